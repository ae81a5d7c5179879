//! The live load of `bench tune`: the workload's open-loop class at a rate that can change while it runs, and its
//! closed-loop class with a client count that can change, both sending through the generator's own
//! [`generator::send`] and [`Recorder`] (what `bench sweep` measures).
//!
//! Arrivals come from the workload's own process, drawn at 1 request/s (unit time) and played on a virtual clock
//! that advances at the current rate: a rate change rescales the gaps from that moment on, keeping the process's
//! shape (a trace's bursts, a gamma's CV).

use std::sync::Arc;

use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::generator::{self, Ctx, Recorder};
use crate::target::Target;
use crate::workload::{ClassLoad, Level, Request, Source, Workload};

/// What the generator offers now.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Offered {
    /// Requests/s of the open-loop class.
    pub rate: f64,
    /// Clients of the closed-loop class.
    pub clients: usize,
    pub paused: bool,
    /// False once the run ends: the senders stop (requests in flight are still answered).
    pub running: bool,
}

/// Unit-time seconds of arrivals drawn at once; the next chunk is drawn with the next seed.
const CHUNK_S: f64 = 600.0;

/// Starts a sender per class; they follow `offered` until it says the run is over. The returned set ends once
/// every request sent is answered or abandoned.
pub fn start(
    workload: Arc<Workload>,
    target: Arc<dyn Target>,
    rec: Arc<Recorder>,
    offered: watch::Receiver<Offered>,
    start: Instant,
) -> anyhow::Result<JoinSet<()>> {
    let mut tasks = JoinSet::new();
    let first = workload.loads(Level::Rate(1.0), CHUNK_S, 0)?;
    for (class, load) in first.into_iter().enumerate() {
        let ctx = Ctx {
            target: target.clone(),
            rec: rec.clone(),
            class,
            priority: workload.classes[class].priority,
            prompt_name: workload.classes[class].prompt_name.clone(),
            start,
            timeout: workload.classes[class].timeout,
        };
        match load {
            ClassLoad::Open(schedule) => {
                tasks.spawn(open_loop(ctx, workload.clone(), schedule, offered.clone()));
            }
            ClassLoad::Closed { source, .. } => {
                tasks.spawn(closed_clients(ctx, source, offered.clone()));
            }
        }
    }
    Ok(tasks)
}

/// The open-loop class: each arrival leaves when the virtual clock reaches its unit time, whatever is
/// outstanding; its latency counts from then.
async fn open_loop(
    ctx: Ctx,
    workload: Arc<Workload>,
    mut schedule: Vec<(f64, Request)>,
    mut offered: watch::Receiver<Offered>,
) {
    let mut in_flight = JoinSet::new();
    // Unit time reached, at real time `at`.
    let (mut virtual_s, mut at) = (0.0, Instant::now());
    let mut chunk = 0u64;
    'run: loop {
        for (unit_at, request) in std::mem::take(&mut schedule) {
            let due_unit = chunk as f64 * CHUNK_S + unit_at;
            loop {
                let now_offered = *offered.borrow_and_update();
                if !now_offered.running {
                    break 'run;
                }
                let rate = now_offered.rate;
                if now_offered.paused || rate.is_nan() || rate <= 0.0 {
                    // Paused: the virtual clock stands still.
                    if offered.changed().await.is_err() {
                        break 'run;
                    }
                    at = Instant::now();
                    continue;
                }
                let wait = (due_unit - virtual_s).max(0.0) / rate;
                let due = at + std::time::Duration::from_secs_f64(wait.min(1e6));
                tokio::select! {
                    _ = crate::pace::sleep_until(due) => {
                        (virtual_s, at) = (due_unit, due);
                        in_flight.spawn(generator::send(ctx.clone(), request, due));
                        while in_flight.try_join_next().is_some() {}
                        break;
                    }
                    changed = offered.changed() => {
                        // Time so far ran at the old rate; from now on, at the new one.
                        let now = Instant::now();
                        virtual_s += (now - at).as_secs_f64() * rate;
                        at = now;
                        if changed.is_err() {
                            break 'run;
                        }
                    }
                }
            }
        }
        chunk += 1;
        match workload.loads(Level::Rate(1.0), CHUNK_S, chunk) {
            Ok(loads) => match loads.into_iter().nth(ctx.class) {
                Some(ClassLoad::Open(next)) if !next.is_empty() => schedule = next,
                _ => break,
            },
            Err(e) => {
                ctx.rec.note(format!("drawing arrivals: {e}"));
                break;
            }
        }
    }
    while in_flight.join_next().await.is_some() {}
}

/// The closed-loop class: client `i` sends while `i` is below the client count, each its next request when its
/// last is answered.
async fn closed_clients(ctx: Ctx, source: Arc<Source>, mut offered: watch::Receiver<Offered>) {
    let mut clients = JoinSet::new();
    let mut spawned = 0;
    loop {
        let now = *offered.borrow_and_update();
        if !now.running {
            break;
        }
        while spawned < now.clients {
            clients.spawn(client(
                ctx.clone(),
                source.clone(),
                offered.clone(),
                spawned,
            ));
            spawned += 1;
        }
        if offered.changed().await.is_err() {
            break;
        }
    }
    while clients.join_next().await.is_some() {}
}

async fn client(ctx: Ctx, source: Arc<Source>, mut offered: watch::Receiver<Offered>, id: usize) {
    loop {
        let now = *offered.borrow_and_update();
        if !now.running {
            return;
        }
        if now.paused || id >= now.clients {
            if offered.changed().await.is_err() {
                return;
            }
            continue;
        }
        let Some(request) = source.next() else { return };
        generator::send(ctx.clone(), request, Instant::now()).await;
    }
}
