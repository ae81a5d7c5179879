//! The real model against sentence-transformers: reference fixtures made by `scripts/make_fixtures.py`.
//! Runs on all-MiniLM-L6-v2 (fetched into the cache on first use).

use engine::{Batch, Engine, EngineConfig};

mod common;
use common::{cosine, Fixture};

fn fixtures() -> Vec<Fixture> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/minilm_reference.jsonl"
    );
    common::read(std::path::Path::new(path), "embedding_f32_b64")
}

fn minilm() -> Engine {
    minilm_with(EngineConfig::default())
}

fn minilm_with(config: EngineConfig) -> Engine {
    let dir = engine::model::fetch::default_model_dir().expect("default model");
    Engine::load(dir, config).expect("load all-MiniLM-L6-v2")
}

/// The lowest cosine between the engine's embeddings and the references, and the text it was for.
fn worst_cosine<'a>(fx: &'a [Fixture], got: &[Vec<f32>]) -> (f64, &'a str) {
    fx.iter()
        .zip(got)
        .map(|(f, e)| (cosine(e, &f.embedding), f.text.as_str()))
        .fold((1.0, ""), |w, c| if c.0 < w.0 { c } else { w })
}

#[test]
fn every_fixture_matches_sentence_transformers() {
    let fx = fixtures();
    assert!(fx.len() >= 200, "only {} fixtures", fx.len());
    let engine = minilm();
    let texts: Vec<&str> = fx.iter().map(|f| f.text.as_str()).collect();
    // Under lazy capture the first pass runs each bucket eager and the second captures and replays its plan.
    let eager = engine.embed(&texts).expect("embed");
    let replayed = engine.embed(&texts).expect("embed again");
    assert!(
        eager
            .iter()
            .flatten()
            .zip(replayed.iter().flatten())
            .all(|(a, b)| a.to_bits() == b.to_bits()),
        "a replayed plan differs from the eager pass"
    );
    let worst = worst_cosine(&fx, &eager);
    println!(
        "min cosine over {} fixtures: {:.9} (1 - cos = {:.1e})",
        fx.len(),
        worst.0,
        1.0 - worst.0
    );
    assert!(
        worst.0 >= 0.9999,
        "cosine {} for {:?}",
        worst.0,
        worst.1.chars().take(80).collect::<String>()
    );
}

/// Selected at build time (`engine/build.rs` looks at the CPU): where there is no AVX512-BF16 the run lists it as
/// ignored, with the reason, rather than passing it having checked nothing.
#[test]
#[cfg_attr(
    not(bf16_cpu),
    ignore = "this CPU has no AVX512-BF16 (dtype bf16 runs the f32 kernels here)"
)]
fn bf16_reaches_0_999_on_every_fixture() {
    let fx = fixtures();
    let engine = minilm_with(EngineConfig {
        dtype: engine::Dtype::Bf16,
        ..Default::default()
    });
    if engine.backend().info().dtype != engine::Dtype::Bf16 {
        eprintln!("skipped: this CPU has no AVX512-BF16 (dtype bf16 runs the f32 kernels here)");
        return;
    }
    let texts: Vec<&str> = fx.iter().map(|f| f.text.as_str()).collect();
    let worst = worst_cosine(&fx, &engine.embed(&texts).expect("embed"));
    println!(
        "bf16: min cosine over {} fixtures: {:.6} (1 - cos = {:.1e})",
        fx.len(),
        worst.0,
        1.0 - worst.0
    );
    assert!(
        worst.0 >= 0.999,
        "cosine {} for {:?}",
        worst.0,
        worst.1.chars().take(80).collect::<String>()
    );
}

#[test]
fn tokenization_and_truncation_match_the_reference() {
    let engine = minilm();
    assert_eq!(engine.info().max_seq_length, 256);
    let mut truncated = 0;
    for f in fixtures() {
        let ids = engine.tokenize(&f.text).expect("tokenize");
        assert_eq!(
            ids,
            f.ids,
            "ids differ for {:?}",
            f.text.chars().take(80).collect::<String>()
        );
        if f.record["corpus"]
            .as_str()
            .is_some_and(|c| c.starts_with("long_docs"))
        {
            assert_eq!(ids.len(), 256, "long documents are cut at max_seq_length");
            assert_eq!(ids.last(), Some(&102), "[SEP] is kept after truncation");
            truncated += 1;
        }
    }
    assert!(truncated >= 30);
}

#[test]
fn a_text_alone_equals_the_same_text_inside_a_ragged_batch() {
    let engine = minilm();
    let fx = fixtures();
    // Mixed lengths, from the empty string to 256-token documents.
    let seqs: Vec<Vec<u32>> = fx
        .iter()
        .step_by(4)
        .map(|f| engine.tokenize(&f.text).expect("tokenize"))
        .collect();
    let lens: Vec<usize> = seqs.iter().map(Vec::len).collect();
    assert!(
        lens.iter().min() < Some(&5) && lens.iter().max() == Some(&256),
        "{lens:?}"
    );
    let together = engine
        .backend()
        .submit(Batch::from_sequences(seqs.iter().map(Vec::as_slice)))
        .wait()
        .expect("batch");
    let mut max_diff = 0.0f32;
    for (i, s) in seqs.iter().enumerate() {
        let alone = engine
            .backend()
            .submit(Batch::from_sequences([s.as_slice()]))
            .wait()
            .expect("single");
        for (a, b) in alone
            .embeddings
            .row(0)
            .iter()
            .zip(together.embeddings.row(i))
        {
            max_diff = max_diff.max((a - b).abs());
        }
    }
    println!(
        "batch invariance: max |alone - batched| = {max_diff:e} over {} sequences",
        seqs.len()
    );
    assert!(max_diff <= 1e-5, "max difference {max_diff}");
}
