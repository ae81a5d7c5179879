//! Reports: `reports/<run-id>/` with plots (PNG and SVG, drawn by plotters) and an `index.html` that shows them
//! with the findings and the summary table. Latency percentiles against offered load with the SLO line and each
//! configuration's saturation point; achieved against offered throughput with the knee; for workloads with a
//! batch class, its tokens/s; for a single-step replay, the step's timeline.
//!
//! PNG text is drawn with DejaVu Sans, shipped in `harness/assets/` (its license beside it), so no system font
//! is needed.

use std::path::Path;
use std::sync::Once;

use anyhow::{anyhow, Context, Result};
use plotters::coord::Shift;
use plotters::prelude::*;

use crate::results::RunResult;
use crate::search::x_of;
use crate::step::StepResult;
use crate::workload::{quantile_name, Level};
pub(crate) use page::escape;

mod page;

static FONT: &[u8] = include_bytes!("../../assets/DejaVuSans.ttf");

pub(crate) fn register_font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // The font is compiled in and known to be valid; a failure would only leave PNG text blank.
        let _ = plotters::style::register_font("sans-serif", FontStyle::Normal, FONT);
    });
}

/// Colours that stay apart in print and for the common colour-vision deficiencies (Okabe–Ito).
pub(crate) const PALETTE: [RGBColor; 7] = [
    RGBColor(0, 114, 178),
    RGBColor(213, 94, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(230, 159, 0),
    RGBColor(86, 180, 233),
    RGBColor(0, 0, 0),
];

/// Half-way to white: a reference line in a series' colour.
fn lighter(c: RGBColor) -> RGBColor {
    let mid = |v: u8| ((v as u16 + 255) / 2) as u8;
    RGBColor(mid(c.0), mid(c.1), mid(c.2))
}

/// One line of a chart.
pub(crate) struct Line {
    pub(crate) label: String,
    pub(crate) color: RGBColor,
    pub(crate) points: Vec<(f64, f64)>,
    pub(crate) dashed: bool,
    /// Points further apart than this in x are not joined: a timeline's empty buckets are gaps, not zeros.
    pub(crate) max_gap: Option<f64>,
}

impl Line {
    /// The runs of points to join.
    fn segments(&self) -> Vec<Vec<(f64, f64)>> {
        let mut out: Vec<Vec<(f64, f64)>> = Vec::new();
        for &p in &self.points {
            match out.last_mut() {
                Some(run)
                    if self
                        .max_gap
                        .is_none_or(|g| run.last().is_some_and(|q| p.0 - q.0 <= g)) =>
                {
                    run.push(p)
                }
                _ => out.push(vec![p]),
            }
        }
        out
    }
}

/// A point called out on a chart.
pub(crate) struct Mark {
    pub(crate) label: String,
    pub(crate) color: RGBColor,
    pub(crate) at: (f64, f64),
}

/// What one chart shows; drawn the same way on PNG and SVG.
pub(crate) struct Chart {
    pub(crate) file: &'static str,
    pub(crate) title: String,
    pub(crate) x_desc: String,
    pub(crate) y_desc: String,
    pub(crate) log_y: bool,
    pub(crate) lines: Vec<Line>,
    pub(crate) marks: Vec<Mark>,
    /// Horizontal reference lines (the SLO, the probed maximum) with their labels and colours.
    pub(crate) hlines: Vec<(f64, String, RGBColor)>,
    /// Vertical lines at these x values with their labels: the knob changes of a `bench tune` run.
    pub(crate) vlines: Vec<(f64, String)>,
    /// Draw y = x (achieved equal to offered).
    pub(crate) diagonal: bool,
    /// Where the legend hides the least: above rising latency curves, below throughput that levels off.
    pub(crate) legend: SeriesLabelPosition,
    /// The x axis counts (clients): ticks on whole numbers only.
    pub(crate) integer_x: bool,
}

/// Draws each chart into `dir` as `<file>.png` and `<file>.svg`, `size` pixels (the folder is made if need be).
pub(crate) fn draw_all(dir: &Path, charts: &[Chart], size: (u32, u32)) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    register_font();
    for chart in charts {
        let png = dir.join(format!("{}.png", chart.file));
        draw(BitMapBackend::new(&png, size).into_drawing_area(), chart)
            .with_context(|| format!("drawing {}", png.display()))?;
        let svg = dir.join(format!("{}.svg", chart.file));
        draw(SVGBackend::new(&svg, size).into_drawing_area(), chart)
            .with_context(|| format!("drawing {}", svg.display()))?;
    }
    Ok(())
}

/// Writes the plots and `index.html` into `dir`; returns the page's path.
pub fn write(dir: &Path, result: &RunResult) -> Result<std::path::PathBuf> {
    let charts = charts(result);
    draw_all(dir, &charts, (1000, 620))?;
    let page = dir.join("index.html");
    std::fs::write(&page, page::html(result, &charts))
        .with_context(|| format!("writing {}", page.display()))?;
    Ok(page)
}

fn charts(result: &RunResult) -> Vec<Chart> {
    let configs = &result.configs;
    let color = |i: usize| PALETTE[i % PALETTE.len()];
    let many = configs.len() > 1;
    let name = |label: &str, what: &str| {
        if many {
            format!("{label}: {what}")
        } else {
            what.to_owned()
        }
    };
    let measured = |steps: &[StepResult]| -> Vec<StepResult> {
        let mut v: Vec<StepResult> = steps
            .iter()
            .filter(|s| !s.probe && s.measured())
            .cloned()
            .collect();
        v.sort_by(|a, b| x_of(a).total_cmp(&x_of(b)));
        v
    };
    let Some(first) = configs.iter().flat_map(|c| measured(&c.steps)).next() else {
        return Vec::new();
    };
    let rate_mode = matches!(first.level, Level::Rate(_));
    let main = first.main();
    let x_desc = if rate_mode {
        format!("offered load ({} requests/s)", main.class)
    } else {
        format!("concurrency ({} clients)", main.class)
    };
    let single_step = configs.iter().all(|c| measured(&c.steps).len() <= 1);
    if single_step {
        return timeline_charts(&first);
    }

    let mut latency = Chart {
        file: "latency",
        title: format!("{} latency vs load", main.class),
        x_desc: x_desc.clone(),
        y_desc: "latency from the scheduled time (ms, log)".into(),
        log_y: true,
        lines: Vec::new(),
        marks: Vec::new(),
        hlines: vec![(
            main.slo.latency_ms,
            format!(
                "SLO: {} <= {} ms",
                quantile_name(main.slo.quantile),
                main.slo.latency_ms
            ),
            RED,
        )],
        vlines: Vec::new(),
        diagonal: false,
        legend: SeriesLabelPosition::UpperLeft,
        integer_x: !rate_mode,
    };
    let mut throughput = Chart {
        file: "throughput",
        title: if rate_mode {
            "achieved vs offered throughput".into()
        } else {
            format!("{} tokens/s vs concurrency", main.class)
        },
        x_desc: x_desc.clone(),
        y_desc: if rate_mode {
            "achieved (requests/s)".into()
        } else {
            "tokens/s".into()
        },
        log_y: false,
        lines: Vec::new(),
        marks: Vec::new(),
        hlines: Vec::new(),
        vlines: Vec::new(),
        diagonal: rate_mode,
        legend: SeriesLabelPosition::LowerRight,
        integer_x: !rate_mode,
    };
    let batch_class = first
        .classes
        .iter()
        .position(|c| c.closed_loop)
        .filter(|_| rate_mode);
    let mut batch = batch_class.map(|_| Chart {
        file: "batch_tokens",
        title: "batch class throughput while the online load rises".into(),
        x_desc: x_desc.clone(),
        y_desc: "batch tokens/s".into(),
        log_y: false,
        lines: Vec::new(),
        marks: Vec::new(),
        hlines: Vec::new(),
        vlines: Vec::new(),
        diagonal: false,
        legend: SeriesLabelPosition::LowerRight,
        integer_x: !rate_mode,
    });
    for (i, config) in configs.iter().enumerate() {
        let steps = measured(&config.steps);
        // A search can stop after its probe (no answers): such a configuration has no curve to draw.
        if steps.is_empty() {
            continue;
        }
        let pick = |f: &dyn Fn(&StepResult) -> f64| {
            steps.iter().map(|s| (x_of(s), f(s))).collect::<Vec<_>>()
        };
        latency.lines.push(Line {
            label: name(&config.label, &quantile_name(main.slo.quantile)),
            color: color(i),
            points: pick(&|s| s.main().slo_latency_ms.max(0.001)),
            dashed: false,
            max_gap: None,
        });
        latency.lines.push(Line {
            label: name(&config.label, "p50"),
            color: color(i),
            points: pick(&|s| s.main().latency_ms.p50.max(0.001)),
            dashed: true,
            max_gap: None,
        });
        let y_of = StepResult::throughput;
        throughput.lines.push(Line {
            label: name(
                &config.label,
                if rate_mode { "achieved" } else { "tokens/s" },
            ),
            color: color(i),
            points: pick(&y_of),
            dashed: false,
            max_gap: None,
        });
        if rate_mode {
            // Past the knee, what matters is how much is still answered within the SLO.
            throughput.lines.push(Line {
                label: name(&config.label, "goodput (within the SLO)"),
                color: color(i),
                points: pick(&|s| s.main().goodput_rps),
                dashed: true,
                max_gap: None,
            });
        }
        let at = |x: Option<f64>, f: &dyn Fn(&StepResult) -> f64| {
            let x = x?;
            steps
                .iter()
                .find(|s| (x_of(s) - x).abs() < 1e-9)
                .map(|s| (x, f(s)))
        };
        // The legend says what the text says: a lower bound keeps its `>=`, and the unit.
        let unit = crate::search::unit_of(&config.steps);
        if let Some(p) = at(config.saturation.value, &|s| {
            s.main().slo_latency_ms.max(0.001)
        }) {
            latency.marks.push(Mark {
                label: name(
                    &config.label,
                    &format!("saturation {}", config.saturation.show(unit)),
                ),
                color: color(i),
                at: p,
            });
        }
        let probe = config.steps.iter().find(|s| s.probe);
        if let (Some(probe), true) = (probe, rate_mode) {
            throughput.hlines.push((
                probe.main().achieved_rps,
                name(
                    &config.label,
                    &format!(
                        "probe maximum {:.1} (closed loop)",
                        probe.main().achieved_rps
                    ),
                ),
                lighter(color(i)),
            ));
        }
        if let Some(p) = at(config.knee.value, &y_of) {
            throughput.marks.push(Mark {
                label: name(&config.label, &format!("knee {}", config.knee.show(unit))),
                color: color(i),
                at: p,
            });
        }
        let batch_name = batch_class.and_then(|b| Some((b, &steps[0].classes.get(b)?.class)));
        if let (Some(chart), Some((b, class))) = (batch.as_mut(), batch_name) {
            chart.lines.push(Line {
                label: name(&config.label, class),
                color: color(i),
                points: steps
                    .iter()
                    .filter_map(|s| Some((x_of(s), s.classes.get(b)?.tokens_per_s)))
                    .collect(),
                dashed: false,
                max_gap: None,
            });
        }
    }
    let mut out = vec![latency, throughput];
    out.extend(batch);
    out
}

/// A replay's single step over time: latency of the requests due in each bucket, and due vs answered.
fn timeline_charts(step: &StepResult) -> Vec<Chart> {
    let class = step.main();
    let width = match class.timeline.as_slice() {
        [a, b, ..] => b.t - a.t,
        _ => 1.0,
    };
    // Latency exists only where requests were due; rates are zero elsewhere.
    let pts = |f: &dyn Fn(&crate::step::Bucket) -> f64, only_busy: bool| {
        class
            .timeline
            .iter()
            .filter(|b| !only_busy || b.due > 0)
            .map(|b| (b.t, f(b)))
            .collect::<Vec<_>>()
    };
    let line = |label: &str, i: usize, points, dashed| Line {
        label: label.into(),
        color: PALETTE[i],
        points,
        dashed,
        max_gap: Some(width * 1.5),
    };
    vec![
        Chart {
            file: "timeline_latency",
            title: format!("{} latency over the run", class.class),
            x_desc: "time (s)".into(),
            y_desc: "latency from the scheduled time (ms, log)".into(),
            log_y: true,
            lines: vec![
                line("p99", 0, pts(&|b| b.p99_ms.max(0.001), true), false),
                line("p50", 0, pts(&|b| b.p50_ms.max(0.001), true), true),
            ],
            marks: Vec::new(),
            hlines: vec![(
                class.slo.latency_ms,
                format!("SLO {} ms", class.slo.latency_ms),
                RED,
            )],
            vlines: Vec::new(),
            diagonal: false,
            legend: SeriesLabelPosition::UpperLeft,
            integer_x: false,
        },
        Chart {
            file: "timeline_rate",
            title: format!("{} requests over the run", class.class),
            x_desc: "time (s)".into(),
            y_desc: "requests/s".into(),
            log_y: false,
            lines: vec![
                line("due", 0, pts(&|b| b.due as f64 / width, false), false),
                line(
                    "answered",
                    1,
                    pts(&|b| b.answered as f64 / width, false),
                    false,
                ),
            ],
            marks: Vec::new(),
            hlines: Vec::new(),
            vlines: Vec::new(),
            diagonal: false,
            legend: SeriesLabelPosition::UpperMiddle,
            integer_x: false,
        },
    ]
}

pub(crate) fn draw<DB: DrawingBackend>(root: DrawingArea<DB, Shift>, chart: &Chart) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| anyhow!("{e:?}");
    root.fill(&WHITE).map_err(err)?;
    let xs = chart
        .lines
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.0));
    let ys = chart
        .lines
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.1))
        .chain(chart.hlines.iter().map(|h| h.0));
    let x_max = xs.fold(0.0, f64::max).max(1e-9) * 1.05;
    let (y_lo, y_hi) = ys.fold((f64::MAX, 0.0f64), |(lo, hi), y| (lo.min(y), hi.max(y)));
    let y_top = if chart.log_y {
        y_hi * 2.0
    } else {
        (y_hi * 1.1).max(1e-9)
    };
    let mut builder = ChartBuilder::on(&root);
    builder
        .caption(&chart.title, ("sans-serif", 24))
        .margin(16)
        .x_label_area_size(50)
        .y_label_area_size(70);
    let style = ("sans-serif", 15);
    macro_rules! body {
        ($ctx:expr) => {{
            let mut ctx = $ctx;
            ctx.configure_mesh()
                .x_labels(if chart.integer_x {
                    (x_max.ceil() as usize + 1).min(10)
                } else {
                    10
                })
                .x_label_formatter(&|v| {
                    if chart.integer_x && v.fract() != 0.0 {
                        String::new()
                    } else {
                        number(*v)
                    }
                })
                .y_label_formatter(&|v| number(*v))
                .x_desc(chart.x_desc.as_str())
                .y_desc(chart.y_desc.as_str())
                .label_style(style)
                .axis_desc_style(("sans-serif", 16))
                .light_line_style(RGBColor(235, 235, 235))
                .draw()
                .map_err(err)?;
            if chart.diagonal {
                ctx.draw_series(DashedLineSeries::new(
                    // Ends inside the plotting area: plotters does not clip a line leaving it.
                    vec![(0.0, 0.0), (x_max.min(y_top), x_max.min(y_top))],
                    6,
                    4,
                    RGBColor(150, 150, 150).stroke_width(1),
                ))
                .map_err(err)?
                .label("achieved = offered")
                .legend(|(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], RGBColor(150, 150, 150))
                });
            }
            for (y, label, c) in &chart.hlines {
                let c = *c;
                ctx.draw_series(DashedLineSeries::new(
                    vec![(0.0, *y), (x_max, *y)],
                    8,
                    5,
                    c.stroke_width(2),
                ))
                .map_err(err)?
                .label(label.as_str())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2))
                });
            }
            for (x, label) in &chart.vlines {
                let (grey, top) = (RGBColor(90, 90, 90), y_top * 0.95);
                let bottom = if chart.log_y { y_lo.max(1e-3) } else { 0.0 };
                ctx.draw_series(DashedLineSeries::new(
                    vec![(*x, bottom), (*x, top)],
                    6,
                    4,
                    grey.stroke_width(1),
                ))
                .map_err(err)?;
                ctx.draw_series(std::iter::once(Text::new(
                    label.clone(),
                    (*x, top),
                    ("sans-serif", 13).into_font().color(&grey),
                )))
                .map_err(err)?;
            }
            for line in &chart.lines {
                let c = line.color;
                let width = if line.dashed { 1 } else { 2 };
                for (k, run) in line.segments().into_iter().enumerate() {
                    let drawn = if line.dashed {
                        ctx.draw_series(DashedLineSeries::new(run, 5, 4, c.stroke_width(width)))
                    } else {
                        ctx.draw_series(LineSeries::new(run, c.stroke_width(width)))
                    }
                    .map_err(err)?;
                    // One legend entry per line, not per segment.
                    if k == 0 {
                        drawn.label(line.label.as_str()).legend(move |(x, y)| {
                            PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(width))
                        });
                    }
                }
                if !line.dashed {
                    ctx.draw_series(line.points.iter().map(|&p| Circle::new(p, 3, c.filled())))
                        .map_err(err)?;
                }
            }
            for mark in &chart.marks {
                let c = mark.color;
                ctx.draw_series(std::iter::once(TriangleMarker::new(
                    mark.at,
                    11,
                    c.filled(),
                )))
                .map_err(err)?
                .label(mark.label.as_str())
                .legend(move |(x, y)| TriangleMarker::new((x + 10, y), 7, c.filled()));
                ctx.draw_series(std::iter::once(Circle::new(mark.at, 13, c.stroke_width(2))))
                    .map_err(err)?;
            }
            ctx.configure_series_labels()
                .position(chart.legend.clone())
                .label_font(("sans-serif", 14))
                .background_style(WHITE.mix(0.85))
                .border_style(RGBColor(180, 180, 180))
                .draw()
                .map_err(err)?;
        }};
    }
    if chart.log_y {
        let lo = (y_lo.max(1e-3) / 2.0).min(y_hi / 10.0);
        body!(builder
            .build_cartesian_2d(0.0..x_max, (lo..y_top).log_scale())
            .map_err(err)?);
    } else {
        body!(builder
            .build_cartesian_2d(0.0..x_max, 0.0..y_top)
            .map_err(err)?);
    }
    root.present().map_err(err)?;
    Ok(())
}

/// Axis labels without needless decimals: 1000, 25, 2.5, 0.25.
fn number(v: f64) -> String {
    let a = v.abs();
    if a >= 10.0 || a == 0.0 {
        format!("{v:.0}")
    } else if a >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_skips_a_configuration_stopped_after_its_probe() {
        let result = crate::results::tests::mixed_sweep();
        let charts = charts(&result);
        let batch = charts.iter().find(|c| c.file == "batch_tokens").unwrap();
        let labels: Vec<&str> = batch.lines.iter().map(|l| l.label.as_str()).collect();
        assert_eq!(labels, ["b: batch"]);
        assert_eq!(batch.lines[0].points.len(), 3);
        let dir = tempfile::tempdir().unwrap();
        assert!(write(dir.path(), &result).unwrap().is_file());
    }
}
