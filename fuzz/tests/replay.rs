//! Replays the committed seed corpora and every crash the fuzzers found (`fuzz/corpus/<target>/`,
//! `fuzz/crashes/<target>/`) through the targets' functions: a plain `cargo test` in `fuzz/`, no AFL++ needed.

use fuzz::{
    http_body, model_dir, model_dir_seed, repo, tokenizers, trace, MODELS, MODEL_FILES, ROUTES,
    VOCABULARIES,
};

/// Runs `target` on every file of `fuzz/corpus/<name>/` and `fuzz/crashes/<name>/`; returns how many.
fn replay(name: &str, target: fn(&[u8])) -> usize {
    let mut n = 0;
    for kind in ["corpus", "crashes"] {
        let dir = repo().join("fuzz").join(kind).join(name);
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries {
            let path = entry.expect("corpus entry").path();
            target(&std::fs::read(&path).expect("corpus file"));
            n += 1;
        }
    }
    n
}

#[test]
fn tokenizers_corpus_replays() {
    assert!(replay("tokenizers", tokenizers) >= VOCABULARIES.len());
}

#[test]
fn http_body_corpus_replays() {
    assert!(replay("http_body", http_body) >= ROUTES.len());
}

#[test]
fn trace_corpus_replays() {
    assert!(replay("trace", trace) >= 3);
}

#[test]
fn model_dir_corpus_replays() {
    assert!(replay("model_dir", model_dir) >= MODELS.len() * MODEL_FILES.len());
}

/// Regression (CI stop 25): the seeds were a Qwen3's files fed to the tiny BERT, so the fuzzer started from
/// inputs that could not load and seldom reached a loaded model. A seed for each tiny model's file is now that
/// file unchanged, checked here (`FUZZ_WRITE_SEEDS=1 cargo test` rewrites them after the tiny models change);
/// the hand-made `qwen3-tiny.config-rope-*.json` and `tiny-bert.1_Pooling-config-concat.json` beside them are
/// edits of the Qwen3's config and the BERT's pooling.
#[test]
fn model_dir_seeds_are_the_tiny_models_own_files() {
    let dir = repo().join("fuzz/corpus/model_dir");
    let write = std::env::var_os("FUZZ_WRITE_SEEDS").is_some();
    let mut stale = Vec::new();
    for (m, model) in MODELS.iter().enumerate() {
        for (f, file) in MODEL_FILES.iter().enumerate() {
            let path = dir.join(format!("{model}.{}", file.replace('/', "-")));
            let seed = model_dir_seed(m, f);
            if write {
                std::fs::write(&path, &seed).expect("writing a seed");
            } else if std::fs::read(&path).ok().as_deref() != Some(&seed[..]) {
                stale.push(path.display().to_string());
            }
        }
    }
    assert!(
        stale.is_empty(),
        "seeds missing or stale (FUZZ_WRITE_SEEDS=1 cargo test rewrites them): {stale:?}"
    );
}
