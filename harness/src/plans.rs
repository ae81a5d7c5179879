//! `bench plans`: what forward plans buy on this machine. For each batch shape, the forward latency run eager
//! (`capture = off`: one fork/join per operation, buffers allocated per call) against a replayed plan, the first
//! two calls under `lazy` (eager, then capture), and the capture cost; and the start-up time of `startup`
//! capture (plans captured first) against `lazy`.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use engine::plan::{ForwardStats, Run};
use engine::{Batch, CaptureMode, Engine, EngineConfig};

use crate::{load_engine, EngineArgs};

#[derive(Args)]
pub struct PlansArgs {
    #[command(flatten)]
    engine: EngineArgs,
    /// Batch shapes as SEQSxLEN (sequences × tokens each), comma-separated. The default ones are batches the
    /// scheduler forms under the default budget (8192 tokens); a larger shape raises the budget of this run.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1x8,1x32,4x32,32x128,64x128"
    )]
    shapes: Vec<Shape>,
    /// Most timed runs per shape and mode, after a warm-up.
    #[arg(long, default_value_t = 30)]
    runs: usize,
    /// Seconds of timed runs per shape (both modes), within --runs and at least 3 runs: large shapes get fewer
    /// runs, so the whole finishes in about a minute.
    #[arg(long, default_value_t = 5.0)]
    shape_s: f64,
    /// Replay "stops mattering" from the first shape where eager is within this fraction of replay.
    #[arg(long, default_value_t = 0.05)]
    threshold: f64,
    /// Also write the figures as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct Shape {
    seqs: usize,
    len: usize,
}

impl std::str::FromStr for Shape {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Self> {
        let (seqs, len) = s
            .split_once('x')
            .with_context(|| format!("shape {s:?}: expected SEQSxLEN, e.g. 32x128"))?;
        let shape = Shape {
            seqs: seqs
                .trim()
                .parse()
                .with_context(|| format!("shape {s:?}"))?,
            len: len.trim().parse().with_context(|| format!("shape {s:?}"))?,
        };
        if shape.seqs == 0 || shape.len < 2 {
            bail!("shape {s:?}: needs at least one sequence of two tokens ([CLS] and [SEP])");
        }
        Ok(shape)
    }
}

/// One shape's figures, in milliseconds.
#[derive(serde::Serialize)]
struct Row {
    shape: Shape,
    tokens: usize,
    eager_p50_ms: f64,
    replay_p50_ms: f64,
    /// The 99th percentiles (the slowest run, with fewer than 100).
    eager_p99_ms: f64,
    replay_p99_ms: f64,
    speedup: f64,
    lazy_first_call_ms: f64,
    lazy_second_call_ms: f64,
    capture_ms: f64,
    plan_mib: f64,
}

#[derive(serde::Serialize)]
struct Startup {
    lazy_load_ms: f64,
    startup_load_ms: f64,
    startup_capture_ms: f64,
    startup_plans: usize,
}

pub fn run(args: PlansArgs) -> Result<()> {
    let dir = args.engine.model_dir()?;
    let base = args.engine.config()?;
    let startup = startup(&dir, &base)?;
    eprintln!(
        "start-up: lazy {:.0} ms; startup capture {:.0} ms ({} plans captured in {:.0} ms)",
        startup.lazy_load_ms,
        startup.startup_load_ms,
        startup.startup_plans,
        startup.startup_capture_ms
    );

    // Every shape gets a bucket: the budget covers the largest.
    let largest = args
        .shapes
        .iter()
        .map(|s| s.seqs * s.len)
        .max()
        .unwrap_or(1);
    let config = |capture| EngineConfig {
        capture,
        max_batch_tokens: base.max_batch_tokens.max(largest),
        max_batch_seqs: base
            .max_batch_seqs
            .max(args.shapes.iter().map(|s| s.seqs).max().unwrap_or(1)),
        ..base.clone()
    };
    let budget = config(CaptureMode::Off).max_batch_tokens;
    if budget > base.max_batch_tokens {
        eprintln!(
            "plans: the largest shape has {largest} tokens, past the budget of {}: measured under a budget of \
             {budget}, which the scheduler would not form batches to",
            base.max_batch_tokens
        );
    }
    let off = load_engine(&dir, config(CaptureMode::Off))?;
    let vocab = off.backend().info().vocab_size as u32;
    let mut rows = Vec::new();
    for (i, &shape) in args.shapes.iter().enumerate() {
        // A fresh lazy engine per shape, so its first two calls are really the bucket's first two.
        let lazy = load_engine(&dir, config(CaptureMode::Lazy))?;
        let batch = shape_batch(shape, vocab);
        let (first, s1) = timed(&lazy, &batch)?;
        let (second, s2) = timed(&lazy, &batch)?;
        if (s1.run, s2.run) != (Run::Eager, Run::Capture) {
            bail!(
                "lazy capture went {:?} then {:?}, not eager then capture",
                s1.run,
                s2.run
            );
        }
        let mut pair = Duration::ZERO;
        for _ in 0..2 {
            pair = timed(&off, &batch)?.0 + timed(&lazy, &batch)?.0;
        }
        let most = args.runs.max(1);
        let runs =
            ((args.shape_s / pair.as_secs_f64().max(1e-9)) as usize).clamp(most.min(3), most);
        eprintln!(
            "plans: shape {}/{} {}x{}: {} timed runs per mode",
            i + 1,
            args.shapes.len(),
            shape.seqs,
            shape.len,
            runs
        );
        // Interleaved, so that drift in the machine's speed hits both modes alike.
        let (mut eager, mut replay) = (Vec::new(), Vec::new());
        for _ in 0..runs {
            eager.push(timed(&off, &batch)?.0);
            let (t, s) = timed(&lazy, &batch)?;
            if s.run != Run::Replay {
                bail!("expected a replay, got {:?}", s.run);
            }
            replay.push(t);
        }
        let (eager_p50, replay_p50) = (median(&mut eager), median(&mut replay));
        let (eager_p99, replay_p99) = (p99(&eager), p99(&replay));
        rows.push(Row {
            shape,
            tokens: shape.seqs * shape.len,
            eager_p50_ms: ms(eager_p50),
            replay_p50_ms: ms(replay_p50),
            eager_p99_ms: ms(eager_p99),
            replay_p99_ms: ms(replay_p99),
            speedup: eager_p50.as_secs_f64() / replay_p50.as_secs_f64(),
            lazy_first_call_ms: ms(first),
            lazy_second_call_ms: ms(second),
            capture_ms: s2.capture_time.map_or(0.0, ms),
            plan_mib: s2.cache.bytes as f64 / (1 << 20) as f64,
        });
    }

    println!("| shape | tokens | eager p50 ms | replay p50 ms | eager / replay | lazy 1st call ms | lazy 2nd call ms (capture) | capture ms | plan MiB |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for r in &rows {
        println!(
            "| {}x{} | {} | {:.3} | {:.3} | {:.2} | {:.3} | {:.3} | {:.3} | {:.1} |",
            r.shape.seqs,
            r.shape.len,
            r.tokens,
            r.eager_p50_ms,
            r.replay_p50_ms,
            r.speedup,
            r.lazy_first_call_ms,
            r.lazy_second_call_ms,
            r.capture_ms,
            r.plan_mib
        );
    }
    let stops = rows.iter().find(|r| r.speedup < 1.0 + args.threshold);
    match stops {
        Some(r) => println!(
            "\nreplay stops mattering (eager within {:.0}% of replay) from {}x{} = {} tokens",
            args.threshold * 100.0,
            r.shape.seqs,
            r.shape.len,
            r.tokens
        ),
        None => println!(
            "\nreplay is more than {:.0}% faster than eager at every shape measured",
            args.threshold * 100.0
        ),
    }
    println!(
        "start-up: lazy {:.0} ms, startup capture {:.0} ms ({} plans in {:.0} ms)",
        startup.lazy_load_ms,
        startup.startup_load_ms,
        startup.startup_plans,
        startup.startup_capture_ms
    );
    if let Some(path) = &args.json {
        let json = serde_json::json!({
            "schema_version": 1,
            "config": base,
            "threshold": args.threshold,
            "startup": startup,
            "rows": rows,
            "replay_stops_mattering_from": stops.map(|r| r.shape),
        });
        std::fs::write(path, serde_json::to_string_pretty(&json)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// Load times of the same engine under `lazy` and under `startup` (which captures the buckets first).
fn startup(dir: &std::path::Path, base: &EngineConfig) -> Result<Startup> {
    let load = |capture| -> Result<(Duration, Engine)> {
        let start = Instant::now();
        let engine = load_engine(
            dir,
            EngineConfig {
                capture,
                ..base.clone()
            },
        )?;
        Ok((start.elapsed(), engine))
    };
    let (lazy, _) = load(CaptureMode::Lazy)?;
    let (startup, engine) = load(CaptureMode::Startup)?;
    let info = engine.backend().info();
    Ok(Startup {
        lazy_load_ms: ms(lazy),
        startup_load_ms: ms(startup),
        startup_capture_ms: info.startup_capture.map_or(0.0, ms),
        startup_plans: info.startup_plans,
    })
}

/// `seqs` sequences of `len` deterministic ids below `vocab`: a forward pass costs the same for any ids of one
/// shape. They skip the first thousand (BERT's special and unused tokens) where the vocabulary is big enough.
fn shape_batch(shape: Shape, vocab: u32) -> Batch {
    let offset = 1000.min(vocab / 2) as u64;
    let span = (vocab as u64 - offset).max(1);
    let seq: Vec<u32> = (0..shape.len as u64)
        .map(|i| (offset + i * 7919 % span) as u32)
        .collect();
    Batch::from_sequences(std::iter::repeat_n(seq.as_slice(), shape.seqs))
}

fn timed(engine: &Engine, batch: &Batch) -> Result<(Duration, ForwardStats)> {
    let start = Instant::now();
    let out = engine
        .backend()
        .submit(batch.clone())
        .wait()
        .with_context(|| {
            format!(
                "a forward pass of shape {}x{}",
                batch.len(),
                batch.max_len()
            )
        })?;
    let elapsed = start.elapsed();
    Ok((
        elapsed,
        out.forward.context("the backend ran no forward pass")?,
    ))
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// The 99th percentile of durations `median` has sorted.
fn p99(sorted: &[Duration]) -> Duration {
    sorted[(sorted.len() * 99 / 100).min(sorted.len() - 1)]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_shapes_are_batches_the_scheduler_forms_under_the_default_budget() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            args: PlansArgs,
        }
        let args = <Cli as clap::Parser>::parse_from(["plans"]).args;
        let d = EngineConfig::default();
        for s in &args.shapes {
            assert!(s.seqs * s.len <= d.max_batch_tokens, "{s:?}");
            assert!(s.seqs <= d.max_batch_seqs, "{s:?}");
            // all-MiniLM-L6-v2's sequence limit.
            assert!(s.len <= 256, "{s:?}");
        }
        assert!(
            args.shape_s * args.shapes.len() as f64 <= 30.0,
            "timed runs fit the minute"
        );
    }

    #[test]
    fn shape_ids_stay_inside_a_vocabulary_of_at_most_1000() {
        let shape = Shape { seqs: 2, len: 600 };
        for vocab in [1, 2, 999, 1000, 1001, 30_522] {
            let batch = shape_batch(shape, vocab);
            assert_eq!(batch.tokens(), 1200);
            assert!(batch.ids().iter().all(|&id| id < vocab), "vocab {vocab}");
        }
        // A BERT vocabulary keeps its first thousand ids out.
        assert!(shape_batch(shape, 30_522)
            .ids()
            .iter()
            .all(|&id| id >= 1000));
    }
}
