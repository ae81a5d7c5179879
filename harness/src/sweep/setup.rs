//! What a run holds fixed: the target kind, the model, the workload built from the command line, the knob
//! combinations over the engine settings given.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use indicatif::{MultiProgress, ProgressDrawTarget};

use super::args::Common;
use super::run::Runner;
use crate::arrivals::Arrivals;
use crate::knobs::{self, Knobs};
use crate::target::{self, Api, EngineSetup, Target, TargetKind};
use crate::workload::{repo_path, Class, Corpus, Drive, Rerank, Slo, Workload, WorkloadKind};

/// Everything a run holds fixed.
pub(crate) struct Setup {
    pub(crate) common_args: Vec<String>,
    pub(crate) kind: TargetKind,
    pub(crate) model_dir: Option<PathBuf>,
    pub(crate) model_name: String,
    pub(crate) workload: Workload,
    /// The engine settings the knobs apply to.
    pub(crate) base: engine::EngineConfig,
    pub(crate) combos: Vec<Knobs>,
    pub(crate) axes: Vec<String>,
    pub(crate) progress: MultiProgress,
}

impl Setup {
    pub(crate) fn new(c: &Common, axes: &[String], corpus_pass: bool) -> Result<Setup> {
        let kind = TargetKind::parse(&c.target, c.api)?;
        let external = matches!(kind, TargetKind::Url { .. });
        if external && (!c.sets.is_empty() || !axes.is_empty() || c.engine.any_setting()) {
            bail!("engine settings (--set, --axis, --config, engine flags) cannot be set on an external target; they configure an engine the harness starts");
        }
        let base = c.engine.config()?;
        let combos = knobs::combinations(&c.sets, axes, &base)?;
        let model_dir = if external {
            None
        } else {
            Some(c.engine.model_dir().context("fetching the default model")?)
        };
        // The workload's own errors first: they are the user's to fix whatever the model.
        let workload = workload(c, corpus_pass)?;
        if let Some(dir) = &model_dir {
            let http = match kind {
                TargetKind::Serve { api } => Some(api),
                _ => None,
            };
            // Each combination's pooling (a knob may set it): what it makes of the model decides its route.
            let mut poolings = Vec::new();
            for set in &combos {
                let pooling = knobs::apply(set, base.clone())?.pooling;
                if !poolings.contains(&pooling) {
                    poolings.push(pooling);
                }
            }
            if poolings.is_empty() {
                poolings.push(base.pooling);
            }
            // A directory that cannot be read is reported when the engine loads it, after the run's own settings.
            if let Ok(opened) = engine::model::ModelDir::open(dir) {
                check_prompt_names(dir, &opened, c)?;
                for pooling in poolings {
                    if let Ok(model) = opened.clone().pooled_by(pooling) {
                        check_model_kind(dir, &model, c.workload, http)?;
                    }
                }
            }
        }
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
            workload,
            base,
            combos,
            axes: knobs::axis_names(axes),
            progress,
        })
    }

    pub(super) fn runner<'a>(&'a self, c: &Common) -> Runner<'a> {
        Runner {
            workload: &self.workload,
            progress: &self.progress,
            max_dispatch_delay_ms: c.max_dispatch_delay_ms,
            kill_replica_at_s: c.kill_replica_at_s,
        }
    }

    /// A line above the progress bars (or straight to stderr when they are hidden).
    pub(crate) fn say(&self, line: String) {
        if self.progress.is_hidden() {
            eprintln!("{line}");
        } else {
            let _ = self.progress.println(line);
        }
    }

    pub(crate) fn start_target(
        &self,
        knobs: &Knobs,
    ) -> Result<(Arc<dyn Target>, Option<serde_json::Value>, usize)> {
        let config = knobs::apply(knobs, self.base.clone())?;
        let replicas = config.replicas;
        let say = |line| self.say(line);
        let setup = self.model_dir.as_deref().map(|dir| EngineSetup {
            model_dir: dir,
            config: config.clone(),
            say: &say,
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
pub(crate) fn positive(values: &[(&str, f64)]) -> Result<()> {
    match values.iter().find(|(_, v)| !(v.is_finite() && *v > 0.0)) {
        Some((name, v)) => bail!("{name} must be a positive number, not {v}"),
        None => Ok(()),
    }
}

/// The warm-up is seconds from 0 up to, not including, the step's end (`step`, a flag and its value, or what
/// ends a batch pass); the generator turns it into a Duration.
pub(crate) fn check_warmup(warmup_s: f64, step_s: f64, step: &str) -> Result<()> {
    if !(0.0..step_s).contains(&warmup_s) || Duration::try_from_secs_f64(warmup_s).is_err() {
        bail!("--warmup-s ({warmup_s:?}) must be at least 0 and shorter than {step}");
    }
    Ok(())
}

/// `--kill-replica-at-s` needs replica processes to kill, and a fault inside every step (`step_s`, the shortest
/// step's length, `step` naming it): checked before any target starts, not when the first step ends.
pub(crate) fn check_fault(
    kill_replica_at_s: Option<f64>,
    kind: &TargetKind,
    step_s: f64,
    step: &str,
) -> Result<()> {
    let Some(at_s) = kill_replica_at_s else {
        return Ok(());
    };
    if *kind != TargetKind::Processes {
        bail!("--kill-replica-at-s kills a replica process: it needs --target processes");
    }
    if !(at_s.is_finite() && at_s > 0.0 && at_s < step_s) {
        bail!("--kill-replica-at-s ({at_s:?}) must be above 0 and shorter than {step}");
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

/// The prompt names a run sends must be the model's (its prompts, or a Router's routes): each request would
/// otherwise be refused.
fn check_prompt_names(
    dir: &std::path::Path,
    model: &engine::model::ModelDir,
    c: &Common,
) -> Result<()> {
    let routes = model.routes.as_ref().map(engine::model::Routes::names);
    let known: Vec<String> = model
        .prompts
        .iter()
        .map(|(name, _)| name.clone())
        .chain(routes.into_iter().flatten())
        .collect();
    for (flag, name) in [
        ("--query-prompt-name", &c.query_prompt_name),
        ("--passage-prompt-name", &c.passage_prompt_name),
    ] {
        match name {
            Some(name) if !name.is_empty() && !known.contains(name) => bail!(
                "{flag} {name}: {} has no prompt of that name (it has: {})",
                dir.display(),
                if known.is_empty() {
                    "none".into()
                } else {
                    known.join(", ")
                }
            ),
            _ => {}
        }
    }
    Ok(())
}

/// A rerank workload needs a cross-encoder, the others an embedding model: the wrong kind would measure pairs
/// embedded, or scores read as embeddings, not the traffic asked for.
fn check_model_kind(
    dir: &std::path::Path,
    model: &engine::model::ModelDir,
    workload: WorkloadKind,
    http: Option<Api>,
) -> Result<()> {
    // Over HTTP a sparse model and a multi-vector one have their own routes, and only they have; in-process a
    // sparse model's vector is embedded whole, a multi-vector model's vectors per token.
    if workload != WorkloadKind::Rerank && model.classifier.is_none() {
        let (sparse, multi) = (model.sparse.is_some(), model.multi_vector.is_some());
        match (sparse, multi, http) {
            (true, _, Some(api)) if api != Api::TeiSparse => bail!(
                "{} is a sparse (SPLADE) model, served by /embed_sparse: run it with --api tei-sparse",
                dir.display()
            ),
            (false, _, Some(Api::TeiSparse)) => bail!(
                "--api tei-sparse needs a sparse (SPLADE) model, and {} is not one",
                dir.display()
            ),
            (_, true, Some(api)) if api != Api::TeiMulti => bail!(
                "{} is a multi-vector (ColBERT) model, served by /embed_multi: run it with --api tei-multi",
                dir.display()
            ),
            (_, false, Some(Api::TeiMulti)) => bail!(
                "--api tei-multi needs a multi-vector (ColBERT) model, and {} is not one",
                dir.display()
            ),
            _ => {}
        }
    }
    let labels = model.classifier.as_ref().map(|c| c.labels.len());
    match (workload == WorkloadKind::Rerank, labels) {
        // A multi-vector model ranks by its MaxSim.
        (true, None) if model.multi_vector.is_some() => Ok(()),
        (true, None) => bail!(
            "--workload rerank needs a cross-encoder (a *ForSequenceClassification checkpoint) or a multi-vector \
             (ColBERT) model, and {} is an embedding model",
            dir.display()
        ),
        (true, Some(n)) if n != 1 => bail!(
            "--workload rerank needs a cross-encoder of one label (its relevance), and {} classifies into {n}",
            dir.display()
        ),
        (false, Some(_)) => bail!(
            "{} is a cross-encoder (it scores pairs of texts): run it with --workload rerank",
            dir.display()
        ),
        _ => Ok(()),
    }
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
    let online = |rerank: Option<Rerank>| -> Result<Class> {
        Ok(Class {
            name: if rerank.is_some() { "rerank" } else { "online" }.into(),
            corpus: load_corpus(&c.queries, c.corpus_limit)?,
            drive: Drive::Open {
                arrivals: Arrivals::parse(&c.arrivals)
                    .with_context(|| format!("--arrivals {}", c.arrivals))?,
                match_lengths: c.match_lengths,
            },
            slo: slo(c.slo_ms),
            priority: engine::Priority::Online,
            timeout: timeout(c.slo_ms)?,
            rerank,
            prompt_name: c.query_prompt_name.as_deref().map(Arc::from),
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
            priority: engine::Priority::Batch,
            timeout: timeout(c.batch_slo_ms)?,
            rerank: None,
            prompt_name: c.passage_prompt_name.as_deref().map(Arc::from),
        })
    };
    // A prompt for a class the workload does not have would be silently unused.
    let unused = match c.workload {
        WorkloadKind::Online => c
            .passage_prompt_name
            .as_ref()
            .map(|_| "--passage-prompt-name"),
        WorkloadKind::Batch => c.query_prompt_name.as_ref().map(|_| "--query-prompt-name"),
        WorkloadKind::Mixed | WorkloadKind::Rerank => None,
    };
    if let Some(flag) = unused {
        bail!(
            "{flag} names the prompt of a class --workload {} does not have",
            c.workload
        );
    }
    let classes = match c.workload {
        WorkloadKind::Online => vec![online(None)?],
        WorkloadKind::Rerank => {
            if c.query_prompt_name.is_some() || c.passage_prompt_name.is_some() {
                bail!("--workload rerank sends pairs of texts, which take no prompt: leave out --*-prompt-name");
            }
            if c.rerank_passages == 0 {
                bail!("--rerank-passages must be at least 1");
            }
            vec![online(Some(Rerank {
                passages: load_corpus(&c.passages, c.corpus_limit)?,
                per_request: c.rerank_passages,
            }))?]
        }
        WorkloadKind::Batch => vec![batch(1)?],
        WorkloadKind::Mixed => vec![online(None)?, batch(c.batch_concurrency.max(1))?],
    };
    Ok(Workload {
        kind: c.workload,
        classes,
        seed: c.seed,
        corpus_pass,
    })
}
