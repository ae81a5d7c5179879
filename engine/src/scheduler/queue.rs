//! The batch builder: a pure function of the two queues' heads, the budget and the clock, so every rule is tested
//! on its own, without threads or a model (the shape of TEI's `router/src/queue.rs`).
//!
//! Online work goes first, first come first served; batch work fills the rest of the budget, up to `batch_fill`
//! tokens in all (the scheduler lowers it while queries arrive, so a batch holding batch work stays short). While
//! batch work is queued, `batch_reserve` tokens of every batch are held for it, so a stream of queries cannot
//! starve a re-index, and a re-index delays a query by at most the compute of the batch already running.

use std::time::Duration;

use tokio::time::Instant;

/// What one batch may hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budget {
    /// Sum of the sequences' lengths, special tokens included.
    pub max_tokens: usize,
    pub max_seqs: usize,
    /// Tokens of each batch kept for batch work while any is queued (online work may not take them).
    pub batch_reserve: usize,
    /// Batch work joins a batch while it stays within this many tokens in all, or within the online work in it
    /// plus the reserve, whichever is more (and within `max_tokens`).
    pub batch_fill: usize,
}

impl Budget {
    /// Whether a sequence of `len` tokens joins a batch that already holds `seqs` sequences and `tokens` tokens,
    /// with `max_tokens` the cap for its class. The first sequence always joins, so one larger than the budget
    /// runs alone.
    fn admits(self, max_tokens: usize, seqs: usize, tokens: usize, len: usize) -> bool {
        seqs == 0 || (tokens + len <= max_tokens && seqs < self.max_seqs)
    }

    fn is_full(self, seqs: usize, tokens: usize) -> bool {
        seqs >= self.max_seqs || tokens >= self.max_tokens
    }
}

/// The next batch cut from the heads of the queues.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cut {
    /// How many sequences from the head of the online queue, in order.
    pub online: usize,
    /// How many from the head of the batch queue.
    pub batch: usize,
    pub tokens: usize,
    /// Whether the batch is cut because a queued sequence would not fit, or the budget is met: it goes at once,
    /// whatever the max-wait.
    pub full: bool,
}

impl Cut {
    pub fn seqs(&self) -> usize {
        self.online + self.batch
    }
}

/// Online sequences of the given lengths join in order while they fit the budget less the batch reserve (when
/// batch work is queued); then batch sequences fill the whole budget.
pub fn cut(
    online: impl IntoIterator<Item = usize>,
    batch: impl IntoIterator<Item = usize>,
    budget: Budget,
) -> Cut {
    let mut batch = batch.into_iter().peekable();
    let online_cap = match batch.peek() {
        Some(_) => budget.max_tokens.saturating_sub(budget.batch_reserve),
        None => budget.max_tokens,
    };
    let (mut c, mut full) = (
        Cut {
            online: 0,
            batch: 0,
            tokens: 0,
            full: false,
        },
        false,
    );
    for len in online {
        if !budget.admits(online_cap, c.online, c.tokens, len) {
            full = true;
            break;
        }
        c.online += 1;
        c.tokens += len;
    }
    let batch_cap = budget
        .batch_fill
        .max(c.tokens + budget.batch_reserve)
        .min(budget.max_tokens);
    for len in batch {
        if !budget.admits(batch_cap, c.seqs(), c.tokens, len) {
            full = true;
            break;
        }
        c.batch += 1;
        c.tokens += len;
    }
    c.full = full || budget.is_full(c.seqs(), c.tokens);
    c
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

/// Decides on the queues' heads: a full batch goes at once; a partial one goes once the oldest sequence queued
/// has waited `max_wait` (at once when it is zero).
pub fn decide(
    online: impl IntoIterator<Item = usize>,
    batch: impl IntoIterator<Item = usize>,
    oldest: Option<Instant>,
    budget: Budget,
    max_wait: Duration,
    now: Instant,
) -> Decision {
    let Some(oldest) = oldest else {
        return Decision::Idle;
    };
    let next = cut(online, batch, budget);
    if next.seqs() == 0 {
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
        batch_reserve: 0,
        batch_fill: 6,
    };

    fn budget(max_tokens: usize, max_seqs: usize, batch_reserve: usize) -> Budget {
        Budget {
            max_tokens,
            max_seqs,
            batch_reserve,
            batch_fill: max_tokens,
        }
    }

    /// Online sequences of the given lengths, in order, cut into consecutive batches as the dispatch loop would.
    fn cut_batches(lens: &[usize], max_tokens: usize, max_seqs: usize) -> Vec<Range<usize>> {
        let mut batches = Vec::new();
        let mut start = 0;
        while start < lens.len() {
            let n = cut(
                lens[start..].iter().copied(),
                [],
                budget(max_tokens, max_seqs, 0),
            )
            .online;
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
        let c = |lens: &[usize]| cut(lens.iter().copied(), [], BUDGET);
        assert_eq!(
            c(&[2, 2]),
            Cut {
                online: 2,
                batch: 0,
                tokens: 4,
                full: false
            }
        );
        assert!(c(&[2, 2, 3]).full, "the next one would pass the budget");
        assert!(c(&[3, 3]).full, "the budget is met exactly");
        assert_eq!(
            c(&[9, 1]),
            Cut {
                online: 1,
                batch: 0,
                tokens: 9,
                full: true
            },
            "an oversize sequence runs alone"
        );
        assert!(cut([1, 1], [], budget(100, 2, 0)).full);
    }

    #[test]
    fn online_work_goes_first_and_batch_work_fills_the_rest() {
        let b = budget(10, 10, 0);
        // The batch queue's head was there first; the queries still go first.
        let c = cut([2, 2], [4, 4], b);
        assert_eq!((c.online, c.batch, c.tokens, c.full), (2, 1, 8, true));
        // No online work: batch work takes the whole budget.
        assert_eq!(cut([], [4, 4, 4], b).batch, 2);
        // An oversize batch sequence runs alone, but never ahead of a query.
        assert_eq!(
            cut([1], [20], b),
            Cut {
                online: 1,
                batch: 0,
                tokens: 1,
                full: true
            }
        );
        assert_eq!(
            cut([], [20], b),
            Cut {
                online: 0,
                batch: 1,
                tokens: 20,
                full: true
            }
        );
    }

    #[test]
    fn batch_fill_bounds_batch_work_but_not_online_work() {
        let b = Budget {
            batch_fill: 4,
            batch_reserve: 2,
            ..budget(10, 10, 0)
        };
        // Batch work alone: up to 4 tokens.
        assert_eq!(cut([], [2, 2, 2], b).batch, 2);
        assert!(
            cut([], [2, 2, 2], b).full,
            "cut at the fill: it goes at once"
        );
        // Online work takes the budget less the reserve; batch work still gets the reserve.
        let c = cut([3, 3], [2, 2, 2], b);
        assert_eq!((c.online, c.batch, c.tokens), (2, 1, 8));
        // Online work alone is not bound by the fill.
        assert_eq!(cut([3, 3, 3], [], b).online, 3);
    }

    #[test]
    fn the_batch_reserve_keeps_a_stream_of_queries_from_starving_a_reindex() {
        let b = budget(10, 10, 4);
        let c = cut([2; 10], [3, 3], b);
        assert_eq!(
            (c.online, c.batch),
            (3, 1),
            "online takes 6 of 10, batch the reserve"
        );
        // Without batch work queued the reserve is not held.
        assert_eq!(cut([2; 10], [], b).online, 5);
        // A query larger than the online share still runs (alone among the queries).
        assert_eq!(
            cut([9, 1], [3], b),
            Cut {
                online: 1,
                batch: 0,
                tokens: 9,
                full: true
            }
        );
    }

    #[tokio::test(start_paused = true)]
    async fn partial_batch_waits_for_max_wait_then_goes() {
        let t0 = Instant::now();
        let wait = Duration::from_millis(5);
        let d = |now| decide([2], [2], Some(t0), BUDGET, wait, now);
        assert_eq!(d(Instant::now()), Decision::WaitUntil(t0 + wait));
        tokio::time::advance(Duration::from_millis(4)).await;
        assert_eq!(d(Instant::now()), Decision::WaitUntil(t0 + wait));
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(matches!(d(Instant::now()), Decision::Dispatch(c) if c.seqs() == 2));
    }

    #[tokio::test(start_paused = true)]
    async fn full_batch_or_zero_wait_goes_at_once() {
        let now = Instant::now();
        let long = Duration::from_secs(60);
        assert!(matches!(
            decide([3, 3, 1], [], Some(now), BUDGET, long, now),
            Decision::Dispatch(c) if c.online == 2 && c.full
        ));
        assert!(matches!(
            decide([], [1], Some(now), BUDGET, Duration::ZERO, now),
            Decision::Dispatch(c) if c.batch == 1 && !c.full
        ));
        assert_eq!(
            decide([], [], None, BUDGET, long, now),
            Decision::Idle,
            "an empty queue waits for work"
        );
    }
}
