//! The scheduler's state behind its one lock: a queue per priority, the settings, the measured throughput and
//! the batch running. Admission, pruning and cutting are methods here, so each runs under one lock acquisition.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

use super::estimate::{Lateness, Throughput};
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
    pub batch_min_share: f64,
    pub online_batch_share: f64,
}

/// Online work is active while any is queued, or arrived this recently.
const ONLINE_ACTIVE_FOR: Duration = Duration::from_secs(1);

/// A budget of `max_tokens`, batch work filling up to `batch_fill` of which `share` is held for it.
fn budget(max_tokens: usize, max_seqs: usize, share: f64, batch_fill: usize) -> Budget {
    Budget {
        max_tokens,
        max_seqs,
        batch_reserve: (share * batch_fill as f64).ceil() as usize,
        batch_fill,
    }
}

impl Settings {
    pub fn of(config: &EngineConfig) -> Settings {
        Settings {
            // An engine resolves `auto` (0) before its scheduler starts.
            budget: budget(
                config.max_batch_tokens.max(1),
                config.max_batch_seqs,
                config.batch_min_share,
                config.max_batch_tokens.max(1),
            ),
            max_wait: Duration::from_millis(config.max_wait_ms),
            max_queue_tokens: config.max_queue_tokens,
            max_queue_seqs: config.max_queue_requests,
            deadlines: [
                Duration::from_millis(config.online_deadline_ms),
                Duration::from_millis(config.batch_deadline_ms),
            ],
            overlap: config.overlap,
            batch_min_share: config.batch_min_share,
            online_batch_share: config.online_batch_share,
        }
    }
}

pub(super) type Reply = oneshot::Sender<Result<Embedded, Error>>;
/// The receiving end of one sequence's [`Reply`].
pub(super) type Answer = oneshot::Receiver<Result<Embedded, Error>>;

pub(super) struct Entry {
    pub ids: Vec<u32>,
    pub readout: crate::Readout,
    pub type1_from: Option<u32>,
    pub admitted: Instant,
    /// When its answer is due; `None` for work whose caller waited for room and will wait for its answer.
    pub deadline: Option<Instant>,
    /// When admission predicted it would be computed; `None` if it made no prediction.
    pub predicted: Option<Instant>,
    pub reply: Reply,
}

/// The batch computing.
struct Running {
    since: Instant,
    tokens: usize,
    /// Its sequences' predicted instants, by priority.
    predicted: Vec<(Priority, Instant)>,
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
    /// By [`Priority::index`].
    lateness: [Lateness; 2],
    running: Option<Running>,
    /// When online work was last admitted.
    last_online: Option<Instant>,
    pub closed: bool,
}

impl State {
    pub fn new(settings: Settings) -> State {
        State {
            lanes: Default::default(),
            settings,
            throughput: Throughput::default(),
            lateness: Default::default(),
            running: None,
            last_online: None,
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
        let Work {
            priority,
            readout,
            type1_from,
        } = work;
        if self.closed {
            return Err((Error::ShuttingDown, seqs));
        }
        if priority == Priority::Online {
            self.last_online = Some(now);
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
        let max_tokens = s.budget.max_tokens;
        let holds = self
            .throughput
            .drain_time(tokens, max_tokens)
            .is_some_and(|own| own <= deadline);
        let deadline = (!waiting && holds).then(|| now + deadline);
        let predicted = match waiting {
            false => self.wait_for(priority, tokens, now).map(|w| now + w),
            true => None,
        };
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
                    type1_from,
                    admitted: now,
                    deadline,
                    predicted,
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
        let running = match &self.running {
            Some(r) => self
                .throughput
                .batch_time(r.tokens)?
                .saturating_sub(now.saturating_duration_since(r.since)),
            None => Duration::ZERO,
        };
        let ahead = match priority {
            Priority::Online => self.lanes[0].tokens,
            Priority::Batch => self.lanes[0].tokens + self.lanes[1].tokens,
        };
        // Batch work drains in batches of the fill while queries arrive.
        let budget = self.budget(now);
        let size = match priority {
            Priority::Online => budget.max_tokens,
            Priority::Batch => budget.batch_fill,
        };
        let queued = self.throughput.drain_time(ahead + tokens, size)?;
        Some(running + queued)
    }

    /// The budget of the next batch: the configured one, but while online work is active batch work fills a batch
    /// only up to what computes in `online_batch_share` of the online deadline, so it cannot hold a query up for
    /// longer. Online work alone is not bound by it: it has its deadline, and small batches would only cost it
    /// throughput.
    fn budget(&self, now: Instant) -> Budget {
        let s = self.settings;
        let active = s.online_batch_share > 0.0
            && (!self.lanes[Priority::Online.index()].queue.is_empty()
                || self
                    .last_online
                    .is_some_and(|t| now.saturating_duration_since(t) < ONLINE_ACTIVE_FOR));
        let limit = s.deadlines[Priority::Online.index()].mul_f64(s.online_batch_share);
        match active
            .then(|| self.throughput.tokens_within(limit, s.budget.max_tokens))
            .flatten()
        {
            Some(fill) if fill < s.budget.max_tokens => budget(
                s.budget.max_tokens,
                s.budget.max_seqs,
                s.batch_min_share,
                fill,
            ),
            _ => s.budget,
        }
    }

    /// Why `tokens` at `priority` would miss their deadline, if they would. Admitting work also delays what it
    /// shares a batch with: when it would join the batch of the queue's head, it must not push that batch past
    /// the head's (earlier) deadline either. Work that could not meet its deadline even on an idle engine (its own
    /// compute is longer) is refused only when it could not even start by then, so a retry can always succeed.
    /// The estimate must leave the recent lateness's margin before the deadline.
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
        // At most half the deadline, so admission stays open to work that is quick enough.
        let margin = self.lateness[priority.index()].margin(now, deadline / 2);
        let limit = limit.saturating_sub(margin);
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
        let budget = self.budget(now);
        let [online, batch] = &self.lanes;
        let decision = queue::decide(
            online.queue.iter().map(|e| e.ids.len()),
            batch.queue.iter().map(|e| e.ids.len()),
            oldest,
            budget,
            max_wait,
            now,
        );
        let next = match decision {
            Decision::Dispatch(cut) => {
                let mut entries = Vec::with_capacity(cut.seqs());
                let mut predicted = Vec::new();
                for ((lane, n), p) in self
                    .lanes
                    .iter_mut()
                    .zip([cut.online, cut.batch])
                    .zip(Priority::ALL)
                {
                    lane.tokens -= lane
                        .queue
                        .iter()
                        .take(n)
                        .map(|e| e.ids.len())
                        .sum::<usize>();
                    predicted.extend(
                        lane.queue
                            .iter()
                            .take(n)
                            .filter_map(|e| Some((p, e.predicted?))),
                    );
                    entries.extend(lane.queue.drain(..n));
                }
                self.running = Some(Running {
                    since: now,
                    tokens: cut.tokens,
                    predicted,
                });
                let settings = Settings {
                    budget,
                    ..self.settings
                };
                return (Next::Batch(entries, settings), true);
            }
            Decision::Idle if self.closed => Next::Done,
            Decision::Idle => Next::Wait(None),
            Decision::WaitUntil(t) => Next::Wait(Some(t)),
        };
        (next, pruned)
    }

    /// The running batch of `tokens` computed in `took`, done at `now`, after `capture` making its plan:
    /// measured, its answers' lateness recorded, and the backend is free. Making a plan is a one-off the estimate
    /// leaves out, so it delays everything behind it: their predictions move by its time, and the batch that made
    /// it records no lateness.
    pub fn computed(
        &mut self,
        tokens: usize,
        took: Duration,
        capture: Option<Duration>,
        now: Instant,
    ) {
        self.throughput.record(tokens, took);
        if let Some(capture) = capture {
            for e in self.lanes.iter_mut().flat_map(|l| l.queue.iter_mut()) {
                e.predicted = e.predicted.map(|p| p + capture);
            }
        }
        if let Some(running) = self.running.take().filter(|_| capture.is_none()) {
            for p in Priority::ALL {
                self.lateness[p.index()].record(
                    now,
                    running
                        .predicted
                        .iter()
                        .filter(|(q, _)| *q == p)
                        .map(|(_, at)| match now.checked_duration_since(*at) {
                            Some(late) => late.as_secs_f64(),
                            None => -at.saturating_duration_since(now).as_secs_f64(),
                        }),
                );
            }
        }
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
