//! ModelDir's reading of each module kind, and its refusals.

use super::*;
use crate::backend::ops::Activation;

/// The fixture with EmbeddingGemma's head (Pooling, Dense, Dense, Normalize), copied where a test may edit it.
fn dense_fixture() -> tempfile::TempDir {
    fixture("distilbert_dense_mean")
}

/// Fixture `name`, copied where a test may edit it.
fn fixture(name: &str) -> tempfile::TempDir {
    let from = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    let dir = tempfile::tempdir().expect("tempdir");
    for entry in walk(&from) {
        let to = dir.path().join(entry.strip_prefix(&from).expect("inside"));
        std::fs::create_dir_all(to.parent().expect("parent")).expect("mkdir");
        std::fs::copy(&entry, to).expect("copy");
    }
    dir
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .expect("read_dir")
        .flat_map(|e| {
            let p = e.expect("entry").path();
            if p.is_dir() {
                walk(&p)
            } else {
                vec![p]
            }
        })
        .collect()
}

fn edit(path: &Path, f: impl FnOnce(&mut serde_json::Value)) {
    let mut json: serde_json::Value = read_json(path).expect("JSON");
    f(&mut json);
    std::fs::write(path, json.to_string()).expect("write");
}

/// Dense modules load in order, their widths chained; what would run wrong is refused, naming the cause.
#[test]
fn dense_modules_chain_and_what_cannot_run_is_refused() {
    let dir = dense_fixture();
    let model = ModelDir::open(dir.path()).expect("loads");
    let shape: Vec<_> = model
        .dense
        .iter()
        .map(|d| (d.in_features, d.out_features, d.bias, d.activation))
        .collect();
    assert_eq!(
        shape,
        [
            (64, 256, false, Activation::None),
            (256, 48, false, Activation::None)
        ]
    );
    assert_eq!(model.dim(), 48);
    type Edit = fn(&Path);
    let cases: [(Edit, &str); 7] = [
        (
            |d| {
                edit(&d.join("2_Dense/config.json"), |j| {
                    j["activation_function"] = "torch.nn.modules.activation.ReLU".into()
                })
            },
            "activation_function",
        ),
        (
            |d| {
                edit(&d.join("2_Dense/config.json"), |j| {
                    j["use_residual"] = true.into()
                })
            },
            "use_residual",
        ),
        (
            |d| {
                edit(&d.join("3_Dense/config.json"), |j| {
                    j["in_features"] = 64.into()
                })
            },
            "after a module of 256",
        ),
        (
            |d| {
                edit(&d.join("2_Dense/config.json"), |j| {
                    j["module_input_name"] = "token_embeddings".into()
                })
            },
            "token_embeddings",
        ),
        (
            |d| std::fs::remove_file(d.join("3_Dense/model.safetensors")).expect("rm"),
            "pytorch_model.bin is not read",
        ),
        // Normalize before a Dense module.
        (
            |d| {
                edit(&d.join("modules.json"), |j| {
                    j.as_array_mut().expect("list").swap(3, 4)
                })
            },
            "after Normalize",
        ),
        // A Dense module before Pooling.
        (
            |d| {
                edit(&d.join("modules.json"), |j| {
                    j.as_array_mut().expect("list").swap(1, 2)
                })
            },
            "before Pooling",
        ),
    ];
    for (change, cause) in cases {
        let dir = dense_fixture();
        change(dir.path());
        let err = ModelDir::open(dir.path()).expect_err(cause).to_string();
        assert!(err.contains(cause), "{cause}: {err}");
    }
}

/// A WordEmbeddings module (GloVe's) reads its folder: the word list as its tokenizer, its max_seq_length,
/// the Pooling module after it; either generation's tokenizer class names it; what cannot run is refused.
#[test]
fn word_embeddings_read_their_folder_and_what_cannot_run_is_refused() {
    let dir = fixture("glove_mean");
    let folder = dir.path().join("0_WordEmbeddings");
    let model = ModelDir::open(dir.path()).expect("loads");
    let words = folder.join(crate::tokenizer::WHITESPACE_CONFIG);
    assert_eq!(model.tokenizer_path, words);
    assert!(!model.add_special_tokens && !model.normalize);
    assert_eq!((model.dim(), model.max_seq_length), (24, 40));
    // The Hub's files name the class by sentence-transformers 2's module path.
    edit(&folder.join("wordembedding_config.json"), |j| {
        j["tokenizer_class"] =
            "sentence_transformers.models.tokenizer.WhitespaceTokenizer.WhitespaceTokenizer".into();
    });
    ModelDir::open(dir.path()).expect("the older class name loads");
    type Edit = fn(&Path);
    let cases: [(Edit, &str); 4] = [
        // The Hub's average_word_embeddings_* folders hold the table as pytorch_model.bin only.
        (
            |d| {
                let folder = d.join("0_WordEmbeddings");
                std::fs::rename(
                    folder.join("model.safetensors"),
                    folder.join("pytorch_model.bin"),
                )
                .expect("rename")
            },
            "pytorch_model.bin, which is not read",
        ),
        (
            |d| {
                edit(&d.join("0_WordEmbeddings/wordembedding_config.json"), |j| {
                    j["tokenizer_class"] =
                        "sentence_transformers.models.tokenizer.PhraseTokenizer.PhraseTokenizer"
                            .into();
                })
            },
            "unsupported tokenizer_class",
        ),
        (
            |d| {
                edit(&d.join("modules.json"), |j| {
                    j[1]["type"] = "Normalize".into()
                })
            },
            "without a Pooling module",
        ),
        (
            |d| {
                std::fs::remove_file(d.join("0_WordEmbeddings/whitespacetokenizer_config.json"))
                    .expect("remove")
            },
            "word list",
        ),
    ];
    for (change, cause) in cases {
        let dir = fixture("glove_mean");
        change(dir.path());
        let err = ModelDir::open(dir.path()).expect_err(cause).to_string();
        assert!(err.contains(cause), "{cause}: {err}");
    }
}

/// A StaticEmbedding reads its table's shape and its tokenizer from its own folder and adds no special tokens;
/// what it cannot run as sentence-transformers does is refused, naming the cause.
#[test]
fn a_static_embedding_reads_its_folder_and_what_cannot_run_is_refused() {
    let dir = fixture("static_mean");
    let model = ModelDir::open(dir.path()).expect("loads");
    let folder = dir.path().join("0_StaticEmbedding");
    assert_eq!(model.tokenizer_path, folder.join("tokenizer.json"));
    assert!(!model.add_special_tokens && model.normalize);
    assert_eq!((model.dim(), model.max_seq_length), (48, MAX_POSITIONS));
    let truncated = ModelDir::open(fixture("model2vec_mean").path()).expect("loads");
    assert_eq!(truncated.max_seq_length, 24);
    type Edit = fn(&Path);
    let cases: [(Edit, &str); 2] = [
        (
            |d| {
                edit(&d.join("modules.json"), |j| {
                    j[1]["type"] = "sentence_transformers.models.Pooling".into();
                    j[1]["path"] = "1_Pooling".into();
                })
            },
            "unsupported module \"Pooling\" here",
        ),
        (
            |d| {
                edit(&d.join("0_StaticEmbedding/tokenizer.json"), |j| {
                    j["truncation"] = serde_json::json!({"max_length": 8, "direction": "Left",
                        "strategy": "LongestFirst", "stride": 0});
                })
            },
            "truncation from the \"Left\"",
        ),
    ];
    for (change, cause) in cases {
        let dir = fixture("static_mean");
        change(dir.path());
        let err = ModelDir::open(dir.path()).expect_err(cause).to_string();
        assert!(err.contains(cause), "{cause}: {err}");
    }
    // sentence-transformers reads a mapping only beside model2vec's table: elsewhere it is left alone.
    let dir = fixture("static_mean");
    add_mapping(
        &dir.path().join("0_StaticEmbedding/model.safetensors"),
        &[2, 2],
        0,
    );
    let c = static_config(dir.path());
    assert!(!c.mapping && c.vocab_size == c.rows, "{c:?}");
    // model2vec's: one entry per token id, each a row the table has (checked when the table loads).
    let dir = fixture("model2vec_mean");
    let table = dir.path().join("model.safetensors");
    let c = static_config(dir.path());
    assert!(
        c.mapping && c.token_weights && c.rows < c.vocab_size,
        "{c:?}"
    );
    add_mapping(&table, &[2, 2], 0);
    let err = ModelDir::open(dir.path()).expect_err("2-D").to_string();
    assert!(err.contains("`mapping` has shape [2, 2]"), "{err}");
    add_mapping(&table, &[c.vocab_size], c.rows as i64);
    let err = crate::Engine::load(dir.path(), crate::EngineConfig::default())
        .err()
        .expect("refused")
        .to_string();
    assert!(err.contains("outside 0.."), "{err}");
}

fn static_config(dir: &Path) -> crate::model::StaticConfig {
    match ModelDir::open(dir).expect("loads").config {
        ModelConfig::Static(c) => c,
        other => panic!("{other:?}"),
    }
}

/// Rewrites the safetensors file at `path` with an I64 `mapping` of `shape` (in place of any), every entry
/// `value`.
fn add_mapping(path: &Path, shape: &[usize], value: i64) {
    let bytes = std::fs::read(path).expect("read");
    let weights = safetensors::SafeTensors::deserialize(&bytes).expect("table");
    let n: usize = shape.iter().product();
    let mapping: Vec<u8> = (0..n).flat_map(|_| value.to_le_bytes()).collect();
    let mut tensors: Vec<_> = weights
        .tensors()
        .into_iter()
        .filter(|(name, _)| name != "mapping")
        .collect();
    let view =
        safetensors::tensor::TensorView::new(safetensors::Dtype::I64, shape.to_vec(), &mapping);
    tensors.push(("mapping".into(), view.expect("view")));
    safetensors::serialize_to_file(tensors, None, path).expect("write");
}

/// A Transformer module saved in a folder of its own (`"path": "0_Transformer"`, as a Router's routes and older
/// saves have it) is read from there: its config, weights, tokenizer and sentence_bert_config.json.
#[test]
fn a_transformer_module_in_its_own_folder_is_read_from_it() {
    let at_root = ModelDir::open(fixture("distilbert_mean").path()).expect("loads");
    let dir = fixture("distilbert_mean");
    let folder = dir.path().join("0_Transformer");
    std::fs::create_dir(&folder).expect("mkdir");
    for f in [
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        "sentence_bert_config.json",
    ] {
        std::fs::rename(dir.path().join(f), folder.join(f)).expect("move");
    }
    edit(&folder.join("sentence_bert_config.json"), |c| {
        c["max_seq_length"] = 17.into()
    });
    edit(&dir.path().join("modules.json"), |m| {
        m[0]["path"] = "0_Transformer".into()
    });
    let moved = ModelDir::open(dir.path()).expect("loads");
    assert_eq!(moved.weights_path, folder.join("model.safetensors"));
    assert_eq!(moved.tokenizer_path, folder.join("tokenizer.json"));
    assert_eq!(moved.config.hidden_size(), at_root.config.hidden_size());
    assert_eq!((moved.max_seq_length, moved.dim()), (17, at_root.dim()));
}
