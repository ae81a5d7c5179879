//! What the screen shows, kept apart from how it is drawn.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

/// One tick of the run (one second by default): what was offered, what came back, what the engine did.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Point {
    /// Seconds since the run started, at the tick's end.
    pub t: f64,
    /// Requests/s sent, answered, and answered within the SLO.
    pub offered: f64,
    pub achieved: f64,
    pub goodput: f64,
    /// Tokens/s answered.
    pub tokens_per_s: f64,
    /// Latency of the requests answered in the tick, from their scheduled time.
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    /// Sequences queued per class (online, batch) at the tick's end.
    pub queued: [f64; 2],
    /// Mean tokens and sequences of the batches the engine formed in the tick.
    pub batch_tokens: Option<f64>,
    pub batch_seqs: Option<f64>,
    /// Bucket tokens beyond the batches' own, as a share of the bucket tokens.
    pub padding_share: Option<f64>,
    /// Forward passes in the tick that replayed a captured plan, and that captured one.
    pub replays: f64,
    pub captures: f64,
    /// Requests refused, failed, timed out in the tick.
    pub refused: u64,
    pub errors: u64,
    pub timeouts: u64,
}

/// How a knob takes effect.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KnobKind {
    /// The generator's: offered load.
    Load,
    /// The scheduler's, applied live.
    Live,
    /// Needs a new engine, built beside the running one.
    Engine,
}

impl KnobKind {
    pub fn tag(self) -> &'static str {
        match self {
            KnobKind::Load => "load",
            KnobKind::Live => "live",
            KnobKind::Engine => "swap",
        }
    }
}

/// How the up/down keys step a knob.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// Multiply or divide (token budgets, rates), rounded to an integer when `integer`.
    Scale {
        factor: f64,
        integer: bool,
    },
    /// Add or subtract.
    Add(f64),
    Toggle,
    /// The next or previous of these values.
    Choice(Vec<String>),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Knob {
    pub name: String,
    pub value: String,
    pub kind: KnobKind,
    pub step: Step,
}

impl Knob {
    /// The value one step up (or down); `None` when the value cannot be stepped (not a number, or at the end).
    pub fn stepped(&self, up: bool) -> Option<String> {
        match &self.step {
            Step::Scale { factor, integer } => {
                let v: f64 = self.value.trim().parse().ok()?;
                let next = if up { v * factor } else { v / factor };
                Some(number(next.max(1.0), *integer))
            }
            Step::Add(d) => {
                let v: f64 = self.value.trim().parse().ok()?;
                let next = if up { v + d } else { (v - d).max(0.0) };
                Some(number(next, d.fract() == 0.0))
            }
            Step::Toggle => match self.value.as_str() {
                "true" => Some("false".into()),
                "false" => Some("true".into()),
                _ => None,
            },
            Step::Choice(values) => {
                let at = values.iter().position(|v| *v == self.value)?;
                let next = if up { at + 1 } else { at.checked_sub(1)? };
                values.get(next).cloned()
            }
        }
    }
}

fn number(v: f64, integer: bool) -> String {
    if integer {
        format!("{}", v.round() as u64)
    } else {
        format!("{}", (v * 100.0).round() / 100.0)
    }
}

/// A knob change (or another moment worth a line on the charts).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Mark {
    pub t: f64,
    pub label: String,
}

/// A line of the event log.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Event {
    pub t: f64,
    pub text: String,
}

/// What a key asks the harness to do.
#[derive(Clone, Debug, PartialEq)]
pub enum Command {
    Set { name: String, value: String },
    Pause(bool),
    FindSaturation,
    Save,
    Quit,
}

/// Events kept for the log.
const KEEP_EVENTS: usize = 200;

/// The screen's state.
pub struct App {
    pub title: String,
    /// Every tick since the start; the charts show the last `window_s` of it.
    pub series: Vec<Point>,
    pub window_s: f64,
    pub slo_ms: f64,
    pub knobs: Vec<Knob>,
    pub selected: usize,
    pub marks: Vec<Mark>,
    pub events: VecDeque<Event>,
    pub paused: bool,
    /// A value being typed for the selected knob.
    pub input: Option<String>,
    /// A line of state under the title (a search in progress, its result).
    pub status: String,
    pub now: f64,
}

impl App {
    pub fn new(title: String, knobs: Vec<Knob>, slo_ms: f64) -> App {
        App {
            title,
            series: Vec::new(),
            window_s: 180.0,
            slo_ms,
            knobs,
            selected: 0,
            marks: Vec::new(),
            events: VecDeque::new(),
            paused: false,
            input: None,
            status: String::new(),
            now: 0.0,
        }
    }

    pub fn push(&mut self, point: Point) {
        self.now = self.now.max(point.t);
        self.series.push(point);
    }

    pub fn log(&mut self, t: f64, text: String) {
        if self.events.len() == KEEP_EVENTS {
            self.events.pop_front();
        }
        self.events.push_back(Event { t, text });
    }

    /// A knob's new value took effect: shown in the panel, marked on the charts, logged.
    pub fn changed(&mut self, t: f64, name: &str, value: &str) {
        if let Some(k) = self.knobs.iter_mut().find(|k| k.name == name) {
            k.value = value.to_owned();
        }
        let label = format!("{name}={value}");
        self.log(t, format!("set {label}"));
        self.marks.push(Mark { t, label });
    }

    pub fn knob(&self, name: &str) -> Option<&Knob> {
        self.knobs.iter().find(|k| k.name == name)
    }

    /// The points within the chart window.
    pub fn visible(&self) -> &[Point] {
        let from = self.now - self.window_s;
        let start = self.series.partition_point(|p| p.t < from);
        &self.series[start..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn knob(value: &str, step: Step) -> Knob {
        Knob {
            name: "k".into(),
            value: value.into(),
            kind: KnobKind::Live,
            step,
        }
    }

    #[test]
    fn knobs_step_within_their_kind() {
        let budget = Step::Scale {
            factor: 2.0,
            integer: true,
        };
        assert_eq!(knob("512", budget.clone()).stepped(true).unwrap(), "1024");
        assert_eq!(knob("1", budget.clone()).stepped(false).unwrap(), "1");
        assert_eq!(knob("null", budget).stepped(true), None);
        assert_eq!(knob("0", Step::Add(5.0)).stepped(false).unwrap(), "0");
        assert_eq!(knob("true", Step::Toggle).stepped(true).unwrap(), "false");
        let dtype = Step::Choice(vec!["f32".into(), "bf16".into()]);
        assert_eq!(knob("f32", dtype.clone()).stepped(true).unwrap(), "bf16");
        assert_eq!(knob("f32", dtype.clone()).stepped(false), None);
        assert_eq!(knob("bf16", dtype).stepped(true), None);
    }

    #[test]
    fn the_window_shows_the_last_minutes() {
        let mut app = App::new("t".into(), Vec::new(), 100.0);
        for t in 0..400 {
            app.push(Point {
                t: t as f64,
                ..Point::default()
            });
        }
        let v = app.visible();
        assert_eq!(v.len(), 181);
        assert_eq!(v[0].t, 219.0);
    }
}
