//! `bench gate`: CI performance gates. `counts` compares deterministic instruction counts under valgrind with
//! committed baselines; `timing` runs a same-run, interleaved A/B comparison of two binaries (or two knob
//! settings) with a confidence interval per benchmark. Exit status: 0 pass, 1 regression, 2 could not measure
//! (or could not decide). Each run writes `report.md` (a pull-request comment) and `gate.json` to
//! `results/<run-id>/`.

pub mod counts;
pub mod host;
pub mod stats;
pub mod timing;
mod timing_build;
pub mod workloads;

use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use serde::Serialize;

use stats::Verdict;

#[derive(Args, Debug)]
pub struct GateArgs {
    #[command(subcommand)]
    pub command: GateCommand,
}

#[derive(Subcommand, Debug)]
pub enum GateCommand {
    /// Instruction counts (and simulated cache misses) under valgrind against results/baselines/counts.json.
    Counts(counts::CountsArgs),
    /// Interleaved A/B timing of short benchmarks against a git revision or a `bench` binary.
    Timing(timing::TimingArgs),
    /// Runs one counts workload N times (what `gate counts` runs under valgrind).
    #[command(hide = true)]
    Workload(counts::WorkloadArgs),
}

/// Exit status of a gate.
pub const PASS: i32 = 0;
pub const REGRESSION: i32 = 1;
pub const NOT_MEASURED: i32 = 2;

/// Runs a gate and returns its exit status; errors (nothing measured) are printed and give 2.
pub fn run(args: GateArgs) -> i32 {
    let outcome = match args.command {
        GateCommand::Counts(a) => counts::run(a),
        GateCommand::Timing(a) => timing::run(a),
        GateCommand::Workload(a) => counts::workload(a).map(|()| PASS),
    };
    match outcome {
        Ok(code) => code,
        Err(e) => {
            eprintln!("bench gate: could not measure: {e:#}");
            NOT_MEASURED
        }
    }
}

/// One benchmark's line of a gate's report.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    pub name: String,
    pub unit: String,
    pub baseline: String,
    pub candidate: String,
    /// Candidate over baseline, oriented so that above 1 is worse.
    pub ratio: Option<f64>,
    /// 95% interval of the ratio (timing), or none for an exact count.
    pub interval: Option<(f64, f64)>,
    pub verdict: Verdict,
    pub note: String,
}

/// The exit status of a set of verdicts: any failure is a regression; otherwise anything undecided is 2.
pub fn exit_code(rows: &[Row]) -> i32 {
    if rows.iter().any(|r| r.verdict == Verdict::Fail) {
        REGRESSION
    } else if rows.iter().any(|r| r.verdict == Verdict::Inconclusive) || rows.is_empty() {
        NOT_MEASURED
    } else {
        PASS
    }
}

/// The Markdown table of a gate, for a pull-request comment.
pub fn markdown(title: &str, preamble: &[String], rows: &[Row]) -> String {
    let mut s = format!("### {title}\n\n");
    for line in preamble {
        s.push_str(&format!("{line}\n"));
    }
    s.push_str("\n| benchmark | baseline | candidate | ratio | 95% interval | verdict | note |\n");
    s.push_str("|---|---:|---:|---:|---|---|---|\n");
    for r in rows {
        let ratio = r.ratio.map_or("—".into(), |x| format!("{x:.3}"));
        let interval = r
            .interval
            .map_or("exact".into(), |(lo, hi)| format!("[{lo:.3}, {hi:.3}]"));
        let verdict = match r.verdict {
            Verdict::Fail => "**FAIL**".to_owned(),
            v => v.as_str().to_owned(),
        };
        s.push_str(&format!(
            "| {} ({}) | {} | {} | {ratio} | {interval} | {verdict} | {} |\n",
            r.name,
            r.unit,
            r.baseline,
            r.candidate,
            r.note.replace('|', "/")
        ));
    }
    let code = exit_code(rows);
    let overall = match code {
        PASS => "pass",
        REGRESSION => "regression",
        _ => "could not decide",
    };
    s.push_str(&format!("\nOverall: **{overall}** (exit {code}).\n"));
    s
}

/// Writes `report.md` and `gate.json` under `<results_dir>/<run_id>/` and returns the folder.
pub fn write_outputs(
    results_dir: &Path,
    run_id: &str,
    markdown: &str,
    json: &serde_json::Value,
) -> anyhow::Result<PathBuf> {
    use anyhow::Context;
    let dir = results_dir.join(run_id);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    std::fs::write(dir.join("report.md"), markdown)
        .with_context(|| format!("writing {}", dir.join("report.md").display()))?;
    let text = serde_json::to_string_pretty(json)?;
    std::fs::write(dir.join("gate.json"), text + "\n")
        .with_context(|| format!("writing {}", dir.join("gate.json").display()))?;
    Ok(dir)
}

/// A run id from the UTC time and the gate's name.
pub fn run_id(gate: &str) -> String {
    crate::results::run_id(std::time::SystemTime::now(), &format!("gate-{gate}"))
}

/// The repository root: the nearest folder at or above the current one holding `workloads/`, else the source
/// tree this binary was built from.
pub fn repo_root() -> PathBuf {
    if let Ok(cwd) = std::env::current_dir() {
        for dir in cwd.ancestors() {
            if dir.join("workloads").is_dir() && dir.join("Cargo.toml").is_file() {
                return dir.to_path_buf();
            }
        }
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `$EMBED_WORKBENCH_CACHE/gate`, or `~/.cache/embedding-workbench/gate`.
pub fn cache_dir() -> PathBuf {
    let base = std::env::var_os("EMBED_WORKBENCH_CACHE")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/embedding-workbench"))
        })
        .unwrap_or_else(|| std::env::temp_dir().join("embedding-workbench"));
    base.join("gate")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(v: Verdict) -> Row {
        Row {
            name: "x".into(),
            unit: "ms".into(),
            baseline: "1".into(),
            candidate: "1".into(),
            ratio: Some(1.0),
            interval: Some((0.99, 1.01)),
            verdict: v,
            note: "a | b".into(),
        }
    }

    #[test]
    fn exit_codes_follow_the_worst_verdict() {
        assert_eq!(exit_code(&[row(Verdict::Pass)]), PASS);
        assert_eq!(
            exit_code(&[row(Verdict::Pass), row(Verdict::Inconclusive)]),
            NOT_MEASURED
        );
        assert_eq!(
            exit_code(&[row(Verdict::Inconclusive), row(Verdict::Fail)]),
            REGRESSION
        );
        assert_eq!(exit_code(&[]), NOT_MEASURED);
        let md = markdown("t", &[], &[row(Verdict::Fail)]);
        assert!(md.contains("**FAIL**") && md.contains("a / b") && md.contains("exit 1"));
    }
}
