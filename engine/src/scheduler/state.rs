//! The scheduler's state behind its one lock: a queue per priority, the settings, the measured throughput and
//! the batch running. Admission, pruning and cutting are methods here, so each runs under one lock acquisition.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

use super::estimate::Throughput;
use super::queue::{self, Budget, Decision};
use super::{ClassLoad, Embedded, Error, Load, Priority, Refusal, Work};
use crate::config::EngineConfig;

/// The scheduling settings, read from [`EngineConfig`] at start and on every reconfiguration.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Settings {
    pub budget: Budget,
    pub max_wait: Duration,
    pub max_queue_tokens: usize,
    pub max_queue_seqs: usize,
    /// By [`Priority::index`].
    pub deadlines: [Duration; 2],
    pub overlap: bool,
}

impl Settings {
    pub fn of(config: &EngineConfig) -> Settings {
        let reserve = (config.batch_min_share * config.max_batch_tokens as f64).ceil();
        Settings {
            budget: Budget {
                // An engine resolves `auto` (0) before its scheduler starts.
                max_tokens: config.max_batch_tokens.max(1),
                max_seqs: config.max_batch_seqs,
                batch_reserve: reserve as usize,
            },
            max_wait: Duration::from_millis(config.max_wait_ms),
            max_queue_tokens: config.max_queue_tokens,
            max_queue_seqs: config.max_queue_requests,
            deadlines: [
                Duration::from_millis(config.online_deadline_ms),
                Duration::from_millis(config.batch_deadline_ms),
            ],
            overlap: config.overlap,
        }
    }
}

pub(super) type Reply = oneshot::Sender<Result<Embedded, Error>>;
/// The receiving end of one sequence's [`Reply`].
pub(super) type Answer = oneshot::Receiver<Result<Embedded, Error>>;

pub(super) struct Entry {
    pub ids: Vec<u32>,
    pub readout: crate::Readout,
    pub admitted: Instant,
    /// When its answer is due; `None` for work whose caller waited for room and will wait for its answer.
    pub deadline: Option<Instant>,
    pub reply: Reply,
}

#[derive(Default)]
struct Lane {
    queue: VecDeque<Entry>,
    tokens: usize,
    counts: ClassLoad,
}

/// What the dispatch loop does next.
pub(super) enum Next {
    /// Submit these (online first, then batch), under the settings they were cut by.
    Batch(Vec<Entry>, Settings),
    /// Wait for work, or until this instant.
    Wait(Option<Instant>),
    /// Closed and drained.
    Done,
}

pub(super) struct State {
    lanes: [Lane; 2],
    pub settings: Settings,
    throughput: Throughput,
    /// The batch computing: when it was submitted and its tokens.
    running: Option<(Instant, usize)>,
    pub closed: bool,
}

impl State {
    pub fn new(settings: Settings) -> State {
        State {
            lanes: Default::default(),
            settings,
            throughput: Throughput::default(),
            running: None,
            closed: false,
        }
    }

    /// Admits `seqs` whole at `priority`, or gives them back with the reason. `waiting` callers are only bound
    /// by the queue's size (they wait for room and then for their answer); the others are also refused when the
    /// measured throughput says their answer would come after their deadline.
    pub fn admit(
        &mut self,
        seqs: Vec<Vec<u32>>,
        work: Work,
        waiting: bool,
        now: Instant,
    ) -> Result<Vec<Answer>, (Error, Vec<Vec<u32>>)> {
        let Work { priority, readout } = work;
        if self.closed {
            return Err((Error::ShuttingDown, seqs));
        }
        self.drop_abandoned();
        let tokens: usize = seqs.iter().map(Vec::len).sum();
        let s = self.settings;
        let lane = &self.lanes[priority.index()];
        let over = lane.queue.len() + seqs.len() > s.max_queue_seqs
            || lane.tokens + tokens > s.max_queue_tokens;
        // An empty queue admits any submission, so one larger than the bounds is not refused forever.
        let refusal = if over && !lane.queue.is_empty() {
            Some(Refusal::QueueFull {
                queued_seqs: lane.queue.len(),
                queued_tokens: lane.tokens,
                max_seqs: s.max_queue_seqs,
                max_tokens: s.max_queue_tokens,
            })
        } else if waiting {
            None
        } else {
            self.late(priority, tokens, now)
        };
        if let Some(reason) = refusal {
            self.lanes[priority.index()].counts.refused += 1;
            let retry_after = self.wait_ahead(priority, now).unwrap_or_default();
            let e = Error::Overloaded {
                priority,
                reason,
                retry_after,
            };
            return Err((e, seqs));
        }
        // Only work that could meet its deadline on an idle engine is held to it: work admitted without an
        // estimate, or too large for its deadline (admitted because it could start), runs to its end.
        let deadline = s.deadlines[priority.index()];
        let holds = self
            .throughput
            .drain_time(tokens, s.budget.max_tokens)
            .is_some_and(|own| own <= deadline);
        let deadline = (!waiting && holds).then(|| now + deadline);
        let lane = &mut self.lanes[priority.index()];
        lane.tokens += tokens;
        lane.counts.admitted += seqs.len() as u64;
        Ok(seqs
            .into_iter()
            .map(|ids| {
                let (reply, rx) = oneshot::channel();
                lane.queue.push_back(Entry {
                    ids,
                    readout,
                    admitted: now,
                    deadline,
                    reply,
                });
                rx
            })
            .collect())
    }

    /// The time until work queued now at `priority` could start: the running batch's rest, then everything
    /// queued ahead of it (online work is ahead of batch work). `None` before any batch was measured.
    fn wait_ahead(&self, priority: Priority, now: Instant) -> Option<Duration> {
        self.wait_for(priority, 0, now)
    }

    /// When `tokens` more at `priority` would be computed, counted from `now`.
    fn wait_for(&self, priority: Priority, tokens: usize, now: Instant) -> Option<Duration> {
        let running = match self.running {
            Some((since, t)) => self
                .throughput
                .batch_time(t)?
                .saturating_sub(now.saturating_duration_since(since)),
            None => Duration::ZERO,
        };
        let ahead = match priority {
            Priority::Online => self.lanes[0].tokens,
            Priority::Batch => self.lanes[0].tokens + self.lanes[1].tokens,
        };
        let queued = self
            .throughput
            .drain_time(ahead + tokens, self.settings.budget.max_tokens)?;
        Some(running + queued)
    }

    /// Why `tokens` at `priority` would miss their deadline, if they would. Admitting work also delays what it
    /// shares a batch with: when it would join the batch of the queue's head, it must not push that batch past
    /// the head's (earlier) deadline either. Work that could not meet its deadline even on an idle engine (its own
    /// compute is longer) is refused only when it could not even start by then, so a retry can always succeed.
    fn late(&self, priority: Priority, tokens: usize, now: Instant) -> Option<Refusal> {
        let deadline = self.settings.deadlines[priority.index()];
        let max_tokens = self.settings.budget.max_tokens;
        let own = self.throughput.drain_time(tokens, max_tokens)?;
        if own > deadline {
            let estimated = self.wait_ahead(priority, now)?;
            return (estimated > deadline).then_some(Refusal::Late {
                estimated,
                deadline,
            });
        }
        let estimated = self.wait_for(priority, tokens, now)?;
        let lane = &self.lanes[priority.index()];
        let head_due = lane
            .queue
            .front()
            .filter(|_| lane.tokens + tokens <= max_tokens)
            .and_then(|head| head.deadline)
            .map(|d| d.saturating_duration_since(now));
        let limit = head_due.map_or(deadline, |d| d.min(deadline));
        (estimated > limit).then_some(Refusal::Late {
            estimated,
            deadline,
        })
    }

    /// Removes sequences whose caller has gone, so they never reach the backend; true if any was.
    fn drop_abandoned(&mut self) -> bool {
        let mut any = false;
        for lane in &mut self.lanes {
            if !lane.queue.iter().any(|e| e.reply.is_closed()) {
                continue;
            }
            let before = lane.queue.len();
            lane.queue.retain(|e| !e.reply.is_closed());
            lane.counts.abandoned += (before - lane.queue.len()) as u64;
            lane.tokens = lane.queue.iter().map(|e| e.ids.len()).sum();
            any = true;
        }
        any
    }

    /// Answers the sequences at the heads of the queues whose deadline has passed, without computing them; true if
    /// any was. Within a queue deadlines follow admission order, so only the head is looked at.
    fn drop_expired(&mut self, now: Instant) -> bool {
        let mut any = false;
        for p in Priority::ALL {
            let retry_after = self.wait_ahead(p, now).unwrap_or_default();
            let deadline = self.settings.deadlines[p.index()];
            let lane = &mut self.lanes[p.index()];
            while let Some(e) = lane.queue.front() {
                if e.deadline.is_none_or(|d| d > now) {
                    break;
                }
                let Some(e) = lane.queue.pop_front() else {
                    break;
                };
                lane.tokens -= e.ids.len();
                lane.counts.expired += 1;
                any = true;
                let _ = e.reply.send(Err(Error::Expired {
                    priority: p,
                    deadline,
                    retry_after,
                }));
            }
        }
        any
    }

    /// Prunes the queues and, when a batch is due, takes it off them. True in `.1` when the queues shrank.
    pub fn next(&mut self, now: Instant) -> (Next, bool) {
        let pruned = self.drop_abandoned() | self.drop_expired(now);
        // Closing flushes partial batches at once rather than waiting out max-wait.
        let max_wait = if self.closed {
            Duration::ZERO
        } else {
            self.settings.max_wait
        };
        let oldest = self
            .lanes
            .iter()
            .filter_map(|l| l.queue.front().map(|e| e.admitted))
            .min();
        let [online, batch] = &self.lanes;
        let decision = queue::decide(
            online.queue.iter().map(|e| e.ids.len()),
            batch.queue.iter().map(|e| e.ids.len()),
            oldest,
            self.settings.budget,
            max_wait,
            now,
        );
        let next = match decision {
            Decision::Dispatch(cut) => {
                let mut entries = Vec::with_capacity(cut.seqs());
                for (lane, n) in self.lanes.iter_mut().zip([cut.online, cut.batch]) {
                    lane.tokens -= lane
                        .queue
                        .iter()
                        .take(n)
                        .map(|e| e.ids.len())
                        .sum::<usize>();
                    entries.extend(lane.queue.drain(..n));
                }
                self.running = Some((now, cut.tokens));
                return (Next::Batch(entries, self.settings), true);
            }
            Decision::Idle if self.closed => Next::Done,
            Decision::Idle => Next::Wait(None),
            Decision::WaitUntil(t) => Next::Wait(Some(t)),
        };
        (next, pruned)
    }

    /// The running batch of `tokens` computed in `took`: measured, and the backend is free.
    pub fn computed(&mut self, tokens: usize, took: Duration) {
        self.throughput.record(tokens, took);
        self.running = None;
    }

    pub fn load(&self) -> Load {
        let classes = [0, 1].map(|i| ClassLoad {
            queued_seqs: self.lanes[i].queue.len(),
            queued_tokens: self.lanes[i].tokens,
            ..self.lanes[i].counts
        });
        Load {
            queued_seqs: classes.iter().map(|c| c.queued_seqs).sum(),
            queued_tokens: classes.iter().map(|c| c.queued_tokens).sum(),
            classes,
            ..Load::default()
        }
    }
}
