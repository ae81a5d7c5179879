//! The batch builder: a pure function of the queue's head, the budget and the clock, so every rule is tested on
//! its own, without threads or a model (the shape of TEI's `router/src/queue.rs`).

use std::time::Duration;

use tokio::time::Instant;

/// What one batch may hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budget {
    /// Sum of the sequences' lengths, special tokens included.
    pub max_tokens: usize,
    pub max_seqs: usize,
}

impl Budget {
    /// Whether a sequence of `len` tokens joins a batch that already holds `seqs` sequences and `tokens` tokens.
    /// The first sequence always joins, so one larger than the budget runs alone.
    fn admits(self, seqs: usize, tokens: usize, len: usize) -> bool {
        seqs == 0 || (tokens + len <= self.max_tokens && seqs < self.max_seqs)
    }

    fn is_full(self, seqs: usize, tokens: usize) -> bool {
        seqs >= self.max_seqs || tokens >= self.max_tokens
    }
}

/// The next batch cut from the head of a queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cut {
    /// How many sequences, from the head, in order.
    pub seqs: usize,
    pub tokens: usize,
    /// Whether the batch is cut because the next sequence would not fit, or the budget is met: it goes at once,
    /// whatever the max-wait.
    pub full: bool,
}

/// First-come-first-served: sequences of the given lengths join, in order, until the next one would pass the
/// budget.
pub fn cut(lens: impl IntoIterator<Item = usize>, budget: Budget) -> Cut {
    let (mut seqs, mut tokens) = (0, 0);
    for len in lens {
        if !budget.admits(seqs, tokens, len) {
            return Cut {
                seqs,
                tokens,
                full: true,
            };
        }
        seqs += 1;
        tokens += len;
    }
    Cut {
        seqs,
        tokens,
        full: budget.is_full(seqs, tokens),
    }
}

/// What the dispatch loop does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Nothing queued.
    Idle,
    /// Send this batch now.
    Dispatch(Cut),
    /// A partial batch is waiting for company until this instant.
    WaitUntil(Instant),
}

/// Decides on the queue's head: a full batch goes at once; a partial one goes once its oldest sequence has waited
/// `max_wait` (at once when it is zero). `oldest` is when the head of the queue was enqueued.
pub fn decide(
    lens: impl IntoIterator<Item = usize>,
    oldest: Option<Instant>,
    budget: Budget,
    max_wait: Duration,
    now: Instant,
) -> Decision {
    let Some(oldest) = oldest else {
        return Decision::Idle;
    };
    let next = cut(lens, budget);
    if next.seqs == 0 {
        return Decision::Idle;
    }
    let deadline = oldest + max_wait;
    if next.full || now >= deadline {
        Decision::Dispatch(next)
    } else {
        Decision::WaitUntil(deadline)
    }
}

#[cfg(test)]
mod tests {
    use std::ops::Range;

    use super::*;

    const BUDGET: Budget = Budget {
        max_tokens: 6,
        max_seqs: 10,
    };

    /// Sequences of the given lengths, in order, cut into consecutive batches as the dispatch loop would.
    fn cut_batches(lens: &[usize], max_tokens: usize, max_seqs: usize) -> Vec<Range<usize>> {
        let budget = Budget {
            max_tokens,
            max_seqs,
        };
        let mut batches = Vec::new();
        let mut start = 0;
        while start < lens.len() {
            let n = cut(lens[start..].iter().copied(), budget).seqs;
            batches.push(start..start + n);
            start += n;
        }
        batches
    }

    #[test]
    fn batches_respect_budget_and_order() {
        assert_eq!(cut_batches(&[3, 3, 3, 3], 6, 10), vec![0..2, 2..4]);
        assert_eq!(cut_batches(&[10, 2, 2], 6, 10), vec![0..1, 1..3]);
        assert_eq!(cut_batches(&[2, 10, 2], 6, 10), vec![0..1, 1..2, 2..3]);
        assert_eq!(cut_batches(&[1, 1, 1], 100, 2), vec![0..2, 2..3]);
        assert_eq!(cut_batches(&[], 6, 2), Vec::<Range<usize>>::new());
    }

    #[test]
    fn cut_reports_whether_the_batch_is_full() {
        let c = |lens: &[usize]| cut(lens.iter().copied(), BUDGET);
        assert_eq!(
            c(&[2, 2]),
            Cut {
                seqs: 2,
                tokens: 4,
                full: false
            }
        );
        assert!(c(&[2, 2, 3]).full, "the next one would pass the budget");
        assert!(c(&[3, 3]).full, "the budget is met exactly");
        assert_eq!(
            c(&[9, 1]),
            Cut {
                seqs: 1,
                tokens: 9,
                full: true
            },
            "an oversize sequence runs alone"
        );
        let seq_cap = Budget {
            max_tokens: 100,
            max_seqs: 2,
        };
        assert!(cut([1, 1].into_iter(), seq_cap).full);
    }

    #[tokio::test(start_paused = true)]
    async fn partial_batch_waits_for_max_wait_then_goes() {
        let t0 = Instant::now();
        let wait = Duration::from_millis(5);
        let d = |now| decide([2, 2], Some(t0), BUDGET, wait, now);
        assert_eq!(d(Instant::now()), Decision::WaitUntil(t0 + wait));
        tokio::time::advance(Duration::from_millis(4)).await;
        assert_eq!(d(Instant::now()), Decision::WaitUntil(t0 + wait));
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(matches!(d(Instant::now()), Decision::Dispatch(c) if c.seqs == 2));
    }

    #[tokio::test(start_paused = true)]
    async fn full_batch_or_zero_wait_goes_at_once() {
        let now = Instant::now();
        let long = Duration::from_secs(60);
        assert!(matches!(
            decide([3, 3, 1], Some(now), BUDGET, long, now),
            Decision::Dispatch(c) if c.seqs == 2 && c.full
        ));
        assert!(matches!(
            decide([1], Some(now), BUDGET, Duration::ZERO, now),
            Decision::Dispatch(c) if c.seqs == 1 && !c.full
        ));
        assert_eq!(
            decide([], None, BUDGET, long, now),
            Decision::Idle,
            "an empty queue waits for work"
        );
    }
}
