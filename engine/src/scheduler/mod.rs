//! The scheduler: a queue per priority of tokenized sequences in front of one backend, a dispatch loop that cuts
//! a batch with the pure builder in [`queue`] whenever the backend is free, and admission control from the
//! measured throughput ([`estimate`]).
//!
//! - **Priorities.** Every submission is [`Priority::Online`] (latency) or [`Priority::Batch`] (throughput). Online
//!   work goes first; batch work fills the rest of each batch, and a share of every batch is held for it while
//!   any is queued (`batch_min_share`), so it cannot starve.
//! - **When a batch is cut.** When the backend can start one: so it holds everything that arrived during the
//!   last one's compute. With `overlap`, the backend is free once the last batch is computed, and its answering
//!   (splitting rows, waking callers) runs beside the next one's compute; without, once it is answered.
//! - **Overload.** A submission is refused at once ([`Error::Overloaded`], with a retry-after) when its queue is
//!   full, or when the throughput measured from recent batches says its answer would come after its priority's
//!   deadline. Queued work whose deadline passes before it is cut is answered [`Error::Expired`], never computed;
//!   work whose [`Ticket`] was dropped is removed before it reaches the backend. Each is counted ([`ClassLoad`]).
//! - A caller with a whole corpus at hand waits for room instead ([`Scheduler::submit_waiting`],
//!   [`Scheduler::embed_all`]). Every admitted sequence is answered exactly once, with a [`Row`] of its batch's
//!   pooled embeddings (shared, not copied).

mod dispatch;
pub mod estimate;
pub mod queue;
mod state;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::{oneshot, Notify};
use tokio::time::Instant;

use crate::backend::{Backend, Row};
use crate::config::EngineConfig;
pub use queue::Budget;
use state::{Settings, State};

/// What a request is for: a user waiting (latency) or a bulk job (throughput). Over HTTP, the `x-priority`
/// header or the body's `priority` field; `online` when neither says.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum Priority {
    #[default]
    Online,
    Batch,
}

impl Priority {
    pub const ALL: [Priority; 2] = [Priority::Online, Priority::Batch];

    /// Its place in per-priority arrays such as [`Load::classes`].
    pub fn index(self) -> usize {
        self as usize
    }

    pub fn name(self) -> &'static str {
        match self {
            Priority::Online => "online",
            Priority::Batch => "batch",
        }
    }
}

impl std::fmt::Display for Priority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What one submission asks of the scheduler: its priority, the answer each of its sequences wants (pooled,
/// or every token's state), and, for pairs of texts, where the tokens of type 1 start — one boundary for all its
/// sequences ([`crate::Batch::type1_from`]; a caller submits pairs of another boundary separately). Sequences of every kind share batches; a [`Priority`] alone means pooled
/// single texts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Work {
    pub priority: Priority,
    pub readout: crate::Readout,
    pub type1_from: Option<u32>,
}

impl From<Priority> for Work {
    fn from(priority: Priority) -> Work {
        Work {
            priority,
            readout: crate::Readout::POOLED,
            type1_from: None,
        }
    }
}

impl std::str::FromStr for Priority {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Priority::ALL
            .into_iter()
            .find(|p| s.trim().eq_ignore_ascii_case(p.name()))
            .ok_or_else(|| format!("unknown priority {s:?}: `online` or `batch`"))
    }
}

/// Why a submission was refused at admission.
#[derive(Clone, Debug, PartialEq)]
pub enum Refusal {
    /// Its queue is at its bounds.
    QueueFull {
        queued_seqs: usize,
        queued_tokens: usize,
        max_seqs: usize,
        max_tokens: usize,
    },
    /// At the measured throughput its answer would come after its deadline.
    Late {
        estimated: Duration,
        deadline: Duration,
    },
    /// A remote replica's scheduler refused it, for the reason given.
    Remote(String),
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::QueueFull {
                queued_seqs,
                queued_tokens,
                max_seqs,
                max_tokens,
            } => write!(
                f,
                "the queue holds {queued_seqs} sequences and {queued_tokens} tokens (bounds {max_seqs} and \
                 {max_tokens})"
            ),
            Refusal::Late {
                estimated,
                deadline,
            } => write!(
                f,
                "at the measured throughput it would be answered in {} ms, past its {} ms deadline",
                estimated.as_millis(),
                deadline.as_millis()
            ),
            Refusal::Remote(reason) => f.write_str(reason),
        }
    }
}

/// Why a submission or one of its sequences was not embedded.
#[derive(Clone, Debug, thiserror::Error)]
pub enum Error {
    #[error("overloaded: {reason}; retry in {} ms", retry_after.as_millis())]
    Overloaded {
        priority: Priority,
        reason: Refusal,
        /// The estimated time until its queue has drained.
        retry_after: Duration,
    },
    #[error(
        "overloaded: the {} ms deadline of {priority} work passed before its batch could start; retry in {} ms",
        deadline.as_millis(),
        retry_after.as_millis()
    )]
    Expired {
        priority: Priority,
        deadline: Duration,
        retry_after: Duration,
    },
    #[error("the scheduler is shutting down")]
    ShuttingDown,
    #[error("the batch failed: {0}")]
    Batch(Arc<crate::Error>),
}

impl Error {
    /// How long a refused caller should wait before trying again.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Error::Overloaded { retry_after, .. } | Error::Expired { retry_after, .. } => {
                Some(*retry_after)
            }
            _ => None,
        }
    }
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

/// One priority's queue and what became of its work since the start.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ClassLoad {
    pub queued_seqs: usize,
    pub queued_tokens: usize,
    /// Sequences admitted.
    pub admitted: u64,
    /// Submissions refused at admission.
    pub refused: u64,
    /// Sequences whose deadline passed in the queue: answered with an error, never computed.
    pub expired: u64,
    /// Sequences whose caller went away while they were queued: never computed.
    pub abandoned: u64,
}

/// A snapshot of the scheduler's load.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Load {
    pub queued_seqs: usize,
    pub queued_tokens: usize,
    /// Tokens submitted to the backend and not yet answered.
    pub in_flight_tokens: usize,
    pub batches: u64,
    /// By [`Priority::index`].
    pub classes: [ClassLoad; 2],
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
    replies: Vec<state::Answer>,
}

impl Ticket {
    /// One answer per submitted sequence, in order; the first error if any sequence failed.
    pub async fn wait(self) -> Result<Vec<Embedded>, Error> {
        let mut out: Vec<Embedded> = Vec::with_capacity(self.replies.len());
        for mut rx in self.replies {
            let reply = match rx.try_recv() {
                Ok(reply) => reply,
                Err(oneshot::error::TryRecvError::Empty) => {
                    // This answer is in a later batch: the rows held meanwhile must not hold their batch back.
                    for e in &mut out {
                        e.embedding = e.embedding.settled();
                    }
                    // A dropped sender means the loop is gone: nothing will answer any more.
                    rx.await.unwrap_or(Err(Error::ShuttingDown))
                }
                Err(oneshot::error::TryRecvError::Closed) => Err(Error::ShuttingDown),
            };
            out.push(reply?);
        }
        Ok(out)
    }
}

/// Makes the rows held by a caller about to await more answers safe to hold ([`Row::settled`]).
pub(crate) fn settle_rows(rows: &mut [Row]) {
    for row in rows {
        *row = row.settled();
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
    /// Woken when the queue shrinks (a batch leaves it, abandoned or expired work is removed) or closes.
    room: Notify,
    backend: Arc<dyn Backend>,
    in_flight_tokens: AtomicUsize,
    batches: AtomicU64,
    observer: Observer,
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
            state: Mutex::new(State::new(Settings::of(config))),
            wake: Notify::new(),
            room: Notify::new(),
            backend,
            in_flight_tokens: AtomicUsize::new(0),
            batches: AtomicU64::new(0),
            observer: Box::new(observer),
        });
        tokio::spawn(dispatch::run(shared.clone()));
        Scheduler { shared }
    }

    /// Admits the sequences whole at `priority`, or refuses them at once: when the queue is full, or when at the
    /// measured throughput they would be answered after the priority's deadline. An empty queue admits any
    /// submission, so one larger than the queue's bounds is not refused forever.
    pub fn submit(&self, seqs: Vec<Vec<u32>>, work: impl Into<Work>) -> Result<Ticket, Error> {
        self.admit(seqs, work.into(), false).map_err(|(e, _)| e)
    }

    /// [`Scheduler::submit`] that waits for room in the queue instead of being refused, and whose work has no
    /// deadline: for a caller that has more work at hand and will wait for its answers.
    pub async fn submit_waiting(
        &self,
        mut seqs: Vec<Vec<u32>>,
        work: impl Into<Work>,
    ) -> Result<Ticket, Error> {
        let work = work.into();
        loop {
            let room = self.shared.room.notified();
            tokio::pin!(room);
            // Registered before the attempt, so room made between a refusal and the wait is not missed.
            room.as_mut().enable();
            match self.admit(seqs, work, true) {
                Err((Error::Overloaded { .. }, back)) => {
                    seqs = back;
                    room.await;
                }
                other => return other.map_err(|(e, _)| e),
            }
        }
    }

    /// Embeds `seqs` in order as batch work, each read out as `readout` says (pooled, without a prompt's tokens
    /// where the model leaves them out, or token states), calling `each` with every answer in input order: groups are
    /// submitted as the queue has room (so a whole corpus is fed within the queue's bounds, keeping the backend
    /// busy) while the answers already there are handed over. The first error of `seqs`, of `each` or of a batch
    /// stops submission; what was admitted before it still runs.
    pub async fn embed_all<E: From<Error>>(
        &self,
        seqs: impl IntoIterator<Item = Result<Vec<u32>, E>>,
        readout: crate::Readout,
        mut each: impl FnMut(Embedded) -> Result<(), E>,
    ) -> Result<(), E> {
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Ticket>(GROUPS_AHEAD);
        let work = Work {
            priority: Priority::Batch,
            readout,
            type1_from: None,
        };
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
                if !group.is_empty()
                    && tx
                        .send(self.submit_waiting(group, work).await?)
                        .await
                        .is_err()
                {
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
    fn admit(
        &self,
        seqs: Vec<Vec<u32>>,
        work: Work,
        waiting: bool,
    ) -> Result<Ticket, (Error, Vec<Vec<u32>>)> {
        let replies = self
            .shared
            .lock()
            .admit(seqs, work, waiting, Instant::now())?;
        self.shared.wake.notify_one();
        Ok(Ticket { replies })
    }

    /// Applies the scheduling settings of `config` (token budget, sequence cap, max-wait, overlap, queue bounds,
    /// deadlines, batch share) from the next batch on, without dropping queued work. Settings that need a new
    /// engine (threads, dtype, capture, tokenizer) are not the scheduler's and are ignored here.
    pub fn reconfigure(&self, config: &EngineConfig) -> crate::Result<()> {
        config.validate()?;
        if config.auto_budget() {
            return Err(crate::Error::Config {
                name: "max_batch_tokens",
                message:
                    "`auto` is measured when an engine loads; give a running scheduler a number"
                        .into(),
            });
        }
        self.shared.lock().settings = Settings::of(config);
        self.shared.wake.notify_one();
        // Larger bounds may make room for callers waiting on it.
        self.shared.room.notify_waiters();
        Ok(())
    }

    pub fn load(&self) -> Load {
        Load {
            in_flight_tokens: self.shared.in_flight_tokens.load(Ordering::Relaxed),
            batches: self.shared.batches.load(Ordering::Relaxed),
            ..self.shared.lock().load()
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
}

#[cfg(test)]
mod tests;
