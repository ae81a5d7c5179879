//! How long queued work will take to compute, from the batches the backend actually ran: the time per token of
//! each batch size (a power-of-two bucket of tokens), kept as a moving average. Per size, because a small batch
//! costs more per token than a full one: one figure for all sizes would misjudge the queue exactly when it grows.
//!
//! The forward pass is not all of a request's wait: cutting, submitting and answering a batch, and a machine
//! shared with other work, add to it. [`Lateness`] measures how late answers come against what admission
//! predicted, and admission keeps that much margin before the deadline.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

/// Buckets of batch sizes: bucket `b` holds batches of `2^(b-1) + 1 ..= 2^b` tokens.
const BUCKETS: usize = 32;
/// Weight of the newest batch in its bucket's average: about the last eight batches count.
const ALPHA: f64 = 0.25;

/// Seconds per token of each batch-size bucket, measured; `None` until a batch of that size ran.
#[derive(Clone, Debug, Default)]
pub struct Throughput {
    per_token: [Option<f64>; BUCKETS],
}

fn bucket(tokens: usize) -> usize {
    let bits = usize::BITS - tokens.max(1).saturating_sub(1).leading_zeros();
    (bits as usize).min(BUCKETS - 1)
}

impl Throughput {
    /// Records one batch of `tokens` tokens whose forward pass took `took`.
    pub fn record(&mut self, tokens: usize, took: Duration) {
        if tokens == 0 {
            return;
        }
        let sample = took.as_secs_f64() / tokens as f64;
        let slot = &mut self.per_token[bucket(tokens)];
        *slot = Some(match *slot {
            Some(avg) => avg + ALPHA * (sample - avg),
            None => sample,
        });
    }

    /// The time one batch of `tokens` tokens takes: its bucket's rate, or the nearest measured bucket's (the
    /// smaller one first: it errs on the slow side); `None` before any batch was measured.
    pub fn batch_time(&self, tokens: usize) -> Option<Duration> {
        if tokens == 0 {
            return Some(Duration::ZERO);
        }
        let b = bucket(tokens);
        let per_token = (0..BUCKETS).find_map(|d| {
            let below = b.checked_sub(d).and_then(|i| self.per_token[i]);
            below.or_else(|| self.per_token.get(b + d).copied().flatten())
        })?;
        Some(Duration::from_secs_f64(per_token * tokens as f64))
    }

    /// The time `tokens` queued tokens take to compute, cut into batches of `max_batch_tokens` as the batch
    /// builder does when the queue is long: full batches, then the rest.
    pub fn drain_time(&self, tokens: usize, max_batch_tokens: usize) -> Option<Duration> {
        let full = tokens / max_batch_tokens.max(1);
        let rest = tokens - full * max_batch_tokens.max(1);
        let full_time = match full {
            0 => Duration::ZERO,
            n => self.batch_time(max_batch_tokens)?.saturating_mul(n as u32),
        };
        Some(full_time + self.batch_time(rest)?)
    }

    /// The largest batch, up to `max_tokens`, estimated to compute within `limit`; `None` before any batch was
    /// measured. At least one token, so a budget derived from it always admits a sequence (one longer runs alone).
    pub fn tokens_within(&self, limit: Duration, max_tokens: usize) -> Option<usize> {
        self.batch_time(1)?;
        // Time grows with tokens within a bucket and nearly so across them: a binary search finds the edge.
        let (mut lo, mut hi) = (1, max_tokens.max(1));
        while lo < hi {
            let mid = lo + (hi - lo).div_ceil(2);
            if self.batch_time(mid)? <= limit {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        Some(lo)
    }
}

/// Answers of this recent past count for the margin: long enough for a few hundred answers at saturation, short
/// enough that a margin learned in a burst does not outlive it.
const LATENESS_WINDOW: Duration = Duration::from_secs(1);
/// At most this many answers are kept (the newest).
const LATENESS_KEEP: usize = 512;
/// The margin covers this share of the recent answers' lateness.
const LATENESS_QUANTILE: f64 = 0.9;

/// How much later than predicted at admission the recent answers were computed: the part of a request's wait
/// that the forward passes' timing does not show. Admission keeps [`Lateness::margin`] before the deadline.
#[derive(Clone, Debug, Default)]
pub struct Lateness {
    /// When each recent answer was computed, and how many seconds late (negative: early).
    recent: VecDeque<(Instant, f64)>,
    margin: Duration,
}

impl Lateness {
    /// Records the answers of one batch computed at `now`: each one's seconds past its predicted instant.
    pub fn record(&mut self, now: Instant, late_s: impl IntoIterator<Item = f64>) {
        let before = self.recent.len();
        for late in late_s {
            if self.recent.len() == LATENESS_KEEP {
                self.recent.pop_front();
            }
            self.recent.push_back((now, late));
        }
        if self.recent.len() == before {
            return;
        }
        while self
            .recent
            .front()
            .is_some_and(|(t, _)| now.saturating_duration_since(*t) > LATENESS_WINDOW)
        {
            self.recent.pop_front();
        }
        let mut sorted: Vec<f64> = self.recent.iter().map(|(_, late)| *late).collect();
        let n = sorted.len();
        let k = ((n as f64 * LATENESS_QUANTILE) as usize).min(n - 1);
        let (_, q, _) = sorted.select_nth_unstable_by(k, f64::total_cmp);
        self.margin = Duration::from_secs_f64(q.max(0.0));
    }

    /// The margin admission keeps before a deadline at `now`: the 90th percentile of the lateness of the answers
    /// of the last second, at most `cap`; zero when none came in the last second (so a margin cannot shut
    /// admission for good: with nothing admitted, nothing would update it).
    pub fn margin(&self, now: Instant, cap: Duration) -> Duration {
        match self.recent.back() {
            Some((t, _)) if now.saturating_duration_since(*t) <= LATENESS_WINDOW => {
                self.margin.min(cap)
            }
            _ => Duration::ZERO,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn nothing_is_estimated_before_a_batch_ran() {
        let t = Throughput::default();
        assert_eq!(t.batch_time(100), None);
        assert_eq!(t.drain_time(0, 64), Some(Duration::ZERO));
    }

    #[test]
    fn a_size_is_estimated_from_its_own_bucket_then_the_nearest() {
        let mut t = Throughput::default();
        t.record(512, ms(50)); // ~0.1 ms per token at 512
        t.record(16, ms(4)); // 0.25 ms per token at 16: small batches cost more per token
        assert_eq!(
            t.batch_time(400),
            Some(Duration::from_secs_f64(400.0 * 0.05 / 512.0))
        );
        assert_eq!(t.batch_time(16), Some(ms(4)));
        // 100 tokens (bucket 65..=128): no batch of its size ran; 257..=512 is two buckets away, 9..=16 three.
        assert_eq!(
            t.batch_time(100),
            Some(Duration::from_secs_f64(100.0 * 0.05 / 512.0))
        );
        // 32 tokens: one bucket from 16, four from 512.
        assert_eq!(t.batch_time(32), Some(ms(8)));
        // Past every measured size, the largest one's rate.
        assert_eq!(
            t.batch_time(4096),
            Some(Duration::from_secs_f64(4096.0 * 0.05 / 512.0))
        );
    }

    #[test]
    fn the_average_follows_the_newest_batches() {
        let mut t = Throughput::default();
        t.record(100, ms(10));
        for _ in 0..40 {
            t.record(100, ms(20));
        }
        let got = t.batch_time(100).unwrap().as_secs_f64();
        assert!((got - 0.020).abs() < 1e-4, "{got}");
    }

    #[test]
    fn a_long_queue_drains_in_full_batches() {
        let mut t = Throughput::default();
        t.record(512, ms(40));
        t.record(64, ms(10));
        // 1100 tokens at a 512 budget: two full batches and one of 76.
        let want = ms(80) + Duration::from_secs_f64(76.0 * 0.010 / 64.0);
        assert_eq!(t.drain_time(1100, 512), Some(want));
    }

    #[test]
    fn the_largest_batch_within_a_time_is_found() {
        let mut t = Throughput::default();
        assert_eq!(t.tokens_within(ms(25), 8192), None);
        t.record(64, ms(16)); // 0.25 ms per token up to 64
        t.record(128, ms(24)); // 0.1875 ms per token, also for 129..=256 (the nearest measured)
        t.record(512, ms(64)); // 0.125 ms per token from 257 up
        assert_eq!(t.tokens_within(ms(25), 8192), Some(133));
        assert_eq!(t.tokens_within(ms(1000), 8192), Some(8000));
        assert_eq!(
            t.tokens_within(ms(1000), 4096),
            Some(4096),
            "capped by the budget"
        );
        assert_eq!(
            t.tokens_within(Duration::ZERO, 8192),
            Some(1),
            "never below one token"
        );
    }

    #[test]
    fn the_margin_covers_the_recent_lateness_and_lapses() {
        let t0 = Instant::now();
        let cap = ms(50);
        let mut l = Lateness::default();
        assert_eq!(l.margin(t0, cap), Duration::ZERO);
        l.record(t0, [-0.010; 100]);
        assert_eq!(
            l.margin(t0, cap),
            Duration::ZERO,
            "early answers need no margin"
        );
        // And 200 answers 1..=200 ms late: the 90th percentile of the 300 is the 171 ms one.
        l.record(t0, (1..=200).map(|i| i as f64 / 1000.0));
        assert_eq!(l.margin(t0, Duration::MAX), Duration::from_secs_f64(0.171));
        assert_eq!(l.margin(t0, cap), cap, "never more than the cap");
        // A second later with no answer since, it lapses: a margin alone cannot keep admission shut.
        assert_eq!(
            l.margin(t0 + Duration::from_millis(1001), cap),
            Duration::ZERO
        );
        // Answers older than a second no longer count.
        l.record(t0 + Duration::from_millis(1500), [0.002]);
        assert_eq!(l.margin(t0 + Duration::from_millis(1500), cap), ms(2));
    }
}
