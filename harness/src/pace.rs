//! Sleeping until an instant more precisely than tokio's timer, for the open loops' sends.
//!
//! tokio's timer counts whole milliseconds and rounds a deadline up to the next one, so an open loop that slept on
//! it sent every request about a millisecond late: at 40 requests/s against MiniLM on this 2-core CPU the median
//! dispatch delay was 1.1 ms of a 5 ms median latency, and on an H200 1.0 ms of 1.6 ms — latency the harness added,
//! not the target (with this module: 0.15 ms, the task's wake-up and spawn included). Here one thread
//! (`bench-pacer`) keeps the pending deadlines in a heap and waits on a channel with a timeout (a futex with a
//! high-resolution timer) until the earliest, then wakes its sleeper's task through a oneshot. A sleeper that goes
//! away (a `select!` that took another branch) leaves an entry that fires into nothing.
//!
//! The generator's unit tests run on tokio's paused clock, which no thread can see: under `cfg(test)` the open
//! loops sleep on tokio's timer; [`precise_sleep_until`] is tested on its own, in real time.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::OnceLock;

use tokio::sync::oneshot;
use tokio::time::Instant;

/// Waits until `due`: on the pacer thread, or on tokio's timer in unit tests (see the module's docs).
pub async fn sleep_until(due: Instant) {
    if cfg!(test) {
        tokio::time::sleep_until(due).await;
    } else {
        precise_sleep_until(due).await;
    }
}

/// Waits until `due` on the pacer thread (tokio's timer where the thread could not be started).
pub async fn precise_sleep_until(due: Instant) {
    if Instant::now() >= due {
        return;
    }
    if let Some(pacer) = pacer() {
        let (tx, rx) = oneshot::channel();
        if pacer.send((due.into_std(), tx)).is_ok() && rx.await.is_ok() {
            return;
        }
    }
    tokio::time::sleep_until(due).await;
}

type Request = (std::time::Instant, oneshot::Sender<()>);

/// The pacer thread's inbox, started on first use; `None` if the thread could not be spawned.
fn pacer() -> Option<&'static mpsc::Sender<Request>> {
    static PACER: OnceLock<Option<mpsc::Sender<Request>>> = OnceLock::new();
    PACER
        .get_or_init(|| {
            let (tx, rx) = mpsc::channel();
            std::thread::Builder::new()
                .name("bench-pacer".into())
                .spawn(move || run(rx))
                .ok()
                .map(|_| tx)
        })
        .as_ref()
}

/// A pending wake-up, ordered by its time (then by arrival, so equal times wake in the order they were asked).
struct Wake {
    at: std::time::Instant,
    seq: u64,
    tx: oneshot::Sender<()>,
}

impl PartialEq for Wake {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Wake {}

impl PartialOrd for Wake {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Wake {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

/// Pending entries past which the abandoned ones are dropped (a live `bench tune` abandons one per rate change);
/// after a prune, twice what is left, so live entries past it cost a prune per doubling, not one per push.
const PRUNE_AT: usize = 4096;

fn run(rx: mpsc::Receiver<Request>) {
    let mut heap: BinaryHeap<Reverse<Wake>> = BinaryHeap::new();
    let (mut seq, mut prune_at) = (0u64, PRUNE_AT);
    loop {
        let now = std::time::Instant::now();
        while heap.peek().is_some_and(|Reverse(w)| w.at <= now) {
            if let Some(Reverse(w)) = heap.pop() {
                let _ = w.tx.send(());
            }
        }
        let next = match heap.peek() {
            Some(Reverse(w)) => {
                rx.recv_timeout(w.at.saturating_duration_since(std::time::Instant::now()))
            }
            None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
        };
        match next {
            Ok((at, tx)) => {
                seq += 1;
                heap.push(Reverse(Wake { at, seq, tx }));
                if heap.len() > prune_at {
                    heap.retain(|Reverse(w)| !w.tx.is_closed());
                    prune_at = (2 * heap.len()).max(PRUNE_AT);
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            // The inbox's sender is a static, never dropped: this cannot happen, but ends the thread if it did.
            Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// How late each of 40 sleepers, asked out of order 700 µs apart, woke with `sleep`; none may wake early.
    async fn lateness<F, S>(sleep: S) -> Vec<Duration>
    where
        S: Fn(Instant) -> F + Copy + Send + 'static,
        F: std::future::Future<Output = ()> + Send,
    {
        let start = Instant::now() + Duration::from_millis(5);
        let mut tasks = tokio::task::JoinSet::new();
        for i in (0..40u64).map(|i| (i * 17) % 40) {
            let due = start + Duration::from_micros(700 * i);
            tasks.spawn(async move {
                sleep(due).await;
                let at = Instant::now();
                assert!(at >= due, "sleeper {i} woke {:?} early", due - at);
                at - due
            });
            // Polled once (so the pacer holds its entry), then dropped: it fires into nothing later.
            let abandoned = sleep(due + Duration::from_secs(1));
            tokio::pin!(abandoned);
            tokio::select! {
                biased;
                _ = &mut abandoned => panic!("a sleep a second away returned at once"),
                _ = std::future::ready(()) => {}
            }
        }
        let mut late = Vec::new();
        while let Some(r) = tasks.join_next().await {
            late.push(r.expect("a sleeper panicked"));
        }
        late.sort();
        late
    }

    /// Every sleeper wakes, none early, and the pacer's median lateness is below tokio's timer's on the same
    /// schedule in the same run (tokio's rounds each deadline up to its next millisecond tick).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_pacer_wakes_each_sleeper_on_time_and_sooner_than_tokios_timer() {
        let run = async {
            let paced = lateness(precise_sleep_until).await;
            let ticked = lateness(tokio::time::sleep_until).await;
            (paced, ticked)
        };
        let (paced, ticked) = tokio::time::timeout(Duration::from_secs(30), run)
            .await
            .expect("the sleepers woke within 30 s");
        assert_eq!((paced.len(), ticked.len()), (40, 40));
        assert!(
            paced[20] < ticked[20],
            "median lateness: pacer {:?}, tokio {:?}",
            paced[20],
            ticked[20]
        );
    }

    #[test]
    fn wake_ups_order_by_time_then_by_arrival() {
        let t = std::time::Instant::now();
        let wake = |ms: u64, seq: u64| Wake {
            at: t + std::time::Duration::from_millis(ms),
            seq,
            tx: oneshot::channel().0,
        };
        let mut heap: BinaryHeap<Reverse<Wake>> = [wake(5, 1), wake(1, 2), wake(5, 0), wake(3, 3)]
            .into_iter()
            .map(Reverse)
            .collect();
        let popped: Vec<(u64, u64)> = std::iter::from_fn(|| heap.pop())
            .map(|Reverse(w)| ((w.at - t).as_millis() as u64, w.seq))
            .collect();
        assert_eq!(popped, [(1, 2), (3, 3), (5, 0), (5, 1)]);
    }
}
