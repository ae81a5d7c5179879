//! The load generator. Open loop: each request leaves at its scheduled time whatever is outstanding, and its
//! latency counts from that time, so a stalled target shows as latency (no coordinated omission); how late the
//! generator itself sent it is kept as the dispatch delay. Closed loop: a fixed number of clients, each sending
//! its next request when the last is answered (latency from the send). Both can run in one step, one per class.
//!
//! Times are tokio's, so tests run the generator on a paused clock, exactly; sends are paced by
//! [`crate::pace`], to within tens of microseconds rather than tokio's millisecond ticks.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use indicatif::ProgressBar;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::target::{Failure, Reply, Target, Telemetry};
use crate::workload::{ClassLoad, Request, Source};
use engine::Priority;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    /// Turned away for load (429/503).
    Refused,
    Error,
    /// Unanswered within the class's timeout, then abandoned.
    Timeout,
}

/// One request's record; times in seconds from the step's start.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub class: usize,
    /// When it was due (open loop) or sent (closed loop): latency counts from here.
    pub scheduled: f64,
    pub sent: f64,
    pub done: f64,
    pub outcome: Outcome,
    pub inputs: u32,
    pub tokens: u32,
    /// Time in the target's queue and its batch's forward pass, when the target says.
    pub queue: Option<f64>,
    pub inference: Option<f64>,
}

impl Sample {
    pub fn latency(&self) -> f64 {
        self.done - self.scheduled
    }

    pub fn dispatch_delay(&self) -> f64 {
        self.sent - self.scheduled
    }
}

/// How long a step offers load and how long each class's requests may take.
#[derive(Clone, Debug)]
pub struct Timing {
    /// Infinite for a step that runs until its closed-loop sources are exhausted.
    pub duration_s: f64,
    /// Telemetry is read at this point and at the end: the measured window.
    pub warmup_s: f64,
    /// Per class.
    pub timeouts: Vec<Duration>,
    /// Per class (online when left out).
    pub priorities: Vec<Priority>,
    /// Per class: the prompt its requests name (none when left out).
    pub prompt_names: Vec<Option<Arc<str>>>,
}

/// A step that runs until its work is done (a corpus pass) has an unbounded duration: it ends here.
const MAX_STEP_S: f64 = 1e7;

/// Seconds from the step's start as a Duration. Callers check their times; one out of range (negative, NaN,
/// past the longest step) is clamped rather than a panic.
fn since_start(seconds: f64) -> Duration {
    Duration::try_from_secs_f64(seconds.clamp(0.0, MAX_STEP_S)).unwrap_or_default()
}

/// Everything a step recorded.
pub struct StepRun {
    pub samples: Vec<Sample>,
    /// The first few distinct error messages, to tell a person what went wrong.
    pub errors: Vec<String>,
    /// The target's batch counters at the start and end of the measured window.
    pub telemetry: Option<(Telemetry, Telemetry)>,
    /// From the start until the last answer.
    pub wall_s: f64,
    /// This process's resident memory while the step ran, `(seconds from the start, MiB)`; empty where the
    /// system does not tell (and it is the engine's only for an in-process or `serve` target).
    pub rss_mib: Vec<(f64, f64)>,
    /// At the same instants, the memory of the step's own request records (kept in this process until the step
    /// ends): the part of `rss_mib` that is the harness's, not the engine's.
    pub log_mib: Vec<(f64, f64)>,
    /// Answers with more embeddings than inputs.
    pub duplicated: u64,
}

/// How often a step samples the process's resident memory.
const RSS_EVERY: Duration = Duration::from_secs(5);

/// This process's resident set size in MiB (Linux's `/proc/self/status`).
pub fn rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib / 1024.0)
}

/// Where request tasks put their records: a step takes them all at its end, `bench tune` drains them each tick.
#[derive(Default)]
pub struct Recorder {
    samples: Mutex<Vec<Sample>>,
    errors: Mutex<Vec<String>>,
    /// `(seconds, RSS MiB, request records MiB)`.
    rss: Mutex<Vec<(f64, f64, f64)>>,
    sent: AtomicU64,
    done: AtomicU64,
    failed: AtomicU64,
    /// Answers with more embeddings than inputs: a piece answered twice.
    duplicated: AtomicU64,
}

/// Error messages kept per step.
const KEEP_ERRORS: usize = 5;

impl Recorder {
    /// The records of the requests answered (or abandoned) since the last call.
    pub fn drain(&self) -> Vec<Sample> {
        take(&self.samples)
    }

    /// The distinct error messages kept since the last call.
    pub fn drain_errors(&self) -> Vec<String> {
        take(&self.errors)
    }

    /// Requests sent and requests finished (answered, refused, failed or abandoned) so far.
    pub fn counts(&self) -> (u64, u64) {
        (
            self.sent.load(Ordering::Relaxed),
            self.done.load(Ordering::Relaxed),
        )
    }

    /// Keeps a message about the run (the first few distinct ones).
    pub fn note(&self, message: String) {
        self.error(message)
    }

    fn error(&self, message: String) {
        let mut errors = self.errors.lock().unwrap_or_else(PoisonError::into_inner);
        if errors.len() < KEEP_ERRORS && !errors.contains(&message) {
            errors.push(message);
        }
    }
}

/// Runs one step: every class's load at once, then waits for every answer (each bounded by its timeout).
pub async fn run(
    target: Arc<dyn Target>,
    loads: Vec<ClassLoad>,
    timing: &Timing,
    progress: Option<ProgressBar>,
) -> StepRun {
    let rec = Arc::new(Recorder::default());
    let start = Instant::now();
    let end = start + since_start(timing.duration_s);
    let mut tasks = JoinSet::new();
    for (class, load) in loads.into_iter().enumerate() {
        let timeout = timing
            .timeouts
            .get(class)
            .copied()
            .unwrap_or(Duration::from_secs(60));
        let ctx = Ctx {
            target: target.clone(),
            rec: rec.clone(),
            class,
            priority: timing.priorities.get(class).copied().unwrap_or_default(),
            prompt_name: timing.prompt_names.get(class).cloned().flatten(),
            start,
            timeout,
        };
        match load {
            ClassLoad::Open(schedule) => {
                tasks.spawn(open_loop(ctx, schedule));
            }
            ClassLoad::Closed {
                concurrency,
                source,
            } => {
                for _ in 0..concurrency {
                    tasks.spawn(closed_client(ctx.clone(), source.clone(), end));
                }
            }
        }
    }
    let read_at = |at: Instant| {
        let target = target.clone();
        tokio::spawn(async move {
            tokio::time::sleep_until(at).await;
            target.telemetry().await
        })
    };
    let memory = {
        let rec = rec.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(RSS_EVERY);
            loop {
                tick.tick().await;
                let Some(mib) = rss_mib() else { return };
                let records = rec
                    .samples
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .len();
                let log = (records * std::mem::size_of::<Sample>()) as f64 / (1 << 20) as f64;
                let mut rss = rec.rss.lock().unwrap_or_else(PoisonError::into_inner);
                rss.push((start.elapsed().as_secs_f64(), mib, log));
            }
        })
    };
    let before = read_at(start + since_start(timing.warmup_s));
    let after = read_at(end);
    let duration_s = timing.duration_s;
    let ticker = progress.map(|bar| {
        let rec = rec.clone();
        tokio::spawn(async move {
            loop {
                let (sent, done) = (
                    rec.sent.load(Ordering::Relaxed),
                    rec.done.load(Ordering::Relaxed),
                );
                // A timed step shows tenths of seconds; one that runs until done shows answers.
                if duration_s.is_finite() {
                    bar.set_position((start.elapsed().as_secs_f64().min(duration_s) * 10.0) as u64);
                } else {
                    bar.set_position(done);
                }
                bar.set_message(format!(
                    "sent {sent}, answered {done}, in flight {}, failed {}",
                    sent.saturating_sub(done),
                    rec.failed.load(Ordering::Relaxed)
                ));
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
    });
    while tasks.join_next().await.is_some() {}
    let wall_s = start.elapsed().as_secs_f64();
    if let Some(t) = ticker {
        t.abort();
    }
    let after = if after.is_finished() {
        after.await.ok().flatten()
    } else {
        after.abort();
        target.telemetry().await
    };
    let telemetry = before.await.ok().flatten().zip(after);
    memory.abort();
    let (rss_mib, log_mib) = take(&rec.rss)
        .into_iter()
        .map(|(t, rss, log)| ((t, rss), (t, log)))
        .unzip();
    let mut samples = take(&rec.samples);
    samples.sort_by(|a, b| a.scheduled.total_cmp(&b.scheduled));
    StepRun {
        samples,
        errors: take(&rec.errors),
        telemetry,
        wall_s,
        rss_mib,
        log_mib,
        duplicated: rec.duplicated.load(Ordering::Relaxed),
    }
}

fn take<T>(m: &Mutex<Vec<T>>) -> Vec<T> {
    std::mem::take(&mut *m.lock().unwrap_or_else(PoisonError::into_inner))
}

/// What a request task needs to know.
#[derive(Clone)]
pub struct Ctx {
    pub target: Arc<dyn Target>,
    pub rec: Arc<Recorder>,
    pub class: usize,
    pub priority: Priority,
    pub prompt_name: Option<Arc<str>>,
    /// Samples' times count from here.
    pub start: Instant,
    pub timeout: Duration,
}

/// Sends each request at its time. The sends are spawned, so a slow answer never delays the next send.
async fn open_loop(ctx: Ctx, schedule: Vec<(f64, Request)>) {
    let mut in_flight = JoinSet::new();
    for (at, request) in schedule {
        let due = ctx.start + since_start(at);
        crate::pace::sleep_until(due).await;
        in_flight.spawn(send(ctx.clone(), request, due));
        while in_flight.try_join_next().is_some() {}
    }
    while in_flight.join_next().await.is_some() {}
}

/// One client of a closed loop: sends, waits for the answer, sends again, until the step ends.
async fn closed_client(ctx: Ctx, source: Arc<Source>, end: Instant) {
    while Instant::now() < end {
        let Some(request) = source.next() else { return };
        let now = Instant::now();
        // A refused client waits as it is told, as real clients do: retrying at once would turn the refusals
        // into a busy loop that takes the CPU the engine needs to catch up.
        if let Some(wait) = send(ctx.clone(), request, now).await {
            tokio::time::sleep_until(end.min(Instant::now() + wait)).await;
        }
    }
}

/// How long a refused client waits when the server does not say.
const RETRY_WITHOUT_HINT: Duration = Duration::from_millis(100);

/// Sends one request, due at `due` (its latency counts from there), and records how it went. A refused request
/// gives how long its client should wait before the next.
pub async fn send(ctx: Ctx, mut request: Request, due: Instant) -> Option<Duration> {
    request.prompt_name = ctx.prompt_name.clone();
    let sent = Instant::now();
    ctx.rec.sent.fetch_add(1, Ordering::Relaxed);
    let (inputs, est) = (request.texts.len() as u32, request.est_tokens);
    let result = tokio::time::timeout(ctx.timeout, ctx.target.embed(request, ctx.priority)).await;
    let done = Instant::now();
    let mut back_off = None;
    let (outcome, tokens, reply) = match result {
        Ok(Ok(reply)) => (Outcome::Ok, reply.tokens.unwrap_or(est), reply),
        Ok(Err(Failure::Refused {
            message,
            retry_after,
        })) => {
            ctx.rec.error(format!("refused: {message}"));
            back_off = Some(retry_after.unwrap_or(RETRY_WITHOUT_HINT));
            (Outcome::Refused, 0, Reply::default())
        }
        Ok(Err(Failure::Error(m))) => {
            ctx.rec.error(m);
            (Outcome::Error, 0, Reply::default())
        }
        Ok(Err(Failure::Rows { got, want })) => {
            if got > want {
                ctx.rec.duplicated.fetch_add(1, Ordering::Relaxed);
            }
            ctx.rec.error(format!("{got} embeddings for {want} inputs"));
            (Outcome::Error, 0, Reply::default())
        }
        Err(_) => (Outcome::Timeout, 0, Reply::default()),
    };
    ctx.rec.done.fetch_add(1, Ordering::Relaxed);
    if outcome != Outcome::Ok {
        ctx.rec.failed.fetch_add(1, Ordering::Relaxed);
    }
    let secs = |t: Instant| (t - ctx.start).as_secs_f64();
    let sample = Sample {
        class: ctx.class,
        scheduled: secs(due),
        sent: secs(sent),
        done: secs(done),
        outcome,
        inputs,
        tokens,
        queue: reply.queue.map(|d| d.as_secs_f64()),
        inference: reply.inference.map(|d| d.as_secs_f64()),
    };
    ctx.rec
        .samples
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(sample);
    back_off
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::target::BoxFuture;

    fn request() -> Request {
        Request {
            texts: vec![Arc::from("q")].into(),
            query: None,
            est_tokens: 3,
            prompt_name: None,
        }
    }

    /// Answers in 1 ms, except that nothing is answered during `[from, until)`: requests arriving then are
    /// answered at `until`.
    struct Stalls {
        start: Instant,
        from: Duration,
        until: Duration,
    }

    impl Target for Stalls {
        fn embed(&self, _: Request, _: Priority) -> BoxFuture<Result<Reply, Failure>> {
            let now = self.start.elapsed();
            let wait = if now >= self.from && now < self.until {
                self.until - now
            } else {
                Duration::from_millis(1)
            };
            Box::pin(async move {
                tokio::time::sleep(wait).await;
                Ok(Reply::default())
            })
        }
        fn telemetry(&self) -> BoxFuture<Option<Telemetry>> {
            Box::pin(async { None })
        }
        fn settle(&self) -> BoxFuture<()> {
            Box::pin(async {})
        }
    }

    fn timing(duration_s: f64) -> Timing {
        Timing {
            duration_s,
            warmup_s: 0.0,
            timeouts: vec![Duration::from_secs(10)],
            priorities: Vec::new(),
            prompt_names: Vec::new(),
        }
    }

    /// 100 requests/s for 3 s against a target that stalls for 500 ms from t = 1 s: the open loop keeps sending
    /// on schedule through the stall, and the 50 requests due during it wait for its end — latency from their
    /// scheduled time grows to the stall's length. A closed loop over the same target sends just one request into
    /// the stall and so hides it (coordinated omission): the contrast this generator exists for.
    #[tokio::test(start_paused = true)]
    async fn open_loop_keeps_its_schedule_when_the_target_stalls() {
        let target = |start| {
            Arc::new(Stalls {
                start,
                from: Duration::from_millis(1000),
                until: Duration::from_millis(1500),
            }) as Arc<dyn Target>
        };
        let schedule: Vec<(f64, Request)> =
            (0..300).map(|i| (i as f64 / 100.0, request())).collect();
        let run = super::run(
            target(Instant::now()),
            vec![ClassLoad::Open(schedule)],
            &timing(3.0),
            None,
        )
        .await;
        assert_eq!(run.samples.len(), 300);
        for s in &run.samples {
            assert!(s.dispatch_delay() < 1e-3, "sent late: {s:?}");
            let expected = if (1.0..1.5).contains(&s.scheduled) {
                1.5 - s.scheduled
            } else {
                0.001
            };
            assert!((s.latency() - expected).abs() < 2e-3, "{s:?}");
        }
        let stalled = run.samples.iter().filter(|s| s.latency() > 0.25).count();
        assert_eq!(stalled, 25);
        let max = run.samples.iter().map(Sample::latency).fold(0.0, f64::max);
        assert!((max - 0.5).abs() < 2e-3, "max latency {max}");

        // The closed loop at the same throughput outside the stall: one client, 1 ms answers.
        let corpus = crate::workload::Corpus::new("q".into(), vec![(Arc::from("q"), 3)]);
        let source = Arc::new(Source::random(Arc::new(corpus), 1, 0, None));
        let closed = super::run(
            target(Instant::now()),
            vec![ClassLoad::Closed {
                concurrency: 1,
                source,
            }],
            &timing(3.0),
            None,
        )
        .await;
        let hidden = closed.samples.iter().filter(|s| s.latency() > 0.25).count();
        assert_eq!(hidden, 1, "the closed loop sees the stall once");
    }

    /// Regression: a closed-loop client retried a refusal at once, so refusals that come back in microseconds
    /// became a busy loop (615,889 requests in a 5 s probe) that starved the engine. It now waits as told.
    #[tokio::test(start_paused = true)]
    async fn a_refused_closed_loop_client_waits_as_retry_after_says() {
        struct Refuses;
        impl Target for Refuses {
            fn embed(&self, _: Request, _: Priority) -> BoxFuture<Result<Reply, Failure>> {
                Box::pin(async {
                    Err(Failure::Refused {
                        message: "busy".into(),
                        retry_after: Some(Duration::from_millis(100)),
                    })
                })
            }
            fn telemetry(&self) -> BoxFuture<Option<Telemetry>> {
                Box::pin(async { None })
            }
            fn settle(&self) -> BoxFuture<()> {
                Box::pin(async {})
            }
        }
        let corpus = crate::workload::Corpus::new("q".into(), vec![(Arc::from("q"), 3)]);
        let source = Arc::new(Source::random(Arc::new(corpus), 1, 0, None));
        let run = super::run(
            Arc::new(Refuses),
            vec![ClassLoad::Closed {
                concurrency: 2,
                source,
            }],
            &timing(1.0),
            None,
        )
        .await;
        // Two clients, one request each per 100 ms for 1 s.
        assert!(
            (19..=22).contains(&run.samples.len()),
            "{}",
            run.samples.len()
        );
        assert!(run.samples.iter().all(|s| s.outcome == Outcome::Refused));
    }

    /// Answers take 1 ms of tokio time, but each call first blocks its thread for 20 ms, as an overloaded
    /// machine would: a 200 requests/s schedule cannot be kept, and the dispatch delays say so.
    #[tokio::test(flavor = "current_thread")]
    async fn a_generator_held_up_records_its_dispatch_delay() {
        struct Blocks;
        impl Target for Blocks {
            fn embed(&self, _: Request, _: Priority) -> BoxFuture<Result<Reply, Failure>> {
                std::thread::sleep(Duration::from_millis(20));
                Box::pin(async { Ok(Reply::default()) })
            }
            fn telemetry(&self) -> BoxFuture<Option<Telemetry>> {
                Box::pin(async { None })
            }
            fn settle(&self) -> BoxFuture<()> {
                Box::pin(async {})
            }
        }
        let schedule: Vec<(f64, Request)> =
            (0..20).map(|i| (i as f64 / 200.0, request())).collect();
        let run = super::run(
            Arc::new(Blocks),
            vec![ClassLoad::Open(schedule)],
            &timing(0.1),
            None,
        )
        .await;
        let last = run.samples.last().unwrap();
        // 20 sends of 20 ms each cannot fit in the 95 ms the schedule allows.
        assert!(last.dispatch_delay() > 0.2, "{last:?}");
        assert!(last.latency() >= last.dispatch_delay());
    }
}
