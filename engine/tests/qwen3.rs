//! The Qwen3 architecture against transformers / sentence-transformers, on the tiny random-weight models that
//! `scripts/make_qwen3_fixtures.py` made: Qwen3-Embedding's convention (causal, last-token pooling) and the
//! bidirectional one (`"is_causal": false`, mean pooling). Their byte-level BPE tokenizer (NFC, the Qwen split
//! regex, `<|endoftext|>` appended by the post-processor) runs on the default, in-house `fast` tokenizer, whose ids
//! must be the reference's.

use engine::{Batch, CaptureMode, Dtype, Engine, EngineConfig};

mod common;
use common::cosine;

fn dir(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn fixtures(name: &str) -> Vec<common::Fixture> {
    common::read(&dir(name).join("reference.jsonl"), "embedding")
}

fn load(name: &str, dtype: Dtype, capture: CaptureMode) -> Engine {
    let config = EngineConfig {
        threads: 2,
        dtype,
        capture,
        ..Default::default()
    };
    Engine::load(dir(name), config).expect("load the tiny Qwen3")
}

/// Token ids equal the reference's, and every embedding reaches `min` cosine against it.
fn check(name: &str, dtype: Dtype, min: f64) {
    let fx = fixtures(name);
    let engine = load(name, dtype, CaptureMode::Lazy);
    for f in &fx {
        assert_eq!(
            engine.tokenize(&f.text).expect("tokenize"),
            f.ids,
            "{:?}",
            f.text
        );
    }
    let texts: Vec<&str> = fx.iter().map(|f| f.text.as_str()).collect();
    let got = engine.embed(&texts).expect("embed");
    let worst = fx
        .iter()
        .zip(&got)
        .map(|(f, g)| cosine(&f.embedding, g))
        .fold(f64::INFINITY, f64::min);
    println!(
        "{name} {dtype}: min cosine {worst:.9} over {} texts",
        fx.len()
    );
    assert!(worst >= min, "{name} {dtype}: min cosine {worst}");
}

#[test]
fn causal_last_token_matches_sentence_transformers() {
    check("qwen3_causal", Dtype::F32, 0.9999);
}

#[test]
fn bidirectional_mean_matches_transformers() {
    check("qwen3_bidirectional", Dtype::F32, 0.9999);
}

#[test]
fn bf16_reaches_0_999_on_both_conventions() {
    if load("qwen3_causal", Dtype::Bf16, CaptureMode::Off)
        .backend()
        .info()
        .dtype
        != Dtype::Bf16
    {
        eprintln!("SKIPPED: this CPU has no AVX512-BF16 (bf16 runs f32 here)");
        return;
    }
    check("qwen3_causal", Dtype::Bf16, 0.999);
    check("qwen3_bidirectional", Dtype::Bf16, 0.999);
}

/// A sequence's embedding does not depend on the batch around it, nor on how the forward ran (eager or replayed).
#[test]
fn batch_invariance_and_replay_are_bitwise() {
    for name in ["qwen3_causal", "qwen3_bidirectional"] {
        let fx = fixtures(name);
        let eager = load(name, Dtype::F32, CaptureMode::Off);
        let seqs: Vec<&[u32]> = fx.iter().map(|f| f.ids.as_slice()).collect();
        let together = eager
            .backend()
            .submit(Batch::from_sequences(seqs.iter().copied()))
            .wait()
            .expect("batch");
        let lazy = load(name, Dtype::F32, CaptureMode::Lazy);
        for (i, s) in seqs.iter().enumerate() {
            let alone = eager
                .backend()
                .submit(Batch::from_sequences([*s]))
                .wait()
                .expect("alone");
            assert_eq!(
                alone.embeddings.row(0),
                together.embeddings.row(i),
                "{name} [{i}]"
            );
        }
        // Third call of the bucket replays its plan: bitwise the eager result.
        for _ in 0..3 {
            let replayed = lazy
                .backend()
                .submit(Batch::from_sequences(seqs.iter().copied()))
                .wait()
                .expect("replay");
            assert_eq!(
                replayed.embeddings.as_slice(),
                together.embeddings.as_slice(),
                "{name}"
            );
        }
    }
}

/// Regression (fuzz crash `fuzz/crashes/model_dir/qwen3-max-position-embeddings-3276832768`): the rotary table
/// was sized by `max_position_embeddings` alone, so a config claiming billions of positions aborted the process
/// on allocation. The table now covers the positions the engine runs: its `max_seq_length`, and never more than
/// `MAX_POSITIONS` whatever the config says (a fallible reserve stays behind it, so a table that still cannot be
/// allocated is a load error naming the model).
#[test]
fn rotary_table_of_billions_of_positions_is_bounded_not_an_abort() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let model = tmp.path().join("m");
    let (_, spec) = engine::model::synthetic::MODELS
        .iter()
        .find(|(n, _)| *n == "qwen3-tiny")
        .expect("qwen3-tiny");
    engine::model::synthetic::write_qwen3(&model, *spec).expect("write qwen3-tiny");
    let config_path = model.join("config.json");
    let mut config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&config_path).expect("config")).expect("json");
    config["max_position_embeddings"] = 3_276_832_768u64.into();
    std::fs::write(&config_path, config.to_string()).expect("write config");
    let engine_config = || EngineConfig {
        threads: 1,
        ..Default::default()
    };

    // sentence-transformers' max_seq_length bounds what runs, and so the table: the model loads and embeds.
    let engine = Engine::load(&model, engine_config()).expect("load capped by max_seq_length");
    assert_eq!(engine.info().max_seq_length, spec.max_seq_length);
    assert_eq!(engine.backend().info().max_positions, spec.max_seq_length);
    assert_eq!(engine.embed(&["capped"]).expect("embed").len(), 1);

    // Without it, the engine's own ceiling bounds the table, not the config: the model loads and embeds (the
    // table was once sized by the config alone, and its allocation aborted the process).
    std::fs::remove_file(model.join("sentence_bert_config.json")).expect("remove");
    let engine = Engine::load(&model, engine_config()).expect("load capped by MAX_POSITIONS");
    assert_eq!(engine.info().max_seq_length, engine::model::MAX_POSITIONS);
    assert_eq!(
        engine.backend().info().max_positions,
        engine::model::MAX_POSITIONS
    );
    assert_eq!(engine.embed(&["capped"]).expect("embed").len(), 1);
}
