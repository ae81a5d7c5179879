//! `bench tune`: live tuning of a running engine under real traffic. The engine runs in-process (or a URL target,
//! where only the load is live); the workload runs open loop through the generator's own send and record path;
//! the screen (the `tui` crate) shows the last minutes and takes knob changes; on quit, `results/<run-id>/` holds
//! the time series, the knob changes and the final configuration, and `bench report` draws them. `--headless
//! --script FILE` runs the same session from a JSON Lines script of timed actions, without a terminal.

mod control;
mod live;
mod panel;
mod record;
mod screen;
mod script;
mod search;
#[cfg(test)]
mod tests;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use anyhow::{bail, Context, Result};
use clap::Args;
use engine::gateway::{Gateway, GatewayConfig};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::generator::Recorder;
use crate::knobs;
use crate::results;
use crate::sweep::{positive, Common, Setup};
use crate::target::{InProcess, Target, TargetKind};
use crate::workload::Drive;
use control::{EngineSource, Tuner};
use live::Offered;
pub use record::rereport;

#[derive(Args, Debug)]
pub struct TuneArgs {
    #[command(flatten)]
    pub common: Common,
    /// Requests/s of the online class to start with.
    #[arg(long, default_value_t = 50.0)]
    pub rate: f64,
    /// Run without a terminal, from --script, for --duration seconds.
    #[arg(long)]
    pub headless: bool,
    /// JSON Lines of timed actions: {"at_s": 5, "set": {"max_batch_tokens": 512}}, {"at_s": 12, "key": "f"}.
    #[arg(long, requires = "headless")]
    pub script: Option<PathBuf>,
    /// Seconds to run (headless: required; interactive: quit by itself after this long).
    #[arg(long)]
    pub duration: Option<f64>,
    /// Milliseconds per tick: one point of the time series.
    #[arg(long, default_value_t = 1000)]
    pub tick_ms: u64,
    /// Seconds of history the charts show.
    #[arg(long, default_value_t = 180.0)]
    pub window_s: f64,
}

pub fn run(args: TuneArgs) -> Result<()> {
    let c = &args.common;
    positive(&[("--rate", args.rate), ("--window-s", args.window_s)])?;
    if args.tick_ms == 0 {
        bail!("--tick-ms must be at least 1");
    }
    let duration = match (args.headless, args.duration) {
        (true, None) => bail!("--headless needs --duration"),
        (_, Some(d)) => {
            positive(&[("--duration", d)])?;
            Some(d)
        }
        (false, None) => None,
    };
    let actions = match &args.script {
        Some(path) => script::read(path)?,
        None => Vec::new(),
    };
    let setup = Setup::new(c, &[], false)?;
    if matches!(setup.kind, TargetKind::Serve { .. } | TargetKind::Processes) {
        bail!("bench tune drives the engine in-process or a URL; `--target serve` and `processes` are for sweeps");
    }
    let config = match setup.combos.first() {
        Some(set) => knobs::apply(set, setup.base.clone())?,
        None => setup.base.clone(),
    };
    let run_id = c
        .run_id
        .clone()
        .unwrap_or_else(|| results::run_id(SystemTime::now(), &format!("tune-{}", c.workload)));
    let dir = c.results_dir.join(&run_id);
    let clients = setup
        .workload
        .classes
        .iter()
        .find_map(|class| match class.drive {
            Drive::Closed { concurrency, .. } => Some(concurrency),
            Drive::Open { .. } => None,
        })
        .unwrap_or(0);
    let target_name = match &setup.kind {
        TargetKind::Url { url, .. } => url.clone(),
        _ => "in-process".into(),
    };
    let title = format!("{} {} {target_name}", c.workload, setup.model_name);
    let Setup {
        kind,
        model_dir,
        model_name,
        workload,
        ..
    } = setup;
    let workload = Arc::new(workload);
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    let wall = std::time::Instant::now();
    let tuner = runtime.block_on(async {
        let gateway_config = GatewayConfig {
            model_name: model_name.clone(),
            auto_truncate: true,
            ..GatewayConfig::default()
        };
        let (target, engines): (Arc<dyn Target>, _) = match (&kind, &model_dir) {
            (TargetKind::InProcess, Some(dir)) => {
                let replicas = crate::engines::load_replicas(dir, config.clone(), &|line| {
                    eprintln!("{line}")
                })?;
                let gateway = Gateway::new(replicas, gateway_config.clone())?;
                let target = Arc::new(InProcess::new(gateway));
                let source = EngineSource {
                    model_dir: dir.clone(),
                    gateway: gateway_config,
                    target: target.clone(),
                };
                (target, Some(source))
            }
            _ => (crate::target::start(&kind, None, &model_name)?, None),
        };
        let (offered_tx, offered_rx) = watch::channel(Offered {
            rate: args.rate,
            clients,
            paused: false,
            running: true,
        });
        let rec = Arc::new(Recorder::default());
        let start = Instant::now();
        let senders = live::start(
            workload.clone(),
            target.clone(),
            rec.clone(),
            offered_rx,
            start,
        )?;
        let mut tuner = Tuner::new(
            title,
            config,
            target,
            engines,
            offered_tx,
            rec,
            workload.clone(),
            start,
            dir.clone(),
        )?;
        tuner.app.window_s = args.window_s;
        let tick = Duration::from_millis(args.tick_ms);
        let screens = if args.headless {
            screen::headless(&mut tuner, actions, duration.unwrap_or(0.0), tick).await?
        } else {
            screen::interactive(&mut tuner, duration, tick).await?
        };
        finish(&mut tuner, senders, &workload).await;
        anyhow::Ok((tuner, screens))
    })?;
    let (tuner, screens) = tuner;
    let result = record::TuneResult::of(
        &tuner,
        run_id.clone(),
        &model_name,
        &workload,
        &kind,
        args.tick_ms as f64 / 1e3,
        wall.elapsed().as_secs_f64(),
    )?;
    record::write(&dir, &result, &screens)?;
    let t = &result.totals;
    eprintln!(
        "bench tune: {} sent, {} answered, {} refused, {} errors, {} timeouts; {} knob changes; results: {}",
        t.sent,
        t.ok,
        t.refused,
        t.errors,
        t.timeouts,
        result.changes.len(),
        dir.display()
    );
    if !c.no_report {
        let page = record::report(&c.reports_dir.join(&run_id), &result)?;
        eprintln!("report: {}", page.display());
    }
    Ok(())
}

/// Stops the load and waits for every request sent to be answered (or abandoned at its timeout), then takes the
/// last records and waits for old engines to drain.
async fn finish(
    tuner: &mut Tuner,
    mut senders: tokio::task::JoinSet<()>,
    workload: &crate::workload::Workload,
) {
    tuner.stop();
    let longest = workload
        .classes
        .iter()
        .map(|c| c.timeout)
        .max()
        .unwrap_or_default();
    let _ = tokio::time::timeout(longest + Duration::from_secs(5), async {
        while senders.join_next().await.is_some() {}
    })
    .await;
    tuner.tick().await;
    tuner.drain().await;
}
