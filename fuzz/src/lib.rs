//! The fuzz targets' bodies, one function per target, each taking the fuzzer's bytes. The binaries in `src/bin/`
//! hand them to AFL++ (`cargo afl`); the tests below replay the committed corpora and every crash found through
//! the same functions, on a plain `cargo test`. A target fails by panicking: a parser that panics, or the two
//! tokenizers disagreeing.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use engine::tokenizer::{self, Scratch, Tokenizer, TokenizerKind, Truncation};

/// The harness's trace reader, compiled here from its own source: `harness` is a binary crate, and this is the
/// one file of it a fuzzer needs (it depends on nothing else of the harness outside its tests, which are left out:
/// this library has no unit tests of its own).
#[cfg(not(test))]
#[allow(dead_code)]
#[path = "../../harness/src/trace.rs"]
mod trace_source;

/// Every vocabulary the project ships: WordPiece, four Unigram (one behind ALBERT's NFKD normaliser), three
/// byte-level BPE, three SentencePiece BPE.
pub const VOCABULARIES: [&str; 11] = [
    "all-MiniLM-L6-v2/tokenizer.json",
    "pegasus_unigram_tokenizer.json",
    "xlmr_style_unigram_1k_tokenizer.json",
    "albert_style_unigram_1k_tokenizer.json",
    "xlmr_style_unigram_ja_8k_tokenizer.json",
    "qwen2_style_bpe_4k_tokenizer.json",
    "gpt2_style_bpe_4k_tokenizer.json",
    "llama3_style_bpe_4k_tokenizer.json",
    "llama2_style_spbpe_4k_tokenizer.json",
    "mistral_style_spbpe_4k_tokenizer.json",
    "gemma_style_spbpe_4k_tokenizer.json",
];

/// The repository's root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

type Pair = (Box<dyn Tokenizer>, Box<dyn Tokenizer>);

/// Both tokenizers of every vocabulary, without and with truncation to 16 tokens, loaded once per process.
fn pairs() -> &'static Vec<[Pair; 2]> {
    static PAIRS: OnceLock<Vec<[Pair; 2]>> = OnceLock::new();
    PAIRS.get_or_init(|| {
        VOCABULARIES
            .iter()
            .map(|file| {
                let path = repo().join("workloads/vocab").join(file);
                let load = |kind, cut| {
                    tokenizer::load(&path, kind, cut, true).unwrap_or_else(|e| panic!("{file}: {e}"))
                };
                let cut = Some(Truncation::right(16));
                [
                    (
                        load(TokenizerKind::Fast, None),
                        load(TokenizerKind::Hf, None),
                    ),
                    (load(TokenizerKind::Fast, cut), load(TokenizerKind::Hf, cut)),
                ]
            })
            .collect()
    })
}

/// Differential: the in-house tokenizer and Hugging Face's give the same ids for any text. The first byte picks
/// the vocabulary and whether to truncate; the rest is the text (invalid UTF-8 replaced, as a client's bytes are
/// refused before they get this far).
pub fn tokenizers(data: &[u8]) {
    let Some((&pick, text)) = data.split_first() else {
        return;
    };
    let pairs = pairs();
    let (fast, hf) = &pairs[pick as usize % pairs.len()][(pick as usize / pairs.len()) % 2];
    let text = String::from_utf8_lossy(text);
    let (mut scratch, mut a, mut b) = (Scratch::default(), Vec::new(), Vec::new());
    let fast_result = fast
        .encode_with(&text, &mut scratch, &mut a)
        .map_err(|e| e.to_string());
    let hf_result = hf.encode(&text, &mut b).map_err(|e| e.to_string());
    assert_eq!(
        fast_result.is_ok(),
        hf_result.is_ok(),
        "{fast_result:?} vs {hf_result:?} on {text:?}"
    );
    assert_eq!(
        a,
        b,
        "vocabulary {} on {text:?}",
        VOCABULARIES[pick as usize % pairs.len()]
    );
}

/// The routes that read a JSON body.
pub const ROUTES: [&str; 12] = [
    "/v1/embeddings",
    "/embed",
    "/embed_all",
    "/similarity",
    "/tokenize",
    "/decode",
    "/",
    "/rerank",
    "/predict",
    "/v1/rerank",
    "/v2/rerank",
    "/embed_sparse",
];

/// A request body, as the route the first byte picks reads it: never a panic, and every refusal a 4xx.
pub fn http_body(data: &[u8]) {
    let Some((&pick, body)) = data.split_first() else {
        return;
    };
    if let Err(e) = engine::gateway::parse_body(ROUTES[pick as usize % ROUTES.len()], body) {
        assert!(e.status.is_client_error(), "{e:?}");
    }
}

/// A scratch folder of this process, kept for its life (a target runs thousands of inputs in one process).
fn scratch() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("ew-fuzz-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("scratch folder");
        dir
    })
}

/// A trace file (Azure CSV, Mooncake or native JSON Lines, told apart by content as `bench` does): read, its
/// statistics taken and rescaled, never a panic.
#[cfg(not(test))]
pub fn trace(data: &[u8]) {
    let path = scratch().join("trace.jsonl");
    std::fs::write(&path, data).expect("writing the trace");
    if let Ok(t) = trace_source::Trace::load(&path) {
        let _ = t.stats();
        let _ = t.rescaled(3, 100.0, 2.0);
    }
}

/// The files of a model directory the fuzzer may replace: the first byte picks one (and the model, below), the
/// rest is its content; `model.safetensors` keeps the model's data and takes the input as its header (with its
/// length prefix).
pub const MODEL_FILES: [&str; 5] = [
    "config.json",
    "modules.json",
    "1_Pooling/config.json",
    "sentence_bert_config.json",
    "model.safetensors",
];

/// The tiny models a corrupted file goes into: the random BERT (f32 weights, read in place from the map) and the
/// random Qwen3 (bf16 weights, widened at load), so both architectures' loaders and both storages are reached.
pub const MODELS: [&str; 2] = ["tiny-bert", "qwen3-tiny"];

/// A tiny model's directory, written once per process, and its files' bytes (in [`MODEL_FILES`] order).
type Tiny = (PathBuf, Vec<Vec<u8>>);

fn tiny(model: usize) -> &'static Tiny {
    static TINY: OnceLock<[Tiny; 2]> = OnceLock::new();
    &TINY.get_or_init(|| {
        MODELS.map(|name| {
            let dir = scratch().join(name);
            let written = if name == "tiny-bert" {
                engine::model::tiny::write_tiny_bert(&dir, Default::default())
            } else {
                let (_, spec) = engine::model::synthetic::MODELS
                    .iter()
                    .find(|(n, _)| *n == name)
                    .expect("a synthetic model of that name");
                engine::model::synthetic::write_qwen3(&dir, *spec)
            };
            written.unwrap_or_else(|e| panic!("{name}: {e}"));
            let files = MODEL_FILES
                .iter()
                .map(|f| std::fs::read(dir.join(f)).unwrap_or_default())
                .collect();
            (dir, files)
        })
    })[model]
}

/// The fuzzer's input that reproduces a model's own file `file` unchanged: the seeds of `corpus/model_dir/`.
pub fn model_dir_seed(model: usize, file: usize) -> Vec<u8> {
    let original = &tiny(model).1[file];
    let content = if MODEL_FILES[file] == "model.safetensors" {
        &original[8..8 + header_len(original)]
    } else {
        &original[..]
    };
    let mut seed = vec![(model * MODEL_FILES.len() + file) as u8];
    seed.extend_from_slice(content);
    seed
}

/// A safetensors file's header length (its 8-byte little-endian prefix).
fn header_len(file: &[u8]) -> usize {
    u64::from_le_bytes(file[..8].try_into().expect("8 bytes")) as usize
}

/// Replaces `path`'s content by a new file renamed over it, never by writing into it: a loaded engine maps
/// `model.safetensors`, and a file truncated under a map faults (SIGBUS) on the next read past its new end.
fn replace(path: &Path, bytes: &[u8]) {
    let staging = path.with_extension("fuzz-staging");
    std::fs::write(&staging, bytes).expect("writing a model file");
    std::fs::rename(&staging, path).expect("renaming a model file");
}

/// A model directory with one file corrupted: loading it is an error naming a file of the directory, or a
/// working engine — never a panic, an out-of-bounds read or an abort.
pub fn model_dir(data: &[u8]) {
    let Some((&pick, content)) = data.split_first() else {
        return;
    };
    let i = pick as usize % MODEL_FILES.len();
    let (dir, originals) = tiny((pick as usize / MODEL_FILES.len()) % MODELS.len());
    let path = dir.join(MODEL_FILES[i]);
    let bytes = if MODEL_FILES[i] == "model.safetensors" {
        let original = &originals[i];
        let mut out = (content.len() as u64).to_le_bytes().to_vec();
        out.extend_from_slice(content);
        out.extend_from_slice(&original[8 + header_len(original)..]);
        out
    } else {
        content.to_vec()
    };
    replace(&path, &bytes);
    let config = engine::EngineConfig {
        threads: 1,
        capture: engine::CaptureMode::Off,
        ..Default::default()
    };
    let loaded = engine::Engine::load(dir, config);
    replace(&path, &originals[i]);
    match loaded {
        Ok(engine) => {
            // A model that loads must run.
            let _ = engine.embed(&["a fuzzed model"]);
        }
        Err(e) => {
            let message = e.to_string();
            assert!(
                message.contains(&dir.display().to_string()),
                "an error that names no file of the directory: {message}"
            );
        }
    }
}
