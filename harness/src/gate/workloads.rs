//! The workloads of the instruction-count gate, each run N times by the hidden `bench gate workload NAME --iters
//! N`. Setup (loading tokenizers and models, picking texts) happens before the measured function is entered;
//! callgrind collects only inside the function named by the workload's `toggle` (see `counts.rs`).

use std::hint::black_box;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};
use engine::tokenizer::{self, Scratch, Tokenizer, TokenizerKind};

/// Where callgrind collects for the workloads run on the calling thread: this function, entered once.
pub const MEASURED: &str = "bench::gate::workloads::measured";
/// Where it collects for the model's forward, which runs on the engine's compute thread: the network's whole
/// forward (the head's pooling, a copy per sequence, runs after it). The
/// wildcard lets a generic `Bert<D>` match too; the closures inside, whose names go on past `forward`, never do
/// (a nested match would toggle collection off).
pub const FORWARD: &str = "<engine::model::bert::Bert<*>::forward";

/// One counts workload.
pub struct Spec {
    pub name: &'static str,
    /// The function callgrind collects in (`--toggle-collect`).
    pub toggle: &'static str,
    /// Iterations the gate runs (enough that per-iteration figures are stable, few enough for valgrind).
    pub iters: usize,
    pub what: &'static str,
}

pub const SPECS: &[Spec] = &[
    spec(
        "tokenize/wordpiece/query",
        MEASURED,
        200,
        "MiniLM WordPiece, fast, ~10-token query",
    ),
    spec(
        "tokenize/wordpiece/passage",
        MEASURED,
        50,
        "MiniLM WordPiece, fast, ~150-token passage",
    ),
    spec(
        "tokenize/wordpiece/514",
        MEASURED,
        20,
        "MiniLM WordPiece, fast, 514 tokens",
    ),
    spec(
        "tokenize/unigram/query",
        MEASURED,
        200,
        "Pegasus Unigram, fast, ~10-token query",
    ),
    spec(
        "tokenize/unigram/passage",
        MEASURED,
        50,
        "Pegasus Unigram, fast, ~150-token passage",
    ),
    spec(
        "tokenize/unigram/514",
        MEASURED,
        20,
        "Pegasus Unigram, fast, 514 tokens",
    ),
    spec(
        "tokenize/bpe/query",
        MEASURED,
        200,
        "Qwen2-style byte-level BPE, fast, ~10-token query",
    ),
    spec(
        "tokenize/bpe/passage",
        MEASURED,
        50,
        "Qwen2-style byte-level BPE, fast, ~150-token passage",
    ),
    spec(
        "tokenize/bpe/514",
        MEASURED,
        20,
        "Qwen2-style byte-level BPE, fast, 514 tokens",
    ),
    spec(
        "tokenize/spbpe/query",
        MEASURED,
        200,
        "Llama 2-style SentencePiece BPE, fast, ~10-token query",
    ),
    spec(
        "tokenize/spbpe/passage",
        MEASURED,
        50,
        "Llama 2-style SentencePiece BPE, fast, ~150-token passage",
    ),
    spec(
        "tokenize/spbpe/514",
        MEASURED,
        20,
        "Llama 2-style SentencePiece BPE, fast, 514 tokens",
    ),
    spec(
        "batch-builder",
        MEASURED,
        20,
        "scheduler::queue cut + decide, a 4096-sequence queue front to back",
    ),
    spec(
        "request-parse",
        MEASURED,
        50,
        "TEI /embed body of 16 texts: parse, validate, template, tokenize",
    ),
    spec(
        "forward-tiny/1x12",
        FORWARD,
        50,
        "tiny random BERT, f32, 1 sequence of 12 tokens",
    ),
    spec(
        "forward-tiny/8x32",
        FORWARD,
        20,
        "tiny random BERT, f32, 8 sequences of 32 tokens",
    ),
    spec(
        "step-analysis",
        MEASURED,
        5,
        "step::analyze of 20,000 online samples",
    ),
];

const fn spec(name: &'static str, toggle: &'static str, iters: usize, what: &'static str) -> Spec {
    Spec {
        name,
        toggle,
        iters,
        what,
    }
}

/// Runs `work` `iters` times. Never inlined: callgrind toggles collection on entering and leaving it.
#[inline(never)]
pub fn measured(work: &mut dyn FnMut(), iters: usize) {
    for _ in 0..iters {
        work();
    }
}

/// Sets up workload `name`, runs it once outside the measured region (warm-up: first-use allocations), then
/// `iters` times inside it.
pub fn run(name: &str, iters: usize, root: &Path) -> Result<()> {
    let mut work = setup(name, root)?;
    work();
    measured(&mut *work, iters);
    Ok(())
}

type Work = Box<dyn FnMut()>;

fn setup(name: &str, root: &Path) -> Result<Work> {
    let vocab = root.join("workloads/vocab");
    if let Some(rest) = name.strip_prefix("tokenize/") {
        let (kind, size) = rest
            .split_once('/')
            .ok_or_else(|| anyhow!("workload {name}: tokenize/<kind>/<size>"))?;
        let file = match kind {
            "wordpiece" => vocab.join("all-MiniLM-L6-v2/tokenizer.json"),
            "unigram" => vocab.join("pegasus_unigram_tokenizer.json"),
            "bpe" => vocab.join("qwen2_style_bpe_4k_tokenizer.json"),
            "spbpe" => vocab.join("llama2_style_spbpe_4k_tokenizer.json"),
            _ => bail!("workload {name}: no tokenizer {kind}"),
        };
        return tokenize(&file, size, root);
    }
    match name {
        "batch-builder" => Ok(batch_builder()),
        "request-parse" => request_parse(),
        "forward-tiny/1x12" => forward(1, 12),
        "forward-tiny/8x32" => forward(8, 32),
        "step-analysis" => Ok(step_analysis()),
        _ => bail!(
            "no counts workload {name}; there are: {}",
            SPECS.iter().map(|s| s.name).collect::<Vec<_>>().join(", ")
        ),
    }
}

fn texts(root: &Path, file: &str) -> Result<Vec<String>> {
    let path = root.join("workloads/text").join(file);
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    Ok(text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| v.get("text")?.as_str().map(str::to_owned))
        .collect())
}

fn count(t: &dyn Tokenizer, text: &str) -> usize {
    let mut ids = Vec::new();
    t.encode(text, &mut ids).map_or(0, |()| ids.len())
}

/// The first text within `slack` tokens of `target`, or the longest prefix (in words) of a longer one that fits.
fn pick(t: &dyn Tokenizer, pool: &[String], target: usize, slack: usize) -> Result<String> {
    if let Some(s) = pool.iter().find(|s| count(t, s).abs_diff(target) <= slack) {
        return Ok(s.clone());
    }
    let long = pool
        .iter()
        .find(|s| count(t, s) > target)
        .ok_or_else(|| anyhow!("no text longer than {target} tokens"))?;
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
    Ok(words[..lo].join(" "))
}

fn tokenize(file: &Path, size: &str, root: &Path) -> Result<Work> {
    let t = tokenizer::load(file, TokenizerKind::Fast, None, true)
        .with_context(|| format!("loading {}", file.display()))?;
    let text = match size {
        "query" => pick(
            t.as_ref(),
            &texts(root, "queries_multilingual.jsonl")?,
            10,
            1,
        )?,
        "passage" => pick(t.as_ref(), &texts(root, "passages_en.jsonl")?, 150, 10)?,
        "514" => pick(t.as_ref(), &texts(root, "long_docs_en.jsonl")?, 514, 0)?,
        _ => bail!("no text size {size} (query, passage, 514)"),
    };
    let (mut scratch, mut ids) = (Scratch::default(), Vec::new());
    Ok(Box::new(move || {
        let r = t.encode_with(black_box(&text), &mut scratch, &mut ids);
        black_box((&r, &ids));
    }))
}

/// SplitMix64, for fixed pseudo-random inputs.
fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn batch_builder() -> Work {
    use engine::scheduler::queue::{cut, decide, Budget};
    let mut s = 1;
    let lens: Vec<usize> = (0..4096)
        .map(|_| 8 + (splitmix(&mut s) % 505) as usize)
        .collect();
    let now = tokio::time::Instant::now();
    let budget = Budget {
        max_tokens: 8192,
        max_seqs: 256,
        batch_reserve: 2048,
        batch_fill: 8192,
    };
    // The queue of 4096 sequences cut into batches, front to back, as the dispatch loop does.
    Box::new(move || {
        let mut start = 0;
        while start < lens.len() {
            let rest = black_box(&lens[start..]);
            let d = decide(
                rest.iter().copied(),
                [],
                Some(now),
                budget,
                std::time::Duration::from_millis(2),
                now,
            );
            black_box(d);
            start += cut(rest.iter().copied(), [], budget).seqs().max(1);
        }
    })
}

/// A tiny random BERT in a fresh temporary folder, loaded with one compute thread and no plans (so every
/// forward is the same eager pass on one thread).
fn tiny_engine() -> Result<(engine::Engine, TempDir)> {
    let dir =
        TempDir(std::env::temp_dir().join(format!("bench-gate-tiny-{:010}", std::process::id())));
    engine::model::tiny::write_tiny_bert(&dir.0, engine::model::tiny::TinySpec::default())?;
    let config = engine::EngineConfig {
        threads: 1,
        capture: engine::plan::CaptureMode::Off,
        ..Default::default()
    };
    let engine = engine::Engine::load(&dir.0, config)?;
    eprintln!("gate workload: {}", engine.backend().info().device);
    // Let the engine's freshly started threads settle (rayon's idle workers spin a while before they sleep),
    // so nothing else is running when the measured function starts.
    std::thread::sleep(std::time::Duration::from_millis(300));
    Ok((engine, dir))
}

/// Removed when dropped.
struct TempDir(PathBuf);
impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `words` words of the tiny vocabulary: with `[CLS]` and `[SEP]`, `words + 2` tokens.
fn tiny_text(words: usize, salt: usize) -> String {
    const W: [&str; 10] = [
        "the", "search", "query", "of", "and", "embed", "to", "in", "is", "a",
    ];
    (0..words)
        .map(|i| W[(i * 7 + salt) % W.len()])
        .collect::<Vec<_>>()
        .join(" ")
}

fn forward(seqs: usize, tokens: usize) -> Result<Work> {
    let (engine, dir) = tiny_engine()?;
    let texts: Vec<String> = (0..seqs).map(|s| tiny_text(tokens - 2, s)).collect();
    let n: usize = texts.iter().map(|t| count(engine.tokenizer(), t)).sum();
    if n != seqs * tokens {
        bail!("the tiny texts are {n} tokens, not {}", seqs * tokens);
    }
    Ok(Box::new(move || {
        let _keep = &dir;
        black_box(engine.embed(black_box(&texts)).map(|v| v.len()).ok());
    }))
}

fn request_parse() -> Result<Work> {
    let (engine, dir) = tiny_engine()?;
    let tokenization = engine::gateway::Tokenization::new(engine.front(), None)?;
    let inputs: Vec<String> = (0..16).map(|s| tiny_text(10 + s, s)).collect();
    let body = serde_json::to_vec(&serde_json::json!({
        "inputs": inputs, "truncate": true, "prompt_name": "query", "normalize": true,
    }))?;
    Ok(Box::new(move || {
        let _keep = &dir;
        let ids = engine::gateway::parse_embed_body(black_box(&body), false)
            .and_then(|(inputs, options)| tokenization.prepare(engine.front(), inputs, &options));
        black_box(ids.map(|v| v.seqs.len()).ok());
    }))
}

fn step_analysis() -> Work {
    use crate::generator::{Outcome, Sample};
    use crate::step::{analyze, ClassSpec, Window};
    let mut s = 3;
    let samples: Vec<Sample> = (0..20_000)
        .map(|i| {
            let scheduled = i as f64 * 0.0005;
            let latency = 0.002 + (splitmix(&mut s) % 50_000) as f64 * 1e-6;
            Sample {
                class: 0,
                scheduled,
                sent: scheduled + 1e-5,
                done: scheduled + latency,
                outcome: if i % 997 == 0 {
                    Outcome::Refused
                } else {
                    Outcome::Ok
                },
                inputs: 1,
                tokens: 12,
                queue: Some(latency / 4.0),
                inference: Some(latency / 2.0),
            }
        })
        .collect();
    Box::new(move || {
        let classes = [ClassSpec {
            name: "online",
            slo: crate::workload::Slo {
                quantile: 0.99,
                latency_ms: 100.0,
                max_error_rate: 0.01,
            },
            closed_loop: false,
        }];
        let window = Window {
            warmup_s: 1.0,
            end_s: 10.0,
            max_dispatch_delay_ms: 10.0,
            one_pass: false,
        };
        black_box(analyze(black_box(&samples), &classes, &window, None));
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_workload_sets_up_and_runs() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        for s in SPECS {
            run(s.name, 1, &root).unwrap_or_else(|e| panic!("{}: {e:#}", s.name));
        }
        assert!(run("nope", 1, &root).is_err());
    }
}
