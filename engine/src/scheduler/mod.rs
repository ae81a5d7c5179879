//! The scheduler: a bounded queue of tokenized sequences in front of one backend, a dispatch loop that cuts
//! batches with the pure builder in [`queue`], and the overlap of one batch's answering with the next one's
//! forward pass.
//!
//! Work is admitted whole or refused at once ([`Error::Overloaded`]), or, for a caller with a whole corpus at
//! hand, admitted as the queue drains ([`Scheduler::submit_waiting`], [`Scheduler::embed_all`]); a sequence whose
//! [`Ticket`] was dropped is removed before it reaches the backend; every admitted sequence is answered exactly
//! once, with a [`Row`] of its batch's pooled embeddings (shared, not copied).

pub mod queue;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::{oneshot, Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use crate::backend::{Backend, Handle, Output, Row};
use crate::batch::Batch;
use crate::config::EngineConfig;
pub use queue::Budget;
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
    pub embedding: Row,
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
    /// Woken when the queue shrinks (a batch leaves it, abandoned work is removed) or closes.
    room: Notify,
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
    /// Removes sequences whose caller has gone, so they never reach the backend; true if any was.
    fn drop_abandoned(&mut self) -> bool {
        if !self.queue.iter().any(|e| e.reply.is_closed()) {
            return false;
        }
        self.queue.retain(|e| !e.reply.is_closed());
        self.tokens = self.queue.iter().map(|e| e.ids.len()).sum();
        true
    }
}

/// [`Scheduler::embed_all`] submits this many sequences at a time (the gateway's default split size).
const GROUP: usize = 64;
/// Groups submitted and not yet answered to the caller, at most: bounds the answers held for it.
const GROUPS_AHEAD: usize = 64;

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
            room: Notify::new(),
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
        self.admit(seqs).map_err(|(e, _)| e)
    }

    /// [`Scheduler::submit`] that waits for room in the queue instead of being refused as overloaded.
    pub async fn submit_waiting(&self, mut seqs: Vec<Vec<u32>>) -> Result<Ticket, Error> {
        loop {
            let room = self.shared.room.notified();
            tokio::pin!(room);
            // Registered before the attempt, so room made between a refusal and the wait is not missed.
            room.as_mut().enable();
            match self.admit(seqs) {
                Err((Error::Overloaded { .. }, back)) => {
                    seqs = back;
                    room.await;
                }
                other => return other.map_err(|(e, _)| e),
            }
        }
    }

    /// Embeds `seqs` in order, calling `each` with every answer in input order: groups are submitted as the queue
    /// has room (so a whole corpus is fed within the queue's bounds, keeping the backend busy) while the answers
    /// already there are handed over. The first error of `seqs`, of `each` or of a batch stops submission; what
    /// was admitted before it still runs.
    pub async fn embed_all<E: From<Error>>(
        &self,
        seqs: impl IntoIterator<Item = Result<Vec<u32>, E>>,
        mut each: impl FnMut(Embedded) -> Result<(), E>,
    ) -> Result<(), E> {
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Ticket>(GROUPS_AHEAD);
        let feed = async move {
            let mut seqs = seqs.into_iter();
            loop {
                let mut group = Vec::with_capacity(GROUP);
                let mut failed = None;
                for seq in seqs.by_ref() {
                    match seq {
                        Ok(ids) => group.push(ids),
                        Err(e) => {
                            failed = Some(e);
                            break;
                        }
                    }
                    if group.len() == GROUP {
                        break;
                    }
                }
                let last = failed.is_some() || group.len() < GROUP;
                // A closed channel means the answering side stopped on an error; it reports that one.
                if !group.is_empty() && tx.send(self.submit_waiting(group).await?).await.is_err() {
                    return Ok(());
                }
                if last {
                    return failed.map_or(Ok(()), Err);
                }
            }
        };
        let answer = async {
            while let Some(ticket) = rx.recv().await {
                for e in ticket.wait().await? {
                    each(e)?;
                }
            }
            Ok(())
        };
        let (fed, answered) = tokio::join!(feed, answer);
        answered.and(fed)
    }

    /// Admits `seqs` whole, or gives them back with the reason.
    fn admit(&self, seqs: Vec<Vec<u32>>) -> Result<Ticket, (Error, Vec<Vec<u32>>)> {
        let tokens: usize = seqs.iter().map(Vec::len).sum();
        let mut st = self.shared.lock();
        if st.closed {
            return Err((Error::ShuttingDown, seqs));
        }
        st.drop_abandoned();
        let over = st.queue.len() + seqs.len() > self.shared.max_queue_seqs
            || st.tokens + tokens > self.shared.max_queue_tokens;
        if over && !st.queue.is_empty() {
            let e = Error::Overloaded {
                queued_requests: st.queue.len(),
                queued_tokens: st.tokens,
                max_requests: self.shared.max_queue_seqs,
                max_tokens: self.shared.max_queue_tokens,
            };
            return Err((e, seqs));
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
        self.shared.room.notify_waiters();
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
                if st.drop_abandoned() {
                    self.room.notify_waiters();
                }
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
                        let batch = st.queue.drain(..seqs).collect();
                        self.room.notify_waiters();
                        return Some(batch);
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

/// Awaits one batch, hands each sequence's caller its row of the shared result, and frees the batch's permit.
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
            let seqs = embeddings.len();
            for (entry, row) in entries.into_iter().zip(embeddings.into_rows()) {
                let times = StageTimes {
                    queue: submitted - entry.admitted + queued,
                    inference: compute,
                };
                // A caller gone since the batch was cut simply misses its answer.
                let _ = entry.reply.send(Ok(Embedded {
                    embedding: row,
                    times,
                }));
            }
            (shared.observer)(&BatchStats {
                seqs,
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
