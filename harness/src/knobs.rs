//! Knobs: engine settings set by name (`--set tokenizer=hf`) or swept (`--axis max_batch_tokens=256,1024`).
//! [`EngineConfig`] is read through its serde form, so every field it has — including ones added later — is a
//! knob without code here, named as its `--flag` (with `_`).

use std::collections::BTreeMap;

use engine::EngineConfig;
use serde_json::Value;

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum KnobError {
    #[error("`{0}` is not NAME=VALUE")]
    Syntax(String),
    #[error("unknown knob `{name}`; the knobs are: {valid}")]
    Unknown { name: String, valid: String },
    /// `setting`: the knob at fault as typed (`max_batch_tokens=abc`), or all of them when only their
    /// combination is wrong.
    #[error("knob {setting}: {message}")]
    Invalid { setting: String, message: String },
    #[error("knob `{0}` is given twice")]
    Repeated(String),
}

/// One combination of knob values: name → JSON value, in name order.
pub type Knobs = BTreeMap<String, Value>;

/// A value as typed: JSON when it parses (`256`, `true`, `null`, `"x"`), else a plain string (`hf`).
pub fn value(raw: &str) -> Value {
    serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.to_owned()))
}

/// Parses `--set NAME=VALUE` and `--axis NAME=V1,V2,...` into the list of knob combinations to run (the
/// cartesian product of the axes, each with every `--set`), checking each combination over `base`.
pub fn combinations(
    sets: &[String],
    axes: &[String],
    base: &EngineConfig,
) -> Result<Vec<Knobs>, KnobError> {
    let valid = crate::config::field_names();
    let split = |arg: &String| -> Result<(String, String), KnobError> {
        let (name, raw) = arg
            .split_once('=')
            .ok_or_else(|| KnobError::Syntax(arg.clone()))?;
        let name = name.trim().replace('-', "_");
        if !valid.contains(&name) {
            return Err(KnobError::Unknown {
                name,
                valid: valid.join(", "),
            });
        }
        Ok((name, raw.trim().to_owned()))
    };
    let mut fixed = Knobs::new();
    for arg in sets {
        let (name, raw) = split(arg)?;
        if fixed.insert(name.clone(), value(&raw)).is_some() {
            return Err(KnobError::Repeated(name));
        }
    }
    let mut combos = vec![fixed];
    for arg in axes {
        let (name, raw) = split(arg)?;
        if combos[0].contains_key(&name) {
            return Err(KnobError::Repeated(name));
        }
        let values: Vec<Value> = raw.split(',').map(|v| value(v.trim())).collect();
        combos = combos
            .into_iter()
            .flat_map(|c| {
                let name = &name;
                values.iter().map(move |v| {
                    let mut c = c.clone();
                    c.insert(name.clone(), v.clone());
                    c
                })
            })
            .collect();
    }
    for c in &combos {
        apply(c, base.clone())?;
    }
    Ok(combos)
}

/// `base` with the knobs set, validated. An error names the knob at fault with the value given: the first that
/// fails on its own, else (only their combination is wrong) all of them.
pub fn apply(knobs: &Knobs, base: EngineConfig) -> Result<EngineConfig, KnobError> {
    build(knobs.iter(), &base).map_err(|message| {
        let alone = knobs
            .iter()
            .find(|knob| build(std::iter::once(*knob), &base).is_err());
        let setting = match alone {
            Some((name, v)) => show(name, v),
            None => knobs
                .iter()
                .map(|(name, v)| show(name, v))
                .collect::<Vec<_>>()
                .join(" "),
        };
        KnobError::Invalid { setting, message }
    })
}

/// `base` with `knobs` set, through its serde form, validated.
fn build<'a>(
    knobs: impl Iterator<Item = (&'a String, &'a Value)>,
    base: &EngineConfig,
) -> Result<EngineConfig, String> {
    let mut json = serde_json::to_value(base).map_err(|e| e.to_string())?;
    if let Value::Object(map) = &mut json {
        for (name, v) in knobs {
            map.insert(name.clone(), v.clone());
        }
    }
    let config: EngineConfig = serde_json::from_value(json).map_err(|e| e.to_string())?;
    config.validate().map_err(|e| e.to_string())?;
    Ok(config)
}

/// `name=value` as it was typed: a string without its JSON quotes.
fn show(name: &str, v: &Value) -> String {
    match v {
        Value::String(s) => format!("{name}={s}"),
        other => format!("{name}={other}"),
    }
}

/// `max_batch_tokens=256 overlap=false`, or `defaults`.
pub fn label(knobs: &Knobs, axes: &[String]) -> String {
    let parts: Vec<String> = knobs
        .iter()
        .filter(|(k, _)| axes.is_empty() || axes.contains(k))
        .map(|(k, v)| show(k, v))
        .collect();
    if parts.is_empty() {
        "defaults".into()
    } else {
        parts.join(" ")
    }
}

/// The names swept by `--axis` arguments, for labels.
pub fn axis_names(axes: &[String]) -> Vec<String> {
    axes.iter()
        .filter_map(|a| a.split_once('=').map(|(n, _)| n.trim().replace('-', "_")))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn axes_multiply_and_sets_apply_to_each() {
        let combos = combinations(
            &s(&["tokenizer=hf", "replicas=2"]),
            &s(&["max_batch_tokens=256,1024,8192", "overlap=true,false"]),
            &EngineConfig::default(),
        )
        .unwrap();
        assert_eq!(combos.len(), 6);
        let config = apply(&combos[1], EngineConfig::default()).unwrap();
        assert_eq!(config.max_batch_tokens, 256);
        assert!(!config.overlap);
        assert_eq!(config.tokenizer, engine::tokenizer::TokenizerKind::Hf);
        assert_eq!(config.replicas, 2);
        assert_eq!(
            label(
                &combos[1],
                &axis_names(&s(&["max_batch_tokens=1", "overlap=1"]))
            ),
            "max_batch_tokens=256 overlap=false"
        );
    }

    #[test]
    fn every_engine_config_field_is_a_knob() {
        let names = crate::config::field_names();
        for field in [
            "threads",
            "max_batch_tokens",
            "max_batch_seqs",
            "max_wait_ms",
            "overlap",
            "tokenizer",
            "max_seq_length",
            "replicas",
        ] {
            assert!(
                names.contains(&field.to_owned()),
                "{field} missing from {names:?}"
            );
        }
        let base = EngineConfig {
            max_seq_length: Some(64),
            ..EngineConfig::default()
        };
        let combos = combinations(
            &s(&["max_seq_length=null", "max-wait-ms=5", "capture=eager"]),
            &[],
            &base,
        )
        .unwrap();
        let config = apply(&combos[0], base).unwrap();
        assert_eq!((config.max_seq_length, config.max_wait_ms), (None, 5));
        assert_eq!(config.capture, engine::plan::CaptureMode::Startup);
    }

    #[test]
    fn bad_knobs_say_what_is_wrong() {
        let d = EngineConfig::default();
        let e = combinations(&s(&["batch_size=3"]), &[], &d).unwrap_err();
        assert!(
            e.to_string().contains("unknown knob `batch_size`")
                && e.to_string().contains("max_batch_tokens"),
            "{e}"
        );
        let e = combinations(&[], &s(&["tokenizer=fast,sentencepiece"]), &d)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("tokenizer") && e.contains("sentencepiece"),
            "{e}"
        );
        let e = combinations(&s(&["max_batch_seqs=0"]), &[], &d)
            .unwrap_err()
            .to_string();
        assert!(e.contains("at least 1"), "{e}");
        // 0 tokens is `auto`, as the word is.
        let auto = combinations(&s(&["max_batch_tokens=auto"]), &[], &d).unwrap();
        assert!(apply(&auto[0], d.clone()).unwrap().auto_budget());
        let e = combinations(&s(&["replicas=0"]), &[], &d)
            .unwrap_err()
            .to_string();
        assert!(e.contains("replicas"), "{e}");
        assert_eq!(
            combinations(&s(&["threads"]), &[], &d).unwrap_err(),
            KnobError::Syntax("threads".into())
        );
    }

    #[test]
    fn knob_errors_show_the_bad_value_not_null() {
        let d = EngineConfig::default();
        let e = combinations(&s(&["overlap=true", "max_batch_tokens=abc"]), &[], &d)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("knob max_batch_tokens=abc: "), "{e}");
        let e = combinations(&s(&["max_batch_seqs=0"]), &[], &d)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("knob max_batch_seqs=0: "), "{e}");
        assert!(!e.contains("null"), "{e}");
        assert_eq!(
            combinations(&s(&["threads=1"]), &s(&["threads=2,3"]), &d).unwrap_err(),
            KnobError::Repeated("threads".into())
        );
    }
}
