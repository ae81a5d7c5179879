//! The saturation curve: forward tokens/s against batch size in tokens, and the smallest batch budget that reaches
//! a given fraction of the peak. The design this project follows sizes its scheduler's token budget by this curve
//! (a sub-1B model saturates a GPU at about 512 tokens per batch); here it is measured, on the backend given.
//! `max_batch_tokens = auto` (0) runs [`auto_budget`] when an engine loads; `bench curve` prints the whole curve.

use std::time::{Duration, Instant};

use crate::backend::Backend;
use crate::batch::Batch;
use crate::error::Result;

/// One measured batch size.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Point {
    pub tokens: usize,
    pub seqs: usize,
    pub p50_ms: f64,
    pub tokens_per_s: f64,
    /// `tokens_per_s` over the curve's peak.
    pub of_peak: f64,
}

/// Sizes doubling from 16 up to `max` (and `max` itself).
pub fn sizes_up_to(max: usize) -> Vec<usize> {
    let mut sizes: Vec<usize> = std::iter::successors(Some(16usize), |s| s.checked_mul(2))
        .take_while(|&s| s < max)
        .collect();
    sizes.push(max.max(1));
    sizes
}

/// The smallest size whose throughput, and the next larger size's, reach `fraction` of the peak; with each
/// point's share of the best one. On a flat curve run-to-run noise of ±10% decides a single-point rule, so the peak
/// is the median of the three best points (one lucky run does not raise it) and the knee must hold for two sizes
/// in a row (one lucky small size does not take it).
pub fn knee(points: &mut [Point], fraction: f64) -> Option<usize> {
    points.sort_by_key(|p| p.tokens);
    let best = points.iter().map(|p| p.tokens_per_s).fold(0.0, f64::max);
    if best <= 0.0 {
        return None;
    }
    for p in points.iter_mut() {
        p.of_peak = p.tokens_per_s / best;
    }
    let mut rates: Vec<f64> = points.iter().map(|p| p.tokens_per_s).collect();
    rates.sort_by(|a, b| b.total_cmp(a));
    // The median of the best three: the second best, or the best when fewer were measured.
    let peak = rates[(rates.len().min(3) - 1) / 2];
    let reaches = |p: &Point| p.tokens_per_s >= fraction * peak;
    (0..points.len())
        .find(|&i| reaches(&points[i]) && points.get(i + 1).is_none_or(reaches))
        .map(|i| points[i].tokens)
}

/// `tokens` ids as sequences of up to `len`, deterministic and inside the vocabulary.
pub fn synthetic_batch(tokens: usize, len: usize, vocab: u32) -> Batch {
    let len = len.max(1);
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

/// Times a batch of `tokens` tokens in sequences of `len`: its median over at least `runs` runs and `min` time,
/// after two untimed calls (a bucket's first call runs eager and its second captures, under lazy capture).
pub fn measure(
    backend: &dyn Backend,
    tokens: usize,
    len: usize,
    runs: usize,
    min: Duration,
) -> Result<Point> {
    let info = backend.info();
    let batch = synthetic_batch(tokens, len.min(info.max_positions), info.vocab_size as u32);
    for _ in 0..2 {
        backend.submit(batch.clone()).wait()?;
    }
    let mut times = Vec::new();
    let start = Instant::now();
    while times.len() < runs.max(1) || start.elapsed() < min {
        let t = Instant::now();
        backend.submit(batch.clone()).wait()?;
        times.push(t.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    let p50 = times[times.len() / 2];
    Ok(Point {
        tokens,
        seqs: batch.len(),
        p50_ms: p50 * 1e3,
        tokens_per_s: tokens as f64 / p50,
        of_peak: 0.0,
    })
}

/// The largest budget `auto` considers: the curve is flat well before it on every backend measured so far.
pub const AUTO_MAX_TOKENS: usize = 8192;
/// `auto` picks the smallest budget within this share of the peak.
pub const AUTO_FRACTION: f64 = 0.95;

/// The budget `max_batch_tokens = auto` runs with: the smallest size from 16 to [`AUTO_MAX_TOKENS`] whose
/// tokens/s (passage-length sequences of 128) reaches [`AUTO_FRACTION`] of the peak. A few seconds at start-up.
pub fn auto_budget(backend: &dyn Backend) -> Result<(usize, Vec<Point>)> {
    let mut points = sizes_up_to(AUTO_MAX_TOKENS)
        .into_iter()
        .map(|t| measure(backend, t, 128, 3, Duration::from_millis(150)))
        .collect::<Result<Vec<_>>>()?;
    let budget = knee(&mut points, AUTO_FRACTION).unwrap_or(AUTO_MAX_TOKENS);
    Ok((budget, points))
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
        let mut two = vec![point(16, 39.0), point(256, 83.0)];
        assert_eq!(
            knee(&mut two, 0.95),
            Some(256),
            "two points: the best is the peak"
        );
    }

    /// Regression: on this CPU's flat bf16 curve one lucky run at 64 tokens made `auto` pick 64, and on the f32
    /// curve one lucky 2048 raised the peak so that only 2048 reached 95% of it (`results/20261203-curve-*.json`).
    #[test]
    fn regression_auto_took_a_lucky_point_on_a_flat_curve() {
        let sizes = [16, 64, 256, 512, 1024, 2048, 4096, 8192];
        let curve = |rates: [f64; 8]| -> Vec<Point> {
            sizes.iter().zip(rates).map(|(&t, r)| point(t, r)).collect()
        };
        let mut bf16 = curve([4150., 5668., 5221., 5599., 5350., 5148., 5537., 4786.]);
        assert_eq!(knee(&mut bf16, 0.95), Some(512));
        let mut f32 = curve([7035., 7480., 6818., 7588., 8212., 9044., 8206., 5435.]);
        assert_eq!(knee(&mut f32, 0.95), Some(1024));
    }

    #[test]
    fn batches_hold_exactly_the_tokens_asked_for() {
        for (tokens, len, seqs) in [(16, 128, 1), (300, 128, 3), (256, 128, 2)] {
            let b = synthetic_batch(tokens, len, 30_522);
            assert_eq!((b.tokens(), b.len()), (tokens, seqs));
            assert!(b.validate(30_522, 512).is_ok());
        }
        // A vocabulary smaller than the id offset still gets ids inside it.
        assert!(synthetic_batch(40, 16, 100).validate(100, 512).is_ok());
    }

    #[test]
    fn sizes_double_up_to_the_largest() {
        assert_eq!(sizes_up_to(100), vec![16, 32, 64, 100]);
        assert_eq!(sizes_up_to(64), vec![16, 32, 64]);
    }
}
