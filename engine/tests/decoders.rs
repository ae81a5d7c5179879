//! The Llama family of decoders against transformers / sentence-transformers, on tiny random-weight models.
//! `scripts/make_qwen3_fixtures.py` made Qwen3-Embedding's convention (causal, last-token pooling) and the
//! bidirectional one (`"is_causal": false`, mean pooling), with a byte-level BPE tokenizer (NFC, the Qwen split
//! regex, `<|endoftext|>` appended by the post-processor) that runs on the in-house tokenizer, whose ids must be
//! the reference's. `scripts/make_encoder_fixtures.py` made the other families: Llama with every bias (and,
//! without biases, with SGPT's position-weighted mean pooling), Mistral with a sliding window on every layer and a
//! head width of its own (both last-token pooling, with a SentencePiece-style tokenizer appending `</s>`), Qwen2 with its Q/K/V biases, sliding-window layers from
//! `max_window_layers` on and stella's Dense head, Qwen3 bidirectional with sliding-window layers from
//! `layer_types` (mean pooling), EuroBERT (Llama's layers, always bidirectional, its own RMSNorm epsilon), and
//! rotary scaling: Llama 3.1's (`llama3`, in transformers 4's `rope_scaling` key as the Hub's Llama 3.x files have
//! it) and YaRN on Qwen3 (transformers 5's `rope_parameters`), each over a pretraining length shorter than the
//! texts so that the scaling shows (the script checks the embeddings without it are far from the reference).

use engine::{Engine, EngineConfig};

mod common;

const MODELS: [&str; 10] = [
    "qwen3_causal",
    "qwen3_bidirectional",
    "llama_last",
    "llama_weightedmean",
    "mistral_last",
    "qwen2_dense_mean",
    "qwen3_window_mean",
    "eurobert_mean",
    "llama3_rope_last",
    "qwen3_yarn_last",
];

common::models::fixture_tests!(MODELS);

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

/// Copies fixture `name` into `to`, its weights split between two shards and transformers' index, as checkpoints
/// past a few GB are saved; `shard_name` names the second shard in the index.
fn shard(name: &str, to: &std::path::Path, shard_name: &str) {
    use safetensors::{serialize, SafeTensors};
    let bytes = common::models::copy_all_but_weights(name, to);
    let file = SafeTensors::deserialize(&bytes).expect("safetensors");
    let mut names = file.names();
    names.sort();
    let files = ["model-00001-of-00002.safetensors", shard_name];
    let mut map = serde_json::Map::new();
    for (i, out) in files.iter().enumerate() {
        // Alternate tensors between the shards, so every layer reads from both.
        let mine: Vec<(&str, _)> = names
            .iter()
            .skip(i)
            .step_by(2)
            .map(|n| (*n, file.tensor(n).expect("tensor")))
            .collect();
        for (n, _) in &mine {
            map.insert(n.to_string(), files[i].into());
        }
        if !out.contains('/') {
            let data = serialize(mine, None).expect("serialize");
            std::fs::write(to.join(out), data).expect("write shard");
        }
    }
    let index = serde_json::json!({"metadata": {"total_size": bytes.len()}, "weight_map": map});
    std::fs::write(to.join("model.safetensors.index.json"), index.to_string()).expect("index");
}

/// A sharded checkpoint (`model.safetensors.index.json` and its shards, as gte-Qwen2 and e5-mistral ship) loads
/// and embeds bitwise as the single file does; a missing shard, or one outside the index's directory, is refused.
#[test]
fn sharded_checkpoint_embeds_as_the_single_file() {
    let name = "qwen2_dense_mean";
    let tmp = tempfile::tempdir().expect("temp dir");
    let sharded = tmp.path().join("sharded");
    std::fs::create_dir(&sharded).expect("mkdir");
    shard(name, &sharded, "model-00002-of-00002.safetensors");
    let config = || EngineConfig {
        threads: 1,
        ..Default::default()
    };
    let texts: Vec<String> = common::models::fixtures(name)
        .into_iter()
        .map(|f| f.text)
        .collect();
    let single = Engine::load(common::models::dir(name), config()).expect("single file");
    let split = Engine::load(&sharded, config()).expect("sharded");
    assert_eq!(
        single.embed(&texts).expect("embed"),
        split.embed(&texts).expect("embed")
    );

    std::fs::remove_file(sharded.join("model-00002-of-00002.safetensors")).expect("rm shard");
    let err = Engine::load(&sharded, config()).err().expect("refused");
    assert!(err.to_string().contains("a shard the index names"), "{err}");

    let outside = tmp.path().join("outside");
    std::fs::create_dir(&outside).expect("mkdir");
    shard(name, &outside, "../model-00002-of-00002.safetensors");
    let err = Engine::load(&outside, config()).err().expect("refused");
    assert!(
        err.to_string().contains("file name beside the index"),
        "{err}"
    );
}
