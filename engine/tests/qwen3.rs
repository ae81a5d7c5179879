//! The Qwen3 architecture against transformers / sentence-transformers, on the tiny random-weight models that
//! `scripts/make_qwen3_fixtures.py` made: Qwen3-Embedding's convention (causal, last-token pooling) and the
//! bidirectional one (`"is_causal": false`, mean pooling). Their byte-level BPE tokenizer (NFC, the Qwen split
//! regex, `<|endoftext|>` appended by the post-processor) runs on the default, in-house `fast` tokenizer, whose ids
//! must be the reference's.

use engine::{Dtype, Engine, EngineConfig};

mod common;
use common::models::{assert_batch_invariant_and_replay_bitwise, bf16_runs, check};

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
    if bf16_runs("qwen3_causal") {
        check("qwen3_causal", Dtype::Bf16, 0.999);
        check("qwen3_bidirectional", Dtype::Bf16, 0.999);
    }
}

#[test]
fn batch_invariance_and_replay_are_bitwise() {
    for name in ["qwen3_causal", "qwen3_bidirectional"] {
        assert_batch_invariant_and_replay_bitwise(name);
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
