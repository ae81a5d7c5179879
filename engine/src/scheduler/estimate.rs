//! How long queued work will take to compute, from the batches the backend actually ran: the time per token of
//! each batch size (a power-of-two bucket of tokens), kept as a moving average. Per size, because a small batch
//! costs more per token than a full one: one figure for all sizes would misjudge the queue exactly when it grows.

use std::time::Duration;

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
}
