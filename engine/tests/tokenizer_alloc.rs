//! A warm `fast` encode performs no heap allocation: counted by a global allocator, which is why this test has
//! a file (and so a test binary) of its own. The count is per thread, so the tests of this file, which the test
//! harness runs side by side, do not count each other's allocations.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::path::Path;

use engine::tokenizer::{self, FastTokenizer, Scratch, Tokenizer, TokenizerKind, Truncation};

struct Counting;

thread_local! {
    /// Allocations made by this thread; const-initialised, so reading it never allocates.
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

fn count() {
    ALLOCATIONS.with(|a| a.set(a.get() + 1));
}

/// Allocations this thread has made so far.
fn allocations() -> usize {
    ALLOCATIONS.with(Cell::get)
}

// SAFETY: every call is forwarded unchanged to the system allocator; counting has no effect on the memory.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: the caller's contract is the system allocator's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as for `alloc`.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: as for `alloc`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn warm_encode_allocates_nothing() {
    let workloads = Path::new(env!("CARGO_MANIFEST_DIR")).join("../workloads");
    let mut texts = Vec::new();
    for file in [
        "passages_multilingual.jsonl",
        "queries_multilingual.jsonl",
        "nasty_unicode.jsonl",
    ] {
        let corpus = std::fs::read_to_string(workloads.join("text").join(file)).expect("corpus");
        for line in corpus.lines().take(300) {
            let v: serde_json::Value = serde_json::from_str(line).expect("JSON line");
            texts.push(v["text"].as_str().expect("text").to_owned());
        }
    }
    let read = |file: &str| -> serde_json::Value {
        let text = std::fs::read_to_string(workloads.join("vocab").join(file)).expect("vocab");
        serde_json::from_str(&text).expect("tokenizer.json")
    };
    let mut files: Vec<(String, serde_json::Value)> = [
        "all-MiniLM-L6-v2/tokenizer.json",
        "pegasus_unigram_tokenizer.json",
        "xlmr_style_unigram_1k_tokenizer.json",
        // ALBERT's normaliser steps: NFKD's canonical ordering works in the scratch.
        "albert_style_unigram_1k_tokenizer.json",
        "qwen2_style_bpe_4k_tokenizer.json",
        "gpt2_style_bpe_4k_tokenizer.json",
        "llama3_style_bpe_4k_tokenizer.json",
        "llama2_style_spbpe_4k_tokenizer.json",
        "mistral_style_spbpe_4k_tokenizer.json",
        "gemma_style_spbpe_4k_tokenizer.json",
    ]
    .into_iter()
    .map(|f| (f.to_owned(), read(f)))
    .collect();
    // ByteLevel's prefix space, in both its places, writes its spaced copies into the scratch too.
    let mut j = read("gpt2_style_bpe_4k_tokenizer.json");
    j["pre_tokenizer"]["add_prefix_space"] = true.into();
    files.push(("gpt2 style, prefix space".into(), j));
    let mut j = read("qwen2_style_bpe_4k_tokenizer.json");
    j["pre_tokenizer"]["pretokenizers"][1]["add_prefix_space"] = true.into();
    files.push(("qwen2 style, prefix space".into(), j));
    // WordPiece's added tokens matched on normalised text: the normalised gap is written into the scratch.
    let mut j = read("all-MiniLM-L6-v2/tokenizer.json");
    j["added_tokens"][0]["normalized"] = true.into();
    j["added_tokens"].as_array_mut().expect("added tokens").push(serde_json::json!({"id": 30522,
        "content": "The", "single_word": false, "lstrip": false, "rstrip": false, "normalized": true,
        "special": false}));
    files.push(("minilm, normalised added tokens".into(), j));
    for (file, json) in &files {
        for truncation in [None, Some(Truncation::right(64))] {
            let t = FastTokenizer::from_json(json, truncation).expect("loads");
            let (mut scratch, mut ids) = (Scratch::default(), Vec::new());
            let mut batch = Vec::new();
            let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
            // The first pass grows the buffers to the largest input; the second must not allocate.
            t.encode_batch(&refs, &mut scratch, &mut batch)
                .expect("encodes");
            for text in &texts {
                t.encode_with(text, &mut scratch, &mut ids)
                    .expect("encodes");
            }
            let before = allocations();
            let mut total = 0;
            for text in &texts {
                t.encode_with(text, &mut scratch, &mut ids)
                    .expect("encodes");
                total += ids.len();
            }
            t.encode_batch(&refs, &mut scratch, &mut batch)
                .expect("encodes");
            let allocations = allocations() - before;
            assert_eq!(
                allocations, 0,
                "{file} {truncation:?}: {allocations} allocations"
            );
            assert!(total > texts.len() * 3, "{file}: really encoded");
        }
    }
}

/// Regression: `Tokenizer::encode`, the call the gateway makes, built a fresh `Scratch` per input, so serving
/// allocated on every encode; it now uses the thread's own scratch, warm after the first input.
#[test]
fn encode_without_a_caller_scratch_allocates_nothing_once_warm() {
    let workloads = Path::new(env!("CARGO_MANIFEST_DIR")).join("../workloads");
    let corpus =
        std::fs::read_to_string(workloads.join("text/queries_multilingual.jsonl")).expect("corpus");
    let texts: Vec<String> = corpus
        .lines()
        .take(300)
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("JSON line");
            v["text"].as_str().expect("text").to_owned()
        })
        .collect();
    let t = tokenizer::load(
        &workloads.join("vocab/all-MiniLM-L6-v2/tokenizer.json"),
        TokenizerKind::Fast,
        Some(Truncation::right(256)),
        true,
    )
    .expect("loads");
    let mut ids = Vec::new();
    for text in &texts {
        t.encode(text, &mut ids).expect("encodes");
    }
    let before = allocations();
    for text in &texts {
        t.encode(text, &mut ids).expect("encodes");
    }
    let allocations = allocations() - before;
    assert_eq!(allocations, 0, "{allocations} allocations in warm encodes");
}

/// Regression: a thread's scratch was let go after an encode only when its text buffers passed 1 MiB, so one
/// 100,000-letter word kept the BPE merge buffers it grew (about 2.4 MB) on every thread that ever saw it; they
/// now count too, and the next encode grows them again.
#[test]
fn a_huge_bpe_word_does_not_pin_its_merge_buffers() {
    let workloads = Path::new(env!("CARGO_MANIFEST_DIR")).join("../workloads");
    let t = tokenizer::load(
        &workloads.join("vocab/qwen2_style_bpe_4k_tokenizer.json"),
        TokenizerKind::Fast,
        None,
        true,
    )
    .expect("loads");
    let mut ids = Vec::new();
    t.encode("warm", &mut ids).expect("encodes");
    t.encode(&"a".repeat(100_000), &mut ids).expect("encodes");
    let before = allocations();
    t.encode("warm", &mut ids).expect("encodes");
    assert!(
        allocations() > before,
        "the thread's scratch was kept after a huge word"
    );
}
