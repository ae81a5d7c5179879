//! Results: `results/<run-id>/result.json` (versioned: configuration, knobs, machine, git revision, every step's
//! metrics and HDR histograms) and `summary.csv` (one row per step and class). [`read`] reads this version and
//! says clearly why it cannot read another.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::knobs::Knobs;
use crate::search::Finding;
use crate::step::StepResult;

/// Bump on any change a reader of the previous version would misread; teach [`read`] to convert the old one.
pub const SCHEMA_VERSION: u32 = 1;

#[derive(Debug, thiserror::Error)]
pub enum ResultsError {
    #[error("reading {path}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: not a results file: {message}")]
    Invalid { path: PathBuf, message: String },
    #[error(
        "{path}: schema version {found} was written by a newer harness; this one reads versions up to \
         {SCHEMA_VERSION} (rebuild from a newer checkout)"
    )]
    Newer { path: PathBuf, found: u64 },
    #[error("writing {path}: {message}")]
    Write { path: PathBuf, message: String },
}

/// One run of `bench sweep` or `bench replay`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunResult {
    pub schema_version: u32,
    pub run_id: String,
    /// `sweep` or `replay`.
    pub command: String,
    /// The command line, as typed.
    pub args: Vec<String>,
    pub started_at: String,
    pub wall_s: f64,
    pub harness_version: String,
    pub git: Option<Git>,
    pub machine: Machine,
    pub target: String,
    pub model: Option<String>,
    pub workload: WorkloadInfo,
    /// Step length, warm-up, search plan and the other settings of the run.
    pub settings: Value,
    /// Knob names swept (`--axis`).
    pub axes: Vec<String>,
    pub configs: Vec<ConfigResult>,
    /// The configuration with the highest throughput within the SLO, when there are several.
    pub best: Option<Best>,
    /// How busy the host was over the run (other processes' CPU, steal, load, frequency); absent from results
    /// written before it was recorded.
    #[serde(default)]
    pub host: Option<crate::gate::host::HostSample>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Git {
    pub revision: String,
    /// Tracked files differed from the revision.
    pub dirty: bool,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Machine {
    pub cpu: String,
    pub cores: usize,
    pub memory_gib: f64,
    pub os: String,
    pub kernel: String,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WorkloadInfo {
    pub kind: String,
    pub seed: u64,
    pub classes: Vec<ClassInfo>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ClassInfo {
    pub name: String,
    pub corpus: String,
    /// Arrivals (open loop) or clients and request size (closed loop).
    pub load: String,
    pub slo: crate::workload::Slo,
    pub timeout_s: f64,
    /// The `prompt_name` its requests were sent with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_name: Option<String>,
}

/// One knob combination: its engine, its steps, and what was found.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ConfigResult {
    pub label: String,
    pub knobs: Knobs,
    /// The full engine configuration run (absent for an external target).
    pub engine: Option<Value>,
    pub replicas: usize,
    pub steps: Vec<StepResult>,
    pub saturation: Finding,
    pub knee: Finding,
    /// Requests/s (rate mode) or tokens/s (concurrency mode) at the best step within the SLO.
    pub throughput_within_slo: Option<f64>,
    /// Why the search stopped.
    pub search_end: String,
    pub wall_s: f64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Best {
    pub label: String,
    pub throughput_within_slo: f64,
    pub unit: String,
}

impl Machine {
    /// What this machine is, from /proc and /etc/os-release where they exist.
    pub fn detect() -> Machine {
        let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
        let field = |text: &str, key: &str| {
            text.lines().find_map(|l| {
                l.strip_prefix(key)?
                    .trim_start()
                    .strip_prefix(['=', ':'])?
                    .trim()
                    .to_owned()
                    .into()
            })
        };
        let cpu = field(&read("/proc/cpuinfo"), "model name")
            .unwrap_or_else(|| std::env::consts::ARCH.into());
        let os = field(&read("/etc/os-release"), "PRETTY_NAME")
            .map(|s: String| s.trim_matches('"').to_owned())
            .unwrap_or_else(|| std::env::consts::OS.into());
        let kib: f64 = field(&read("/proc/meminfo"), "MemTotal")
            .and_then(|s: String| s.trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0.0);
        Machine {
            cpu,
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            memory_gib: (kib / (1024.0 * 1024.0) * 10.0).round() / 10.0,
            os,
            kernel: read("/proc/sys/kernel/osrelease").trim().to_owned(),
        }
    }
}

impl Git {
    /// The checkout's revision, when git and a repository are there.
    pub fn detect() -> Option<Git> {
        let git = |args: &[&str]| {
            let out = std::process::Command::new("git")
                .args(args)
                .current_dir(env!("CARGO_MANIFEST_DIR"))
                .output()
                .ok()?;
            out.status
                .success()
                .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
        };
        Some(Git {
            revision: git(&["rev-parse", "HEAD"])?,
            dirty: !git(&["status", "--porcelain", "--untracked-files=no"])?.is_empty(),
        })
    }
}

/// `20250101-120000-online`: sortable, from the UTC start time.
pub fn run_id(started: std::time::SystemTime, what: &str) -> String {
    let stamp = humantime::format_rfc3339_seconds(started).to_string();
    let digits: String = stamp.chars().filter(char::is_ascii_digit).collect();
    format!(
        "{}-{}-{what}",
        &digits[..8.min(digits.len())],
        &digits[8.min(digits.len())..]
    )
}

/// Writes `dir/result.json` and `dir/summary.csv`.
pub fn write(dir: &Path, result: &RunResult) -> Result<(), ResultsError> {
    let fail = |path: &Path, message: String| ResultsError::Write {
        path: path.to_owned(),
        message,
    };
    std::fs::create_dir_all(dir).map_err(|e| fail(dir, e.to_string()))?;
    let json = dir.join("result.json");
    let text = serde_json::to_string_pretty(result).map_err(|e| fail(&json, e.to_string()))?;
    std::fs::write(&json, text).map_err(|e| fail(&json, e.to_string()))?;
    let csv_path = dir.join("summary.csv");
    let mut w = csv::Writer::from_path(&csv_path).map_err(|e| fail(&csv_path, e.to_string()))?;
    let (headers, rows) = table(result);
    w.write_record(&headers)
        .map_err(|e| fail(&csv_path, e.to_string()))?;
    for row in rows {
        w.write_record(&row)
            .map_err(|e| fail(&csv_path, e.to_string()))?;
    }
    w.flush().map_err(|e| fail(&csv_path, e.to_string()))
}

/// Reads a `result.json` of this schema version (the only one so far), or says why not.
pub fn read(path: &Path) -> Result<RunResult, ResultsError> {
    let invalid = |message: String| ResultsError::Invalid {
        path: path.to_owned(),
        message,
    };
    let text = std::fs::read_to_string(path).map_err(|source| ResultsError::Io {
        path: path.to_owned(),
        source,
    })?;
    let value: Value = serde_json::from_str(&text).map_err(|e| invalid(e.to_string()))?;
    match value.get("schema_version").and_then(Value::as_u64) {
        None => Err(invalid("no `schema_version`".into())),
        Some(v) if v > SCHEMA_VERSION as u64 => Err(ResultsError::Newer {
            path: path.to_owned(),
            found: v,
        }),
        Some(_) => {
            let result: RunResult =
                serde_json::from_value(value).map_err(|e| invalid(e.to_string()))?;
            check_classes(&result).map_err(invalid)?;
            Ok(result)
        }
    }
}

/// Every step holds one entry per workload class, the stepped one first: the summary and the report index them.
fn check_classes(result: &RunResult) -> Result<(), String> {
    let want = result.workload.classes.len();
    if want == 0 {
        return Err("the workload lists no classes".into());
    }
    for config in &result.configs {
        for step in &config.steps {
            if step.classes.len() != want {
                return Err(format!(
                    "configuration `{}` step {} has {} classes; the workload has {want}",
                    config.label,
                    step.index,
                    step.classes.len()
                ));
            }
        }
    }
    Ok(())
}

/// The summary's columns, and whether the terminal table (narrower than the CSV and the page) shows each.
pub const COLUMNS: [(&str, bool); 26] = [
    ("config", true),
    ("step", true),
    ("phase", false),
    ("level", true),
    ("class", true),
    ("offered/s", true),
    ("achieved/s", true),
    ("inputs/s", false),
    ("tokens/s", true),
    ("p50 ms", true),
    ("p90 ms", false),
    ("p99 ms", true),
    ("p99.9 ms", false),
    ("max ms", true),
    ("goodput/s", true),
    ("queue p50 ms", false),
    ("inference p50 ms", false),
    ("fill", true),
    // Of the batches, the share whose forward pass replayed a captured plan.
    ("plan replays", false),
    ("refused", true),
    ("refusal p99 ms", false),
    ("errors", true),
    ("timeouts", true),
    ("stable", true),
    ("behind", true),
    ("SLO", true),
];

/// The per-step summary: one row per configuration, step and class. The CSV, the terminal table and the HTML
/// page all show these columns.
pub fn table(result: &RunResult) -> (Vec<String>, Vec<Vec<String>>) {
    let headers = COLUMNS.map(|(name, _)| name.to_owned()).to_vec();
    let mut rows = Vec::new();
    for config in &result.configs {
        for step in &config.steps {
            for c in &step.classes {
                let level = match step.level {
                    crate::workload::Level::Rate(r) => format!("{r:.1} req/s"),
                    crate::workload::Level::Concurrency(n) => crate::count(n, "client"),
                };
                let phase = step.phase.split(':').next().unwrap_or("").to_owned();
                rows.push(vec![
                    config.label.clone(),
                    step.index.to_string(),
                    phase,
                    level,
                    c.class.clone(),
                    format!("{:.1}", c.offered_rps),
                    format!("{:.1}", c.achieved_rps),
                    format!("{:.1}", c.inputs_per_s),
                    format!("{:.0}", c.tokens_per_s),
                    format!("{:.1}", c.latency_ms.p50),
                    format!("{:.1}", c.latency_ms.p90),
                    format!("{:.1}", c.latency_ms.p99),
                    format!("{:.1}", c.latency_ms.p999),
                    format!("{:.1}", c.latency_ms.max),
                    format!("{:.1}", c.goodput_rps),
                    c.queue_ms.map_or("-".into(), |q| format!("{:.1}", q.p50)),
                    c.inference_ms
                        .map_or("-".into(), |q| format!("{:.1}", q.p50)),
                    step.batches
                        .map_or("-".into(), |b| format!("{:.2}", b.mean_fill)),
                    step.batches
                        .map_or("-".into(), |b| format!("{:.0}%", 100.0 * b.replayed)),
                    c.refused.to_string(),
                    c.refusal_ms.map_or("-".into(), |q| format!("{:.2}", q.p99)),
                    c.errors.to_string(),
                    c.timeouts.to_string(),
                    if c.stability.stable { "yes" } else { "no" }.into(),
                    if step.behind { "BEHIND" } else { "" }.into(),
                    // A probe measures throughput; its latency is not meant to meet anything.
                    match (step.probe, c.verdict.pass) {
                        (true, _) => "probe",
                        (false, true) => "pass",
                        (false, false) => "FAIL",
                    }
                    .into(),
                ]);
            }
        }
    }
    (headers, rows)
}

/// One row per configuration: what was found, for comparing knob values at a glance.
pub fn config_table(result: &RunResult) -> (Vec<String>, Vec<Vec<String>>) {
    let rate_mode = result
        .configs
        .iter()
        .flat_map(|c| c.steps.iter().find(|s| !s.probe))
        .any(|s| matches!(s.level, crate::workload::Level::Rate(_)));
    let unit = if rate_mode { "req/s" } else { "tokens/s" };
    let level = if rate_mode { "req/s" } else { "clients" };
    let headers = vec![
        "config".to_owned(),
        format!("saturation point ({level})"),
        format!("knee ({level})"),
        format!("best within SLO ({unit})"),
        format!("peak ({unit})"),
        "steps".to_owned(),
        "time s".to_owned(),
    ];
    let rows = result
        .configs
        .iter()
        .map(|c| {
            let peak = c
                .steps
                .iter()
                .map(StepResult::throughput)
                .fold(0.0, f64::max);
            vec![
                c.label.clone(),
                c.saturation.show(""),
                c.knee.show(""),
                c.throughput_within_slo
                    .map_or("-".into(), |t| format!("{t:.1}")),
                format!("{peak:.1}"),
                c.steps.len().to_string(),
                format!("{:.0}", c.wall_s),
            ]
        })
        .collect();
    (headers, rows)
}

/// A warning when the generator fell behind in some steps (it was starved of CPU, or the load was more than it
/// can send): those steps offered their load later than planned, and their latencies include the delay.
pub fn behind_warning(result: &RunResult) -> Option<String> {
    let behind: Vec<(&str, &StepResult)> = result
        .configs
        .iter()
        .flat_map(|c| {
            c.steps
                .iter()
                .filter(|s| s.behind)
                .map(move |s| (c.label.as_str(), s))
        })
        .collect();
    let worst = behind
        .iter()
        .flat_map(|(_, s)| s.classes.iter().map(|c| c.dispatch_delay_ms.max))
        .fold(0.0, f64::max);
    (!behind.is_empty()).then(|| {
        let steps: Vec<String> = behind.iter().map(|(c, s)| format!("{c} step {}", s.index)).collect();
        format!(
            "WARNING: the generator fell behind its schedule in {} step(s) ({}; dispatch delay up to {:.0} ms): the \
             load went out later than planned and those latencies include the delay. On a shared or niced machine \
             this is the harness being starved of CPU; rerun those levels on a quieter machine.",
            behind.len(),
            steps.join(", "),
            worst
        )
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::generator::{Outcome, Sample};
    use crate::step::{analyze, ClassSpec, Window};
    use crate::workload::{Level, Slo};

    const SLO: Slo = Slo {
        quantile: 0.99,
        latency_ms: 50.0,
        max_error_rate: 0.01,
    };
    const CLASSES: [(&str, bool); 2] = [("online", false), ("batch", true)];

    /// One second of a mixed step: `online` requests at `rate`/s (the probe's clients send as fast as answered),
    /// two batch requests of 500 tokens.
    fn step(index: usize, probe: bool, level: Level) -> StepResult {
        step_taking(index, probe, level, 0.01)
    }

    /// [`step`] whose requests take `latency` seconds each.
    fn step_taking(index: usize, probe: bool, level: Level, latency: f64) -> StepResult {
        let n = level.value() as usize;
        let at = |class, t: f64, tokens| Sample {
            class,
            scheduled: t,
            sent: t,
            done: t + latency,
            outcome: Outcome::Ok,
            inputs: 1,
            tokens,
            queue: None,
            inference: None,
        };
        let samples: Vec<Sample> = (0..n)
            .map(|k| at(0, k as f64 / n as f64, 10))
            .chain([at(1, 0.1, 500), at(1, 0.5, 500)])
            .collect();
        let specs = CLASSES.map(|(name, closed_loop)| ClassSpec {
            name,
            slo: SLO,
            closed_loop,
        });
        let window = Window {
            warmup_s: 0.0,
            end_s: 1.0,
            max_dispatch_delay_ms: 5.0,
            one_pass: false,
        };
        let (classes, batches, behind) = analyze(&samples, &specs, &window, None);
        StepResult {
            index,
            phase: String::new(),
            probe,
            level,
            duration_s: 1.0,
            warmup_s: 0.0,
            wall_s: 1.0,
            pass: classes.iter().all(|c| c.verdict.pass),
            classes,
            batches,
            behind,
            errors: Vec::new(),
            rss_mib: Vec::new(),
            log_mib: Vec::new(),
            fault: None,
        }
    }

    #[test]
    fn more_clients_add_queueing_is_not_concluded_from_one_step() {
        let one = crate::search::knee(&[step(0, false, Level::Concurrency(2))]);
        assert_eq!(one.value, Some(2.0));
        assert!(one.lower_bound, "nothing above it was tried");
        assert!(!one.how.contains("add queueing"), "{}", one.how);
        assert!(one.how.contains("no step had more clients"), "{}", one.how);
        assert_eq!(one.show("clients"), ">= 2 clients");
    }

    #[test]
    fn a_short_replay_all_answered_did_not_fall_behind() {
        // One second of 50 req/s, each answered 300 ms later: the last third lands after the window.
        let replay = step_taking(0, false, Level::Rate(50.0), 0.3);
        let m = replay.main();
        assert!(
            m.achieved_rps < 0.95 * m.offered_rps,
            "the window misses answers"
        );
        let knee = crate::search::knee(std::slice::from_ref(&replay));
        assert_eq!(knee.value, Some(m.offered_rps), "{}", knee.how);
        assert!(!knee.how.contains("fell behind"), "{}", knee.how);
    }

    /// A step whose window held no request of the stepped class (slow requests at a low rate: a reranker's) fails
    /// its verdict, but is no level that misses the SLO: the findings come from the steps that measured.
    #[test]
    fn a_step_with_no_requests_in_its_window_decides_no_finding() {
        let steps = [
            step(0, false, Level::Rate(0.0)),
            step(1, false, Level::Rate(20.0)),
        ];
        assert!(!steps[0].pass && !steps[0].measured());
        assert!(steps[1].pass && steps[1].measured());
        let saturation = crate::search::saturation(&steps);
        assert_eq!(saturation.value, Some(20.0), "{}", saturation.how);
        assert!(saturation.lower_bound, "{}", saturation.how);
        assert_eq!(crate::search::knee(&steps).value, Some(20.0));
    }

    fn config(label: &str, steps: Vec<StepResult>) -> ConfigResult {
        ConfigResult {
            label: label.into(),
            knobs: Knobs::new(),
            engine: None,
            replicas: 1,
            saturation: crate::search::saturation(&steps),
            knee: crate::search::knee(&steps),
            throughput_within_slo: crate::search::throughput_within_slo(&steps),
            steps,
            search_end: String::new(),
            wall_s: 1.0,
        }
    }

    /// A mixed-workload sweep of two configurations: `a`'s search stopped after its probe (as when the probe
    /// gets no answers), `b` measured three rates.
    pub(crate) fn mixed_sweep() -> RunResult {
        let probe = |index| step(index, true, Level::Concurrency(64));
        RunResult {
            schema_version: SCHEMA_VERSION,
            run_id: "test".into(),
            command: "sweep".into(),
            args: Vec::new(),
            started_at: String::new(),
            wall_s: 2.0,
            harness_version: String::new(),
            git: None,
            machine: Machine {
                cpu: "test".into(),
                cores: 1,
                memory_gib: 1.0,
                os: "test".into(),
                kernel: "test".into(),
            },
            target: "in-process".into(),
            model: None,
            workload: WorkloadInfo {
                kind: "mixed".into(),
                seed: 1,
                classes: CLASSES
                    .map(|(name, _)| ClassInfo {
                        name: name.into(),
                        corpus: String::new(),
                        load: String::new(),
                        slo: SLO,
                        timeout_s: 1.0,
                        prompt_name: None,
                    })
                    .to_vec(),
            },
            settings: Value::Null,
            axes: vec!["replicas".into()],
            configs: vec![
                config("a", vec![probe(0)]),
                config(
                    "b",
                    std::iter::once(probe(0))
                        .chain((1..4).map(|i| step(i, false, Level::Rate(10.0 * i as f64))))
                        .collect(),
                ),
            ],
            best: None,
            host: None,
        }
    }

    #[test]
    fn reader_refuses_steps_without_classes() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), &mixed_sweep()).unwrap();
        let p = dir.path().join("result.json");
        assert_eq!(read(&p).unwrap().configs.len(), 2);
        let mut v: Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
        v["configs"][1]["steps"][2]["classes"] = Value::Array(Vec::new());
        std::fs::write(&p, v.to_string()).unwrap();
        let e = read(&p).unwrap_err().to_string();
        assert!(
            e.contains("configuration `b` step 2 has 0 classes; the workload has 2"),
            "{e}"
        );
    }

    #[test]
    fn reader_refuses_newer_and_foreign_files() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("result.json");
        std::fs::write(&p, r#"{"schema_version": 99}"#).unwrap();
        let e = read(&p).unwrap_err().to_string();
        assert!(
            e.contains("version 99") && e.contains("newer harness"),
            "{e}"
        );
        std::fs::write(&p, r#"{"rows": []}"#).unwrap();
        assert!(read(&p)
            .unwrap_err()
            .to_string()
            .contains("no `schema_version`"));
    }

    #[test]
    fn run_ids_sort_by_time() {
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000);
        assert_eq!(run_id(t, "online"), "20231114-221320-online");
    }
}
