//! The Qwen3 architecture against transformers / sentence-transformers, on the tiny random-weight models that
//! `scripts/make_qwen3_fixtures.py` made: Qwen3-Embedding's convention (causal, last-token pooling) and the
//! bidirectional one (`"is_causal": false`, mean pooling). Their byte-level BPE tokenizer runs on the `hf`
//! tokenizer (the in-house one has no BPE yet).

use base64::Engine as _;
use engine::tokenizer::TokenizerKind;
use engine::{Batch, CaptureMode, Dtype, Engine, EngineConfig};

struct Fixture {
    text: String,
    ids: Vec<u32>,
    embedding: Vec<f32>,
}

fn dir(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn fixtures(name: &str) -> Vec<Fixture> {
    std::fs::read_to_string(dir(name).join("reference.jsonl"))
        .expect("fixture file")
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("fixture JSON");
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(v["embedding"].as_str().expect("embedding"))
                .expect("base64");
            Fixture {
                text: v["text"].as_str().expect("text").to_owned(),
                ids: v["ids"]
                    .as_array()
                    .expect("ids")
                    .iter()
                    .map(|i| i.as_u64().expect("id") as u32)
                    .collect(),
                embedding: bytes
                    .chunks_exact(4)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                    .collect(),
            }
        })
        .collect()
}

fn load(name: &str, dtype: Dtype, capture: CaptureMode) -> Engine {
    let config = EngineConfig {
        tokenizer: TokenizerKind::Hf,
        threads: 2,
        dtype,
        capture,
        ..Default::default()
    };
    Engine::load(dir(name), config).expect("load the tiny Qwen3")
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| *x as f64 * *y as f64).sum();
    let na: f64 = a.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    dot / (na * nb)
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
