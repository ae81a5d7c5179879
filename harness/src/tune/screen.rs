//! The two ways a session is driven: a terminal (keys through the key table, the screen redrawn each tick and on
//! every key or resize), or headless (a script's timed actions). Both capture the screen as text before each knob
//! change and at the end.

use std::time::Duration;

use anyhow::Result;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;
use tui::ratatui::crossterm::event::{self, Event, KeyEventKind};
use tui::Command;

use super::control::Tuner;
use super::script::{Action, Do};

/// The screen as text at a moment of the run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Screen {
    pub t: f64,
    pub label: String,
    pub text: String,
}

/// The size screens are captured at: the smallest the screen is made for.
const CAPTURE: (u16, u16) = (80, 24);

fn capture(tuner: &Tuner, label: String) -> Screen {
    Screen {
        t: tuner.elapsed(),
        label,
        text: tui::screen_text(&tuner.app, CAPTURE.0, CAPTURE.1),
    }
}

fn secs(s: f64) -> Duration {
    Duration::try_from_secs_f64(s.clamp(0.0, 1e7)).unwrap_or_default()
}

/// Runs `actions` at their times for `duration_s`, a tick every `tick`.
pub async fn headless(
    tuner: &mut Tuner,
    actions: Vec<Action>,
    duration_s: f64,
    tick: Duration,
) -> Result<Vec<Screen>> {
    let start = Instant::now() - secs(tuner.elapsed());
    let end = start + secs(duration_s);
    let mut ticker = tokio::time::interval(tick);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut screens = Vec::new();
    let mut actions = actions.into_iter().peekable();
    loop {
        let next_at = actions.peek().map(|a| start + secs(a.at_s));
        tokio::select! {
            _ = ticker.tick() => tuner.tick().await,
            _ = tokio::time::sleep_until(next_at.unwrap_or(end)), if next_at.is_some() => {
                let Some(action) = actions.next() else { continue };
                match action.what {
                    Do::Set(pairs) => {
                        let label = pairs.iter().map(|(n, v)| format!("{n}={v}")).collect::<Vec<_>>();
                        screens.push(capture(tuner, format!("before {}", label.join(" "))));
                        for (name, value) in pairs {
                            tuner.command(Command::Set { name, value }).await;
                        }
                    }
                    Do::Key(key) => {
                        if let Some(command) = tui::handle(&mut tuner.app, key) {
                            if !tuner.command(command).await {
                                break;
                            }
                        }
                    }
                }
            }
            _ = tokio::time::sleep_until(end) => break,
        }
    }
    screens.push(capture(tuner, "end".into()));
    Ok(screens)
}

/// Runs on the terminal until `q` (or `duration_s`, when given).
pub async fn interactive(
    tuner: &mut Tuner,
    duration_s: Option<f64>,
    tick: Duration,
) -> Result<Vec<Screen>> {
    let mut terminal = tui::ratatui::init();
    let result = drive(&mut terminal, tuner, duration_s, tick).await;
    tui::ratatui::restore();
    result
}

async fn drive(
    terminal: &mut tui::ratatui::DefaultTerminal,
    tuner: &mut Tuner,
    duration_s: Option<f64>,
    tick: Duration,
) -> Result<Vec<Screen>> {
    let (tx, mut rx) = tokio::sync::mpsc::channel(64);
    // Terminal input blocks: read it on a thread of its own. It ends with the process.
    std::thread::Builder::new()
        .name("bench-tune-keys".into())
        .spawn(move || {
            while let Ok(e) = event::read() {
                if tx.blocking_send(e).is_err() {
                    break;
                }
            }
        })?;
    let end = duration_s.map(|d| Instant::now() + secs(d));
    let mut ticker = tokio::time::interval(tick);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut screens = Vec::new();
    loop {
        terminal.draw(|f| tui::draw(f, &tuner.app))?;
        tokio::select! {
            _ = ticker.tick() => tuner.tick().await,
            e = rx.recv() => match e {
                Some(Event::Key(key)) if key.kind == KeyEventKind::Press => {
                    let before = capture(tuner, String::new());
                    if let Some(command) = tui::handle(&mut tuner.app, key) {
                        if let Command::Set { name, value } = &command {
                            screens.push(Screen { label: format!("before {name}={value}"), ..before });
                        }
                        if !tuner.command(command).await {
                            break;
                        }
                    }
                }
                // A resize (or any other event) redraws at the new size.
                Some(_) => {}
                None => break,
            },
            _ = tokio::time::sleep_until(end.unwrap_or_else(Instant::now)), if end.is_some() => break,
        }
    }
    screens.push(capture(tuner, "end".into()));
    Ok(screens)
}
