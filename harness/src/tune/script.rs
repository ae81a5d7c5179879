//! Headless scripts: JSON Lines of timed actions, each a knob setting or a key of the screen's key table.
//! `{"at_s": 5, "set": {"max_batch_tokens": 512}}`, `{"at_s": 8, "set": {"rate": 300}}`, `{"at_s": 12, "key": "f"}`.

use std::path::Path;

use anyhow::{bail, Context, Result};
use serde::Deserialize;
use serde_json::Value;
use tui::ratatui::crossterm::event::KeyEvent;

#[derive(Clone, Debug, PartialEq)]
pub enum Do {
    /// Knob names and values, as typed on the screen.
    Set(Vec<(String, String)>),
    Key(KeyEvent),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Action {
    pub at_s: f64,
    pub what: Do,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Line {
    at_s: f64,
    set: Option<serde_json::Map<String, Value>>,
    key: Option<String>,
}

pub fn read(path: &Path) -> Result<Vec<Action>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    parse(&text).with_context(|| format!("script {}", path.display()))
}

/// The actions in time order.
pub fn parse(text: &str) -> Result<Vec<Action>> {
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        if raw.trim().is_empty() {
            continue;
        }
        let at = || format!("line {}", i + 1);
        let line: Line = serde_json::from_str(raw).with_context(at)?;
        if !(line.at_s.is_finite() && line.at_s >= 0.0) {
            bail!("{}: at_s must be a time in seconds from the start", at());
        }
        let what = match (line.set, line.key) {
            (Some(set), None) if !set.is_empty() => Do::Set(
                set.into_iter()
                    .map(|(name, v)| {
                        let value = match v {
                            Value::String(s) => s,
                            other => other.to_string(),
                        };
                        (name, value)
                    })
                    .collect(),
            ),
            (None, Some(key)) => match tui::key_named(&key) {
                Some(k) => Do::Key(k),
                None => bail!("{}: unknown key `{key}`", at()),
            },
            _ => bail!("{}: give either `set` (knobs) or `key`", at()),
        };
        out.push(Action {
            at_s: line.at_s,
            what,
        });
    }
    out.sort_by(|a, b| a.at_s.total_cmp(&b.at_s));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scripts_parse_and_say_what_is_wrong() {
        let actions = parse(
            "{\"at_s\": 8, \"set\": {\"rate\": 300, \"dtype\": \"bf16\"}}\n\n{\"at_s\": 5, \"key\": \"f\"}\n",
        )
        .unwrap();
        assert_eq!(actions.len(), 2);
        assert_eq!(actions[0].at_s, 5.0);
        assert_eq!(
            actions[1].what,
            Do::Set(vec![
                ("dtype".into(), "bf16".into()),
                ("rate".into(), "300".into())
            ])
        );
        for (bad, says) in [
            ("{\"at_s\": 1}", "either"),
            ("{\"at_s\": -1, \"key\": \"f\"}", "at_s"),
            ("{\"at_s\": 1, \"key\": \"ctrl-x\"}", "unknown key"),
            ("{\"at_s\": 1, \"sett\": {}}", "line 1"),
            ("nope", "line 1"),
        ] {
            let e = format!("{:#}", parse(bad).unwrap_err());
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
