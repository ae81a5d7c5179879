//! `bench curve`: the engine's saturation curve ([`engine::curve`]) — forward tokens/s and GFLOP/s against batch
//! size in tokens — as a table and JSON, and its knee: the smallest budget that, with the next size, reaches a
//! fraction of the peak (what `--max-batch-tokens auto` runs with, measured there over 16 … 8192).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args;
use engine::curve::{knee, measure, sizes_up_to, Point};
use engine::{CaptureMode, EngineConfig};

use crate::{load_engine, EngineArgs};

#[derive(Args)]
pub struct CurveArgs {
    #[command(flatten)]
    engine: EngineArgs,
    /// Batch sizes in tokens, comma-separated (default: doubling from 16 to 32768).
    #[arg(long, value_delimiter = ',')]
    sizes: Vec<usize>,
    /// Tokens per sequence: a batch of T tokens holds ceil(T / len) sequences, the last one shorter.
    #[arg(long, default_value_t = 128)]
    len: usize,
    /// Timed runs per size: at least this many, and at least `--min-s` seconds.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    #[arg(long, default_value_t = 1.0)]
    min_s: f64,
    /// The budget named is the smallest size whose tokens/s, and the next size's, reach this fraction of the
    /// peak (the median of the three best sizes).
    #[arg(long, default_value_t = 0.95)]
    fraction: f64,
    /// Also write the curve as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Debug, serde::Serialize)]
pub struct Curve {
    pub backend: String,
    pub device: String,
    pub dtype: String,
    pub threads: usize,
    pub len: usize,
    /// The model's FLOPs per token at `len` ([`engine::ModelInfo::flops_per_token`]).
    pub flops_per_token: f64,
    pub fraction: f64,
    pub points: Vec<Point>,
    /// The knee ([`engine::curve::knee`]): what `auto` would run with.
    pub budget: usize,
}

pub fn run(args: CurveArgs) -> Result<()> {
    if !(args.fraction > 0.0 && args.fraction <= 1.0) {
        bail!("--fraction must be in (0, 1], got {}", args.fraction);
    }
    if args.len == 0 || args.runs == 0 {
        bail!("--len and --runs must be at least 1");
    }
    let sizes = if args.sizes.is_empty() {
        sizes_up_to(32_768)
    } else {
        args.sizes.clone()
    };
    let largest = sizes.iter().copied().max().unwrap_or(16);
    let base = args.engine.config()?;
    let config = EngineConfig {
        capture: CaptureMode::Lazy,
        max_batch_tokens: base.max_batch_tokens.max(largest),
        max_batch_seqs: base.max_batch_seqs.max(largest.div_ceil(args.len)),
        ..base
    };
    let engine = load_engine(&args.engine.model_dir()?, config)?;
    let info = engine.backend().info();
    let len = args.len.min(info.max_positions);
    let mut points = Vec::new();
    let bar = indicatif::ProgressBar::new(sizes.len() as u64).with_style(
        indicatif::ProgressStyle::with_template("{pos}/{len} sizes {wide_bar} {elapsed}")
            .expect("a valid template"),
    );
    for &tokens in &sizes {
        let min = Duration::from_secs_f64(args.min_s);
        let point = measure(engine.backend().as_ref(), tokens, len, args.runs, min)
            .with_context(|| format!("batch of {tokens} tokens"))?;
        points.push(point);
        bar.inc(1);
    }
    bar.finish_and_clear();
    let budget = knee(&mut points, args.fraction).context("no size was measured")?;
    let curve = Curve {
        backend: info.name.to_string(),
        device: info.device.clone(),
        dtype: info.dtype.to_string(),
        threads: info.threads,
        len,
        flops_per_token: engine.info().flops_per_token(len),
        fraction: args.fraction,
        points,
        budget,
    };
    println!("| batch tokens | sequences | p50 ms | tokens/s | GFLOP/s | of peak |");
    println!("|---:|---:|---:|---:|---:|---:|");
    for p in &curve.points {
        println!(
            "| {} | {} | {:.2} | {:.0} | {:.1} | {:.0}% |",
            p.tokens,
            p.seqs,
            p.p50_ms,
            p.tokens_per_s,
            p.tokens_per_s * curve.flops_per_token / 1e9,
            100.0 * p.of_peak
        );
    }
    println!(
        "\n{} {} on {} threads ({}): the knee is {} tokens (with the next size, within {:.0}% of the median of \
         the three best)",
        curve.backend,
        curve.dtype,
        curve.threads,
        curve.device,
        curve.budget,
        100.0 * curve.fraction
    );
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_vec_pretty(&curve)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}
