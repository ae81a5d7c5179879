//! `bench sweep` and `bench replay`: for each knob combination, a fresh target, then steps chosen by the search
//! (sweep) or one step (replay); results and reports written at the end, a summary table on stderr.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::arrivals::Arrivals;
use crate::generator::{self, Timing};
use crate::knobs::{self, Knobs};
use crate::results::{self, Best, ClassInfo, ConfigResult, Git, Machine, RunResult, WorkloadInfo};
use crate::search::{self, Next, Observation, Plan};
use crate::step::{self, ClassSpec, StepResult, Window};
use crate::target::{self, Api, EngineSetup, Target, TargetKind};
use crate::workload::{repo_path, Class, Corpus, Drive, Level, Slo, Workload, WorkloadKind};

/// What both commands take: the workload, the target, the knobs, the SLOs and where results go.
#[derive(Args, Debug)]
pub struct Common {
    /// online (open-loop queries), batch (closed-loop re-index of a corpus) or mixed (both, each with its SLO).
    #[arg(long, value_enum, default_value_t = WorkloadKind::Online)]
    pub workload: WorkloadKind,
    /// in-process (the gateway path without HTTP), serve (our HTTP server on loopback), or an http:// URL.
    #[arg(long, default_value = "in-process")]
    pub target: String,
    /// Wire format of a URL target.
    #[arg(long, value_enum, default_value_t = Api::Openai)]
    pub api: Api,
    /// Model directory; default: all-MiniLM-L6-v2, fetched on first use.
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// Model name sent to a URL target (OpenAI's `model` field).
    #[arg(long)]
    pub model_name: Option<String>,
    /// An engine knob for every run, NAME=VALUE (any EngineConfig field, or `replicas`); repeatable.
    #[arg(long = "set", value_name = "NAME=VALUE")]
    pub sets: Vec<String>,
    /// Arrivals of the online class: uniform, poisson, gamma:CV, azure-conv, azure-code, mooncake,
    /// servegen[:client=N][,window=S], or a trace file.
    #[arg(long, default_value = "azure-conv")]
    pub arrivals: String,
    /// Pick queries whose token counts match the trace's (when it has them) instead of random ones.
    #[arg(long)]
    pub match_lengths: bool,
    /// Corpus of the online class (JSON Lines with `text`).
    #[arg(long, default_value = "workloads/text/queries_multilingual.jsonl")]
    pub queries: String,
    /// Corpus of the batch class.
    #[arg(long, default_value = "workloads/text/passages_en.jsonl")]
    pub passages: String,
    /// Use only the first N texts of each corpus.
    #[arg(long)]
    pub corpus_limit: Option<usize>,
    /// Passages per batch request.
    #[arg(long, default_value_t = 16)]
    pub batch_size: usize,
    /// Clients of the batch class in the mixed workload.
    #[arg(long, default_value_t = 1)]
    pub batch_concurrency: usize,
    /// Online SLO: latency at --slo-quantile within this many milliseconds.
    #[arg(long, default_value_t = 100.0)]
    pub slo_ms: f64,
    /// Batch SLO, per bulk request.
    #[arg(long, default_value_t = 30_000.0)]
    pub batch_slo_ms: f64,
    /// The latency quantile the SLOs bound (0.99: p99).
    #[arg(long, default_value_t = 0.99)]
    pub slo_quantile: f64,
    /// Share of requests that may be refused, fail or time out within the SLO.
    #[arg(long, default_value_t = 0.01)]
    pub max_error_rate: f64,
    /// Abandon a request after this long (default: 10 x its class's SLO, at least 1 s).
    #[arg(long)]
    pub timeout_ms: Option<f64>,
    /// Flag a step whose dispatch delay p99 exceeds this: the generator fell behind its schedule.
    #[arg(long, default_value_t = 10.0)]
    pub max_dispatch_delay_ms: f64,
    /// Seed of every schedule and text choice: the same seed and rate give the same requests for every knob value.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Name of the run's directories (default: UTC time and workload).
    #[arg(long)]
    pub run_id: Option<String>,
    /// Where results/<run-id>/ goes (relative to the current directory).
    #[arg(long, default_value = "results")]
    pub results_dir: PathBuf,
    /// Where reports/<run-id>/ goes.
    #[arg(long, default_value = "reports")]
    pub reports_dir: PathBuf,
    /// Write results only, no plots or page.
    #[arg(long)]
    pub no_report: bool,
}

#[derive(Args, Debug)]
pub struct SweepArgs {
    #[command(flatten)]
    pub common: Common,
    /// Sweep an engine knob over values, NAME=V1,V2,...; several axes multiply.
    #[arg(long = "axis", value_name = "NAME=V1,V2")]
    pub axes: Vec<String>,
    /// Seconds each step offers load (default: 10 online and mixed, 20 batch).
    #[arg(long)]
    pub step_s: Option<f64>,
    /// Seconds at the start of each step left out of its figures (default: 2 online and mixed, 4 batch).
    #[arg(long)]
    pub warmup_s: Option<f64>,
    /// Seconds of the closed-loop probe for the maximum throughput (rate sweeps).
    #[arg(long, default_value_t = 5.0)]
    pub probe_s: f64,
    #[arg(long, default_value_t = 64)]
    pub probe_concurrency: usize,
    /// Steps spread below the probed maximum.
    #[arg(long, default_value_t = 7)]
    pub spread: usize,
    /// Narrow the SLO boundary until it is this fraction wide.
    #[arg(long, default_value_t = 0.1)]
    pub resolution: f64,
    /// Steps at most per configuration, the probe not counted.
    #[arg(long, default_value_t = 12)]
    pub max_steps: usize,
    /// Most clients a concurrency sweep tries.
    #[arg(long, default_value_t = 16)]
    pub max_concurrency: usize,
}

#[derive(Args, Debug)]
pub struct ReplayArgs {
    #[command(flatten)]
    pub common: Common,
    /// Requests/s of the online class (the arrivals time-scaled to it); default: the trace's own mean rate.
    #[arg(long)]
    pub rate: Option<f64>,
    /// Seconds to replay (online and mixed); a batch replay runs until the corpus is embedded once.
    #[arg(long, default_value_t = 60.0)]
    pub duration_s: f64,
    /// Clients of the batch class (batch workload).
    #[arg(long, default_value_t = 2)]
    pub concurrency: usize,
    /// Seconds at the start left out of the figures.
    #[arg(long, default_value_t = 0.0)]
    pub warmup_s: f64,
}

/// Everything a run holds fixed.
struct Setup {
    common_args: Vec<String>,
    kind: TargetKind,
    model_dir: Option<PathBuf>,
    model_name: String,
    workload: Workload,
    combos: Vec<Knobs>,
    axes: Vec<String>,
    progress: MultiProgress,
}

impl Setup {
    fn new(c: &Common, axes: &[String], corpus_pass: bool) -> Result<Setup> {
        let kind = TargetKind::parse(&c.target, c.api)?;
        let combos = knobs::combinations(&c.sets, axes)?;
        let external = matches!(kind, TargetKind::Url { .. });
        if external && (!c.sets.is_empty() || !axes.is_empty()) {
            bail!("knobs (--set, --axis) cannot be set on an external target; they configure an engine the harness starts");
        }
        let model_dir = if external {
            None
        } else {
            Some(match &c.model {
                Some(dir) => dir.clone(),
                None => engine::model::fetch::default_model_dir()
                    .context("fetching the default model")?,
            })
        };
        let model_name = c.model_name.clone().unwrap_or_else(|| {
            model_dir
                .as_ref()
                .and_then(|d| d.file_name())
                .map_or("all-MiniLM-L6-v2".into(), |n| {
                    n.to_string_lossy().into_owned()
                })
        });
        let progress = MultiProgress::new();
        if !std::io::IsTerminal::is_terminal(&std::io::stderr()) {
            progress.set_draw_target(ProgressDrawTarget::hidden());
        }
        Ok(Setup {
            common_args: std::env::args().skip(1).collect(),
            kind,
            model_dir,
            model_name,
            workload: workload(c, corpus_pass)?,
            combos,
            axes: knobs::axis_names(axes),
            progress,
        })
    }

    fn runner<'a>(&'a self, c: &Common) -> Runner<'a> {
        Runner {
            workload: &self.workload,
            progress: &self.progress,
            max_dispatch_delay_ms: c.max_dispatch_delay_ms,
        }
    }

    /// A line above the progress bars (or straight to stderr when they are hidden).
    fn say(&self, line: String) {
        if self.progress.is_hidden() {
            eprintln!("{line}");
        } else {
            let _ = self.progress.println(line);
        }
    }

    fn start_target(
        &self,
        knobs: &Knobs,
    ) -> Result<(Arc<dyn Target>, Option<serde_json::Value>, usize)> {
        let (config, replicas) = knobs::apply(knobs, engine::EngineConfig::default())?;
        let setup = self.model_dir.as_deref().map(|dir| EngineSetup {
            model_dir: dir,
            config: config.clone(),
            replicas,
        });
        let engine = setup
            .as_ref()
            .map(|_| serde_json::to_value(&config))
            .transpose()?;
        let target = target::start(&self.kind, setup, &self.model_name)?;
        Ok((target, engine, replicas))
    }
}

/// Durations, rates and bounds must be positive numbers.
fn positive(values: &[(&str, f64)]) -> Result<()> {
    match values.iter().find(|(_, v)| !(v.is_finite() && *v > 0.0)) {
        Some((name, v)) => bail!("{name} must be a positive number, not {v}"),
        None => Ok(()),
    }
}

/// The warm-up is seconds from 0 up to, not including, the step's end (`step`, a flag and its value, or what
/// ends a batch pass); the generator turns it into a Duration.
fn check_warmup(warmup_s: f64, step_s: f64, step: &str) -> Result<()> {
    if !(0.0..step_s).contains(&warmup_s) || Duration::try_from_secs_f64(warmup_s).is_err() {
        bail!("--warmup-s ({warmup_s:?}) must be at least 0 and shorter than {step}");
    }
    Ok(())
}

fn load_corpus(path: &str, limit: Option<usize>) -> Result<Arc<Corpus>> {
    let corpus = Corpus::load(&repo_path(path))?;
    Ok(Arc::new(match limit {
        Some(n) if n < corpus.texts.len() => {
            let pairs = corpus
                .texts
                .into_iter()
                .zip(corpus.tokens)
                .take(n.max(1))
                .collect();
            Corpus::new(corpus.name, pairs)
        }
        _ => corpus,
    }))
}

fn workload(c: &Common, corpus_pass: bool) -> Result<Workload> {
    let slo = |ms: f64| Slo {
        quantile: c.slo_quantile,
        latency_ms: ms,
        max_error_rate: c.max_error_rate,
    };
    if !(0.0..1.0).contains(&c.slo_quantile) {
        bail!("--slo-quantile must be in [0, 1), not {}", c.slo_quantile);
    }
    if !(0.0..=1.0).contains(&c.max_error_rate) {
        bail!(
            "--max-error-rate must be in [0, 1], not {}",
            c.max_error_rate
        );
    }
    positive(&[
        ("--slo-ms", c.slo_ms),
        ("--batch-slo-ms", c.batch_slo_ms),
        ("--timeout-ms", c.timeout_ms.unwrap_or(1.0)),
        ("--max-dispatch-delay-ms", c.max_dispatch_delay_ms),
    ])?;
    let timeout = |slo_ms: f64| -> Result<Duration> {
        let ms = c.timeout_ms.unwrap_or((10.0 * slo_ms).max(1000.0));
        Duration::try_from_secs_f64(ms / 1e3).map_err(|_| match c.timeout_ms {
            Some(_) => anyhow!("--timeout-ms {ms:?} is too long"),
            None => anyhow!(
                "the request timeout, 10 x the SLO of {slo_ms:?} ms, is too long: set --timeout-ms"
            ),
        })
    };
    let online = || -> Result<Class> {
        Ok(Class {
            name: "online".into(),
            corpus: load_corpus(&c.queries, c.corpus_limit)?,
            drive: Drive::Open {
                arrivals: Arrivals::parse(&c.arrivals)
                    .with_context(|| format!("--arrivals {}", c.arrivals))?,
                match_lengths: c.match_lengths,
            },
            slo: slo(c.slo_ms),
            timeout: timeout(c.slo_ms)?,
        })
    };
    let batch = |concurrency| -> Result<Class> {
        if c.batch_size == 0 {
            bail!("--batch-size must be at least 1");
        }
        Ok(Class {
            name: "batch".into(),
            corpus: load_corpus(&c.passages, c.corpus_limit)?,
            drive: Drive::Closed {
                concurrency,
                per_request: c.batch_size,
            },
            slo: slo(c.batch_slo_ms),
            timeout: timeout(c.batch_slo_ms)?,
        })
    };
    let classes = match c.workload {
        WorkloadKind::Online => vec![online()?],
        WorkloadKind::Batch => vec![batch(1)?],
        WorkloadKind::Mixed => vec![online()?, batch(c.batch_concurrency.max(1))?],
    };
    Ok(Workload {
        kind: c.workload,
        classes,
        seed: c.seed,
        corpus_pass,
    })
}

/// How one step is run.
pub struct StepSpec {
    /// A probe measures throughput: its requests may take as long as they need (up to a minute).
    pub probe: bool,
    index: usize,
    level: Level,
    phase: String,
    duration_s: f64,
    warmup_s: f64,
}

/// The timeout of a probe's requests: long enough that an overloaded target still answers, so its throughput
/// shows.
const PROBE_TIMEOUT: Duration = Duration::from_secs(60);

/// Runs steps of one workload against a target: what a sweep does per knob combination, free of the command
/// line so that tests drive it with fake targets on a paused clock.
pub struct Runner<'a> {
    pub workload: &'a Workload,
    pub progress: &'a MultiProgress,
    pub max_dispatch_delay_ms: f64,
}

/// Step lengths of a search.
pub struct StepTimes {
    pub step_s: f64,
    pub warmup_s: f64,
    pub probe_s: f64,
}

impl Runner<'_> {
    /// Steps chosen by the search until it is done; returns them and why it stopped.
    pub async fn search(
        &self,
        target: &Arc<dyn Target>,
        plan: &Plan,
        times: &StepTimes,
        say: &dyn Fn(String),
    ) -> Result<(Vec<StepResult>, String)> {
        let mut steps: Vec<StepResult> = Vec::new();
        let mut history: Vec<Observation> = Vec::new();
        let end = loop {
            let (level, phase) = match search::next(plan, &history) {
                Next::Done(why) => break why,
                Next::Run { level, phase } => (level, phase),
            };
            let probe = plan.rate_mode && matches!(level, Level::Concurrency(_));
            let spec = StepSpec {
                index: steps.len(),
                level,
                phase,
                probe,
                duration_s: if probe { times.probe_s } else { times.step_s },
                warmup_s: if probe {
                    (times.probe_s / 5.0).min(times.warmup_s)
                } else {
                    times.warmup_s
                },
            };
            let step = self.step(target, spec).await?;
            say(step_line(&step, self.workload));
            history.push(Observation {
                level,
                probe,
                throughput: if plan.rate_mode {
                    step.main().achieved_rps
                } else {
                    step.main().tokens_per_s
                },
                pass: step.pass,
            });
            steps.push(step);
        };
        Ok((steps, end))
    }

    /// Runs one step on `target` and analyses it.
    pub async fn step(&self, target: &Arc<dyn Target>, spec: StepSpec) -> Result<StepResult> {
        target.settle().await;
        let w = self.workload;
        let loads = w
            .plan(spec.level, spec.duration_s, spec.level.value().to_bits())
            .with_context(|| format!("step {}: planning its load", spec.index))?;
        // A step that runs until its sources are exhausted counts its requests.
        let pass_len = loads.iter().find_map(|l| match l {
            crate::workload::ClassLoad::Closed { source, .. } => source.requests_in_pass(),
            _ => None,
        });
        let bar = self.progress.add(match pass_len {
            Some(n) if !spec.duration_s.is_finite() => ProgressBar::new(n as u64),
            _ => ProgressBar::new((spec.duration_s * 10.0) as u64),
        });
        bar.set_style(
            ProgressStyle::with_template("  step {prefix:>2} [{bar:30}] {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        bar.set_prefix(spec.index.to_string());
        let timing = Timing {
            duration_s: spec.duration_s,
            warmup_s: spec.warmup_s,
            timeouts: w
                .classes
                .iter()
                .map(|c| {
                    if spec.probe {
                        c.timeout.max(PROBE_TIMEOUT)
                    } else {
                        c.timeout
                    }
                })
                .collect(),
        };
        let run = generator::run(target.clone(), loads, &timing, Some(bar.clone())).await;
        bar.finish_and_clear();
        self.progress.remove(&bar);
        let end_s = if spec.duration_s.is_finite() {
            spec.duration_s
        } else {
            run.wall_s
        };
        let specs: Vec<ClassSpec> = w
            .classes
            .iter()
            .enumerate()
            .map(|(i, c)| ClassSpec {
                name: &c.name,
                slo: c.slo,
                closed_loop: matches!(c.drive, Drive::Closed { .. })
                    || (i == 0 && matches!(spec.level, Level::Concurrency(_))),
            })
            .collect();
        let window = Window {
            warmup_s: spec.warmup_s,
            end_s,
            max_dispatch_delay_ms: self.max_dispatch_delay_ms,
        };
        let (classes, batches, behind) =
            step::analyze(&run.samples, &specs, &window, run.telemetry);
        let pass = classes.iter().all(|c| c.verdict.pass);
        Ok(StepResult {
            index: spec.index,
            phase: spec.phase,
            probe: spec.probe,
            level: spec.level,
            duration_s: end_s,
            warmup_s: spec.warmup_s,
            wall_s: run.wall_s,
            classes,
            batches,
            behind,
            pass,
            errors: run.errors,
        })
    }
}

fn step_line(s: &StepResult, w: &Workload) -> String {
    let m = s.main();
    let level = match s.level {
        Level::Rate(r) => format!("{r:8.1} req/s"),
        Level::Concurrency(c) => format!("{c:5} clients"),
    };
    let mut line = format!(
        "  step {:>2} {level}: achieved {:.1} req/s, {:.0} tokens/s, p50 {:.1} ms, {} {:.1} ms, errors {:.1}% -> {}{}",
        s.index,
        m.achieved_rps,
        m.tokens_per_s,
        m.latency_ms.p50,
        crate::workload::quantile_name(m.slo.quantile),
        m.slo_latency_ms,
        m.error_rate * 100.0,
        if s.pass { "pass" } else { "FAIL" },
        if s.behind { " (generator BEHIND)" } else { "" }
    );
    for c in s.classes.iter().skip(1) {
        line.push_str(&format!(
            " | {}: {:.0} tokens/s, {} {:.0} ms",
            c.class,
            c.tokens_per_s,
            crate::workload::quantile_name(c.slo.quantile),
            c.slo_latency_ms
        ));
    }
    // A re-index's figure of merit: how long the whole corpus would take at this throughput.
    for (c, class) in s.classes.iter().zip(&w.classes) {
        if matches!(class.drive, Drive::Closed { .. }) && c.tokens_per_s > 0.0 {
            line.push_str(&format!(
                " | {} at this pace: {:.0} s",
                class.corpus.name,
                class.corpus.total_tokens() as f64 / c.tokens_per_s
            ));
        }
    }
    if let Some(e) = s.errors.first() {
        line.push_str(&format!("\n           first error: {e}"));
    }
    line
}

pub fn sweep(args: SweepArgs) -> Result<()> {
    let c = &args.common;
    let setup = Setup::new(c, &args.axes, false)?;
    let batch = c.workload == WorkloadKind::Batch;
    let step_s = args.step_s.unwrap_or(if batch { 20.0 } else { 10.0 });
    let warmup_s = args.warmup_s.unwrap_or(if batch { 4.0 } else { 2.0 });
    positive(&[("--step-s", step_s), ("--probe-s", args.probe_s)])?;
    check_warmup(warmup_s, step_s, &format!("--step-s ({step_s})"))?;
    let plan = Plan {
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
        "step_s": step_s, "warmup_s": warmup_s, "probe_s": args.probe_s, "plan": plan,
        "max_dispatch_delay_ms": c.max_dispatch_delay_ms, "sets": c.sets, "axes": args.axes,
    });
    let times = StepTimes {
        step_s,
        warmup_s,
        probe_s: args.probe_s,
    };
    execute(&setup, c, "sweep", settings, |setup, target, runtime| {
        let runner = setup.runner(c);
        runtime.block_on(runner.search(target, &plan, &times, &|line| setup.say(line)))
    })
}

pub fn replay(args: ReplayArgs) -> Result<()> {
    let c = &args.common;
    let batch = c.workload == WorkloadKind::Batch;
    let setup = Setup::new(c, &[], batch)?;
    let level = if batch {
        check_warmup(args.warmup_s, f64::INFINITY, "the pass over the corpus")?;
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
        check_warmup(
            args.warmup_s,
            args.duration_s,
            &format!("--duration-s ({})", args.duration_s),
        )?;
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
        Ok((vec![step], "one step".into()))
    })
}

type Steps = Result<(Vec<StepResult>, String)>;

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
            config.saturation.show(),
            config.knee.show(),
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
                    corpus: format!("{} ({} texts)", class.corpus.name, class.corpus.texts.len()),
                    load: match &class.drive {
                        Drive::Open { arrivals, .. } => {
                            format!("open loop, arrivals {}", arrivals.describe())
                        }
                        Drive::Closed {
                            concurrency,
                            per_request,
                        } => format!(
                            "closed loop, {concurrency} clients, {per_request} texts per request"
                        ),
                    },
                    slo: class.slo,
                    timeout_s: class.timeout.as_secs_f64(),
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
    Ok(())
}

/// The summary table on stderr: the columns that fit a terminal.
pub fn print_summary(result: &RunResult) {
    let (headers, rows) = results::table(result);
    let cols: Vec<usize> = (0..headers.len())
        .filter(|&i| results::COLUMNS[i].1)
        .collect();
    let pick = |r: &Vec<String>| cols.iter().map(|&i| r[i].clone()).collect::<Vec<_>>();
    eprintln!();
    print_table(&pick(&headers), &rows.iter().map(pick).collect::<Vec<_>>());
    eprintln!();
    let (headers, rows) = results::config_table(result);
    print_table(&headers, &rows);
    eprintln!();
    for c in &result.configs {
        eprintln!(
            "{}: saturation point {} — {}",
            c.label,
            c.saturation.show(),
            c.saturation.how
        );
        eprintln!("{}: knee {} — {}", c.label, c.knee.show(), c.knee.how);
    }
    if let Some(b) = &result.best {
        eprintln!(
            "best setting for the SLO: {} ({:.1} {})",
            b.label, b.throughput_within_slo, b.unit
        );
    }
    if let Some(w) = results::behind_warning(result) {
        eprintln!("{w}");
    }
}

/// Right-aligned columns on stderr.
fn print_table(headers: &[String], rows: &[Vec<String>]) {
    let headers = headers.to_vec();
    let all: Vec<&Vec<String>> = std::iter::once(&headers).chain(rows).collect();
    let widths: Vec<usize> = (0..headers.len())
        .map(|j| all.iter().map(|r| r[j].chars().count()).max().unwrap_or(0))
        .collect();
    for row in all {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(v, w)| format!("{v:>w$}"))
            .collect();
        eprintln!("{}", line.join("  "));
    }
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
    use crate::target::{BoxFuture, Failure, Reply, Telemetry};
    use crate::workload::Request;

    /// One server answering requests first come, first served, each in a fixed time: it serves exactly
    /// `1 / service` requests per second, and its queue grows without bound above that rate.
    struct FixedRate {
        service: Duration,
        free_at: std::sync::Mutex<tokio::time::Instant>,
    }

    impl Target for FixedRate {
        fn embed(&self, _: Request) -> BoxFuture<Result<Reply, Failure>> {
            let now = tokio::time::Instant::now();
            let mut free_at = self.free_at.lock().unwrap();
            let start = (*free_at).max(now);
            *free_at = start + self.service;
            let (done, service) = (*free_at, self.service);
            Box::pin(async move {
                tokio::time::sleep_until(done).await;
                Ok(Reply {
                    tokens: Some(10),
                    queue: Some(start - now),
                    inference: Some(service),
                })
            })
        }
        fn telemetry(&self) -> BoxFuture<Option<Telemetry>> {
            Box::pin(async { None })
        }
        fn settle(&self) -> BoxFuture<()> {
            let idle = *self.free_at.lock().unwrap();
            Box::pin(tokio::time::sleep_until(idle))
        }
    }

    fn online(arrivals: Arrivals) -> Workload {
        let corpus = Corpus::new("q".into(), vec![(Arc::from("a query"), 10)]);
        Workload {
            kind: WorkloadKind::Online,
            classes: vec![Class {
                name: "online".into(),
                corpus: Arc::new(corpus),
                drive: Drive::Open {
                    arrivals,
                    match_lengths: false,
                },
                slo: Slo {
                    quantile: 0.99,
                    latency_ms: 50.0,
                    max_error_rate: 0.01,
                },
                timeout: Duration::from_secs(2),
            }],
            seed: 1,
            corpus_pass: false,
        }
    }

    fn plan() -> Plan {
        Plan {
            rate_mode: true,
            probe_concurrency: 16,
            spread: 7,
            lo: 0.1,
            hi: 1.2,
            resolution: 0.05,
            max_steps: 14,
            max_concurrency: 16,
        }
    }

    /// A server of exactly 100 requests/s behind a p99 <= 50 ms SLO (five service times). With evenly spaced
    /// arrivals nothing queues below 100 requests/s and the queue grows without bound above it, so the
    /// saturation point is 100: the probe, spread and narrowing must find it within 10%. With Poisson arrivals
    /// bursts queue long before (M/D/1), so the SLO breaks lower, but the knee — where achieved stops
    /// following offered — is still the server's rate, within 10%. Paused tokio time makes every figure exact.
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

    #[tokio::test(start_paused = true)]
    async fn sweep_finds_the_saturation_point_of_a_fixed_rate_server() {
        for (arrivals, lo, hi) in [
            (Arrivals::Uniform, 90.0, 100.5),
            (Arrivals::Poisson, 10.0, 100.0),
        ] {
            let workload = online(arrivals.clone());
            let progress = MultiProgress::with_draw_target(ProgressDrawTarget::hidden());
            let runner = Runner {
                workload: &workload,
                progress: &progress,
                max_dispatch_delay_ms: 5.0,
            };
            let target: Arc<dyn Target> = Arc::new(FixedRate {
                service: Duration::from_millis(10),
                free_at: std::sync::Mutex::new(tokio::time::Instant::now()),
            });
            let times = StepTimes {
                step_s: 10.0,
                warmup_s: 2.0,
                probe_s: 5.0,
            };
            let (steps, end) = runner
                .search(&target, &plan(), &times, &|_| {})
                .await
                .unwrap();
            let probe = &steps[0];
            assert!(
                (probe.main().achieved_rps - 100.0).abs() < 1.0,
                "probe: {}",
                probe.main().achieved_rps
            );
            let sat = search::saturation(&steps);
            let value = sat.value.unwrap();
            assert!(!sat.lower_bound, "{sat:?}");
            assert!(
                (lo..=hi).contains(&value),
                "{arrivals:?}: saturation {value} ({})",
                sat.how
            );
            assert!(end.contains("SLO boundary"), "{end}");
            let knee = search::knee(&steps);
            let k = knee.value.unwrap();
            assert!(
                (k - 100.0).abs() <= 10.0,
                "{arrivals:?}: knee {k} ({})",
                knee.how
            );
            // Every step's generator kept its schedule.
            assert!(steps.iter().all(|s| !s.behind));
        }
    }
}
