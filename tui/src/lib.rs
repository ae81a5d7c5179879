//! The live tuning screen of `bench tune`: the screen's state ([`App`]: time series, knobs, marks, event log),
//! the widgets that draw it ([`draw`]) and the one key table ([`KEYS`]) that both handles keys and writes the
//! help bar. It knows nothing of engines or load: the harness feeds it [`Point`]s and carries out the
//! [`Command`]s its keys produce, so the same state runs in a terminal or headless.

mod app;
mod keys;
mod widgets;

pub use app::{App, Command, Event, Knob, KnobKind, Mark, Point, Step};
pub use keys::{handle, help_line, key_named, Action, Binding, INPUT_KEYS, KEYS};
pub use ratatui;
pub use widgets::{draw, screen_text};
