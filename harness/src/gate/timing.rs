//! `bench gate timing`: a same-run A/B comparison. Baseline (A) and candidate (B) binaries run each short
//! benchmark alternately (AB, then BA, ...), so drift in the host's speed falls on both; every round gives one
//! paired ratio per metric, and the verdict is taken on the bootstrap interval of their geometric mean
//! (`stats.rs`).
//!
//! The benchmarks drive commands every `bench` since the first release has, and parse their existing output, so
//! an old revision's binary runs them unchanged:
//! - `forward-1x12-<dtype>`: `bench embed --per-input` over 32 single 12-token queries, p50 (stderr `per input:`)
//! - `forward-32x128-<dtype>`: `bench embed --max-batch-tokens 4096` over 2 batches of 32 x 128 tokens, tokens/s
//! - `bulk-<dtype>`: `bench embed` over the first 48 passages of passages_en, tokens/s (stderr `embedded ...`)
//! - `tokenize-wordpiece`: `bench tokenize` (MiniLM vocabulary) over passages_en x 10, the process's wall time
//! - `online-p99`, `online-achieved`: `bench replay --rate R --duration-s D` in-process (result.json)
//!
//! bf16 runs only where the CPU has AVX512-BF16. The model is a MiniLM-shaped random BERT written once to the
//! cache (no download; `--model` for another).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};
use clap::Args;
use serde::Serialize;

use super::host::{HostSample, Sampler};
use super::stats::{self, Verdict};
use super::timing_build::{baseline_binary, gate_model, write_inputs};
use super::Row;

#[derive(Args, Debug)]
pub struct TimingArgs {
    /// Baseline: a git revision (built once with `cargo build --release -p harness` in a temporary worktree and
    /// cached by commit) or the path of a `bench` binary.
    #[arg(long)]
    pub against: String,
    /// Candidate binary; default: this one.
    #[arg(long)]
    pub candidate: Option<PathBuf>,
    /// Engine knob of the candidate's runs, NAME=VALUE (engine flags of `embed`, `--set` of `replay`).
    #[arg(long = "candidate-set", value_name = "NAME=VALUE")]
    pub candidate_sets: Vec<String>,
    /// Engine knob of the baseline's runs.
    #[arg(long = "baseline-set", value_name = "NAME=VALUE")]
    pub baseline_sets: Vec<String>,
    /// Paired rounds (each runs every benchmark once on each side).
    #[arg(long, default_value_t = 6)]
    pub rounds: usize,
    /// Slowdown that fails a benchmark when its whole interval is past it (0.05: 5%).
    #[arg(long, default_value_t = 0.05)]
    pub threshold: f64,
    /// Run only the benchmarks whose name contains one of these (comma-separated).
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
    /// Model directory; default: a MiniLM-shaped random BERT written to the cache.
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// Before each round, wait up to this many seconds for the host to be quiet.
    #[arg(long, default_value_t = 0.0)]
    pub wait_quiet_s: f64,
    /// Keep the verdicts of benchmarks measured mostly on a busy host (by default they are inconclusive).
    #[arg(long)]
    pub allow_busy: bool,
    /// Requests/s of the online step.
    #[arg(long, default_value_t = 40.0)]
    pub online_rate: f64,
    /// Seconds of the online step (the first one left out).
    #[arg(long, default_value_t = 4.0)]
    pub online_s: f64,
    /// Seed of the bootstrap.
    #[arg(long, default_value_t = 7)]
    pub seed: u64,
    #[arg(long)]
    pub run_id: Option<String>,
    #[arg(long, default_value = "results")]
    pub results_dir: PathBuf,
}

/// What a benchmark runs.
#[derive(Clone, Debug)]
enum Kind {
    PerInput,
    Batch32x128,
    Bulk,
    Tokenize,
    Online,
}

/// One metric a benchmark reports.
#[derive(Clone, Debug, Serialize)]
struct Metric {
    name: String,
    unit: &'static str,
    higher_is_better: bool,
}

#[derive(Clone, Debug)]
struct Bench {
    kind: Kind,
    dtype: &'static str,
    metrics: Vec<Metric>,
}

fn metric(name: String, unit: &'static str, higher_is_better: bool) -> Metric {
    Metric {
        name,
        unit,
        higher_is_better,
    }
}

fn cpu_has_bf16() -> bool {
    std::fs::read_to_string("/proc/cpuinfo").is_ok_and(|s| s.contains("avx512_bf16"))
}

fn benches(only: &[String]) -> Vec<Bench> {
    let mut dtypes = vec!["f32"];
    if cpu_has_bf16() {
        dtypes.push("bf16");
    }
    let mut all = Vec::new();
    for dtype in dtypes {
        all.push(Bench {
            kind: Kind::PerInput,
            dtype,
            metrics: vec![metric(format!("forward-1x12-{dtype}"), "p50 ms", false)],
        });
        all.push(Bench {
            kind: Kind::Batch32x128,
            dtype,
            metrics: vec![metric(format!("forward-32x128-{dtype}"), "tokens/s", true)],
        });
        all.push(Bench {
            kind: Kind::Bulk,
            dtype,
            metrics: vec![metric(format!("bulk-{dtype}"), "tokens/s", true)],
        });
    }
    all.push(Bench {
        kind: Kind::Tokenize,
        dtype: "f32",
        metrics: vec![metric("tokenize-wordpiece".into(), "s", false)],
    });
    all.push(Bench {
        kind: Kind::Online,
        dtype: "f32",
        metrics: vec![
            metric("online-p99".into(), "ms", false),
            metric("online-achieved".into(), "req/s", true),
        ],
    });
    all.into_iter()
        .filter(|b| {
            only.is_empty()
                || b.metrics
                    .iter()
                    .any(|m| only.iter().any(|o| m.name.contains(o.as_str())))
        })
        .collect()
}

/// Engine knobs as `embed` flags: `threads=1` is `--threads 1`, `overlap=false` is `--no-overlap`.
fn engine_flags(sets: &[(String, String)]) -> Vec<String> {
    let mut flags = Vec::new();
    for (k, v) in sets {
        match (k.as_str(), v.as_str()) {
            ("overlap", "false") => flags.push("--no-overlap".into()),
            ("overlap", _) => {}
            _ => {
                flags.push(format!("--{}", k.replace('_', "-")));
                flags.push(v.clone());
            }
        }
    }
    flags
}

fn parse_sets(sets: &[String]) -> Result<Vec<(String, String)>> {
    sets.iter()
        .map(|s| {
            let (k, v) = s
                .split_once('=')
                .with_context(|| format!("`{s}`: knobs are NAME=VALUE"))?;
            Ok((k.trim().to_owned(), v.trim().to_owned()))
        })
        .collect()
}

/// Everything the runs share.
struct Setup {
    root: PathBuf,
    model: PathBuf,
    inputs: PathBuf,
    online_rate: f64,
    online_s: f64,
}

/// The number after `key` in `text` (`p50 1.234 ms` gives 1.234 for `p50 `).
fn number_after(text: &str, key: &str) -> Option<f64> {
    let rest = &text[text.find(key)? + key.len()..];
    let end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-' || c == 'e'))
        .unwrap_or(rest.len());
    rest[..end].parse().ok()
}

/// The tokens/s of `bench embed`'s last line: `embedded N inputs (T tokens) in S s: X tokens/s`.
fn tokens_per_s(stderr: &str) -> Option<f64> {
    let line = stderr.lines().rev().find(|l| l.starts_with("embedded "))?;
    let tail = &line[line.rfind(": ")? + 2..];
    tail.strip_suffix(" tokens/s")?.trim().parse().ok()
}

/// Runs one benchmark with `binary` and knobs `sets`; returns its metrics, and the host while it ran.
fn run_one(
    setup: &Setup,
    binary: &Path,
    bench: &Bench,
    sets: &[(String, String)],
    tag: &str,
) -> Result<(Vec<f64>, HostSample)> {
    let mut knobs: Vec<(String, String)> = vec![("dtype".into(), bench.dtype.into())];
    knobs.retain(|(k, _)| !sets.iter().any(|(s, _)| s == k));
    knobs.extend(sets.iter().cloned());
    let model = setup.model.display().to_string();
    let mut cmd = Command::new(binary);
    cmd.current_dir(&setup.root).stdout(Stdio::null());
    let replay_dir = setup.inputs.join(format!("replay-{tag}"));
    match bench.kind {
        Kind::PerInput | Kind::Batch32x128 | Kind::Bulk => {
            let (file, extra): (&str, &[&str]) = match bench.kind {
                Kind::PerInput => ("queries-1x12.jsonl", &["--per-input"]),
                Kind::Batch32x128 => ("batch-32x128.jsonl", &["--max-batch-tokens", "4096"]),
                _ => ("bulk.jsonl", &[]),
            };
            let mut extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
            if knobs.iter().any(|(k, _)| k == "max_batch_tokens") {
                extra.retain(|e| e != "--max-batch-tokens" && e != "4096");
            }
            cmd.args(["embed", "--model", &model])
                .args(extra)
                .args(engine_flags(&knobs))
                .arg(setup.inputs.join(file));
        }
        Kind::Tokenize => {
            cmd.args(["tokenize", "--tokenizer-json"])
                .arg(
                    setup
                        .root
                        .join("workloads/vocab/all-MiniLM-L6-v2/tokenizer.json"),
                )
                .arg(setup.inputs.join("tokenize.jsonl"));
        }
        Kind::Online => {
            let _ = std::fs::remove_dir_all(&replay_dir);
            cmd.args([
                "replay",
                "--model",
                &model,
                "--arrivals",
                "poisson",
                "--no-report",
            ])
            .args(["--rate", &setup.online_rate.to_string()])
            .args([
                "--duration-s",
                &setup.online_s.to_string(),
                "--warmup-s",
                "1",
            ])
            .arg("--results-dir")
            .arg(&replay_dir)
            .args(["--run-id", "gate"])
            .args(
                sets.iter()
                    .flat_map(|(k, v)| ["--set".into(), format!("{k}={v}")]),
            );
        }
    }
    let sampler = Sampler::start();
    let start = std::time::Instant::now();
    let output = cmd
        .output()
        .with_context(|| format!("running {}", binary.display()))?;
    let wall = start.elapsed().as_secs_f64();
    let host = sampler.finish();
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !output.status.success() {
        let tail: Vec<&str> = stderr.lines().rev().take(8).collect();
        bail!(
            "{} ({}) failed: {}",
            bench.metrics[0].name,
            binary.display(),
            tail.into_iter().rev().collect::<Vec<_>>().join(" / ")
        );
    }
    let values = match bench.kind {
        Kind::PerInput => number_after(&stderr, "p50 ").map(|v| vec![v]),
        Kind::Batch32x128 | Kind::Bulk => tokens_per_s(&stderr).map(|v| vec![v]),
        Kind::Tokenize => Some(vec![wall]),
        Kind::Online => {
            let path = replay_dir.join("gate/result.json");
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("reading {}", path.display()))?;
            let v: serde_json::Value = serde_json::from_str(&text)?;
            let class = &v["configs"][0]["steps"][0]["classes"][0];
            let _ = std::fs::remove_dir_all(&replay_dir);
            class["latency_ms"]["p99"]
                .as_f64()
                .zip(class["achieved_rps"].as_f64())
                .map(|(p, a)| vec![p, a])
        }
    };
    let values = values.with_context(|| {
        format!(
            "{}: no figure in the output of {}",
            bench.metrics[0].name,
            binary.display()
        )
    })?;
    Ok((values, host))
}

/// Every run of one metric.
#[derive(Default, Serialize)]
struct Samples {
    baseline: Vec<f64>,
    candidate: Vec<f64>,
    busy_runs: usize,
}

fn median(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

pub fn run(args: TimingArgs) -> Result<i32> {
    let root = super::repo_root();
    let base_sets = parse_sets(&args.baseline_sets)?;
    let cand_sets = parse_sets(&args.candidate_sets)?;
    let candidate = match &args.candidate {
        Some(p) => p.clone(),
        None => std::env::current_exe().context("locating this bench binary")?,
    };
    let (baseline, baseline_label) = baseline_binary(&args.against, &root)?;
    let model = match &args.model {
        Some(m) => m.clone(),
        None => gate_model()?,
    };
    let inputs = std::env::temp_dir().join(format!("bench-gate-timing-{}", std::process::id()));
    write_inputs(&root, &inputs)?;
    let setup = Setup {
        root: root.clone(),
        model,
        inputs: inputs.clone(),
        online_rate: args.online_rate,
        online_s: args.online_s,
    };
    let result = measure(&args, &setup, &baseline, &candidate, &base_sets, &cand_sets);
    let _ = std::fs::remove_dir_all(&inputs);
    let (samples, hosts, benches) = result?;
    let mut rows = Vec::new();
    for (i, bench) in benches.iter().enumerate() {
        for (j, m) in bench.metrics.iter().enumerate() {
            rows.push(row(&args, m, &samples[i][j]));
        }
    }
    let preamble = vec![
        format!(
            "Baseline `{baseline_label}`{}; candidate `{}`{}. {} paired rounds (AB, BA, ...), fail past +{:.0}% \
             only when the whole 95% interval is.",
            show_sets(&base_sets),
            candidate.display(),
            show_sets(&cand_sets),
            args.rounds,
            args.threshold * 100.0
        ),
        "Ratios are candidate over baseline, oriented so that above 1 is slower (for throughputs, baseline over \
         candidate)."
            .into(),
    ];
    let md = super::markdown("Timing gate (A/B)", &preamble, &rows);
    let run_id = args
        .run_id
        .clone()
        .unwrap_or_else(|| super::run_id("timing"));
    let names: Vec<&Metric> = benches.iter().flat_map(|b| &b.metrics).collect();
    let json = serde_json::json!({
        "gate": "timing", "run_id": run_id, "baseline": baseline_label, "candidate": candidate,
        "baseline_sets": args.baseline_sets, "candidate_sets": args.candidate_sets, "rounds": args.rounds,
        "threshold": args.threshold, "model": setup.model, "metrics": names, "samples": samples,
        "hosts": hosts, "rows": rows, "exit_code": super::exit_code(&rows),
    });
    let dir = super::write_outputs(&root.join(&args.results_dir), &run_id, &md, &json)?;
    println!("{md}");
    eprintln!("gate timing: report in {}", dir.display());
    Ok(super::exit_code(&rows))
}

fn show_sets(sets: &[(String, String)]) -> String {
    if sets.is_empty() {
        return String::new();
    }
    let s: Vec<String> = sets.iter().map(|(k, v)| format!("{k}={v}")).collect();
    format!(" ({})", s.join(", "))
}

type Measured = (Vec<Vec<Samples>>, Vec<(String, HostSample)>, Vec<Bench>);

fn measure(
    args: &TimingArgs,
    setup: &Setup,
    baseline: &Path,
    candidate: &Path,
    base_sets: &[(String, String)],
    cand_sets: &[(String, String)],
) -> Result<Measured> {
    let benches = benches(&args.only);
    if benches.is_empty() {
        bail!("no benchmark matches --only {:?}", args.only);
    }
    let mut samples: Vec<Vec<Samples>> = benches
        .iter()
        .map(|b| b.metrics.iter().map(|_| Samples::default()).collect())
        .collect();
    let mut hosts = Vec::new();
    for round in 0..args.rounds {
        if args.wait_quiet_s > 0.0 {
            wait_quiet(args.wait_quiet_s);
        }
        for (i, bench) in benches.iter().enumerate() {
            let order = if round % 2 == 0 {
                [false, true]
            } else {
                [true, false]
            };
            for is_candidate in order {
                let (binary, sets) = if is_candidate {
                    (candidate, cand_sets)
                } else {
                    (baseline, base_sets)
                };
                let side = if is_candidate { "B" } else { "A" };
                let (values, host) = run_one(setup, binary, bench, sets, side)?;
                eprintln!(
                    "  round {}/{} {:<18} {side} {:>10.3}  host: {}",
                    round + 1,
                    args.rounds,
                    bench.metrics[0].name,
                    values[0],
                    host.describe()
                );
                for (j, v) in values.iter().enumerate() {
                    if let Some(s) = samples[i].get_mut(j) {
                        let list = if is_candidate {
                            &mut s.candidate
                        } else {
                            &mut s.baseline
                        };
                        list.push(*v);
                        s.busy_runs += usize::from(host.busy);
                    }
                }
                hosts.push((
                    format!("{} {side} {}", bench.metrics[0].name, round + 1),
                    host,
                ));
            }
        }
    }
    Ok((samples, hosts, benches))
}

/// Waits (bounded) until a half-second sample of the host is not busy.
fn wait_quiet(max_s: f64) {
    let start = std::time::Instant::now();
    loop {
        let s = super::host::sample_for(0.5);
        if !s.busy || start.elapsed().as_secs_f64() >= max_s {
            if s.busy {
                eprintln!(
                    "gate timing: host still busy after {max_s} s ({})",
                    s.describe()
                );
            }
            return;
        }
    }
}

fn row(args: &TimingArgs, m: &Metric, s: &Samples) -> Row {
    let ratios: Vec<f64> = s
        .baseline
        .iter()
        .zip(&s.candidate)
        .map(|(b, c)| if m.higher_is_better { b / c } else { c / b })
        .collect();
    let interval = stats::bootstrap(&ratios, 4000, args.seed);
    let mut verdict = stats::decide(interval, ratios.len(), args.threshold);
    let runs = s.baseline.len() + s.candidate.len();
    let mut note = format!("busy host in {} of {runs} runs", s.busy_runs);
    if !args.allow_busy && verdict != Verdict::Inconclusive && s.busy_runs * 2 > runs {
        verdict = Verdict::Inconclusive;
        note.push_str("; undecided on a busy host (--wait-quiet-s, or --allow-busy)");
    }
    if verdict == Verdict::Inconclusive {
        if let Some(i) = &interval {
            let more = stats::rounds_for(i, ratios.len(), args.threshold);
            note.push_str(&format!("; try --rounds {more}"));
        }
    }
    Row {
        name: m.name.clone(),
        unit: m.unit.into(),
        baseline: format!("{:.3}", median(&s.baseline)),
        candidate: format!("{:.3}", median(&s.candidate)),
        ratio: interval.map(|i| i.ratio),
        interval: interval.map(|i| (i.lo, i.hi)),
        verdict,
        note,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_outputs_of_embed() {
        let e =
            "engine: cpu\nper input: n 32, p50 1.234 ms, p90 2.000 ms, p99 3.1 ms, mean 1.5 ms\n\
                 embedded 32 inputs (384 tokens) in 0.050 s: 7680 tokens/s\n";
        assert_eq!(number_after(e, "p50 "), Some(1.234));
        assert_eq!(tokens_per_s(e), Some(7680.0));
        assert_eq!(tokens_per_s("nothing"), None);
    }

    #[test]
    fn knobs_become_flags() {
        let sets = parse_sets(&[
            "threads=1".into(),
            "overlap=false".into(),
            "max_batch_tokens=64".into(),
        ])
        .expect("valid");
        assert_eq!(
            engine_flags(&sets),
            ["--threads", "1", "--no-overlap", "--max-batch-tokens", "64"]
        );
        assert!(parse_sets(&["threads".into()]).is_err());
        assert!(!benches(&["forward-1x12".into()]).is_empty());
    }
}
