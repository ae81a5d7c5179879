//! The tiny random-weight model directories under `tests/fixtures/` (each with its `reference.jsonl`), loaded and
//! checked against their references the same way whatever the architecture. Not every test crate that compiles
//! `common` uses these.
#![allow(dead_code)]

use engine::{Batch, CaptureMode, Dtype, Engine, EngineConfig};

use super::{cosine, Fixture};

pub fn dir(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// Copies fixture `name`'s directory into `to`, all but its weights (which a test writes as it needs them), and
/// returns its `model.safetensors` bytes.
pub fn copy_all_but_weights(name: &str, to: &std::path::Path) -> Vec<u8> {
    copy_tree(&dir(name), to, true);
    std::fs::read(dir(name).join("model.safetensors")).expect("weights")
}

/// Fixture `name`'s directory, copied whole (its module folders too) where a test may edit it.
pub fn copied(name: &str) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().expect("tmp");
    copy_into(name, tmp.path());
    tmp
}

/// Copies fixture `name`'s directory whole into `to`.
pub fn copy_into(name: &str, to: &std::path::Path) {
    copy_tree(&dir(name), to, false);
}

/// Copies `from`'s files and its folders' into `to`, all but its own `model.safetensors` when `but_weights`.
fn copy_tree(from: &std::path::Path, to: &std::path::Path, but_weights: bool) {
    for entry in std::fs::read_dir(from).expect("fixture") {
        let path = entry.expect("entry").path();
        let target = to.join(path.file_name().expect("name"));
        if path.is_dir() {
            std::fs::create_dir(&target).expect("mkdir");
            copy_tree(&path, &target, false);
        } else if !(but_weights && path.file_name() == Some("model.safetensors".as_ref())) {
            std::fs::copy(&path, &target).expect("copy");
        }
    }
}

/// Rewrites the JSON file at `path` as `f` changes it.
pub fn edit_json(path: &std::path::Path, f: impl FnOnce(&mut serde_json::Value)) {
    let mut json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(path).expect("read")).expect("JSON");
    f(&mut json);
    std::fs::write(path, json.to_string()).expect("write");
}

pub fn fixtures(name: &str) -> Vec<Fixture> {
    super::read(&dir(name).join("reference.jsonl"), "embedding")
}

pub fn load(name: &str, dtype: Dtype, capture: CaptureMode) -> Engine {
    let config = EngineConfig {
        threads: 2,
        dtype,
        capture,
        ..Default::default()
    };
    Engine::load(dir(name), config).unwrap_or_else(|e| panic!("load {name}: {e}"))
}

/// Token ids equal the reference's on the default, in-house tokenizer, every embedding reaches `min` cosine
/// against it, and its length is the reference's (cosine cannot see a scale: a model without Normalize pooled by
/// the mean where it asks for the sum over √n would pass it). In f32, each is also the reference to float rounding
/// (`|got - want| ≤ 2e-5 |want|`): a close approximation passes cosine's 0.9999 (GELU's tanh form in place of
/// the exact one gives 0.99999994 on albert_mean), not this.
pub fn check(name: &str, dtype: Dtype, min: f64) {
    let fx = fixtures(name);
    let engine = load(name, dtype, CaptureMode::Lazy);
    for f in &fx {
        assert_eq!(
            engine.tokenize(&f.text).expect("tokenize"),
            f.ids,
            "{name}: {:?}",
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
    let length = |v: &[f32]| v.iter().map(|&x| (x as f64).powi(2)).sum::<f64>().sqrt();
    let scale = fx
        .iter()
        .zip(&got)
        .map(|(f, g)| (length(g) / length(&f.embedding) - 1.0).abs())
        .fold(0.0, f64::max);
    let error = fx
        .iter()
        .zip(&got)
        .map(|(f, g)| {
            let diff: Vec<f32> = f.embedding.iter().zip(g).map(|(a, b)| a - b).collect();
            length(&diff) / length(&f.embedding)
        })
        .fold(0.0, f64::max);
    println!(
        "{name} {dtype}: min cosine {worst:.9}, lengths within {scale:.1e}, relative error {error:.1e}, over {} \
         texts",
        fx.len()
    );
    assert!(worst >= min, "{name} {dtype}: min cosine {worst}");
    if dtype == Dtype::F32 {
        assert!(
            error <= 2e-5,
            "{name} f32: an embedding is off the reference's by {error:.2e} of its length"
        );
    }
    let tolerance = match dtype {
        Dtype::F32 => 1e-4,
        _ => 1e-2,
    };
    assert!(
        scale <= tolerance,
        "{name} {dtype}: an embedding's length is off the reference's by {scale:.2e}"
    );
}

/// Whether bf16 runs here (the CPU backend needs AVX512-BF16); says so when it does not.
pub fn bf16_runs(name: &str) -> bool {
    let runs = load(name, Dtype::Bf16, CaptureMode::Off)
        .backend()
        .info()
        .dtype
        == Dtype::Bf16;
    if !runs {
        eprintln!("SKIPPED: this CPU has no AVX512-BF16 (bf16 runs f32 here)");
    }
    runs
}

/// A sequence's embedding does not depend on the batch around it, nor on how the forward ran (eager or replayed).
pub fn assert_batch_invariant_and_replay_bitwise(name: &str) {
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

/// The three tests every fixture list takes, as `#[test]` functions in the calling test crate: f32 reaches
/// 0.9999 cosine against the reference, bf16 0.999 (where the CPU runs bf16), and batch invariance and replay
/// are bitwise. (Not every test crate that compiles `common` uses it.)
#[allow(unused_macros)]
macro_rules! fixture_tests {
    ($models:expr) => {
        #[test]
        fn f32_matches_the_reference() {
            for name in $models {
                common::models::check(name, engine::Dtype::F32, 0.9999);
            }
        }

        #[test]
        fn bf16_reaches_0_999() {
            if common::models::bf16_runs($models[0]) {
                for name in $models {
                    common::models::check(name, engine::Dtype::Bf16, 0.999);
                }
            }
        }

        #[test]
        fn batch_invariance_and_replay_are_bitwise() {
            for name in $models {
                common::models::assert_batch_invariant_and_replay_bitwise(name);
            }
        }
    };
}
#[allow(unused_imports)]
pub(crate) use fixture_tests;
