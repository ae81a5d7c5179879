//! `bench curve`: the engine's saturation curve — forward tokens/s against batch size in tokens — and the
//! smallest batch budget that reaches a given fraction of the peak. The design this project follows sizes its
//! scheduler's token budget by this curve (a sub-1B model saturates a GPU at about 512 tokens per batch); here it is
//! measured, for the model, dtype, threads and backend given.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use engine::{Batch, CaptureMode, Engine, EngineConfig};

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
    /// The budget named is the smallest size whose tokens/s reaches this fraction of the peak.
    #[arg(long, default_value_t = 0.95)]
    fraction: f64,
    /// Also write the curve as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct Point {
    pub tokens: usize,
    pub seqs: usize,
    pub p50_ms: f64,
    pub tokens_per_s: f64,
    /// `tokens_per_s` over the curve's peak.
    pub of_peak: f64,
}

#[derive(Debug, serde::Serialize)]
pub struct Curve {
    pub backend: String,
    pub device: String,
    pub dtype: String,
    pub threads: usize,
    pub len: usize,
    pub fraction: f64,
    pub points: Vec<Point>,
    /// The smallest size reaching `fraction` of the peak.
    pub budget: usize,
}

/// The smallest size whose throughput reaches `fraction` of the best one's, with each point's share of the peak.
pub fn knee(points: &mut [Point], fraction: f64) -> Option<usize> {
    let peak = points.iter().map(|p| p.tokens_per_s).fold(0.0, f64::max);
    if peak <= 0.0 {
        return None;
    }
    for p in points.iter_mut() {
        p.of_peak = p.tokens_per_s / peak;
    }
    points
        .iter()
        .filter(|p| p.of_peak >= fraction)
        .map(|p| p.tokens)
        .min()
}

/// `tokens` ids as sequences of up to `len`, deterministic and inside the vocabulary.
fn batch(tokens: usize, len: usize, vocab: u32) -> Batch {
    let ids: Vec<u32> = (0..len as u32)
        .map(|i| 1000.min(vocab / 2) + (i * 7919) % (vocab / 2).max(1))
        .collect();
    let mut b = Batch::new();
    let mut left = tokens;
    while left > 0 {
        let n = left.min(len);
        b.push(&ids[..n]);
        left -= n;
    }
    b
}

fn measure(engine: &Engine, batch: &Batch, runs: usize, min: Duration) -> Result<f64> {
    // The bucket's first call runs eager and its second captures (lazy): both before timing.
    for _ in 0..2 {
        engine.backend().submit(batch.clone()).wait()?;
    }
    let mut times = Vec::new();
    let start = Instant::now();
    while times.len() < runs || start.elapsed() < min {
        let t = Instant::now();
        engine.backend().submit(batch.clone()).wait()?;
        times.push(t.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

pub fn run(args: CurveArgs) -> Result<()> {
    if !(args.fraction > 0.0 && args.fraction <= 1.0) {
        bail!("--fraction must be in (0, 1], got {}", args.fraction);
    }
    if args.len == 0 || args.runs == 0 {
        bail!("--len and --runs must be at least 1");
    }
    let sizes = if args.sizes.is_empty() {
        std::iter::successors(Some(16usize), |s| Some(s * 2))
            .take_while(|&s| s <= 32_768)
            .collect()
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
    let vocab = info.vocab_size as u32;
    let mut points = Vec::new();
    let bar = indicatif::ProgressBar::new(sizes.len() as u64).with_style(
        indicatif::ProgressStyle::with_template("{pos}/{len} sizes {wide_bar} {elapsed}")
            .expect("a valid template"),
    );
    for &tokens in &sizes {
        let b = batch(tokens, len, vocab);
        let p50 = measure(&engine, &b, args.runs, Duration::from_secs_f64(args.min_s))
            .with_context(|| format!("batch of {tokens} tokens"))?;
        points.push(Point {
            tokens,
            seqs: b.len(),
            p50_ms: p50 * 1e3,
            tokens_per_s: tokens as f64 / p50,
            of_peak: 0.0,
        });
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
        fraction: args.fraction,
        points,
        budget,
    };
    println!("| batch tokens | sequences | p50 ms | tokens/s | of peak |");
    println!("|---:|---:|---:|---:|---:|");
    for p in &curve.points {
        println!(
            "| {} | {} | {:.2} | {:.0} | {:.0}% |",
            p.tokens,
            p.seqs,
            p.p50_ms,
            p.tokens_per_s,
            100.0 * p.of_peak
        );
    }
    println!(
        "\n{} {} on {} threads ({}): the smallest batch reaching {:.0}% of the peak is {} tokens",
        curve.backend,
        curve.dtype,
        curve.threads,
        curve.device,
        100.0 * curve.fraction,
        curve.budget
    );
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_vec_pretty(&curve)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(tokens: usize, tokens_per_s: f64) -> Point {
        Point {
            tokens,
            seqs: 1,
            p50_ms: 0.0,
            tokens_per_s,
            of_peak: 0.0,
        }
    }

    #[test]
    fn knee_is_the_smallest_size_within_the_fraction_of_the_peak() {
        let mut pts = vec![
            point(16, 100.0),
            point(32, 900.0),
            point(64, 960.0),
            point(128, 1000.0),
        ];
        assert_eq!(knee(&mut pts, 0.95), Some(64));
        assert!((pts[0].of_peak - 0.1).abs() < 1e-12);
        assert_eq!(knee(&mut pts, 0.5), Some(32));
        assert_eq!(knee(&mut [], 0.95), None);
    }

    #[test]
    fn batches_hold_exactly_the_tokens_asked_for() {
        for (tokens, len, seqs) in [(16, 128, 1), (300, 128, 3), (256, 128, 2)] {
            let b = batch(tokens, len, 30_522);
            assert_eq!((b.tokens(), b.len()), (tokens, seqs));
            assert!(b.validate(30_522, 512).is_ok());
        }
        // A vocabulary smaller than the id offset still gets ids inside it.
        assert!(batch(40, 16, 100).validate(100, 512).is_ok());
    }
}
