//! Drawing the screen: time-series charts over the last minutes with the knob changes marked, the knob panel,
//! the event log and the help bar. The chart grid follows the terminal's size (four charts at 80×24, more on a
//! larger screen, fewer on a smaller one).

use ratatui::backend::TestBackend;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::symbols::Marker;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Axis, Block, Chart, Dataset, GraphType, List, ListItem, Paragraph};
use ratatui::{Frame, Terminal};

use crate::app::{App, KnobKind, Point};
use crate::keys::help_line;

/// Columns of the knob panel.
const PANEL: u16 = 26;
/// Rows a chart needs to be worth drawing.
const CHART_ROWS: u16 = 7;
const CHART_COLS: u16 = 26;

/// One line of a chart: its name, colour and value per tick.
type Pick = (&'static str, Color, fn(&Point) -> Option<f64>);

/// The charts, most important first; the grid shows as many as fit.
const CHARTS: &[(&str, &[Pick])] = &[
    (
        "req/s",
        &[
            ("off", Color::Gray, |p| Some(p.offered)),
            ("ach", Color::Cyan, |p| Some(p.achieved)),
            ("good", Color::Green, |p| Some(p.goodput)),
        ],
    ),
    (
        "latency ms",
        &[
            ("p50", Color::Cyan, |p| p.p50_ms),
            ("p99", Color::Magenta, |p| p.p99_ms),
        ],
    ),
    (
        "batch tokens",
        &[("mean", Color::Yellow, |p| p.batch_tokens)],
    ),
    (
        "queued seqs",
        &[
            ("online", Color::Cyan, |p| Some(p.queued[0])),
            ("batch", Color::Yellow, |p| Some(p.queued[1])),
        ],
    ),
    (
        "tokens/s",
        &[("ach", Color::Cyan, |p| Some(p.tokens_per_s))],
    ),
    ("batch seqs", &[("mean", Color::Yellow, |p| p.batch_seqs)]),
    (
        "padding %",
        &[("pad", Color::Red, |p| p.padding_share.map(|s| s * 100.0))],
    ),
    (
        "plans /s",
        &[
            ("replay", Color::Green, |p| Some(p.replays)),
            ("capture", Color::Red, |p| Some(p.captures)),
        ],
    ),
];

/// Draws the whole screen.
pub fn draw(frame: &mut Frame, app: &App) {
    let area = frame.area();
    let log_rows = if area.height >= 20 { 5 } else { 0 };
    let [header, body, log, help] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Min(0),
        Constraint::Length(log_rows),
        Constraint::Length(1),
    ])
    .areas(area);
    let panel = if area.width >= PANEL + CHART_COLS {
        PANEL
    } else {
        0
    };
    let [charts, knobs] =
        Layout::horizontal([Constraint::Min(0), Constraint::Length(panel)]).areas(body);
    frame.render_widget(header_line(app), header);
    draw_charts(frame, app, charts);
    if panel > 0 {
        draw_knobs(frame, app, knobs);
    }
    if log_rows > 0 {
        draw_log(frame, app, log);
    }
    frame.render_widget(Paragraph::new(help_line(app)), help);
}

/// The screen at `width`×`height` as text, one line per row: what a terminal would show, for logs, results and
/// tests.
pub fn screen_text(app: &App, width: u16, height: u16) -> String {
    // The test backend draws into memory; it has no way to fail.
    let mut terminal = match Terminal::new(TestBackend::new(width, height)) {
        Ok(t) => t,
        Err(e) => return format!("(screen not drawn: {e})"),
    };
    if let Err(e) = terminal.draw(|f| draw(f, app)) {
        return format!("(screen not drawn: {e})");
    }
    let buffer = terminal.backend().buffer();
    (0..height)
        .map(|y| {
            let row: String = (0..width).map(|x| buffer[(x, y)].symbol()).collect();
            row.trim_end().to_owned()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn header_line(app: &App) -> Paragraph<'static> {
    let state = if app.paused {
        Span::styled(
            " PAUSED ",
            Style::default().fg(Color::Black).bg(Color::Yellow),
        )
    } else {
        Span::styled(" LIVE ", Style::default().fg(Color::Black).bg(Color::Green))
    };
    Paragraph::new(Line::from(vec![
        state,
        Span::raw(format!(" t={:.0}s ", app.now)),
        Span::styled(app.status.clone(), Style::default().fg(Color::Cyan)),
        Span::styled(
            format!("  {}", app.title),
            Style::default().add_modifier(Modifier::BOLD),
        ),
    ]))
}

fn draw_charts(frame: &mut Frame, app: &App, area: Rect) {
    let cols = (area.width / CHART_COLS).clamp(1, 3);
    let rows = (area.height / CHART_ROWS).clamp(1, 4);
    let shown = CHARTS.len().min((cols * rows) as usize);
    let rows = (shown as u16).div_ceil(cols);
    let row_areas =
        Layout::vertical(vec![Constraint::Ratio(1, rows as u32); rows as usize]).split(area);
    for (r, row) in row_areas.iter().enumerate() {
        let cells =
            Layout::horizontal(vec![Constraint::Ratio(1, cols as u32); cols as usize]).split(*row);
        for (c, cell) in cells.iter().enumerate() {
            if let Some((title, picks)) = CHARTS.get(r * cols as usize + c) {
                draw_chart(frame, app, *cell, title, picks);
            }
        }
    }
}

fn draw_chart(frame: &mut Frame, app: &App, area: Rect, title: &str, picks: &[Pick]) {
    let points = app.visible();
    let x_hi = app.now.max(10.0);
    let x_lo = (x_hi - app.window_s).max(0.0);
    let lines: Vec<Vec<(f64, f64)>> = picks
        .iter()
        .map(|(_, _, pick)| {
            points
                .iter()
                .filter_map(|p| Some((p.t, pick(p)?)))
                .filter(|(_, v)| v.is_finite())
                .collect()
        })
        .collect();
    let slo = (title == "latency ms").then_some(app.slo_ms);
    let y_max = lines
        .iter()
        .flatten()
        .map(|p| p.1)
        .chain(slo)
        .fold(1.0_f64, f64::max)
        * 1.1;
    let marks: Vec<[(f64, f64); 2]> = app
        .marks
        .iter()
        .filter(|m| m.t >= x_lo)
        .map(|m| [(m.t, 0.0), (m.t, y_max)])
        .collect();
    let slo_line = slo.map(|s| [(x_lo, s), (x_hi, s)]);
    let mut datasets = Vec::new();
    for mark in &marks {
        datasets.push(line(mark, Color::DarkGray));
    }
    if let Some(s) = &slo_line {
        datasets.push(line(s, Color::Red));
    }
    let mut latest = Vec::new();
    for ((name, color, _), data) in picks.iter().zip(&lines) {
        datasets.push(line(data, *color));
        let last = data.last().map_or("-".into(), |p| short(p.1));
        latest.push(Span::styled(
            format!("{name} {last} "),
            Style::default().fg(*color),
        ));
    }
    let chart = Chart::new(datasets)
        .block(
            Block::bordered()
                .title(Span::styled(
                    title.to_owned(),
                    Style::default().add_modifier(Modifier::BOLD),
                ))
                .title_bottom(Line::from(latest)),
        )
        .x_axis(Axis::default().bounds([x_lo, x_hi]))
        .y_axis(
            Axis::default()
                .bounds([0.0, y_max])
                .labels([Span::raw("0"), Span::raw(short(y_max))]),
        )
        .legend_position(None);
    frame.render_widget(chart, area);
}

fn line(data: &[(f64, f64)], color: Color) -> Dataset<'_> {
    Dataset::default()
        .marker(Marker::Braille)
        .graph_type(GraphType::Line)
        .style(Style::default().fg(color))
        .data(data)
}

/// A figure in a few characters: 0.82, 12.5, 340, 12k.
fn short(v: f64) -> String {
    match v.abs() {
        a if a >= 10_000.0 => format!("{:.0}k", v / 1000.0),
        a if a >= 100.0 => format!("{v:.0}"),
        a if a >= 10.0 => format!("{v:.1}"),
        _ => format!("{v:.2}"),
    }
}

fn draw_knobs(frame: &mut Frame, app: &App, area: Rect) {
    let width = area.width.saturating_sub(2) as usize;
    let items: Vec<ListItem> = app
        .knobs
        .iter()
        .enumerate()
        .map(|(i, k)| {
            let color = match k.kind {
                KnobKind::Load => Color::Cyan,
                KnobKind::Live => Color::Green,
                KnobKind::Engine => Color::Yellow,
            };
            let value = if i == app.selected {
                app.input
                    .as_ref()
                    .map_or(k.value.clone(), |typed| format!("{typed}_"))
            } else {
                k.value.clone()
            };
            let name_w = width.saturating_sub(value.chars().count() + 1);
            let mut style = Style::default().fg(color);
            if i == app.selected {
                style = style.add_modifier(Modifier::REVERSED);
            }
            ListItem::new(format!("{:<name_w$} {value}", k.name)).style(style)
        })
        .collect();
    let title = Line::from(vec![
        Span::raw("knobs "),
        Span::styled(KnobKind::Load.tag(), Style::default().fg(Color::Cyan)),
        Span::raw(" "),
        Span::styled(KnobKind::Live.tag(), Style::default().fg(Color::Green)),
        Span::raw(" "),
        Span::styled(KnobKind::Engine.tag(), Style::default().fg(Color::Yellow)),
    ]);
    frame.render_widget(List::new(items).block(Block::bordered().title(title)), area);
}

fn draw_log(frame: &mut Frame, app: &App, area: Rect) {
    let rows = area.height.saturating_sub(2) as usize;
    let lines: Vec<Line> = app
        .events
        .iter()
        .rev()
        .take(rows)
        .rev()
        .map(|e| Line::raw(format!("{:>6.1}s {}", e.t, e.text)))
        .collect();
    frame.render_widget(
        Paragraph::new(lines).block(Block::bordered().title("events")),
        area,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::{Knob, Step};
    use crate::keys::{handle, key_named};

    fn app() -> App {
        let knob = |name: &str, value: &str, kind| Knob {
            name: name.into(),
            value: value.into(),
            kind,
            step: Step::Scale {
                factor: 2.0,
                integer: true,
            },
        };
        let mut app = App::new(
            "online all-MiniLM-L6-v2".into(),
            vec![
                knob("rate", "200", KnobKind::Load),
                knob("max_batch_tokens", "8192", KnobKind::Live),
                knob("threads", "2", KnobKind::Engine),
            ],
            100.0,
        );
        for t in 1..=60 {
            let after = t > 30;
            app.push(Point {
                t: t as f64,
                offered: 200.0,
                achieved: 199.0,
                goodput: if after { 150.0 } else { 199.0 },
                p50_ms: Some(4.0),
                p99_ms: Some(if after { 140.0 } else { 20.0 }),
                batch_tokens: Some(if after { 31.0 } else { 90.0 }),
                ..Point::default()
            });
        }
        app.changed(30.0, "max_batch_tokens", "32");
        app
    }

    fn render(app: &App, w: u16, h: u16) -> String {
        screen_text(app, w, h)
    }

    #[test]
    fn the_screen_at_80x24_shows_charts_knobs_log_and_help() {
        let screen = render(&app(), 80, 24);
        for want in [
            "LIVE",
            "req/s",
            "good 150",
            "latency ms",
            "p99 140",
            "batch tokens",
            "queued seqs",
            "max_batch_tokens",
            "32",
            "set max_batch_tokens=32",
            "saturation",
            "quit",
        ] {
            assert!(screen.contains(want), "{want} missing from\n{screen}");
        }
        // Four charts at this size; the rest need a larger screen.
        assert!(!screen.contains("padding %"), "{screen}");
        let large = render(&app(), 160, 50);
        assert!(
            large.contains("padding %") && large.contains("plans /s"),
            "{large}"
        );
    }

    #[test]
    fn the_selected_knob_shows_what_is_typed() {
        let mut app = app();
        for k in ["down", "enter", "5", "1", "2"] {
            handle(&mut app, key_named(k).unwrap());
        }
        let screen = render(&app, 80, 24);
        assert!(screen.contains("512_"), "{screen}");
        assert!(
            screen.contains("apply") && screen.contains("cancel"),
            "{screen}"
        );
    }

    #[test]
    fn no_key_or_size_panics() {
        let mut app = app();
        let mut keys: Vec<String> = (32u8..127).map(|c| (c as char).to_string()).collect();
        keys.extend(
            [
                "up",
                "down",
                "left",
                "right",
                "enter",
                "esc",
                "tab",
                "backspace",
            ]
            .map(String::from),
        );
        let sizes = [
            (1, 1),
            (0, 0),
            (10, 3),
            (40, 10),
            (80, 24),
            (63, 19),
            (200, 60),
        ];
        for (i, k) in keys.iter().enumerate() {
            let _ = handle(&mut app, key_named(k).unwrap());
            let (w, h) = sizes[i % sizes.len()];
            render(&app, w, h);
        }
        let mut empty = App::new(String::new(), Vec::new(), 1.0);
        for k in &keys {
            let _ = handle(&mut empty, key_named(k).unwrap());
        }
        for (w, h) in sizes {
            render(&empty, w, h);
        }
    }
}
