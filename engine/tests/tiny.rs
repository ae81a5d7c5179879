//! Fast tests on a tiny random-weight BERT that the tests write themselves: the ragged forward pass against a
//! plain padded reference, the handle contract, and the errors a bad model directory or batch gets.

use std::path::Path;

use engine::model::tiny::{write_tiny_bert, TinySpec};
use engine::model::{ModelDir, Pooling, PoolingModule, Weights};
use engine::tokenizer::TokenizerKind;
use engine::{Batch, Engine, EngineConfig, Error};

fn tiny(dir: &Path) -> Engine {
    write_tiny_bert(dir, TinySpec::default()).expect("write tiny model");
    Engine::load(
        dir,
        EngineConfig {
            threads: 2,
            ..Default::default()
        },
    )
    .expect("load tiny model")
}

/// The textbook forward pass, one sequence at a time, in f64: embeddings, per-layer attention with softmax,
/// exact GELU, post-LayerNorm, mean pooling, L2 normalisation. Slow and obvious on purpose.
fn reference_forward(dir: &Path, ids: &[u32]) -> Vec<f32> {
    let md = ModelDir::open(dir).expect("model dir");
    let engine::model::ModelConfig::Bert(c) = &md.config else {
        panic!("the tiny model is a BERT");
    };
    let w = Weights::open(&md.weights_path, "embeddings.word_embeddings.weight").expect("weights");
    let (h, f, nh) = (c.hidden_size, c.intermediate_size, c.num_attention_heads);
    let t = |name: &str, shape: &[usize]| -> Vec<f64> {
        w.get(name, shape)
            .expect(name)
            .data()
            .iter()
            .map(|&v| v as f64)
            .collect()
    };
    let ln = |x: &mut [f64], g: &[f64], b: &[f64]| {
        let mean = x.iter().sum::<f64>() / x.len() as f64;
        let var = x.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / x.len() as f64;
        for (i, v) in x.iter_mut().enumerate() {
            *v = (*v - mean) / (var + c.layer_norm_eps).sqrt() * g[i] + b[i];
        }
    };
    let linear = |x: &[f64], wt: &[f64], b: &[f64], n_in: usize| -> Vec<f64> {
        (0..b.len())
            .map(|o| b[o] + (0..n_in).map(|k| x[k] * wt[o * n_in + k]).sum::<f64>())
            .collect()
    };
    let we = t("embeddings.word_embeddings.weight", &[c.vocab_size, h]);
    let pe = t(
        "embeddings.position_embeddings.weight",
        &[c.max_position_embeddings, h],
    );
    let te = t("embeddings.token_type_embeddings.weight", &[2, h]);
    let (eg, eb) = (
        t("embeddings.LayerNorm.weight", &[h]),
        t("embeddings.LayerNorm.bias", &[h]),
    );
    let mut x: Vec<Vec<f64>> = ids
        .iter()
        .enumerate()
        .map(|(p, &id)| {
            let mut row: Vec<f64> = (0..h)
                .map(|j| we[id as usize * h + j] + pe[p * h + j] + te[j])
                .collect();
            ln(&mut row, &eg, &eb);
            row
        })
        .collect();
    let d = h / nh;
    for l in 0..c.num_hidden_layers {
        let p = |s: &str| format!("encoder.layer.{l}.{s}");
        let proj = |name: &str, x: &[Vec<f64>]| -> Vec<Vec<f64>> {
            let (wt, b) = (
                t(&p(&format!("{name}.weight")), &[h, h]),
                t(&p(&format!("{name}.bias")), &[h]),
            );
            x.iter().map(|r| linear(r, &wt, &b, h)).collect()
        };
        let (q, k, v) = (
            proj("attention.self.query", &x),
            proj("attention.self.key", &x),
            proj("attention.self.value", &x),
        );
        let n = x.len();
        let mut ctx = vec![vec![0.0; h]; n];
        for head in 0..nh {
            for i in 0..n {
                let s: Vec<f64> = (0..n)
                    .map(|j| {
                        (0..d)
                            .map(|e| q[i][head * d + e] * k[j][head * d + e])
                            .sum::<f64>()
                            / (d as f64).sqrt()
                    })
                    .collect();
                let m = s.iter().cloned().fold(f64::MIN, f64::max);
                let z: f64 = s.iter().map(|v| (v - m).exp()).sum();
                for j in 0..n {
                    for e in 0..d {
                        ctx[i][head * d + e] += (s[j] - m).exp() / z * v[j][head * d + e];
                    }
                }
            }
        }
        let attn = proj("attention.output.dense", &ctx);
        let (g1, b1) = (
            t(&p("attention.output.LayerNorm.weight"), &[h]),
            t(&p("attention.output.LayerNorm.bias"), &[h]),
        );
        let (wi, bi) = (
            t(&p("intermediate.dense.weight"), &[f, h]),
            t(&p("intermediate.dense.bias"), &[f]),
        );
        let (wo, bo) = (
            t(&p("output.dense.weight"), &[h, f]),
            t(&p("output.dense.bias"), &[h]),
        );
        let (g2, b2) = (
            t(&p("output.LayerNorm.weight"), &[h]),
            t(&p("output.LayerNorm.bias"), &[h]),
        );
        for i in 0..n {
            let mut a: Vec<f64> = (0..h).map(|j| attn[i][j] + x[i][j]).collect();
            ln(&mut a, &g1, &b1);
            let inter: Vec<f64> = linear(&a, &wi, &bi, h)
                .into_iter()
                .map(|u| 0.5 * u * (1.0 + erf(u / std::f64::consts::SQRT_2)))
                .collect();
            let mut o: Vec<f64> = linear(&inter, &wo, &bo, f)
                .iter()
                .zip(&a)
                .map(|(u, r)| u + r)
                .collect();
            ln(&mut o, &g2, &b2);
            x[i] = o;
        }
    }
    let mut pooled: Vec<f64> = (0..h)
        .map(|j| x.iter().map(|r| r[j]).sum::<f64>() / x.len() as f64)
        .collect();
    let norm = pooled.iter().map(|v| v * v).sum::<f64>().sqrt();
    pooled.iter_mut().for_each(|v| *v /= norm);
    pooled.into_iter().map(|v| v as f32).collect()
}

/// erf by its Taylor series; exact enough for |x| < 6 in f64.
fn erf(x: f64) -> f64 {
    if x.abs() > 5.0 {
        return x.signum();
    }
    let (mut sum, mut term, mut n) = (0.0, x, 0.0);
    while term.abs() > 1e-18 {
        sum += term / (2.0 * n + 1.0);
        n += 1.0;
        term *= -x * x / n;
    }
    sum * 2.0 / std::f64::consts::PI.sqrt()
}

#[test]
fn ragged_forward_matches_a_padded_textbook_reference() {
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = tiny(dir.path());
    let texts = [
        "",
        "the query",
        "embedding is the search of a thing, and the thing is a query!",
        "zz",
    ];
    let got = engine.embed(&texts).expect("embed");
    for (text, e) in texts.iter().zip(&got) {
        let want = reference_forward(dir.path(), &engine.tokenize(text).expect("tokenize"));
        let diff = e
            .iter()
            .zip(&want)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        assert!(diff < 1e-5, "{text:?}: max diff {diff}");
    }
}

#[test]
fn long_inputs_are_truncated_to_max_seq_length_with_sep_kept() {
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = tiny(dir.path());
    let long = "the query ".repeat(100);
    let ids = engine.tokenize(&long).expect("tokenize");
    assert_eq!(ids.len(), TinySpec::default().max_seq_length);
    assert_eq!(
        ids.last(),
        Some(&3),
        "[SEP] (id 3 in the tiny vocabulary) stays last"
    );
    assert_eq!(engine.embed(&[long]).expect("embed").len(), 1);
}

/// Regression: `Engine::embed` cut its own batches beside the scheduler's; it now drives a scheduler, feeding it as
/// its queue drains, so a call with many more texts than the queue holds is answered, in order, with the same
/// numbers as each text alone (a sequence's embedding does not depend on its batch).
#[test]
fn engine_embed_feeds_more_texts_than_the_queue_holds() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_tiny_bert(dir.path(), TinySpec::default()).expect("write tiny model");
    let engine = Engine::load(
        dir.path(),
        EngineConfig {
            threads: 2,
            max_batch_tokens: 32,
            max_queue_requests: 5,
            max_queue_tokens: 40,
            ..Default::default()
        },
    )
    .expect("load tiny model");
    let texts: Vec<String> = (0..300).map(|i| "the query ".repeat(i % 7)).collect();
    let all = engine.embed(&texts).expect("embed");
    assert_eq!(all.len(), texts.len());
    for (i, text) in texts.iter().enumerate().step_by(37) {
        assert_eq!(
            all[i],
            engine.embed(&[text]).expect("embed one")[0],
            "text {i}"
        );
    }
}

/// `max_batch_tokens = auto` is measured when the engine loads: the engine's config then holds one of the sizes
/// the curve measured, and the scheduler batches under it.
#[test]
fn an_auto_budget_is_measured_at_load() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_tiny_bert(dir.path(), TinySpec::default()).expect("write tiny model");
    let config = EngineConfig {
        threads: 1,
        max_batch_tokens: 0,
        ..Default::default()
    };
    let engine = Engine::load(dir.path(), config).expect("load tiny model");
    let budget = engine.config().max_batch_tokens;
    assert!(
        engine::curve::sizes_up_to(engine::curve::AUTO_MAX_TOKENS).contains(&budget),
        "{budget}"
    );
    assert_eq!(engine.embed(&["a query"]).expect("embed").len(), 1);
}

#[test]
fn empty_batch_and_empty_text_are_answered() {
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = tiny(dir.path());
    assert!(engine.embed::<&str>(&[]).expect("embed nothing").is_empty());
    let e = engine.embed(&[""]).expect("embed empty string");
    let norm: f32 = e[0].iter().map(|v| v * v).sum::<f32>().sqrt();
    assert!((norm - 1.0).abs() < 1e-5);
}

#[tokio::test]
async fn handle_is_a_future_and_can_be_polled() {
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = tiny(dir.path());
    let ids = engine.tokenize("the query").expect("tokenize");
    let out = engine
        .backend()
        .submit(Batch::from_sequences([ids.as_slice()]))
        .await
        .expect("await");
    assert_eq!(out.embeddings.len(), 1);
    let mut handle = engine
        .backend()
        .submit(Batch::from_sequences([ids.as_slice(), ids.as_slice()]));
    let polled = loop {
        if let Some(r) = handle.try_take() {
            break r.expect("polled result");
        }
        tokio::task::yield_now().await;
    };
    assert_eq!(polled.embeddings.row(0), polled.embeddings.row(1));
    // A different batch size may block the GEMMs differently: equal to rounding, not bit for bit.
    for (a, b) in polled.embeddings.row(0).iter().zip(out.embeddings.row(0)) {
        assert!((a - b).abs() < 1e-6);
    }
}

/// `/embed_all`'s path: sequences that ask for their token states share a batch with pooled ones; each gets every
/// token's row, unnormalized, whose mean is the pooled row before Normalize (the tiny model mean-pools), and the
/// pooled sequences' answers are those of a batch without them. Eager, capture and replay agree bit for bit.
#[test]
fn token_readout_shares_the_batch_and_its_mean_is_the_pooled_row() {
    use engine::plan::Run;
    use engine::Readout;
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = tiny(dir.path());
    let a = engine.tokenize("the query of tokens").expect("tokenize");
    let b = vec![a[0]];
    let mut batch = Batch::new();
    batch.push_as(&a, Readout::POOLED);
    batch.push_as(&a, Readout::Tokens);
    batch.push_as(&b, Readout::Tokens);
    batch.push_as(&b, Readout::POOLED);
    assert_eq!(batch.out_rows(), 2 + a.len() + 1);
    let runs: Vec<Vec<Vec<f32>>> = [Run::Eager, Run::Capture, Run::Replay]
        .into_iter()
        .map(|how| {
            let out = engine
                .backend()
                .submit(batch.clone())
                .wait()
                .expect("forward");
            assert_eq!(out.forward.expect("a forward ran").run, how);
            (0..4).map(|i| out.embeddings.row(i).to_vec()).collect()
        })
        .collect();
    assert_eq!(runs[0], runs[1], "capture gives the eager output");
    assert_eq!(runs[0], runs[2], "replay gives the eager output");
    let rows = &runs[0];
    let dim = engine.dim();
    assert_eq!(rows[0].len(), dim);
    assert_eq!(rows[1].len(), a.len() * dim);
    assert_eq!(rows[2].len(), dim);
    let unit = |v: &[f32]| {
        let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.iter().map(|x| x / n).collect::<Vec<f32>>()
    };
    let mut mean = vec![0.0f32; dim];
    for token in rows[1].chunks_exact(dim) {
        mean.iter_mut()
            .zip(token)
            .for_each(|(m, x)| *m += x / a.len() as f32);
    }
    for (pooled, tokens) in [(&rows[0], &mean), (&rows[3], &rows[2])] {
        let norm = tokens.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() > 1e-3, "token states are not normalized");
        for (p, t) in pooled.iter().zip(unit(tokens)) {
            assert!((p - t).abs() < 1e-5, "{p} vs {t}");
        }
    }
    let alone = engine
        .backend()
        .submit(Batch::from_sequences([a.as_slice()]))
        .wait()
        .expect("forward");
    for (x, y) in alone.embeddings.row(0).iter().zip(&rows[0]) {
        assert!((x - y).abs() < 1e-6);
    }
}

#[test]
fn invalid_batches_resolve_to_errors_not_panics() {
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = tiny(dir.path());
    let backend = engine.backend();
    let bad_id = backend
        .submit(Batch::from_sequences([&[2u32, 99_999, 3][..]]))
        .wait();
    assert!(matches!(bad_id, Err(Error::Batch(m)) if m.contains("99999")));
    let too_long = vec![5u32; TinySpec::default().max_positions + 1];
    assert!(matches!(
        backend
            .submit(Batch::from_sequences([too_long.as_slice()]))
            .wait(),
        Err(Error::Batch(_))
    ));
    let empty_seq = backend.submit(Batch::from_sequences([&[][..]])).wait();
    assert!(matches!(empty_seq, Err(Error::Batch(_))));
    // The engine still serves after refusing.
    assert_eq!(engine.embed(&["ok"]).expect("embed").len(), 1);
}

#[test]
fn bad_model_directories_name_the_file_and_what_was_expected() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_tiny_bert(dir.path(), TinySpec::default()).expect("write");
    let err = |d: &Path| {
        Engine::load(d, EngineConfig::default())
            .err()
            .expect("must fail")
            .to_string()
    };

    std::fs::remove_file(dir.path().join("tokenizer.json")).expect("rm");
    let e = err(dir.path());
    assert!(e.contains("tokenizer.json") && e.contains("missing"), "{e}");

    write_tiny_bert(dir.path(), TinySpec::default()).expect("write");
    std::fs::write(
        dir.path().join("1_Pooling/config.json"),
        r#"{"pooling_mode": ["max", "median"]}"#,
    )
    .expect("write");
    let e = err(dir.path());
    assert!(
        e.contains("1_Pooling/config.json") && e.contains("pooling"),
        "{e}"
    );

    // A checkpoint whose hidden size disagrees with config.json: the tensor and both shapes are named.
    write_tiny_bert(dir.path(), TinySpec::default()).expect("write");
    let cfg_path = dir.path().join("config.json");
    let cfg = std::fs::read_to_string(&cfg_path)
        .expect("read")
        .replace("\"intermediate_size\": 64", "\"intermediate_size\": 65");
    std::fs::write(&cfg_path, cfg).expect("write");
    let e = err(dir.path());
    assert!(
        e.contains("model.safetensors")
            && e.contains("intermediate.dense.weight")
            && e.contains("[65, 32]"),
        "{e}"
    );

    let cfg = std::fs::read_to_string(&cfg_path)
        .expect("read")
        .replace("\"bert\"", "\"xlnet\"")
        .replace("BertModel", "XLNetModel");
    std::fs::write(&cfg_path, cfg).expect("write");
    let e = err(dir.path());
    assert!(
        e.contains("config.json") && e.contains("unsupported architecture"),
        "{e}"
    );

    let e = err(&dir.path().join("nowhere"));
    assert!(e.contains("not a directory"), "{e}");
}

/// sentence-transformers 6 writes `pooling_mode` (a name, or a list) where earlier versions wrote a flag per mode,
/// and leaves the sequence limit to the tokenizer (`tokenizer_config.json`'s `model_max_length`, within the
/// positions) when its own config names none; older models may name that config after their architecture. Both
/// versions' files are read as sentence-transformers reads them (several modes concatenated, the prompt's tokens
/// left out of pooling), and what it would do that we do not (lowercasing for a cased tokenizer) is refused, not
/// ignored.
#[test]
fn both_sentence_transformers_config_formats_are_read() {
    use serde_json::json;
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let write = |file: &str, json: serde_json::Value| {
        std::fs::write(d.join(file), json.to_string()).expect("write")
    };
    let open = || ModelDir::open(d);
    let refused = |needle: &str| {
        let e = open().expect_err("must be refused").to_string();
        assert!(e.contains(needle), "{e} lacks {needle:?}");
    };
    let spec = TinySpec::default();
    write_tiny_bert(d, spec).expect("write");
    use Pooling::*;
    for (json, modes, include_prompt) in [
        (
            json!({"embedding_dimension": 32, "pooling_mode": "cls"}),
            vec![Cls],
            true,
        ),
        (
            json!({"pooling_mode": ["lasttoken"], "include_prompt": true}),
            vec![LastToken],
            true,
        ),
        // `pooling_mode` wins over the old flags; no flag set at all means the mean.
        (
            json!({"pooling_mode": "mean", "pooling_mode_cls_token": true}),
            vec![Mean],
            true,
        ),
        (json!({"pooling_mode_cls_token": false}), vec![Mean], true),
        (
            json!({"pooling_mode_lasttoken": true}),
            vec![LastToken],
            true,
        ),
        (
            json!({"pooling_mode": "weightedmean"}),
            vec![WeightedMean],
            true,
        ),
        (json!({"pooling_mode_max_tokens": true}), vec![Max], true),
        (
            json!({"pooling_mode_mean_sqrt_len_tokens": true}),
            vec![MeanSqrtLen],
            true,
        ),
        // Several modes, concatenated: in the list's order, or the old flags' fixed one (CLS, max, mean, mean over
        // √n, weighted mean, last token) whatever order the file writes them in.
        (
            json!({"pooling_mode": ["max", "mean", "max"], "include_prompt": false}),
            vec![Max, Mean, Max],
            false,
        ),
        (
            json!({"pooling_mode_lasttoken": true, "pooling_mode_mean_tokens": true,
                   "pooling_mode_cls_token": true, "include_prompt": false}),
            vec![Cls, Mean, LastToken],
            false,
        ),
    ] {
        write("1_Pooling/config.json", json.clone());
        let want = PoolingModule {
            modes,
            include_prompt,
        };
        let dir = open().expect("opens");
        assert_eq!(dir.pooling, want, "{json}");
        assert_eq!(dir.dim(), want.modes.len() * spec.hidden, "{json}");
    }
    for (json, needle) in [
        (json!({"pooling_mode": ["mean", "median"]}), "median"),
        (json!({"pooling_mode": "median"}), "median"),
        (json!({"pooling_mode": []}), "empty list"),
    ] {
        write("1_Pooling/config.json", json);
        refused(needle);
    }
    write("1_Pooling/config.json", json!({"pooling_mode": "mean"}));

    // The limit: sentence-transformers' config, else the tokenizer's, else the positions; never past them.
    assert_eq!(open().expect("opens").max_seq_length, spec.max_seq_length);
    std::fs::remove_file(d.join("sentence_bert_config.json")).expect("rm");
    assert_eq!(open().expect("opens").max_seq_length, spec.max_positions);
    // The second tokenizer limit is transformers' "none" (10^30), the third a whole float; a config named after
    // RoBERTa is read when no (non-empty) sentence_bert_config.json is there; one saying only do_lower_case leaves
    // the limit to the tokenizer.
    for (file, json, want) in [
        ("tokenizer_config.json", json!({"model_max_length": 20}), 20),
        (
            "tokenizer_config.json",
            json!({"model_max_length": 1e30}),
            spec.max_positions,
        ),
        (
            "tokenizer_config.json",
            json!({"model_max_length": 30.0}),
            30,
        ),
        // An empty config is passed over, as sentence-transformers does.
        ("sentence_bert_config.json", json!({}), 30),
        (
            "sentence_roberta_config.json",
            json!({"max_seq_length": 17}),
            17,
        ),
        (
            "sentence_bert_config.json",
            json!({"do_lower_case": true}),
            30,
        ),
    ] {
        write(file, json);
        assert_eq!(open().expect("opens").max_seq_length, want, "{file}");
    }
    // The tiny tokenizer lowercases already, so lowercasing first changed nothing; a cased one is refused.
    let tokenizer_path = d.join("tokenizer.json");
    let mut tokenizer: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&tokenizer_path).expect("read"))
            .expect("json");
    tokenizer["normalizer"]["lowercase"] = false.into();
    std::fs::write(&tokenizer_path, tokenizer.to_string()).expect("write");
    refused("do_lower_case");
}

#[test]
fn weights_are_memory_mapped_not_copied() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_tiny_bert(dir.path(), TinySpec::default()).expect("write");
    let md = ModelDir::open(dir.path()).expect("open");
    let w = Weights::open(&md.weights_path, "embeddings.word_embeddings.weight").expect("weights");
    assert!(w
        .get(
            "embeddings.word_embeddings.weight",
            &[md.config.vocab_size(), 32]
        )
        .expect("tensor")
        .is_mapped());
}

/// Regression: the load-time check compared the tokenizer's token count with the model's `vocab_size`, so a
/// vocabulary whose ids leave a gap passed while its largest id had no embedding row (a slice past the table's end
/// when that token came). The largest id is what is checked now, with either tokenizer.
#[test]
fn a_tokenizer_id_past_the_embedding_is_refused_though_its_count_fits() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_tiny_bert(dir.path(), TinySpec::default()).expect("write");
    let d = dir.path();
    let vocab_size = ModelDir::open(d).expect("open").config.vocab_size();
    let path = d.join("tokenizer.json");
    let mut tokenizer: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("read")).expect("json");
    // Move the last token's id one past the embedding: the count stays, the largest id does not.
    let vocab = tokenizer["model"]["vocab"]
        .as_object_mut()
        .expect("WordPiece vocab");
    let last = vocab
        .iter()
        .max_by_key(|(_, id)| id.as_u64())
        .map(|(t, _)| t.clone())
        .expect("a token");
    vocab.insert(last, vocab_size.into());
    std::fs::write(&path, tokenizer.to_string()).expect("write");
    for kind in [TokenizerKind::Fast, TokenizerKind::Hf] {
        let config = EngineConfig {
            tokenizer: kind,
            ..EngineConfig::default()
        };
        let e = Engine::load(d, config)
            .err()
            .expect("must fail")
            .to_string();
        assert!(
            e.contains(&format!("ids up to {vocab_size}"))
                && e.contains(&format!("vocab_size is {vocab_size}")),
            "{kind:?}: {e}"
        );
    }
}
