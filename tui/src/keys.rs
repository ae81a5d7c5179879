//! One key table: it decides what each key does and writes the help bar, so the two cannot disagree.

use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};

use crate::app::{App, Command};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    SelectPrevious,
    SelectNext,
    Increase,
    Decrease,
    Type,
    Pause,
    Find,
    Save,
    Quit,
    /// Typing a value.
    Apply,
    Cancel,
    Erase,
}

pub struct Binding {
    pub keys: &'static [KeyCode],
    /// As shown in the help bar.
    pub label: &'static str,
    pub what: &'static str,
    pub action: Action,
}

/// The keys while no value is being typed, in help-bar order.
pub const KEYS: &[Binding] = &[
    Binding {
        keys: &[KeyCode::Up, KeyCode::Char('k')],
        label: "↑↓",
        what: "knob",
        action: Action::SelectPrevious,
    },
    Binding {
        keys: &[KeyCode::Down, KeyCode::Char('j'), KeyCode::Tab],
        label: "",
        what: "",
        action: Action::SelectNext,
    },
    Binding {
        keys: &[KeyCode::Right, KeyCode::Char('+'), KeyCode::Char('l')],
        label: "←→",
        what: "step",
        action: Action::Increase,
    },
    Binding {
        keys: &[KeyCode::Left, KeyCode::Char('-'), KeyCode::Char('h')],
        label: "",
        what: "",
        action: Action::Decrease,
    },
    Binding {
        keys: &[KeyCode::Enter, KeyCode::Char('e')],
        label: "⏎",
        what: "type",
        action: Action::Type,
    },
    Binding {
        keys: &[KeyCode::Char('p'), KeyCode::Char(' ')],
        label: "p",
        what: "pause",
        action: Action::Pause,
    },
    Binding {
        keys: &[KeyCode::Char('f')],
        label: "f",
        what: "saturation",
        action: Action::Find,
    },
    Binding {
        keys: &[KeyCode::Char('s')],
        label: "s",
        what: "save",
        action: Action::Save,
    },
    Binding {
        keys: &[KeyCode::Char('q'), KeyCode::Esc],
        label: "q",
        what: "quit",
        action: Action::Quit,
    },
];

/// The keys while a value is being typed (any other printable character is typed).
pub const INPUT_KEYS: &[Binding] = &[
    Binding {
        keys: &[KeyCode::Enter],
        label: "⏎",
        what: "apply",
        action: Action::Apply,
    },
    Binding {
        keys: &[KeyCode::Esc],
        label: "esc",
        what: "cancel",
        action: Action::Cancel,
    },
    Binding {
        keys: &[KeyCode::Backspace],
        label: "⌫",
        what: "erase",
        action: Action::Erase,
    },
];

fn lookup(table: &[Binding], code: KeyCode) -> Option<Action> {
    table
        .iter()
        .find(|b| b.keys.contains(&code))
        .map(|b| b.action)
}

/// Handles one key: moves the selection or the typing on the screen, and returns what the harness is to do.
pub fn handle(app: &mut App, key: KeyEvent) -> Option<Command> {
    if key.modifiers.contains(KeyModifiers::CONTROL) && key.code == KeyCode::Char('c') {
        return Some(Command::Quit);
    }
    if let Some(typed) = app.input.as_mut() {
        match lookup(INPUT_KEYS, key.code) {
            Some(Action::Apply) => {
                let value = typed.trim().to_owned();
                app.input = None;
                let knob = app.knobs.get(app.selected)?;
                return (!value.is_empty()).then(|| Command::Set {
                    name: knob.name.clone(),
                    value,
                });
            }
            Some(Action::Cancel) => app.input = None,
            Some(Action::Erase) => {
                typed.pop();
            }
            _ => {
                if let KeyCode::Char(c) = key.code {
                    typed.push(c);
                }
            }
        }
        return None;
    }
    let n = app.knobs.len();
    match lookup(KEYS, key.code)? {
        Action::SelectPrevious if n > 0 => app.selected = (app.selected + n - 1) % n,
        Action::SelectNext if n > 0 => app.selected = (app.selected + 1) % n,
        action @ (Action::Increase | Action::Decrease) => {
            let knob = app.knobs.get(app.selected)?;
            let value = knob.stepped(action == Action::Increase)?;
            return Some(Command::Set {
                name: knob.name.clone(),
                value,
            });
        }
        Action::Type if n > 0 => app.input = Some(String::new()),
        Action::Pause => return Some(Command::Pause(!app.paused)),
        Action::Find => return Some(Command::FindSaturation),
        Action::Save => return Some(Command::Save),
        Action::Quit => return Some(Command::Quit),
        _ => {}
    }
    None
}

/// The help bar, from the table in use.
pub fn help_line(app: &App) -> Line<'static> {
    let table = if app.input.is_some() {
        INPUT_KEYS
    } else {
        KEYS
    };
    let mut spans = Vec::new();
    for b in table.iter().filter(|b| !b.label.is_empty()) {
        spans.push(Span::styled(
            format!(" {} ", b.label),
            Style::default()
                .fg(Color::Black)
                .bg(Color::Gray)
                .add_modifier(Modifier::BOLD),
        ));
        spans.push(Span::raw(format!(" {} ", b.what)));
    }
    Line::from(spans)
}

/// A key by the name a headless script gives it: a character (`f`), or `up`, `down`, `left`, `right`, `enter`,
/// `esc`, `tab`, `backspace`, `space`.
pub fn key_named(name: &str) -> Option<KeyEvent> {
    let code = match name.to_ascii_lowercase().as_str() {
        "up" => KeyCode::Up,
        "down" => KeyCode::Down,
        "left" => KeyCode::Left,
        "right" => KeyCode::Right,
        "enter" => KeyCode::Enter,
        "esc" => KeyCode::Esc,
        "tab" => KeyCode::Tab,
        "backspace" => KeyCode::Backspace,
        "space" => KeyCode::Char(' '),
        _ => {
            let mut chars = name.chars();
            let c = chars.next()?;
            if chars.next().is_some() {
                return None;
            }
            KeyCode::Char(c)
        }
    };
    Some(KeyEvent::new(code, KeyModifiers::NONE))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::{Knob, KnobKind, Step};

    fn app() -> App {
        let knob = |name: &str, value: &str, step| Knob {
            name: name.into(),
            value: value.into(),
            kind: KnobKind::Live,
            step,
        };
        App::new(
            "t".into(),
            vec![
                knob(
                    "rate",
                    "100",
                    Step::Scale {
                        factor: 1.25,
                        integer: false,
                    },
                ),
                knob(
                    "max_batch_tokens",
                    "512",
                    Step::Scale {
                        factor: 2.0,
                        integer: true,
                    },
                ),
            ],
            100.0,
        )
    }

    fn press(app: &mut App, name: &str) -> Option<Command> {
        handle(app, key_named(name).unwrap())
    }

    #[test]
    fn keys_select_step_and_type_values() {
        let mut app = app();
        assert_eq!(press(&mut app, "down"), None);
        assert_eq!(app.selected, 1);
        let set = |v: &str| {
            Some(Command::Set {
                name: "max_batch_tokens".into(),
                value: v.into(),
            })
        };
        assert_eq!(press(&mut app, "right"), set("1024"));
        assert_eq!(press(&mut app, "-"), set("256"));
        assert_eq!(press(&mut app, "enter"), None);
        for k in ["3", "x", "backspace", "2"] {
            assert_eq!(press(&mut app, k), None, "typing {k}");
        }
        // `q` while typing is typed, not quit.
        assert_eq!(app.input.as_deref(), Some("32"));
        assert_eq!(press(&mut app, "enter"), set("32"));
        assert_eq!(app.input, None);
        assert_eq!(press(&mut app, "up"), None);
        assert_eq!(app.selected, 0);
        assert_eq!(press(&mut app, "p"), Some(Command::Pause(true)));
        assert_eq!(press(&mut app, "f"), Some(Command::FindSaturation));
        assert_eq!(press(&mut app, "s"), Some(Command::Save));
        assert_eq!(press(&mut app, "q"), Some(Command::Quit));
        assert_eq!(key_named("nonsense"), None);
    }

    #[test]
    fn the_help_bar_is_the_key_table() {
        let mut app = app();
        let text: String = help_line(&app)
            .spans
            .iter()
            .map(|s| s.content.as_ref())
            .collect();
        for b in KEYS.iter().filter(|b| !b.label.is_empty()) {
            assert!(text.contains(b.label) && text.contains(b.what), "{text}");
            // What the bar names, the handler does.
            assert!(!b.keys.is_empty());
        }
        let acting: Vec<Action> = KEYS
            .iter()
            .filter_map(|b| lookup(KEYS, b.keys[0]))
            .collect();
        assert_eq!(acting, KEYS.iter().map(|b| b.action).collect::<Vec<_>>());
        app.input = Some(String::new());
        let text: String = help_line(&app)
            .spans
            .iter()
            .map(|s| s.content.as_ref())
            .collect();
        assert!(text.contains("apply") && !text.contains("quit"), "{text}");
    }
}
