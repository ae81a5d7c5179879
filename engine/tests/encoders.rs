//! The BERT family beyond BERT against sentence-transformers, on the tiny random-weight models
//! `scripts/make_encoder_fixtures.py` made: XLM-RoBERTa with an XLM-R-style Unigram tokenizer, mean pooling and
//! Normalize (multilingual-e5's shape); RoBERTa with a byte-level BPE and `RobertaProcessing`, CLS pooling, no
//! Normalize; MPNet (all-mpnet-base-v2's architecture: a relative position bias on every attention score, no token
//! types) with a WordPiece, mean pooling and Normalize, on sequences long enough to reach its last distance bucket;
//! DistilBERT (no token types, its own tensor and config names) with BERT's special tokens and `BertProcessing`,
//! mean pooling, no Normalize; ModernBERT (rotary positions, pre-norm layers, GeGLU, global layers between
//! sliding-window ones) with a byte-level BPE of its pipeline, without biases (mean pooling, Normalize) and with
//! every bias, other rotary bases and a narrower window (CLS pooling), on sequences many windows long; and
//! sentence-transformers' Dense modules after pooling: LaBSE's head (BERT, CLS, a tanh Dense with bias, Normalize)
//! and EmbeddingGemma's (two Dense without bias or activation, 64 to 256 to 48, Normalize); and Gemma 3's text
//! model as EmbeddingGemma runs it (bidirectional, sliding-window and global layers, four norms a layer, a score
//! scale of its own), its SentencePiece-style tokenizer read by the crate (the default falls back to it), with
//! EmbeddingGemma's head, and with Gemma 3 4B's rotary (its global layers scaled linearly, in transformers 4's
//! `rope_scaling`, the local ones plain); and T5's encoder (relative position buckets other than the default, 4 heads of 24
//! columns against d_model 64, the gated tanh-GELU feed-forward with sentence-t5's Dense head, and the ReLU
//! one); and the other pooling modes: max over the tokens (BERT) and the sum over the square root of their count
//! (DistilBERT); and the post-norm rotary BERTs: Nomic BERT (nomic-embed-text: SwiGLU) in both tensor namings
//! and both generations of config keys, and GTE (GeGLU, biases) in transformers' config and in Alibaba's NewModel
//! one with its fixed NTK rotary scaling and no token types, and Jina v3 (XLM-R's tokenizer, BERT's GELU MLP, every
//! bias) in the Hub's tensor names and transformers' in-memory ones; and JinaBERT (jina-embeddings-v2: ALiBi over 12
//! heads, GeGLU; its reference written out by scripts/make_jinabert_fixture.py) and Jina's qk-post-norm JinaBERT
//! (jina-embeddings-v2-base-code, -de, -es, -zh: LayerNorms on Q and K, a second residual norm, its own GeGLU
//! order; the same script's). The first three number positions after the
//! padding id: their texts put `<pad>` inside sequences
//! (it takes the padding row and does not advance the positions after it), `<mask>` after whitespace it strips,
//! and run past max_seq_length; the default tokenizer must give sentence-transformers' ids.

mod common;

const MODELS: [&str; 22] = [
    "xlmr_mean",
    "roberta_cls",
    "mpnet_mean",
    "distilbert_mean",
    "modernbert_mean",
    "modernbert_cls",
    "bert_dense_cls",
    "distilbert_dense_mean",
    "gemma3_mean",
    "gemma3_linear_mean",
    "t5_gated_mean",
    "t5_relu_cls",
    "bert_max",
    "distilbert_mean_sqrt",
    "nomic_mean",
    "nomic_renamed_mean",
    "gte_cls",
    "gte_ntk_cls",
    "jina_v3_mean",
    "jina_v3_renamed_mean",
    "jinabert_mean",
    "jinabert_qk_mean",
];

common::models::fixture_tests!(MODELS);

/// jina-embeddings-v3 as Jina's remote code saves it (an XLM-RoBERTa config with rotary positions and LoRA
/// adapters, whose weights the engine does not read) is refused, naming the checkpoint transformers reads, which
/// it runs.
#[test]
fn jina_v3_remote_code_checkpoint_is_refused_naming_the_hf_one() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let bytes = common::models::copy_all_but_weights("jina_v3_mean", tmp.path());
    std::fs::write(tmp.path().join("model.safetensors"), bytes).expect("weights");
    let path = tmp.path().join("config.json");
    let mut config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).expect("config")).expect("json");
    for (key, value) in [
        ("model_type", serde_json::json!("xlm-roberta")),
        ("architectures", serde_json::json!(["XLMRobertaModel"])),
        ("position_embedding_type", serde_json::json!("rotary")),
        ("rotary_emb_base", serde_json::json!(20000.0)),
        (
            "lora_adaptations",
            serde_json::json!(["retrieval.query", "retrieval.passage"]),
        ),
    ] {
        config[key] = value;
    }
    std::fs::write(&path, config.to_string()).expect("config");
    let err = engine::Engine::load(tmp.path(), engine::EngineConfig::default())
        .err()
        .expect("refused");
    assert!(
        err.to_string().contains("use jinaai/jina-embeddings-v3-hf"),
        "{err}"
    );
}

/// Jina's qk-post-norm JinaBERT (told apart by its tensors) runs only as its checkpoints have it, with ALiBi and
/// the GeGLU feed-forward: a config saying otherwise is refused by name, not run with half the layer misread.
#[test]
fn jinabert_qk_post_norm_without_geglu_is_refused() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let bytes = common::models::copy_all_but_weights("jinabert_qk_mean", tmp.path());
    std::fs::write(tmp.path().join("model.safetensors"), bytes).expect("weights");
    let path = tmp.path().join("config.json");
    let mut config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).expect("config")).expect("json");
    config["feed_forward_type"] = "original".into();
    std::fs::write(&path, config.to_string()).expect("write config");
    let err = engine::Engine::load(tmp.path(), engine::EngineConfig::default())
        .err()
        .expect("refused");
    assert!(err.to_string().contains("qk-post-norm"), "{err}");
}
