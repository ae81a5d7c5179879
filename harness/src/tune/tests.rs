//! `bench tune --headless` end to end on the tiny random BERT: the command line, the live generator, knob changes
//! mid-run (live and by a new engine), the results directory and its report.

use std::path::Path;

use clap::Parser;

use super::record::{self, TuneResult};
use super::TuneArgs;
use tui::KnobKind;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: TuneArgs,
}

/// Runs `bench tune --headless` with `script` for `duration` seconds; returns what it wrote.
fn tune(model: &Path, out: &Path, script: &str, duration: &str, extra: &[&str]) -> TuneResult {
    let script_path = out.join("script.jsonl");
    std::fs::write(&script_path, script).unwrap();
    let results = out.join("results");
    let reports = out.join("reports");
    let mut line = vec![
        "tune",
        "--model",
        model.to_str().unwrap(),
        "--headless",
        "--script",
        script_path.to_str().unwrap(),
        "--duration",
        duration,
        "--arrivals",
        "uniform",
        "--tick-ms",
        "500",
        "--threads",
        "1",
        "--run-id",
        "run",
        "--results-dir",
        results.to_str().unwrap(),
        "--reports-dir",
        reports.to_str().unwrap(),
    ];
    line.extend(extra);
    super::run(Cli::parse_from(line).args).unwrap();
    record::read(&results.join("run/tune.json")).unwrap()
}

fn model() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    engine::model::tiny::write_tiny_bert(dir.path(), Default::default()).unwrap();
    dir
}

fn mean(v: impl Iterator<Item = f64>) -> f64 {
    let v: Vec<f64> = v.collect();
    assert!(!v.is_empty());
    v.iter().sum::<f64>() / v.len() as f64
}

/// At 300 queries/s with a 20 ms max-wait, the engine forms batches of several queries; once the budget is cut to
/// 16 tokens mid-run (a query is longer), each batch holds one. The batches the engine reports say so, not the
/// knob's value; nothing is lost; the results directory and its report show the change.
#[test]
fn a_budget_change_mid_run_changes_the_batches_the_engine_forms() {
    let (model, out) = (model(), tempfile::tempdir().unwrap());
    let result = tune(
        model.path(),
        out.path(),
        "{\"at_s\": 3, \"set\": {\"max_batch_tokens\": 16}}\n",
        "6",
        &["--rate", "300", "--max-wait-ms", "20"],
    );
    assert_eq!(result.changes.len(), 1, "{:?}", result.changes);
    let change = &result.changes[0];
    assert_eq!(
        (change.name.as_str(), change.to.as_str()),
        ("max_batch_tokens", "16")
    );
    assert_eq!(change.kind, KnobKind::Live);
    let seqs = |from: f64, to: f64| {
        mean(
            result
                .series
                .iter()
                .filter(|p| p.t > from && p.t <= to)
                .filter_map(|p| p.batch_seqs),
        )
    };
    let (before, after) = (seqs(1.0, change.t), seqs(change.t + 0.6, 6.0));
    assert!(before > 2.0, "batches of {before} sequences before");
    assert!(after < 1.2, "batches of {after} sequences after");
    let t = result.totals;
    assert!(t.sent > 1000, "{t:?}");
    assert_eq!(t.sent, t.ok + t.refused + t.errors + t.timeouts, "{t:?}");
    assert_eq!(result.final_config.max_batch_tokens, 16);
    let config =
        engine::EngineConfig::from_toml_file(&out.path().join("results/run/final.toml")).unwrap();
    assert_eq!(config, result.final_config);
    let screens = std::fs::read_to_string(out.path().join("results/run/screens.txt")).unwrap();
    assert!(
        screens.contains("before max_batch_tokens=16")
            && screens.contains("set max_batch_tokens=16")
    );
    // `bench report` draws it again from the results directory.
    let page = super::rereport(&out.path().join("results/run"), &out.path().join("again"))
        .unwrap()
        .unwrap();
    let html = std::fs::read_to_string(page).unwrap();
    assert!(html.contains("<td>max_batch_tokens</td>"), "{html}");
    assert!(out.path().join("again/run/tune_batches.png").exists());
    assert!(out.path().join("reports/run/tune_throughput.svg").exists());
}

/// A dtype switch builds a new engine beside the running one and moves traffic to it: every request sent is
/// answered, and traffic keeps flowing after the switch.
#[test]
fn a_dtype_switch_mid_run_loses_no_request() {
    let (model, out) = (model(), tempfile::tempdir().unwrap());
    let result = tune(
        model.path(),
        out.path(),
        "{\"at_s\": 2, \"set\": {\"dtype\": \"bf16\"}}\n",
        "5",
        &["--rate", "150", "--no-report"],
    );
    let change = result
        .changes
        .iter()
        .find(|c| c.name == "dtype")
        .expect("the switch happened");
    assert_eq!(change.kind, KnobKind::Engine);
    assert!(change.build_s.is_some_and(|s| s > 0.0));
    let t = result.totals;
    assert!(t.sent > 300, "{t:?}");
    assert_eq!(
        (t.ok, t.refused, t.errors, t.timeouts),
        (t.sent, 0, 0, 0),
        "{t:?}"
    );
    assert_eq!(result.final_config.dtype, engine::Dtype::Bf16);
    let after = result.series.iter().filter(|p| p.t > change.t + 1.0);
    assert!(mean(after.map(|p| p.achieved)) > 100.0);
    assert!(
        result.events.iter().any(|e| e.text.contains("drained")),
        "{:?}",
        result.events
    );
}

/// `f` from a script starts the saturation search: while the tiny model keeps up, each step offers 1.5 times the
/// last, and every step is a rate change stamped on the charts.
#[test]
fn the_f_key_steps_the_rate_up_while_the_slo_holds() {
    let (model, out) = (model(), tempfile::tempdir().unwrap());
    let result = tune(
        model.path(),
        out.path(),
        "{\"at_s\": 0.2, \"key\": \"f\"}\n",
        "7",
        &["--rate", "100", "--no-report"],
    );
    let rates: Vec<f64> = result
        .changes
        .iter()
        .filter(|c| c.name == "rate")
        .map(|c| c.to.parse().unwrap())
        .collect();
    assert!(rates.len() >= 3, "{rates:?} {:?}", result.events);
    assert_eq!(rates[0], 100.0);
    for pair in rates.windows(2).take(2) {
        assert!((pair[1] / pair[0] - 1.5).abs() < 1e-6, "{rates:?}");
    }
    assert!(result
        .events
        .iter()
        .any(|e| e.text.contains("saturation search from 100")));
}
