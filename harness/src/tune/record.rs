//! What a `bench tune` session leaves: `results/<run-id>/tune.json` (the time series, every knob change, the
//! event log, the screens captured, the final engine configuration), `final.toml` (that configuration, for
//! `bench serve --config`) and `series.csv`; and its report, `reports/<run-id>/`, with the knob changes marked on
//! the time axis and a table of each change's before and after.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use plotters::prelude::*;
use serde::{Deserialize, Serialize};
use tui::{Event, Point};

use super::control::{Change, Totals, Tuner};
use super::screen::Screen;
use crate::report::{draw_all, escape, Chart, Line, PALETTE};
use crate::results::{Git, Machine};
use crate::target::TargetKind;
use crate::workload::Workload;

pub const SCHEMA_VERSION: u32 = 1;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TuneResult {
    pub schema_version: u32,
    pub run_id: String,
    pub command: Vec<String>,
    pub git: Option<Git>,
    pub machine: Machine,
    pub model: String,
    pub workload: String,
    pub target: String,
    pub slo_ms: f64,
    pub tick_s: f64,
    pub wall_s: f64,
    pub series: Vec<Point>,
    pub changes: Vec<Change>,
    pub events: Vec<Event>,
    pub totals: Totals,
    pub searches: Vec<String>,
    pub saved: Vec<PathBuf>,
    pub final_config: engine::EngineConfig,
    #[serde(default)]
    pub screens: Vec<Screen>,
}

impl TuneResult {
    pub fn of(
        tuner: &Tuner,
        run_id: String,
        model: &str,
        workload: &Workload,
        target: &TargetKind,
        tick_s: f64,
        wall_s: f64,
    ) -> Result<TuneResult> {
        Ok(TuneResult {
            schema_version: SCHEMA_VERSION,
            run_id,
            command: std::env::args().collect(),
            git: Git::detect(),
            machine: Machine::detect(),
            model: model.to_owned(),
            workload: workload.kind.to_string(),
            target: target.describe(),
            slo_ms: tuner.app.slo_ms,
            tick_s,
            wall_s,
            series: tuner.app.series.clone(),
            changes: tuner.changes.clone(),
            events: tuner.app.events.iter().cloned().collect(),
            totals: tuner.totals,
            searches: tuner.searches.clone(),
            saved: tuner.saved.clone(),
            final_config: tuner.config.clone(),
            screens: Vec::new(),
        })
    }
}

pub fn write(dir: &Path, result: &TuneResult, screens: &[Screen]) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let result = TuneResult {
        screens: screens.to_vec(),
        ..result.clone()
    };
    let json = dir.join("tune.json");
    std::fs::write(&json, serde_json::to_string_pretty(&result)?)
        .with_context(|| format!("writing {}", json.display()))?;
    let toml = dir.join("final.toml");
    std::fs::write(&toml, result.final_config.to_toml()?)
        .with_context(|| format!("writing {}", toml.display()))?;
    let mut csv = String::from(
        "t,offered,achieved,goodput,tokens_per_s,p50_ms,p99_ms,queued_online,queued_batch,batch_tokens,batch_seqs,padding_share,replays_per_s,captures_per_s,refused,errors,timeouts\n",
    );
    let opt = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v:.4}"));
    for p in &result.series {
        let _ = writeln!(
            csv,
            "{:.3},{:.3},{:.3},{:.3},{:.1},{},{},{},{},{},{},{},{:.3},{:.3},{},{},{}",
            p.t,
            p.offered,
            p.achieved,
            p.goodput,
            p.tokens_per_s,
            opt(p.p50_ms),
            opt(p.p99_ms),
            p.queued[0],
            p.queued[1],
            opt(p.batch_tokens),
            opt(p.batch_seqs),
            opt(p.padding_share),
            p.replays,
            p.captures,
            p.refused,
            p.errors,
            p.timeouts
        );
    }
    let path = dir.join("series.csv");
    std::fs::write(&path, csv).with_context(|| format!("writing {}", path.display()))?;
    let text: String = screens
        .iter()
        .map(|s| format!("--- t={:.1}s {} ---\n{}\n", s.t, s.label, s.text))
        .collect();
    let path = dir.join("screens.txt");
    std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

pub fn read(path: &Path) -> Result<TuneResult> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let result: TuneResult =
        serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    if result.schema_version > SCHEMA_VERSION {
        bail!(
            "{} has schema version {}; this bench reads up to {SCHEMA_VERSION}",
            path.display(),
            result.schema_version
        );
    }
    Ok(result)
}

/// `bench report` of a tune results directory (one with `tune.json`); `None` when it is not one.
pub fn rereport(path: &Path, reports_dir: &Path) -> Result<Option<PathBuf>> {
    let file = if path.file_name().is_some_and(|n| n == "tune.json") {
        path.to_owned()
    } else {
        path.join("tune.json")
    };
    if !file.exists() {
        return Ok(None);
    }
    let result = read(&file)?;
    report(&reports_dir.join(&result.run_id), &result).map(Some)
}

/// A series' figure per tick, for a chart.
fn series(result: &TuneResult, pick: impl Fn(&Point) -> Option<f64>) -> Vec<(f64, f64)> {
    result
        .series
        .iter()
        .filter_map(|p| Some((p.t, pick(p)?)))
        .filter(|(_, v)| v.is_finite())
        .collect()
}

fn charts(result: &TuneResult) -> Vec<Chart> {
    let marks: Vec<(f64, String)> = result
        .changes
        .iter()
        .map(|c| (c.t, format!("{}={}", c.name, c.to)))
        .collect();
    let line = |label: &str, color: usize, points: Vec<(f64, f64)>, dashed: bool| Line {
        label: label.to_owned(),
        color: PALETTE[color],
        points,
        dashed,
        max_gap: Some(result.tick_s * 3.0),
    };
    let chart = |file, title: &str, y_desc: &str, lines| Chart {
        file,
        title: title.to_owned(),
        x_desc: "seconds since the start".into(),
        y_desc: y_desc.to_owned(),
        log_y: false,
        lines,
        marks: Vec::new(),
        hlines: Vec::new(),
        vlines: marks.clone(),
        diagonal: false,
        legend: SeriesLabelPosition::LowerRight,
        integer_x: false,
    };
    let mut latency = chart(
        "tune_latency",
        "Latency per tick (online class)",
        "milliseconds",
        vec![
            line("p50", 0, series(result, |p| p.p50_ms), false),
            line("p99", 1, series(result, |p| p.p99_ms), false),
        ],
    );
    latency.hlines = vec![(
        result.slo_ms,
        format!("SLO {} ms", result.slo_ms),
        PALETTE[3],
    )];
    latency.legend = SeriesLabelPosition::UpperLeft;
    vec![
        chart(
            "tune_throughput",
            "Offered, achieved and goodput",
            "requests/s",
            vec![
                line("offered", 6, series(result, |p| Some(p.offered)), true),
                line("achieved", 0, series(result, |p| Some(p.achieved)), false),
                line(
                    "goodput (within SLO)",
                    2,
                    series(result, |p| Some(p.goodput)),
                    false,
                ),
            ],
        ),
        latency,
        chart(
            "tune_batches",
            "Batches the engine formed (mean per tick)",
            "tokens per batch",
            vec![line("tokens", 4, series(result, |p| p.batch_tokens), false)],
        ),
        chart(
            "tune_batch_seqs",
            "Sequences per batch (mean per tick)",
            "sequences per batch",
            vec![line(
                "sequences",
                5,
                series(result, |p| p.batch_seqs),
                false,
            )],
        ),
    ]
}

/// Achieved req/s, p99 ms and batch tokens, means over some ticks.
type Figures = [Option<f64>; 3];

/// The [`Figures`] of the ticks in `(from, to]`.
fn window(result: &TuneResult, from: f64, to: f64) -> Figures {
    let points: Vec<&Point> = result
        .series
        .iter()
        .filter(|p| p.t > from && p.t <= to)
        .collect();
    let mean = |pick: &dyn Fn(&Point) -> Option<f64>| {
        let v: Vec<f64> = points.iter().filter_map(|p| pick(p)).collect();
        (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
    };
    [
        mean(&|p| Some(p.achieved)),
        mean(&|p| p.p99_ms),
        mean(&|p| p.batch_tokens),
    ]
}

/// Each change's before (the ticks since the previous change, at most 10 s) and after (from one tick after it to
/// the next change).
pub fn before_after(result: &TuneResult) -> Vec<(&Change, Figures, Figures)> {
    let end = result.series.last().map_or(0.0, |p| p.t);
    let times: Vec<f64> = result.changes.iter().map(|c| c.t).collect();
    result
        .changes
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let prev = if i == 0 {
                0.0
            } else {
                times[i - 1] + result.tick_s
            };
            let next = times.get(i + 1).copied().unwrap_or(end);
            let before = window(result, prev.max(c.t - 10.0), c.t);
            let after = window(result, c.t + result.tick_s, next);
            (c, before, after)
        })
        .collect()
}

pub fn report(dir: &Path, result: &TuneResult) -> Result<PathBuf> {
    let charts = charts(result);
    draw_all(dir, &charts, (1000, 560))?;
    let f = |v: Option<f64>| v.map_or("–".into(), |v| format!("{v:.1}"));
    let mut page = format!(
        "<!doctype html><meta charset=utf-8><title>bench tune {id}</title><body style=\"font-family:sans-serif;max-width:1050px\">\
         <h1>bench tune {id}</h1><p>{model}, {workload} workload, {target}; SLO p99 &le; {slo} ms; {wall:.0} s. \
         Requests sent {sent}, answered {ok}, refused {refused}, errors {errors}, timeouts {timeouts}.</p>",
        id = escape(&result.run_id),
        model = escape(&result.model),
        workload = escape(&result.workload),
        target = escape(&result.target),
        slo = result.slo_ms,
        wall = result.wall_s,
        sent = result.totals.sent,
        ok = result.totals.ok,
        refused = result.totals.refused,
        errors = result.totals.errors,
        timeouts = result.totals.timeouts,
    );
    page.push_str(
        "<h2>Knob changes</h2><table border=1 cellpadding=4 style=\"border-collapse:collapse\">\
         <tr><th>t (s)</th><th>knob</th><th>from</th><th>to</th><th>how</th>\
         <th>achieved req/s before</th><th>after</th><th>p99 ms before</th><th>after</th>\
         <th>batch tokens before</th><th>after</th></tr>",
    );
    for (c, b, a) in before_after(result) {
        let how = match c.build_s {
            Some(s) => format!("new engine, built in {s:.2} s"),
            None => c.kind.tag().to_owned(),
        };
        let _ = write!(
            page,
            "<tr><td>{:.1}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            c.t,
            escape(&c.name),
            escape(&c.from),
            escape(&c.to),
            how,
            f(b[0]),
            f(a[0]),
            f(b[1]),
            f(a[1]),
            f(b[2]),
            f(a[2])
        );
    }
    page.push_str("</table><p>Before: the ticks since the previous change (at most 10 s); after: from one tick after the change to the next. p99 is the mean of the per-tick p99s.</p>");
    for s in &result.searches {
        let _ = write!(page, "<p>Saturation search: {}</p>", escape(s));
    }
    for chart in &charts {
        let _ = write!(
            page,
            "<h2>{}</h2><img src=\"{}.png\" width=1000>",
            escape(&chart.title),
            chart.file
        );
    }
    for s in &result.screens {
        let _ = write!(
            page,
            "<h3>Screen at {:.1} s, {}</h3><pre>{}</pre>",
            s.t,
            escape(&s.label),
            escape(&s.text)
        );
    }
    page.push_str("<h2>Events</h2><pre>");
    for e in &result.events {
        let _ = writeln!(page, "{:>7.1} s  {}", e.t, escape(&e.text));
    }
    page.push_str("</pre>");
    let path = dir.join("index.html");
    std::fs::write(&path, page).with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}
