//! Cross-encoders against sentence-transformers' CrossEncoder, on the random-weight checkpoints
//! `scripts/make_cross_encoder_fixtures.py` made: BertForSequenceClassification (token types: the passage's
//! tokens read token type 1's row; the pooler's tanh, then the classifier), XLMRobertaForSequenceClassification (one
//! token type, RobertaClassificationHead), DistilBertForSequenceClassification with three named labels and
//! ElectraForSequenceClassification (token types, narrower embeddings, a GELU head) and
//! ModernBertForSequenceClassification (the tokens' mean, a head with a LayerNorm). Each
//! pair is tokenized as the CrossEncoder tokenizes it (the pair template, both texts truncated longest first to
//! the limit, which most pairs reach) and scored to float rounding in f32, closely in bf16.

mod common;

use base64::Engine as _;
use common::models::{bf16_runs, load};
use engine::tokenizer::Scratch;
use engine::{CaptureMode, Dtype};

struct Pair {
    query: String,
    passage: String,
    ids: Vec<u32>,
    type1_from: Option<u32>,
    logits: Vec<f32>,
}

fn pairs(name: &str) -> Vec<Pair> {
    let path = common::models::dir(name).join("reference.jsonl");
    std::fs::read_to_string(&path)
        .expect("reference")
        .lines()
        .map(|line| {
            let v: serde_json::Value = serde_json::from_str(line).expect("JSON");
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(v["logits"].as_str().expect("logits"))
                .expect("base64");
            Pair {
                query: v["query"].as_str().expect("query").into(),
                passage: v["passage"].as_str().expect("passage").into(),
                ids: serde_json::from_value(v["ids"].clone()).expect("ids"),
                type1_from: serde_json::from_value(v["type1_from"].clone()).expect("type1_from"),
                logits: bytes
                    .chunks_exact(4)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                    .collect(),
            }
        })
        .collect()
}

/// Each fixture, its labels, and whether its model reads token types (the others' tokenizers give no
/// `token_type_ids`, whatever their template says, so the reference has no type-1 boundary for them).
const FIXTURES: [(&str, &[&str], bool); 5] = [
    ("bert_cross_encoder", &["LABEL_0"], true),
    ("xlmr_cross_encoder", &["LABEL_0"], false),
    (
        "distilbert_nli",
        &["contradiction", "entailment", "neutral"],
        false,
    ),
    ("electra_cross_encoder", &["LABEL_0"], true),
    ("modernbert_cross_encoder", &["LABEL_0"], false),
];

/// Ids as the reference's, and where the tokens of type 1 start where the model reads token types; every logit
/// within `tolerance` of the reference's spread (its largest magnitude); the labels the config names.
fn check(fixture: usize, dtype: Dtype, tolerance: f32) {
    let (name, labels, typed) = FIXTURES[fixture];
    let fx = pairs(name);
    let engine = load(name, dtype, CaptureMode::Lazy);
    let classifier = engine.info().classifier.clone().expect("a cross-encoder");
    assert_eq!(classifier.labels, labels, "{name}: labels");
    let mut scratch = Scratch::default();
    for p in &fx {
        let mut ids = Vec::new();
        let from = engine
            .tokenizer()
            .encode_pair(&p.query, &p.passage, &mut scratch, &mut ids)
            .expect("pair")
            .type1_from;
        assert_eq!(ids, p.ids, "{name}: {:?}", p.query);
        if typed {
            assert_eq!(from, p.type1_from, "{name}: {:?}", p.query);
        }
    }
    let got = engine
        .score(
            &fx.iter()
                .map(|p| (&p.query, &p.passage))
                .collect::<Vec<_>>(),
        )
        .expect("score");
    let spread = fx
        .iter()
        .flat_map(|p| &p.logits)
        .fold(0f32, |m, v| m.max(v.abs()));
    let mut worst = 0f32;
    for (p, g) in fx.iter().zip(&got) {
        assert_eq!(g.len(), labels.len(), "{name}: logits per pair");
        for (a, b) in g.iter().zip(&p.logits) {
            worst = worst.max((a - b).abs() / spread);
            assert!(
                (a - b).abs() <= tolerance * spread,
                "{name} {dtype}: {a} against {b} (spread {spread}) for {:?}",
                p.query
            );
        }
    }
    eprintln!("{name} {dtype}: worst error {worst:.2e} of the logits' spread {spread:.3}");
}

#[test]
fn bert_cross_encoder_reads_the_passage_as_token_type_1() {
    check(0, Dtype::F32, 1e-5);
}

#[test]
fn xlmr_cross_encoder_matches() {
    check(1, Dtype::F32, 1e-5);
}

#[test]
fn distilbert_nli_scores_each_label() {
    check(2, Dtype::F32, 1e-5);
}

/// ms-marco-electra-base's shape: token types, embeddings projected to the layers' width, a GELU head.
#[test]
fn electra_cross_encoder_matches() {
    check(3, Dtype::F32, 1e-5);
}

/// gte-reranker-modernbert-base's shape: the tokens' mean through a dense layer, GELU and a LayerNorm (neither
/// with a bias), then the classifier.
#[test]
fn modernbert_cross_encoder_pools_the_mean_and_norms_its_head() {
    check(4, Dtype::F32, 1e-5);
}

#[test]
fn cross_encoders_in_bf16() {
    if !bf16_runs(FIXTURES[0].0) {
        return;
    }
    for fixture in 0..FIXTURES.len() {
        // The random BERT's logits spread over 0.077 only: bf16's few thousandths are 7% of that.
        check(fixture, Dtype::Bf16, 0.1);
    }
}

/// An embedding model is not scored: its output is not a classifier's.
#[test]
fn an_embedding_model_is_not_scored() {
    let engine = load("bert_max", Dtype::F32, CaptureMode::Off);
    assert!(engine.info().classifier.is_none());
    assert!(engine.score(&[("a", "b")]).is_err());
}

/// A classification head the engine does not read is refused, naming the architecture, rather than run as an
/// embedding model (its encoder alone, its head ignored).
#[test]
fn an_unsupported_classification_head_is_refused_by_name() {
    let tmp = common::models::copied("bert_cross_encoder");
    let config = tmp.path().join("config.json");
    let mut json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&config).expect("config")).expect("JSON");
    json["architectures"] = serde_json::json!(["DebertaV2ForSequenceClassification"]);
    std::fs::write(&config, json.to_string()).expect("config");
    let refused = engine::Engine::load(tmp.path(), Default::default())
        .err()
        .expect("refused")
        .to_string();
    assert!(
        refused.contains("unsupported cross-encoder DebertaV2ForSequenceClassification"),
        "{refused}"
    );
}
