//! Replays the committed seed corpora and every crash the fuzzers found (`fuzz/corpus/<target>/`,
//! `fuzz/crashes/<target>/`) through the targets' functions: a plain `cargo test` in `fuzz/`, no AFL++ needed.

use fuzz::{http_body, model_dir, repo, tokenizers, trace, MODEL_FILES, ROUTES, VOCABULARIES};

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
    assert!(replay("model_dir", model_dir) >= MODEL_FILES.len());
}
