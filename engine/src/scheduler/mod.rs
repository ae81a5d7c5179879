//! The scheduler: a bounded queue of tokenized sequences in front of one backend, a dispatch loop that cuts
//! batches with the pure builder in [`queue`], and the overlap of one batch's answering with the next one's
//! forward pass.
//!
//! Work is admitted whole or refused at once ([`Error::Overloaded`]); a sequence whose [`Ticket`] was dropped is
//! removed before it reaches the backend; every admitted sequence is answered exactly once.

pub mod queue;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::{oneshot, Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use crate::backend::{Backend, Handle, Output};
use crate::batch::Batch;
use crate::config::EngineConfig;
pub use queue::{cut_batches, Budget};
use queue::{Cut, Decision};

/// Why a submission or one of its sequences was not embedded.
#[derive(Clone, Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "overloaded: the queue holds {queued_requests} sequences and {queued_tokens} tokens (bounds {max_requests} \
         and {max_tokens}); retry later"
    )]
    Overloaded {
        queued_requests: usize,
        queued_tokens: usize,
        max_requests: usize,
        max_tokens: usize,
    },
    #[error("the scheduler is shutting down")]
    ShuttingDown,
    #[error("the batch failed: {0}")]
    Batch(Arc<crate::Error>),
}

/// Where one sequence's time went after tokenization.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StageTimes {
    /// From admission to the start of its batch's forward pass.
    pub queue: Duration,
    /// Its batch's forward pass, pooling and copy-out included.
    pub inference: Duration,
}

impl StageTimes {
    /// The times of a group of sequences answered together: each stage is as long as its slowest member's.
    pub fn max(self, other: StageTimes) -> StageTimes {
        StageTimes {
            queue: self.queue.max(other.queue),
            inference: self.inference.max(other.inference),
        }
    }
}

/// One sequence's answer.
#[derive(Clone, Debug)]
pub struct Embedded {
    pub embedding: Vec<f32>,
    pub times: StageTimes,
}

/// Telemetry of one batch, reported to the scheduler's observer once the batch is answered.
#[derive(Clone, Copy, Debug)]
pub struct BatchStats {
    pub seqs: usize,
    pub tokens: usize,
    /// `tokens / max_batch_tokens`; above 1 for a sequence larger than the budget, which runs alone.
    pub fill: f64,
    /// Time in the backend's own queue before the forward pass.
    pub backend_queue: Duration,
    pub forward: Duration,
    /// How the backend ran the batch (eager, capture or replay, its bucket, the plan cache after it).
    pub plan: Option<crate::plan::ForwardStats>,
}

/// A snapshot of the scheduler's load.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Load {
    pub queued_seqs: usize,
    pub queued_tokens: usize,
    /// Tokens submitted to the backend and not yet answered.
    pub in_flight_tokens: usize,
    pub batches: u64,
}

impl Load {
    /// Tokens admitted and not yet answered: what replica choice balances.
    pub fn outstanding_tokens(&self) -> usize {
        self.queued_tokens + self.in_flight_tokens
    }
}

/// The pending answers of one submission; await [`Ticket::wait`]. Dropping it abandons the work: sequences not yet
/// in a batch are removed before they reach the backend.
#[derive(Debug)]
pub struct Ticket {
    replies: Vec<oneshot::Receiver<Result<Embedded, Error>>>,
}

impl Ticket {
    /// One answer per submitted sequence, in order; the first error if any sequence failed.
    pub async fn wait(self) -> Result<Vec<Embedded>, Error> {
        let mut out = Vec::with_capacity(self.replies.len());
        for rx in self.replies {
            // A dropped sender means the loop is gone: nothing will answer any more.
            out.push(rx.await.unwrap_or(Err(Error::ShuttingDown))?);
        }
        Ok(out)
    }
}

type Observer = Box<dyn Fn(&BatchStats) + Send + Sync>;

/// A queue and dispatch loop in front of one backend. Start it inside a tokio runtime; dropping it (or
/// [`Scheduler::close`]) stops admission, and the loop exits once everything admitted is answered.
pub struct Scheduler {
    shared: Arc<Shared>,
}

struct Shared {
    state: Mutex<State>,
    wake: Notify,
    backend: Arc<dyn Backend>,
    budget: Budget,
    max_wait: Duration,
    max_queue_tokens: usize,
    max_queue_seqs: usize,
    in_flight_tokens: AtomicUsize,
    batches: AtomicU64,
    observer: Observer,
}

#[derive(Default)]
struct State {
    queue: VecDeque<Entry>,
    tokens: usize,
    closed: bool,
}

struct Entry {
    ids: Vec<u32>,
    admitted: Instant,
    reply: oneshot::Sender<Result<Embedded, Error>>,
}

impl State {
    /// Removes sequences whose caller has gone, so they never reach the backend.
    fn drop_abandoned(&mut self) {
        if self.queue.iter().any(|e| e.reply.is_closed()) {
            self.queue.retain(|e| !e.reply.is_closed());
            self.tokens = self.queue.iter().map(|e| e.ids.len()).sum();
        }
    }
}

impl Scheduler {
    /// Starts the dispatch loop on the current tokio runtime. `observer` sees every answered batch's telemetry.
    pub fn start(
        backend: Arc<dyn Backend>,
        config: &EngineConfig,
        observer: impl Fn(&BatchStats) + Send + Sync + 'static,
    ) -> Scheduler {
        let shared = Arc::new(Shared {
            state: Mutex::default(),
            wake: Notify::new(),
            backend,
            budget: Budget {
                max_tokens: config.max_batch_tokens,
                max_seqs: config.max_batch_seqs,
            },
            max_wait: Duration::from_millis(config.max_wait_ms),
            max_queue_tokens: config.max_queue_tokens,
            max_queue_seqs: config.max_queue_requests,
            in_flight_tokens: AtomicUsize::new(0),
            batches: AtomicU64::new(0),
            observer: Box::new(observer),
        });
        // Overlap: a second batch may be submitted while the first is still computing or being answered.
        let in_flight = if config.overlap { 2 } else { 1 };
        tokio::spawn(dispatch(
            shared.clone(),
            Arc::new(Semaphore::new(in_flight)),
        ));
        Scheduler { shared }
    }

    /// Admits the sequences whole, or refuses them at once. An empty queue admits any submission, so one larger
    /// than the queue's bounds is not refused forever.
    pub fn submit(&self, seqs: Vec<Vec<u32>>) -> Result<Ticket, Error> {
        let tokens: usize = seqs.iter().map(Vec::len).sum();
        let mut st = self.shared.lock();
        if st.closed {
            return Err(Error::ShuttingDown);
        }
        st.drop_abandoned();
        let over = st.queue.len() + seqs.len() > self.shared.max_queue_seqs
            || st.tokens + tokens > self.shared.max_queue_tokens;
        if over && !st.queue.is_empty() {
            return Err(Error::Overloaded {
                queued_requests: st.queue.len(),
                queued_tokens: st.tokens,
                max_requests: self.shared.max_queue_seqs,
                max_tokens: self.shared.max_queue_tokens,
            });
        }
        let admitted = Instant::now();
        let replies = seqs
            .into_iter()
            .map(|ids| {
                let (reply, rx) = oneshot::channel();
                st.queue.push_back(Entry {
                    ids,
                    admitted,
                    reply,
                });
                rx
            })
            .collect();
        st.tokens += tokens;
        drop(st);
        self.shared.wake.notify_one();
        Ok(Ticket { replies })
    }

    pub fn load(&self) -> Load {
        let st = self.shared.lock();
        Load {
            queued_seqs: st.queue.len(),
            queued_tokens: st.tokens,
            in_flight_tokens: self.shared.in_flight_tokens.load(Ordering::Relaxed),
            batches: self.shared.batches.load(Ordering::Relaxed),
        }
    }

    /// Stops admission; what is queued is still run and answered.
    pub fn close(&self) {
        self.shared.lock().closed = true;
        self.shared.wake.notify_one();
    }
}

impl Drop for Scheduler {
    fn drop(&mut self) {
        self.close();
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // No code path panics while holding the lock; if one ever did, the queue itself is still consistent.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits until a batch is due and takes it off the queue; `None` once closed and drained.
    async fn next_batch(&self) -> Option<Vec<Entry>> {
        loop {
            let decision = {
                let mut st = self.lock();
                st.drop_abandoned();
                // Closing flushes partial batches at once rather than waiting out max-wait.
                let max_wait = if st.closed {
                    Duration::ZERO
                } else {
                    self.max_wait
                };
                let decision = queue::decide(
                    st.queue.iter().map(|e| e.ids.len()),
                    st.queue.front().map(|e| e.admitted),
                    self.budget,
                    max_wait,
                    Instant::now(),
                );
                match decision {
                    Decision::Dispatch(Cut { seqs, tokens, .. }) => {
                        st.tokens -= tokens;
                        return Some(st.queue.drain(..seqs).collect());
                    }
                    Decision::Idle if st.closed => return None,
                    other => other,
                }
            };
            match decision {
                Decision::WaitUntil(deadline) => {
                    tokio::select! {
                        _ = self.wake.notified() => {}
                        _ = tokio::time::sleep_until(deadline) => {}
                    }
                }
                _ => self.wake.notified().await,
            }
        }
    }
}

/// The dispatch loop: one permit per batch in flight, held until the batch is answered.
async fn dispatch(shared: Arc<Shared>, permits: Arc<Semaphore>) {
    loop {
        let Ok(permit) = permits.clone().acquire_owned().await else {
            return;
        };
        let Some(entries) = shared.next_batch().await else {
            return;
        };
        let batch = Batch::from_sequences(entries.iter().map(|e| e.ids.as_slice()));
        let tokens = batch.tokens();
        shared.in_flight_tokens.fetch_add(tokens, Ordering::Relaxed);
        let submitted = Instant::now();
        let handle = shared.backend.submit(batch);
        tokio::spawn(answer(shared.clone(), handle, entries, submitted, permit));
    }
}

/// Awaits one batch, copies each row out to its sequence's caller, and frees the batch's permit.
async fn answer(
    shared: Arc<Shared>,
    handle: Handle,
    entries: Vec<Entry>,
    submitted: Instant,
    permit: OwnedSemaphorePermit,
) {
    let tokens: usize = entries.iter().map(|e| e.ids.len()).sum();
    match handle.await {
        Ok(Output {
            embeddings,
            queued,
            compute,
            forward: plan,
        }) => {
            for (entry, row) in entries.into_iter().zip(embeddings.rows()) {
                let times = StageTimes {
                    queue: submitted - entry.admitted + queued,
                    inference: compute,
                };
                // A caller gone since the batch was cut simply misses its answer.
                let _ = entry.reply.send(Ok(Embedded {
                    embedding: row.to_vec(),
                    times,
                }));
            }
            (shared.observer)(&BatchStats {
                seqs: embeddings.len(),
                tokens,
                fill: tokens as f64 / shared.budget.max_tokens as f64,
                backend_queue: queued,
                forward: compute,
                plan,
            });
        }
        Err(e) => {
            let e = Arc::new(e);
            for entry in entries {
                let _ = entry.reply.send(Err(Error::Batch(e.clone())));
            }
        }
    }
    shared.in_flight_tokens.fetch_sub(tokens, Ordering::Relaxed);
    shared.batches.fetch_add(1, Ordering::Relaxed);
    drop(permit);
}

#[cfg(test)]
mod tests;
