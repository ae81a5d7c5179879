//! The runner: one step of load against a target and its analysis, and the search's loop of steps.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};

use crate::generator::{self, Outcome, Timing};
use crate::search::{self, Next, Observation, SearchSettings};
use crate::step::{self, ClassSpec, Fault, StepResult, Window};
use crate::target::Target;
use crate::workload::{Drive, Level, Workload};

/// How one step is run.
pub struct StepSpec {
    /// A probe measures throughput: its requests may take as long as they need (up to a minute).
    pub probe: bool,
    pub index: usize,
    pub level: Level,
    pub phase: String,
    pub duration_s: f64,
    pub warmup_s: f64,
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
    /// Kill one of the target's replica processes this many seconds into every step (`--kill-replica-at-s`).
    pub kill_replica_at_s: Option<f64>,
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
        settings: &SearchSettings,
        times: &StepTimes,
        say: &dyn Fn(String),
    ) -> Result<(Vec<StepResult>, String)> {
        let mut steps: Vec<StepResult> = Vec::new();
        let mut history: Vec<Observation> = Vec::new();
        let end = loop {
            let (level, phase) = match search::next(settings, &history) {
                Next::Done(why) => break why,
                Next::Run { level, phase } => (level, phase),
            };
            let probe = settings.rate_mode && matches!(level, Level::Concurrency(_));
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
                throughput: step.throughput(),
                // A rate step with no requests in its window is no evidence of missing the SLO: the search goes
                // on above it (slow requests at a low rate: a reranker's). A concurrency step without any (one
                // request longer than the window) fails, and the search stops at it with its advice.
                pass: step.pass || (matches!(level, Level::Rate(_)) && !step.measured()),
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
            .loads(spec.level, spec.duration_s, spec.level.value().to_bits())
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
            priorities: w.classes.iter().map(|c| c.priority).collect(),
            prompt_names: w.classes.iter().map(|c| c.prompt_name.clone()).collect(),
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
        // A fault step reads the gateway's re-sent pieces before and after it; other steps read nothing extra.
        let kill = match self.kill_replica_at_s {
            Some(at_s) => {
                let resent_before = target.telemetry().await.map_or(0.0, |t| t.resent_pieces);
                let target = target.clone();
                let task = tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_secs_f64(at_s)).await;
                    target.kill_replica()
                });
                Some((at_s, resent_before, task))
            }
            None => None,
        };
        let run = generator::run(target.clone(), loads, &timing, Some(bar.clone())).await;
        bar.finish_and_clear();
        self.progress.remove(&bar);
        let fault = match kill {
            Some((at_s, resent_before, kill)) => {
                if !kill.is_finished() {
                    kill.abort();
                    bail!("step {}: it ended before the fault at {at_s} s", spec.index);
                }
                let what = kill.await.map_err(|e| anyhow!("the fault's task: {e}"))??;
                target.settle().await;
                let resent_after = target.telemetry().await.map_or(0.0, |t| t.resent_pieces);
                target.restore().await?;
                let count =
                    |o: Outcome| run.samples.iter().filter(|s| s.outcome == o).count() as u64;
                Some(Fault {
                    at_s,
                    what,
                    lost: count(Outcome::Error) + count(Outcome::Timeout),
                    refused: count(Outcome::Refused),
                    duplicated: run.duplicated,
                    retried: (resent_after - resent_before).max(0.0) as u64,
                })
            }
            None => None,
        };
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
            one_pass: !spec.duration_s.is_finite(),
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
            rss_mib: run.rss_mib,
            log_mib: run.log_mib,
            fault,
        })
    }
}

pub(super) fn step_line(s: &StepResult, w: &Workload) -> String {
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
    if let Some(f) = &s.fault {
        line.push_str(&format!(
            "\n           fault at {:.1} s: {}; lost {}, duplicated {}, retried {}, refused {}",
            f.at_s, f.what, f.lost, f.duplicated, f.retried, f.refused
        ));
    }
    if let Some(e) = s.errors.first() {
        line.push_str(&format!("\n           first error: {e}"));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arrivals::Arrivals;
    use crate::target::{BoxFuture, Failure, Reply, Telemetry};
    use crate::workload::{Class, Corpus, Request, Slo, WorkloadKind};
    use engine::Priority;
    use indicatif::ProgressDrawTarget;

    /// One server answering requests first come, first served, each in a fixed time: it serves exactly
    /// `1 / service` requests per second, and its queue grows without bound above that rate.
    struct FixedRate {
        service: Duration,
        free_at: std::sync::Mutex<tokio::time::Instant>,
    }

    impl Target for FixedRate {
        fn embed(&self, _: Request, _: Priority) -> BoxFuture<Result<Reply, Failure>> {
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
                priority: engine::Priority::Online,
                timeout: Duration::from_secs(2),
                rerank: None,
                prompt_name: None,
            }],
            seed: 1,
            corpus_pass: false,
        }
    }

    fn settings() -> SearchSettings {
        SearchSettings {
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

    /// P(wait > t) in an M/D/1 queue (Poisson arrivals at `lambda`, one server, service time `d`), from Erlang's
    /// waiting-time distribution: P(W <= t) = (1 - ρ) Σ_{k=0}^{⌊t/d⌋} (λ(kd - t))^k / k! · e^{-λ(kd - t)}.
    fn md1_wait_exceeds(lambda: f64, d: f64, t: f64) -> f64 {
        let (mut sum, mut factorial) = (0.0, 1.0);
        for k in 0..=(t / d + 1e-9).floor() as i32 {
            factorial *= f64::from(k.max(1));
            let x = lambda * (f64::from(k) * d - t);
            sum += x.powi(k) / factorial * (-x).exp();
        }
        1.0 - (1.0 - lambda * d) * sum
    }

    /// The arrival rate at which an M/D/1 server's sojourn time (wait + `d`) has its `quantile` at `slo`.
    fn md1_rate_at_slo(d: f64, slo: f64, quantile: f64) -> f64 {
        let (mut lo, mut hi) = (0.0, 1.0 / d);
        for _ in 0..60 {
            let mid = (lo + hi) / 2.0;
            if md1_wait_exceeds(mid, d, slo - d) > 1.0 - quantile {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        lo
    }

    /// A server of exactly 100 requests/s (10 ms each) behind a p99 <= 50 ms SLO. With evenly spaced arrivals
    /// nothing queues below 100 requests/s and the queue grows without bound above it, so the saturation point is
    /// 100: the probe, spread and narrowing must find it within 10%. With Poisson arrivals it is an M/D/1 queue,
    /// whose steady-state p99 sojourn reaches 50 ms at a rate computed here (about 56 req/s). A step's p99 is
    /// read off a finite window, and long waits come in clusters (one burst delays every request behind it), so
    /// short steps fail well below that rate (10 s steps: about 39); 120 s steps hold some 6,000 latencies and
    /// read the p99 off ~60 of them. Tolerance 15%: the exceedance count's spread (clusters of a few, so about
    /// ±30% of 60) moves the rate where it crosses 1% by about ±4% (the exceedance chance grows from 0.4% at 50
    /// req/s to 1.7% at 60), the offered rate is a Poisson count (±1.5%), and the search stops at 5% resolution.
    /// The knee — where achieved stops following offered — is the server's rate for both, within 10%. Paused
    /// tokio time makes every run exact and repeatable.
    #[tokio::test(start_paused = true)]
    async fn sweep_finds_the_saturation_point_of_a_fixed_rate_server() {
        let (service, slo) = (0.010, 0.050);
        // The formula's anchor: an arrival waits at all with probability ρ.
        assert!((md1_wait_exceeds(50.0, service, 0.0) - 0.5).abs() < 1e-12);
        let poisson = md1_rate_at_slo(service, slo, 0.99);
        assert!((50.0..62.0).contains(&poisson), "{poisson}");
        for (arrivals, step_s, lo, hi) in [
            (Arrivals::Uniform, 10.0, 90.0, 100.5),
            (Arrivals::Poisson, 120.0, 0.85 * poisson, 1.15 * poisson),
        ] {
            let workload = online(arrivals.clone());
            let progress = MultiProgress::with_draw_target(ProgressDrawTarget::hidden());
            let runner = Runner {
                workload: &workload,
                progress: &progress,
                max_dispatch_delay_ms: 5.0,
                kill_replica_at_s: None,
            };
            let target: Arc<dyn Target> = Arc::new(FixedRate {
                service: Duration::from_secs_f64(service),
                free_at: std::sync::Mutex::new(tokio::time::Instant::now()),
            });
            let times = StepTimes {
                step_s,
                warmup_s: 2.0,
                probe_s: 5.0,
            };
            let (steps, end) = runner
                .search(&target, &settings(), &times, &|_| {})
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
