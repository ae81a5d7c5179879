//! `bench gate counts`: instruction counts under callgrind against committed baselines.
//!
//! Each workload runs in its own `valgrind --tool=callgrind --collect-atstart=no --toggle-collect=FN` process, so
//! only what happens inside FN counts: setup (reading vocabularies, writing and loading the tiny model, picking
//! texts) is never measured, and neither is anything on another thread. That is why callgrind and not cachegrind
//! with a 0-iteration run subtracted: the subtraction would leave in any setup noise that differs between the
//! two runs (allocation patterns, thread start-up), while the toggle leaves it out by construction. The cache
//! is simulated with a fixed geometry (not the host's), so the misses do not depend on the machine either.
//!
//! Valgrind hides AVX-512 from its guest, so the kernels run their AVX2 (or portable) path here: the counts gate
//! the scalar and AVX2 code, and the AVX-512 and bf16 kernels are gated by `bench gate timing`.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use clap::Args;
use serde::{Deserialize, Serialize};

use super::stats::Verdict;
use super::workloads::SPECS;
use super::Row;

/// The cache callgrind simulates: 32 KiB 8-way L1s and an 8 MiB 16-way last level, 64-byte lines.
const CACHE: [&str; 3] = ["--I1=32768,8,64", "--D1=32768,8,64", "--LL=8388608,16,64"];

#[derive(Args, Debug)]
pub struct CountsArgs {
    /// Baselines file.
    #[arg(long, default_value = "results/baselines/counts.json")]
    pub baselines: PathBuf,
    /// Rewrite the baselines from this run instead of comparing (needs --reason).
    #[arg(long, requires = "reason")]
    pub update: bool,
    /// Why the baselines change; recorded in their history.
    #[arg(long)]
    pub reason: Option<String>,
    /// Allowed growth of instructions per iteration for a workload without its own tolerance (0.02: +2%).
    #[arg(long, default_value_t = 0.02)]
    pub tolerance: f64,
    /// Run only workloads whose name contains this.
    #[arg(long)]
    pub only: Option<String>,
    /// The valgrind to run.
    #[arg(long, default_value = "valgrind")]
    pub valgrind: String,
    #[arg(long)]
    pub run_id: Option<String>,
    #[arg(long, default_value = "results")]
    pub results_dir: PathBuf,
}

#[derive(Args, Debug)]
pub struct WorkloadArgs {
    pub name: String,
    #[arg(long, default_value_t = 1)]
    pub iters: usize,
}

/// One workload's counts, per iteration.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Counts {
    pub iters: usize,
    /// Instructions executed.
    pub ir: f64,
    /// L1 data misses (reads and writes), simulated.
    pub d1_misses: f64,
    /// Last-level misses (instruction and data), simulated.
    pub ll_misses: f64,
    /// Allowed growth of `ir` for this workload; the file's default when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerance: Option<f64>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Update {
    pub at: String,
    pub reason: String,
    #[serde(default)]
    pub git: Option<String>,
}

/// results/baselines/counts.json.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Baselines {
    pub schema_version: u32,
    /// Facts that change the counts without any change to the code: compare only when they match.
    pub rustc: String,
    pub valgrind: String,
    pub target: String,
    /// The cargo profile the counted binary was built with (its folder under target/): inlining, and so the
    /// counts, differ between profiles. The baselines are made with `--profile gate` (one codegen unit).
    #[serde(default = "release_profile")]
    pub profile: String,
    pub cache: String,
    /// The kernels the forward ran under valgrind (AVX-512 is hidden there).
    pub kernels_under_valgrind: String,
    pub tolerance: f64,
    pub workloads: std::collections::BTreeMap<String, Counts>,
    /// Every rewrite, oldest first.
    pub history: Vec<Update>,
}

fn release_profile() -> String {
    "release".into()
}

/// The profile this binary was built with, from cargo's layout (`target/<profile>/bench`).
fn own_profile() -> String {
    std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.file_name()?.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "unknown".into())
}

pub fn workload(args: WorkloadArgs) -> Result<()> {
    super::workloads::run(&args.name, args.iters, &super::repo_root())
}

fn tool_version(cmd: &str, arg: &str) -> Result<String> {
    let out = Command::new(cmd)
        .arg(arg)
        .output()
        .with_context(|| format!("running `{cmd} {arg}` (is it installed?)"))?;
    if !out.status.success() {
        bail!("`{cmd} {arg}` failed");
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// Parses a callgrind output file's `events:` and `totals:` (or `summary:`) lines.
pub fn parse_callgrind(text: &str) -> Result<(f64, f64, f64)> {
    let line = |key: &str| text.lines().find_map(|l| l.strip_prefix(key));
    let events: Vec<&str> = line("events:")
        .context("no `events:` line")?
        .split_whitespace()
        .collect();
    let totals: Vec<f64> = line("totals:")
        .or_else(|| line("summary:"))
        .context("no `totals:` line")?
        .split_whitespace()
        .map(|x| x.parse::<f64>().context("a total is not a number"))
        .collect::<Result<_>>()?;
    let get = |name: &str| {
        events
            .iter()
            .position(|e| *e == name)
            .and_then(|i| totals.get(i).copied())
            .unwrap_or(0.0)
    };
    if get("Ir") <= 0.0 {
        bail!("no instructions were collected (is the toggle function's name right?)");
    }
    Ok((
        get("Ir"),
        get("D1mr") + get("D1mw"),
        get("ILmr") + get("DLmr") + get("DLmw"),
    ))
}

/// Runs workload `name` under callgrind; returns its counts per iteration and what it said on stderr.
fn measure(valgrind: &str, spec: &super::workloads::Spec, tmp: &Path) -> Result<(Counts, String)> {
    let exe = std::env::current_exe().context("locating this bench binary")?;
    let out_file = tmp.join(format!("callgrind.{}.out", spec.name.replace('/', "_")));
    let output = Command::new(valgrind)
        .args([
            "--tool=callgrind",
            "--collect-atstart=no",
            "--cache-sim=yes",
        ])
        .arg(format!("--toggle-collect={}", spec.toggle))
        .args(CACHE)
        .arg(format!("--callgrind-out-file={}", out_file.display()))
        .arg(&exe)
        .args(["gate", "workload", spec.name, "--iters"])
        .arg(spec.iters.to_string())
        .current_dir(super::repo_root())
        .output()
        .with_context(|| format!("running {valgrind}"))?;
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    if !output.status.success() {
        let tail: Vec<&str> = stderr.lines().rev().take(15).collect();
        bail!(
            "workload {} failed under valgrind:\n{}",
            spec.name,
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        );
    }
    let text = std::fs::read_to_string(&out_file)
        .with_context(|| format!("reading {}", out_file.display()))?;
    let (ir, d1, ll) = parse_callgrind(&text).with_context(|| format!("workload {}", spec.name))?;
    // The forward's toggle is its own function, so the warm-up run (outside `measured`) is collected too.
    let n = if spec.toggle == super::workloads::FORWARD {
        spec.iters + 1
    } else {
        spec.iters
    } as f64;
    let counts = Counts {
        iters: spec.iters,
        ir: (ir / n).round(),
        d1_misses: (d1 / n).round(),
        ll_misses: (ll / n).round(),
        tolerance: None,
    };
    Ok((counts, stderr))
}

pub fn run(args: CountsArgs) -> Result<i32> {
    let valgrind = tool_version(&args.valgrind, "--version")
        .context("valgrind is needed for the counts gate (apt-get install valgrind)")?;
    let rustc = tool_version("rustc", "--version").unwrap_or_else(|_| "unknown".into());
    let root = super::repo_root();
    let baselines_path = root.join(&args.baselines);
    let old: Option<Baselines> = match std::fs::read_to_string(&baselines_path) {
        Ok(text) => Some(
            serde_json::from_str(&text)
                .with_context(|| format!("reading {}", baselines_path.display()))?,
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(e).context(format!("reading {}", baselines_path.display())),
    };
    eprintln!(
        "gate counts: {rustc}, {valgrind}; AVX-512 is hidden under valgrind, so the kernels run their AVX2 or \
         portable path here (the SIMD kernels are gated by `bench gate timing`)"
    );
    let tmp = std::env::temp_dir().join(format!("bench-gate-counts-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
    let mut measured = std::collections::BTreeMap::new();
    let mut kernels = String::from("n/a");
    for spec in SPECS {
        if args.only.as_deref().is_some_and(|o| !spec.name.contains(o)) {
            continue;
        }
        let start = std::time::Instant::now();
        let result = measure(&args.valgrind, spec, &tmp);
        let (counts, stderr) = match result {
            Ok(r) => r,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&tmp);
                return Err(e);
            }
        };
        if let Some(k) = stderr
            .lines()
            .find_map(|l| l.strip_prefix("gate workload: "))
        {
            kernels = k.to_owned();
        }
        eprintln!(
            "  {:<28} {:>14.0} Ir/iter {:>10.0} D1 miss {:>8.0} LL miss  ({:.1} s; {})",
            spec.name,
            counts.ir,
            counts.d1_misses,
            counts.ll_misses,
            start.elapsed().as_secs_f64(),
            spec.what
        );
        measured.insert(spec.name.to_owned(), counts);
    }
    let _ = std::fs::remove_dir_all(&tmp);
    let now = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    let target = format!("{}-{}", std::env::consts::ARCH, std::env::consts::OS);
    let profile = own_profile();
    let cache = CACHE.join(" ");
    if args.update {
        let reason = args.reason.clone().unwrap_or_default();
        if reason.trim().is_empty() {
            bail!("--update needs a --reason");
        }
        let mut history = old.as_ref().map(|b| b.history.clone()).unwrap_or_default();
        history.push(Update {
            at: now,
            reason,
            git: crate::results::Git::detect().map(|g| g.revision),
        });
        let mut workloads = old
            .as_ref()
            .map(|b| b.workloads.clone())
            .unwrap_or_default();
        for (name, mut c) in measured {
            // A workload's own tolerance survives its update.
            c.tolerance = workloads.get(&name).and_then(|o: &Counts| o.tolerance);
            workloads.insert(name, c);
        }
        let b = Baselines {
            schema_version: 1,
            rustc,
            valgrind,
            target,
            profile,
            cache,
            kernels_under_valgrind: kernels,
            tolerance: old.as_ref().map_or(args.tolerance, |b| b.tolerance),
            workloads,
            history,
        };
        if let Some(parent) = baselines_path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&baselines_path, serde_json::to_string_pretty(&b)? + "\n")
            .with_context(|| format!("writing {}", baselines_path.display()))?;
        eprintln!(
            "gate counts: baselines written to {}",
            baselines_path.display()
        );
        return Ok(super::PASS);
    }
    let Some(base) = old else {
        bail!(
            "no baselines at {} (make them with --update --reason \"...\")",
            baselines_path.display()
        );
    };
    let mut mismatch = Vec::new();
    for (what, b, c) in [
        ("rustc", &base.rustc, &rustc),
        ("valgrind", &base.valgrind, &valgrind),
        ("target", &base.target, &target),
        ("build profile", &base.profile, &profile),
    ] {
        if b != c {
            mismatch.push(format!("{what} is `{c}`, the baselines' `{b}`"));
        }
    }
    let rows = compare(&base, &measured, args.tolerance, &mismatch);
    let mut preamble = vec![
        format!("Instructions per iteration under callgrind ({rustc}, {valgrind}; baselines from {}, {}).",
            base.rustc, base.valgrind),
        format!("Kernels under valgrind: {kernels} (AVX-512 is hidden there; the SIMD kernels are gated by timing)."),
        "A workload fails when its count grows past its tolerance (default +2%); misses are reported, not gated.".into(),
    ];
    if !mismatch.is_empty() {
        preamble.push(format!(
            "**Not comparable**: {}. Re-baseline with `bench gate counts --update --reason \"...\"`.",
            mismatch.join("; ")
        ));
    }
    let md = super::markdown("Instruction-count gate", &preamble, &rows);
    let run_id = args
        .run_id
        .clone()
        .unwrap_or_else(|| super::run_id("counts"));
    let json = serde_json::json!({
        "gate": "counts", "run_id": run_id, "rustc": rustc, "valgrind": valgrind, "kernels": kernels,
        "not_comparable": mismatch, "measured": measured, "rows": rows,
        "exit_code": super::exit_code(&rows),
    });
    let dir = super::write_outputs(&root.join(&args.results_dir), &run_id, &md, &json)?;
    println!("{md}");
    eprintln!("gate counts: report in {}", dir.display());
    Ok(super::exit_code(&rows))
}

/// One row per measured workload: the ratio of instructions, failing past the tolerance.
fn compare(
    base: &Baselines,
    measured: &std::collections::BTreeMap<String, Counts>,
    default_tolerance: f64,
    mismatch: &[String],
) -> Vec<Row> {
    measured
        .iter()
        .map(|(name, c)| {
            let Some(b) = base.workloads.get(name) else {
                return Row {
                    name: name.clone(),
                    unit: "Ir/iter".into(),
                    baseline: "—".into(),
                    candidate: format!("{:.0}", c.ir),
                    ratio: None,
                    interval: None,
                    verdict: Verdict::Inconclusive,
                    note: "no baseline (run --update)".into(),
                };
            };
            let tol = b.tolerance.unwrap_or(default_tolerance);
            let ratio = c.ir / b.ir.max(1.0);
            let mut verdict = if ratio > 1.0 + tol {
                Verdict::Fail
            } else {
                Verdict::Pass
            };
            let mut note = format!(
                "tolerance +{:.1}%; D1 misses {:.0} -> {:.0}, LL {:.0} -> {:.0}",
                tol * 100.0,
                b.d1_misses,
                c.d1_misses,
                b.ll_misses,
                c.ll_misses
            );
            if ratio < 1.0 - tol {
                note.push_str("; faster: consider --update");
            }
            if !mismatch.is_empty() {
                verdict = Verdict::Inconclusive;
                note.push_str("; toolchain differs from the baselines");
            }
            Row {
                name: name.clone(),
                unit: "Ir/iter".into(),
                baseline: format!("{:.0}", b.ir),
                candidate: format!("{:.0}", c.ir),
                ratio: Some(ratio),
                interval: None,
                verdict,
                note,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_callgrind_file() {
        let text = "version: 1\nevents: Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw\nfl=x\n0 1\ntotals: 1000 10 10 1 5 6 1 2 3\n";
        assert_eq!(parse_callgrind(text).ok(), Some((1000.0, 11.0, 6.0)));
        assert!(parse_callgrind("events: Ir\ntotals: 0\n").is_err());
        assert!(parse_callgrind("nothing").is_err());
    }

    #[test]
    fn growth_past_the_tolerance_fails_and_a_toolchain_change_does_not_decide() {
        let c = |ir: f64| Counts {
            iters: 1,
            ir,
            d1_misses: 0.0,
            ll_misses: 0.0,
            tolerance: None,
        };
        let base = Baselines {
            schema_version: 1,
            rustc: "r".into(),
            valgrind: "v".into(),
            target: "t".into(),
            profile: "gate".into(),
            cache: String::new(),
            kernels_under_valgrind: String::new(),
            tolerance: 0.02,
            workloads: [("a".to_owned(), c(1000.0)), ("b".to_owned(), c(1000.0))].into(),
            history: vec![],
        };
        let now = [
            ("a".to_owned(), c(1019.0)),
            ("b".to_owned(), c(1021.0)),
            ("new".to_owned(), c(5.0)),
        ]
        .into();
        let rows = compare(&base, &now, 0.02, &[]);
        let v: Vec<Verdict> = rows.iter().map(|r| r.verdict).collect();
        assert_eq!(v, [Verdict::Pass, Verdict::Fail, Verdict::Inconclusive]);
        let rows = compare(&base, &now, 0.02, &["rustc differs".into()]);
        assert!(rows.iter().all(|r| r.verdict == Verdict::Inconclusive));
    }
}
