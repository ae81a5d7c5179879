//! `bench sweep` and `bench replay`: for each knob combination, a fresh target, then steps chosen by the search
//! (sweep) or one step (replay); results and reports written at the end, a summary table on stderr.

mod args;
mod run;
mod setup;
mod summary;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};

pub(crate) use args::Common;
pub use args::{ReplayArgs, SweepArgs};
use run::{step_line, StepSpec, StepTimes};
use setup::{check_fault, check_warmup};
pub(crate) use setup::{positive, Setup};
use summary::print_summary;

use crate::arrivals::Arrivals;
use crate::knobs;
use crate::results::{self, Best, ClassInfo, ConfigResult, Git, Machine, RunResult, WorkloadInfo};
use crate::search::{self, SearchSettings};
use crate::step::StepResult;
use crate::target::Target;
use crate::workload::{Drive, Level, WorkloadKind};

pub fn sweep(args: SweepArgs) -> Result<()> {
    let c = &args.common;
    let setup = Setup::new(c, &args.axes, false)?;
    let batch = c.workload == WorkloadKind::Batch;
    let step_s = args.step_s.unwrap_or(if batch { 20.0 } else { 10.0 });
    let warmup_s = args.warmup_s.unwrap_or(if batch { 4.0 } else { 2.0 });
    positive(&[("--step-s", step_s), ("--probe-s", args.probe_s)])?;
    check_warmup(warmup_s, step_s, &format!("--step-s ({step_s})"))?;
    let (shortest, which) = if args.probe_s < step_s {
        (args.probe_s, "--probe-s")
    } else {
        (step_s, "--step-s")
    };
    check_fault(
        c.kill_replica_at_s,
        &setup.kind,
        shortest,
        &format!("{which} ({shortest})"),
    )?;
    let search_settings = SearchSettings {
        rate_mode: setup.workload.steps_rate(),
        probe_concurrency: args.probe_concurrency.max(1),
        spread: args.spread.max(2),
        lo: 0.1,
        hi: 1.2,
        resolution: args.resolution,
        max_steps: args.max_steps,
        max_concurrency: args.max_concurrency.max(1),
    };
    let settings = serde_json::json!({
        "step_s": step_s, "warmup_s": warmup_s, "probe_s": args.probe_s, "search": search_settings,
        "max_dispatch_delay_ms": c.max_dispatch_delay_ms, "sets": c.sets, "axes": args.axes,
    });
    let times = StepTimes {
        step_s,
        warmup_s,
        probe_s: args.probe_s,
    };
    execute(&setup, c, "sweep", settings, |setup, target, runtime| {
        let runner = setup.runner(c);
        runtime.block_on(runner.search(target, &search_settings, &times, &|line| setup.say(line)))
    })
}

pub fn replay(args: ReplayArgs) -> Result<()> {
    let c = &args.common;
    let batch = c.workload == WorkloadKind::Batch;
    let setup = Setup::new(c, &[], batch)?;
    let level = if batch {
        check_warmup(args.warmup_s, f64::INFINITY, "the pass over the corpus")?;
        check_fault(
            c.kill_replica_at_s,
            &setup.kind,
            f64::INFINITY,
            "the pass over the corpus",
        )?;
        Level::Concurrency(args.concurrency.max(1))
    } else {
        let rate = match (args.rate, &setup.workload.classes[0].drive) {
            (Some(r), _) => r,
            (
                None,
                Drive::Open {
                    arrivals: Arrivals::Trace(t),
                    ..
                },
            ) => t.stats().mean_rate,
            (None, _) => bail!("--rate is needed with synthetic or ServeGen arrivals"),
        };
        positive(&[("--rate", rate), ("--duration-s", args.duration_s)])?;
        let step = format!("--duration-s ({})", args.duration_s);
        check_warmup(args.warmup_s, args.duration_s, &step)?;
        check_fault(c.kill_replica_at_s, &setup.kind, args.duration_s, &step)?;
        Level::Rate(rate)
    };
    let duration_s = if batch {
        f64::INFINITY
    } else {
        args.duration_s
    };
    let settings = serde_json::json!({
        "duration_s": if batch { None } else { Some(duration_s) }, "warmup_s": args.warmup_s, "level": level,
        "max_dispatch_delay_ms": c.max_dispatch_delay_ms, "sets": c.sets,
    });
    execute(&setup, c, "replay", settings, |setup, target, runtime| {
        let spec = StepSpec {
            index: 0,
            probe: false,
            level,
            phase: if batch {
                "replay: one pass over the corpus".into()
            } else {
                "replay".into()
            },
            duration_s,
            warmup_s: args.warmup_s,
        };
        let step = runtime.block_on(setup.runner(c).step(target, spec))?;
        setup.say(step_line(&step, &setup.workload));
        if batch {
            let m = step.main();
            setup.say(format!(
                "  embedded {} ({} texts) in {:.1} s: {:.0} tokens/s, {:.1} texts/s",
                setup.workload.classes[0].corpus.name,
                setup.workload.classes[0].corpus.texts.len(),
                step.wall_s,
                m.tokens_per_s,
                m.inputs_per_s
            ));
        }
        if let Some(table) = soak_table(&step) {
            setup.say(table);
        }
        Ok((vec![step], "one step".into()))
    })
}

/// A soak's minutes: throughput, latency and resident memory, so drift and leaks show.
fn soak_table(step: &StepResult) -> Option<String> {
    let minutes = &step.main().minutes;
    if minutes.is_empty() {
        return None;
    }
    // The minute's last sample: RSS, and the harness's request records within it.
    let last = |series: &[(f64, f64)], from: f64| {
        series
            .iter()
            .rfind(|(t, _)| *t >= from && *t < from + 60.0)
            .map_or("-".into(), |&(_, mib)| format!("{mib:.0}"))
    };
    let mut out = String::from(
        "  minute  answered/s  p50 ms  p99 ms  RSS MiB  of which request records MiB\n",
    );
    for (i, m) in minutes.iter().enumerate() {
        out.push_str(&format!(
            "  {:>6}  {:>10.1}  {:>6.1}  {:>6.1}  {:>7}  {:>28}\n",
            i + 1,
            f64::from(m.answered) / 60.0,
            m.p50_ms,
            m.p99_ms,
            last(&step.rss_mib, m.t),
            last(&step.log_mib, m.t),
        ));
    }
    Some(out.trim_end().to_owned())
}

type Steps = Result<(Vec<StepResult>, String)>;

/// Why a sweep or replay that ran cannot be trusted at all, each with its exit status (README, "Exit status"), so
/// a script can tell it from a run whose verdicts are in the report.
#[derive(Debug, thiserror::Error)]
pub enum RunFailure {
    #[error("the target {url} is unreachable: {message}")]
    Unreachable { url: String, message: String },
    #[error("no request was answered ({requests} sent{first}); results: {results}")]
    NothingAnswered {
        requests: u64,
        first: String,
        results: String,
    },
}

impl RunFailure {
    /// 2: the target could not be reached; 3: it was, but answered no request.
    pub fn exit_code(&self) -> u8 {
        match self {
            RunFailure::Unreachable { .. } => 2,
            RunFailure::NothingAnswered { .. } => 3,
        }
    }
}

/// Fails a run none of whose requests was answered, pointing at its first error.
fn check_answered(configs: &[ConfigResult], results: &std::path::Path) -> Result<(), RunFailure> {
    let steps = || configs.iter().flat_map(|c| &c.steps);
    let classes = || steps().flat_map(|s| &s.classes);
    let requests: u64 = classes().map(|m| m.requests).sum();
    if requests == 0 || classes().any(|m| m.ok > 0) {
        return Ok(());
    }
    let first = steps()
        .flat_map(|s| s.errors.first())
        .next()
        .map_or(String::new(), |e| format!("; first error: {e}"));
    Err(RunFailure::NothingAnswered {
        requests,
        first,
        results: results.display().to_string(),
    })
}

/// Runs `steps` once per knob combination on a fresh target, then writes the results, the report and the
/// summary.
fn execute(
    setup: &Setup,
    c: &Common,
    command: &str,
    settings: serde_json::Value,
    steps: impl Fn(&Setup, &Arc<dyn Target>, &tokio::runtime::Runtime) -> Steps,
) -> Result<()> {
    let started = SystemTime::now();
    let clock = Instant::now();
    let host = crate::gate::host::Sampler::start();
    let run_id = c
        .run_id
        .clone()
        .unwrap_or_else(|| results::run_id(started, &format!("{command}-{}", c.workload)));
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    if let crate::target::TargetKind::Url { url, .. } = &setup.kind {
        runtime
            .block_on(crate::target::reachable(url))
            .map_err(|message| RunFailure::Unreachable {
                url: url.clone(),
                message,
            })?;
    }
    let configs_bar = setup
        .progress
        .add(ProgressBar::new(setup.combos.len() as u64));
    configs_bar.set_style(
        ProgressStyle::with_template("{prefix} config {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    configs_bar.set_prefix(format!("bench {command} {}", c.workload));
    let mut configs = Vec::new();
    for knobs in &setup.combos {
        let label = knobs::label(knobs, &setup.axes);
        configs_bar.set_message(label.clone());
        setup.say(format!("{label}: starting {}", setup.kind.describe()));
        let t0 = Instant::now();
        let (target, engine, replicas) = {
            let _inside = runtime.enter();
            setup.start_target(knobs)?
        };
        let (steps, search_end) = steps(setup, &target, &runtime)?;
        // The engine is restarted for the next combination: drop this one (its schedulers drain) first.
        drop(target);
        let config = ConfigResult {
            saturation: search::saturation(&steps),
            knee: search::knee(&steps),
            throughput_within_slo: search::throughput_within_slo(&steps),
            label,
            knobs: knobs.clone(),
            engine,
            replicas,
            steps,
            search_end,
            wall_s: t0.elapsed().as_secs_f64(),
        };
        setup.say(format!(
            "{}: saturation {}, knee {} ({:.0} s; {})",
            config.label,
            config.saturation.show(search::unit_of(&config.steps)),
            config.knee.show(search::unit_of(&config.steps)),
            config.wall_s,
            config.search_end
        ));
        configs.push(config);
        configs_bar.inc(1);
    }
    configs_bar.finish_and_clear();
    let rate_mode = setup.workload.steps_rate();
    let best = (configs.len() > 1)
        .then(|| {
            configs
                .iter()
                .filter_map(|c| Some((c, c.throughput_within_slo?)))
                .max_by(|a, b| a.1.total_cmp(&b.1))
                .map(|(c, t)| Best {
                    label: c.label.clone(),
                    throughput_within_slo: t,
                    unit: if rate_mode { "requests/s" } else { "tokens/s" }.into(),
                })
        })
        .flatten();
    let result = RunResult {
        schema_version: results::SCHEMA_VERSION,
        run_id: run_id.clone(),
        command: command.into(),
        args: setup.common_args.clone(),
        started_at: humantime::format_rfc3339_seconds(started).to_string(),
        wall_s: clock.elapsed().as_secs_f64(),
        harness_version: env!("CARGO_PKG_VERSION").into(),
        git: Git::detect(),
        machine: Machine::detect(),
        target: setup.kind.describe(),
        model: setup.model_dir.as_ref().map(|d| d.display().to_string()),
        workload: WorkloadInfo {
            kind: setup.workload.kind.to_string(),
            seed: setup.workload.seed,
            classes: setup
                .workload
                .classes
                .iter()
                .map(|class| ClassInfo {
                    name: class.name.clone(),
                    corpus: match &class.rerank {
                        None => {
                            format!("{} ({} texts)", class.corpus.name, class.corpus.texts.len())
                        }
                        Some(r) => format!(
                            "queries {} ({} texts), each against {} of {} ({} texts)",
                            class.corpus.name,
                            class.corpus.texts.len(),
                            crate::count(r.per_request, "passage"),
                            r.passages.name,
                            r.passages.texts.len()
                        ),
                    },
                    load: match &class.drive {
                        Drive::Open { arrivals, .. } => {
                            format!("open loop, arrivals {}", arrivals.describe())
                        }
                        Drive::Closed {
                            concurrency,
                            per_request,
                        } => format!(
                            "closed loop, {}, {} per request",
                            crate::count(*concurrency, "client"),
                            crate::count(*per_request, "text")
                        ),
                    },
                    slo: class.slo,
                    timeout_s: class.timeout.as_secs_f64(),
                    prompt_name: class.prompt_name.as_deref().map(str::to_owned),
                })
                .collect(),
        },
        settings,
        axes: setup.axes.clone(),
        configs,
        best,
        host: Some(host.finish()),
    };
    let results_dir = c.results_dir.join(&run_id);
    results::write(&results_dir, &result)?;
    print_summary(&result);
    eprintln!(
        "{command} took {:.0} s; results: {}",
        result.wall_s,
        results_dir.join("result.json").display()
    );
    if !c.no_report {
        let page = crate::report::write(&c.reports_dir.join(&run_id), &result)?;
        eprintln!("report:  {}", page.display());
    }
    check_answered(&result.configs, &results_dir.join("result.json"))?;
    Ok(())
}

/// `bench report`: draws the report of an existing results file again.
pub fn rereport(path: PathBuf, reports_dir: PathBuf) -> Result<()> {
    let file = if path.extension().is_some_and(|e| e == "json") {
        path
    } else {
        path.join("result.json")
    };
    let result = results::read(&file)?;
    print_summary(&result);
    let page = crate::report::write(&reports_dir.join(&result.run_id), &result)?;
    eprintln!("report: {}", page.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `bench replay ARGS` on a model that is never loaded: these fail while checking the command line.
    fn replay_error(args: &[&str]) -> String {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            args: ReplayArgs,
        }
        let line = ["replay", "--model", "/nonexistent", "--arrivals", "poisson"];
        let cli = <Cli as clap::Parser>::parse_from(line.iter().chain(args));
        format!("{:#}", replay(cli.args).unwrap_err())
    }

    #[test]
    fn replay_warmup_and_timeout_out_of_range_are_errors_not_panics() {
        for (args, expected) in [
            (
                &["--workload", "batch", "--warmup-s=-1"][..],
                "--warmup-s (-1.0) must be at least 0 and shorter than the pass",
            ),
            (
                &["--workload", "batch", "--warmup-s", "NaN"],
                "--warmup-s (NaN)",
            ),
            (
                &["--workload", "batch", "--warmup-s", "1e300"],
                "--warmup-s (1e300)",
            ),
            (
                &["--rate", "1", "--warmup-s", "NaN"],
                "shorter than --duration-s (60)",
            ),
            (
                &["--rate", "1", "--timeout-ms", "1e300"],
                "--timeout-ms 1e300 is too long",
            ),
            (&["--rate", "1", "--slo-ms", "1e300"], "set --timeout-ms"),
        ] {
            let e = replay_error(args);
            assert!(e.contains(expected), "{args:?}: {e}");
        }
    }
}
