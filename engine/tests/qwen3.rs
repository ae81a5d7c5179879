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
