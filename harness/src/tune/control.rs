//! The controller behind the screen: each tick it turns the generator's records and the engine's counters into a
//! [`Point`]; it carries out the screen's [`Command`]s: knob changes (the load's, the scheduler's live, or a new
//! engine built beside the running one), pause, save, and the saturation search.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use engine::gateway::{Gateway, GatewayConfig};
use engine::EngineConfig;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tokio::time::Instant;
use tui::{App, Command, KnobKind, Point};

use super::live::Offered;
use super::panel::{knob_panel, knob_value};
use super::search::Search;
use crate::generator::{Outcome, Recorder};
use crate::knobs;
use crate::target::{InProcess, Target};
use crate::workload::Workload;

/// Settings the scheduler applies live ([`Gateway::reconfigure`]); every other engine setting needs a new engine.
pub const LIVE: [&str; 10] = [
    "max_batch_tokens",
    "max_batch_seqs",
    "max_wait_ms",
    "overlap",
    "max_queue_tokens",
    "max_queue_requests",
    "online_deadline_ms",
    "batch_deadline_ms",
    "batch_min_share",
    "online_batch_share",
];

/// One knob change as it took effect.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Change {
    pub t: f64,
    pub name: String,
    pub from: String,
    pub to: String,
    pub kind: KnobKind,
    /// For a new engine: seconds to build it (traffic stays on the old one meanwhile).
    pub build_s: Option<f64>,
}

/// The engine counters a tick's figures are differences of.
#[derive(Clone, Copy, Debug, Default)]
struct Counters {
    batches: f64,
    tokens: f64,
    seqs: Option<f64>,
    padding: Option<f64>,
    replays: f64,
    captures: f64,
}

/// Requests by outcome since the start.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Totals {
    pub sent: u64,
    pub ok: u64,
    pub refused: u64,
    pub errors: u64,
    pub timeouts: u64,
}

/// Where the engines come from, for an in-process target.
pub struct EngineSource {
    pub model_dir: PathBuf,
    pub gateway: GatewayConfig,
    pub target: Arc<InProcess>,
}

pub struct Tuner {
    pub app: App,
    pub config: EngineConfig,
    pub changes: Vec<Change>,
    pub totals: Totals,
    pub saved: Vec<PathBuf>,
    pub searches: Vec<String>,
    target: Arc<dyn Target>,
    engines: Option<EngineSource>,
    offered: watch::Sender<Offered>,
    rec: Arc<Recorder>,
    workload: Arc<Workload>,
    start: Instant,
    last: Option<(Instant, u64, Counters)>,
    search: Option<Search>,
    /// Where `s` saves the configuration.
    pub save_dir: PathBuf,
    /// Old engines draining after a swap.
    draining: Vec<(f64, tokio::task::JoinHandle<f64>)>,
    /// Requests refused, failed, timed out since `failed_since`, not yet logged.
    failed: (u64, u64, u64),
    failed_since: f64,
}

/// Seconds over which failures are summed into one log line.
const FAILURES_EVERY_S: f64 = 5.0;

impl Tuner {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        title: String,
        config: EngineConfig,
        target: Arc<dyn Target>,
        engines: Option<EngineSource>,
        offered: watch::Sender<Offered>,
        rec: Arc<Recorder>,
        workload: Arc<Workload>,
        start: Instant,
        save_dir: PathBuf,
    ) -> Result<Tuner> {
        let now = *offered.borrow();
        let knobs = knob_panel(&config, &workload, now, engines.is_some())?;
        let slo_ms = workload.classes.first().map_or(100.0, |c| c.slo.latency_ms);
        Ok(Tuner {
            app: App::new(title, knobs, slo_ms),
            config,
            changes: Vec::new(),
            totals: Totals::default(),
            saved: Vec::new(),
            searches: Vec::new(),
            target,
            engines,
            offered,
            rec,
            workload,
            start,
            last: None,
            search: None,
            save_dir,
            draining: Vec::new(),
            failed: (0, 0, 0),
            failed_since: 0.0,
        })
    }

    pub fn elapsed(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    async fn counters(&self) -> Option<Counters> {
        if let Some(e) = &self.engines {
            let s = e.target.gateway().metrics().snapshot();
            return Some(Counters {
                batches: s.batches as f64,
                tokens: s.batch_tokens,
                seqs: Some(s.batch_seqs as f64),
                padding: Some(s.padding_tokens as f64),
                replays: s.replay_forwards as f64,
                captures: s.capture_forwards as f64,
            });
        }
        let t = self.target.telemetry().await?;
        Some(Counters {
            batches: t.batches,
            tokens: t.batch_tokens,
            replays: t.replays,
            ..Counters::default()
        })
    }

    /// Closes a tick: the requests finished since the last, the engine's batches since the last.
    pub async fn tick(&mut self) {
        let now = Instant::now();
        let t = (now - self.start).as_secs_f64();
        let (sent, _) = self.rec.counts();
        let counters = self.counters().await.unwrap_or_default();
        let Some((then, sent_then, before)) = self.last.replace((now, sent, counters)) else {
            return;
        };
        let dt = (now - then).as_secs_f64().max(1e-3);
        let mut point = Point {
            t,
            offered: (sent - sent_then) as f64 / dt,
            ..Point::default()
        };
        let mut latencies = Vec::new();
        for s in self.rec.drain() {
            let class = &self.workload.classes[s.class.min(self.workload.classes.len() - 1)];
            match s.outcome {
                Outcome::Ok => {
                    self.totals.ok += 1;
                    point.achieved += 1.0;
                    point.tokens_per_s += s.tokens as f64;
                    if s.latency() * 1e3 <= class.slo.latency_ms {
                        point.goodput += 1.0;
                    }
                    if s.class == 0 {
                        latencies.push(s.latency() * 1e3);
                    }
                }
                Outcome::Refused => point.refused += 1,
                Outcome::Error => point.errors += 1,
                Outcome::Timeout => point.timeouts += 1,
            }
        }
        self.totals.sent = sent;
        self.totals.refused += point.refused;
        self.totals.errors += point.errors;
        self.totals.timeouts += point.timeouts;
        for v in [
            &mut point.achieved,
            &mut point.goodput,
            &mut point.tokens_per_s,
        ] {
            *v /= dt;
        }
        latencies.sort_by(f64::total_cmp);
        point.p50_ms = quantile(&latencies, 0.5);
        point.p99_ms = quantile(&latencies, 0.99);
        if let Some(e) = &self.engines {
            for load in e.target.gateway().loads() {
                for (q, c) in point.queued.iter_mut().zip(load.classes) {
                    *q += c.queued_seqs as f64;
                }
            }
        }
        let batches = counters.batches - before.batches;
        // Counters start again at a new engine: a tick across a swap has no batch figures.
        if batches > 0.0 && counters.tokens >= before.tokens {
            point.batch_tokens = Some((counters.tokens - before.tokens) / batches);
            point.batch_seqs = counters
                .seqs
                .zip(before.seqs)
                .map(|(a, b)| (a - b) / batches);
            let padding = counters.padding.zip(before.padding).map(|(a, b)| a - b);
            point.padding_share = padding.map(|p| p / (p + counters.tokens - before.tokens));
            point.replays = (counters.replays - before.replays) / dt;
            point.captures = (counters.captures - before.captures) / dt;
        }
        // Refusals are counted below; their messages would flood the log.
        for e in self.rec.drain_errors() {
            if !e.starts_with("refused:") {
                self.app.log(t, e);
            }
        }
        // Failures are summed over a few seconds, so that knob changes stay in view in the log.
        self.failed.0 += point.refused;
        self.failed.1 += point.errors;
        self.failed.2 += point.timeouts;
        if t - self.failed_since >= FAILURES_EVERY_S {
            let (refused, errors, timeouts) = std::mem::take(&mut self.failed);
            if refused + errors + timeouts > 0 {
                self.app.log(
                    t,
                    format!(
                        "{refused} refused, {errors} errors, {timeouts} timeouts in {:.0} s",
                        t - self.failed_since
                    ),
                );
            }
            self.failed_since = t;
        }
        self.app.push(point);
        self.finish_drains(t).await;
        self.app.status = format!(
            "sent {} ok {} refused {} err {}",
            self.totals.sent,
            self.totals.ok,
            self.totals.refused,
            self.totals.errors + self.totals.timeouts
        );
        if let Some(search) = &mut self.search {
            let step = search.observe(self.app.series.last(), self.app.slo_ms);
            self.search_step(step).await;
        }
    }

    async fn finish_drains(&mut self, t: f64) {
        let mut still = Vec::new();
        for (at, task) in self.draining.drain(..) {
            if task.is_finished() {
                if let Ok(s) = task.await {
                    self.app.log(
                        t,
                        format!("old engine (swapped at {at:.1} s) drained in {s:.2} s"),
                    );
                }
            } else {
                still.push((at, task));
            }
        }
        self.draining = still;
    }

    /// Carries out one command; false when it is Quit.
    pub async fn command(&mut self, command: Command) -> bool {
        let t = self.elapsed();
        match command {
            Command::Quit => return false,
            Command::Pause(paused) => {
                self.offered.send_modify(|o| o.paused = paused);
                self.app.paused = paused;
                self.app.log(
                    t,
                    if paused {
                        "load paused"
                    } else {
                        "load resumed"
                    }
                    .into(),
                );
            }
            Command::Set { name, value } => {
                if let Err(e) = self.set(&name, &value).await {
                    self.app
                        .log(t, format!("{name}={value} not applied: {e:#}"));
                }
            }
            Command::Save => match self.save() {
                Ok(path) => self.app.log(t, format!("saved {}", path.display())),
                Err(e) => self.app.log(t, format!("save failed: {e:#}")),
            },
            Command::FindSaturation => {
                if self.search.is_some() {
                    self.app
                        .log(t, "a saturation search is already running".into());
                } else if !self.workload.steps_rate() {
                    self.app.log(
                        t,
                        "the saturation search steps the rate: online or mixed workloads".into(),
                    );
                } else {
                    let rate = self.offered.borrow().rate;
                    self.search = Some(Search::new(rate));
                    self.app
                        .log(t, format!("saturation search from {rate} req/s"));
                    self.set_rate(rate, "search");
                }
            }
        }
        true
    }

    /// Writes the current engine configuration as TOML (what `bench serve --config` reads).
    pub fn save(&mut self) -> Result<PathBuf> {
        std::fs::create_dir_all(&self.save_dir)
            .with_context(|| format!("creating {}", self.save_dir.display()))?;
        let path = self
            .save_dir
            .join(format!("config-{}.toml", self.saved.len() + 1));
        std::fs::write(&path, self.config.to_toml()?)
            .with_context(|| format!("writing {}", path.display()))?;
        self.saved.push(path.clone());
        Ok(path)
    }

    fn record(
        &mut self,
        name: &str,
        from: String,
        to: String,
        kind: KnobKind,
        build_s: Option<f64>,
    ) {
        let t = self.elapsed();
        self.app.changed(t, name, &to);
        self.changes.push(Change {
            t,
            name: name.to_owned(),
            from,
            to,
            kind,
            build_s,
        });
    }

    fn set_rate(&mut self, rate: f64, why: &str) {
        let from = self.offered.borrow().rate;
        self.offered.send_modify(|o| o.rate = rate);
        let to = format!("{}", (rate * 100.0).round() / 100.0);
        self.record("rate", format!("{from}"), to, KnobKind::Load, None);
        if why == "search" {
            self.app.status = format!("searching: {rate:.1} req/s");
        }
    }

    /// Applies `name=value`: a load knob to the generator, a scheduling knob live to every replica, any other
    /// engine knob by building a new engine beside the running one and switching traffic to it.
    pub async fn set(&mut self, name: &str, value: &str) -> Result<()> {
        let name = name.trim().replace('-', "_");
        match name.as_str() {
            "rate" => {
                let rate: f64 = value.trim().parse().context("the rate is requests/s")?;
                if !(rate.is_finite() && rate > 0.0) {
                    bail!("the rate must be a positive number");
                }
                self.set_rate(rate, "knob");
                return Ok(());
            }
            "batch_clients" => {
                let clients: usize = value.trim().parse().context("a number of clients")?;
                let from = self.offered.borrow().clients;
                self.offered.send_modify(|o| o.clients = clients);
                self.record(
                    &name,
                    from.to_string(),
                    clients.to_string(),
                    KnobKind::Load,
                    None,
                );
                return Ok(());
            }
            _ => {}
        }
        let mut set = knobs::Knobs::new();
        set.insert(name.clone(), knobs::value(value.trim()));
        let next = knobs::apply(&set, self.config.clone())?;
        let from = knob_value(&self.config, &name)?;
        let to = knob_value(&next, &name)?;
        let engines = self
            .engines
            .as_ref()
            .ok_or_else(|| anyhow!("an external target's engine settings cannot be changed"))?;
        if LIVE.contains(&name.as_str()) {
            engines.target.gateway().reconfigure(&next)?;
            self.config = next;
            self.record(&name, from, to, KnobKind::Live, None);
            return Ok(());
        }
        let t = self.elapsed();
        self.app
            .log(t, format!("building a new engine for {name}={to}"));
        let built = Instant::now();
        let (dir, config) = (engines.model_dir.clone(), next.clone());
        // The engines' start-up lines go to the event log: the screen owns the terminal.
        let (replicas, lines) = tokio::task::spawn_blocking(move || {
            let lines = std::sync::Mutex::new(Vec::new());
            let say = |line| lines.lock().unwrap_or_else(|e| e.into_inner()).push(line);
            let replicas = crate::engines::load_replicas(&dir, config, &say)?;
            anyhow::Ok((
                replicas,
                lines.into_inner().unwrap_or_else(|e| e.into_inner()),
            ))
        })
        .await
        .context("the engine build task failed")??;
        for line in lines {
            self.app.log(t, line);
        }
        let gateway = Gateway::new(replicas, engines.gateway.clone())?;
        let build_s = built.elapsed().as_secs_f64();
        // The old engine is not shut: a request that took it just before the swap is still admitted there. It
        // answers what it admitted and goes when the last request holding it does.
        let old = engines.target.swap(gateway);
        let drain = tokio::spawn(async move {
            let t0 = Instant::now();
            crate::target::drained(old).await;
            t0.elapsed().as_secs_f64()
        });
        self.draining.push((self.elapsed(), drain));
        self.config = next;
        // The new engine's counters start at zero.
        self.last = None;
        self.record(&name, from, to, KnobKind::Engine, Some(build_s));
        Ok(())
    }

    async fn search_step(&mut self, step: Option<Result<f64, (f64, String)>>) {
        match step {
            None => {}
            Some(Ok(rate)) => self.set_rate(rate, "search"),
            Some(Err((restore, found))) => {
                let t = self.elapsed();
                self.search = None;
                self.app.status = found.clone();
                self.app.log(t, found.clone());
                self.searches.push(found);
                self.set_rate(restore, "restore");
            }
        }
    }

    /// Ends the load: the senders stop; the caller waits for what is in flight.
    pub fn stop(&self) {
        self.offered.send_modify(|o| o.running = false);
    }

    /// Waits for the old engines still draining.
    pub async fn drain(&mut self) {
        let t = self.elapsed();
        for (_, task) in &mut self.draining {
            let _ = tokio::time::timeout(Duration::from_secs(30), task).await;
        }
        self.finish_drains(t).await;
    }
}

fn quantile(sorted: &[f64], q: f64) -> Option<f64> {
    let last = sorted.len().checked_sub(1)?;
    Some(sorted[((last as f64) * q).round() as usize])
}
