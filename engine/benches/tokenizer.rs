//! Single-thread encode time, `fast` against `hf`, for WordPiece (all-MiniLM-L6-v2), Unigram (Pegasus and the
//! XLM-R-style 1k model), byte-level BPE (the Qwen2-, GPT-2- and Llama-3-style 4k vocabularies) and SentencePiece
//! BPE (the Llama 2-, Mistral- and Gemma-style ones) on a short query (~10 tokens), a passage (~150) and a
//! 514-token input.

use std::path::{Path, PathBuf};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use engine::tokenizer::{self, Scratch, Tokenizer, TokenizerKind};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn texts(file: &str) -> Vec<String> {
    let path = root().join("workloads/text").join(file);
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| v.get("text")?.as_str().map(str::to_owned))
        .collect()
}

fn count(t: &dyn Tokenizer, text: &str) -> usize {
    let mut ids = Vec::new();
    t.encode(text, &mut ids).expect("encode");
    ids.len()
}

/// The first text whose length is within `slack` of `target`; for 514 tokens, a long document cut to fit.
fn pick(t: &dyn Tokenizer, pool: &[String], target: usize, slack: usize) -> String {
    pool.iter()
        .find(|s| count(t, s).abs_diff(target) <= slack)
        .cloned()
        .unwrap_or_else(|| {
            let long = pool
                .iter()
                .find(|s| count(t, s) > target)
                .expect("a long text");
            let words: Vec<&str> = long.split(' ').collect();
            let (mut lo, mut hi) = (0, words.len());
            while lo < hi {
                let mid = (lo + hi).div_ceil(2);
                if count(t, &words[..mid].join(" ")) <= target {
                    lo = mid;
                } else {
                    hi = mid - 1;
                }
            }
            words[..lo].join(" ")
        })
}

fn bench(c: &mut Criterion) {
    let queries = texts("queries_multilingual.jsonl");
    let passages = texts("passages_en.jsonl");
    let long = texts("long_docs_en.jsonl");
    for (name, file) in [
        ("wordpiece", "all-MiniLM-L6-v2/tokenizer.json"),
        ("unigram-pegasus", "pegasus_unigram_tokenizer.json"),
        ("unigram-xlmr1k", "xlmr_style_unigram_1k_tokenizer.json"),
        ("unigram-albert", "albert_style_unigram_1k_tokenizer.json"),
        ("bpe-qwen2", "qwen2_style_bpe_4k_tokenizer.json"),
        ("bpe-gpt2", "gpt2_style_bpe_4k_tokenizer.json"),
        ("bpe-llama3", "llama3_style_bpe_4k_tokenizer.json"),
        ("spbpe-llama2", "llama2_style_spbpe_4k_tokenizer.json"),
        ("spbpe-mistral", "mistral_style_spbpe_4k_tokenizer.json"),
        ("spbpe-gemma", "gemma_style_spbpe_4k_tokenizer.json"),
    ] {
        let path = root().join("workloads/vocab").join(file);
        let fast = tokenizer::load(&path, TokenizerKind::Fast, None, true).expect("fast");
        let hf = tokenizer::load(&path, TokenizerKind::Hf, None, true).expect("hf");
        let inputs = [
            ("query", pick(hf.as_ref(), &queries, 10, 1)),
            ("passage", pick(hf.as_ref(), &passages, 150, 10)),
            ("514", pick(hf.as_ref(), &long, 514, 0)),
        ];
        let mut group = c.benchmark_group(format!("tokenize/{name}"));
        for (size, text) in &inputs {
            let tokens = count(hf.as_ref(), text);
            group.throughput(Throughput::Elements(tokens as u64));
            for (kind, t) in [("fast", &fast), ("hf", &hf)] {
                let (mut scratch, mut ids) = (Scratch::default(), Vec::new());
                group.bench_with_input(
                    BenchmarkId::new(kind, format!("{size}-{tokens}tok")),
                    text,
                    |b, text| {
                        b.iter(|| t.encode_with(text, &mut scratch, &mut ids).expect("encode"))
                    },
                );
            }
        }
        group.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(std::time::Duration::from_millis(500))
        .measurement_time(std::time::Duration::from_secs(2));
    targets = bench
}
criterion_main!(benches);
