//! The special tokens transformers names for a tokenizer (its `all_special_tokens`), which sentence-transformers
//! consults when it counts a prompt's tokens: a prompt's last token is left uncounted when it is one of them.

use std::path::Path;

use serde_json::{Map, Value};

use crate::error::Result;
use crate::model::read_json;

/// The special-token attributes transformers 5 keeps (`SPECIAL_TOKENS_ATTRIBUTES`), in its order.
const NAMED: [&str; 7] = [
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
];

/// transformers' `all_special_tokens` for the tokenizer in `dir`, as transformers 5 reads them (its
/// `_from_pretrained`): the named tokens of `tokenizer_config.json` — the seven standard ones and any other
/// `*_token` key naming a token (Gemma's `image_token`) —, each overridden by `special_tokens_map.json`'s where the
/// config has no `added_tokens_decoder` (a legacy save; its `extra_special_tokens` list then adds to the config's),
/// then the extra ones: `extra_special_tokens` (a list, or a name → token object whose entries are named tokens),
/// else, where that is empty, the older `additional_special_tokens`. A token is a string or an `AddedToken`
/// object's `content`; null names none. Where neither file names any, the added tokens `tokenizer.json` marks
/// special stand in for the defaults a named tokenizer class would supply (transformers then takes the class's,
/// which for the classes that have them are the tokens such a file marks).
pub fn special_tokens(dir: &Path, tokenizer_json: &Path) -> Result<Vec<String>> {
    let mut merged = match read(&dir.join("tokenizer_config.json"))? {
        Value::Object(config) => config,
        _ => Map::new(),
    };
    if !merged.contains_key("added_tokens_decoder") {
        if let Value::Object(map) = read(&dir.join("special_tokens_map.json"))? {
            for (key, value) in map {
                match (merged.get_mut(&key), value) {
                    (Some(Value::Array(extras)), Value::Array(more)) if key == EXTRA => {
                        for t in more {
                            if !extras.contains(&t) {
                                extras.push(t);
                            }
                        }
                    }
                    (_, value) => {
                        merged.insert(key, value);
                    }
                }
            }
        }
    }
    let truthy = |v: &&Value| match v {
        Value::Null => false,
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
        _ => true,
    };
    let extra: Vec<&Value> = match merged
        .get(EXTRA)
        .filter(truthy)
        .or_else(|| merged.get("additional_special_tokens"))
    {
        Some(Value::Array(list)) => list.iter().collect(),
        Some(Value::Object(named)) => named.values().collect(),
        _ => Vec::new(),
    };
    // Standard names and a model's own (`image_token`: `add_bos_token`'s boolean is no token).
    let named = merged
        .iter()
        .filter(|(key, _)| NAMED.contains(&key.as_str()) || key.ends_with("_token"));
    let mut tokens: Vec<String> = named
        .map(|(_, v)| v)
        .chain(extra)
        .filter_map(content)
        .collect();
    if tokens.is_empty() {
        let file = read(tokenizer_json)?;
        let added = file["added_tokens"].as_array().map(Vec::as_slice);
        tokens = added
            .unwrap_or_default()
            .iter()
            .filter(|t| t["special"].as_bool() == Some(true))
            .filter_map(content)
            .collect();
    }
    Ok(tokens)
}

/// transformers 5's name for the extra special tokens (4's: `additional_special_tokens`).
const EXTRA: &str = "extra_special_tokens";

/// A token as these files write it: a string, or an `AddedToken`'s object.
fn content(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => o.get("content")?.as_str().map(str::to_owned),
        _ => None,
    }
}

/// A JSON file's value; null where the file is absent.
fn read(path: &Path) -> Result<Value> {
    match path.is_file() {
        true => read_json(path),
        false => Ok(Value::Null),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The tokens named by these files beside a `tokenizer.json` that flags `[SEP]` and `<x>` special.
    fn named(config: Option<Value>, map: Option<Value>) -> Vec<String> {
        let dir = tempfile::tempdir().expect("temp dir");
        let flagged = json!({"added_tokens": [
            {"id": 0, "content": "[SEP]", "special": true},
            {"id": 1, "content": "<x>", "special": true},
            {"id": 2, "content": "<y>", "special": false}]});
        let tokenizer = dir.path().join("tokenizer.json");
        std::fs::write(&tokenizer, flagged.to_string()).expect("write");
        for (file, v) in [
            ("tokenizer_config.json", config),
            ("special_tokens_map.json", map),
        ] {
            if let Some(v) = v {
                std::fs::write(dir.path().join(file), v.to_string()).expect("write");
            }
        }
        special_tokens(dir.path(), &tokenizer).expect("reads")
    }

    /// Sorted, for comparing sets.
    fn sorted(mut tokens: Vec<String>) -> Vec<String> {
        tokens.sort();
        tokens
    }

    #[test]
    fn named_tokens_come_from_the_config_then_the_map_then_the_extras() {
        let config = json!({"eos_token": {"content": "</s>", "special": true}, "pad_token": "<pad>",
            "sep_token": "[SEP]", "additional_special_tokens": ["<a>"], "extra_special_tokens": {},
            "image_token": "<img>", "add_bos_token": true, "model_max_length": 8});
        assert_eq!(
            sorted(named(Some(config.clone()), None)),
            ["</s>", "<a>", "<img>", "<pad>", "[SEP]"]
        );
        // A legacy save: the map overrides the config key by key; null names none; the newer extras replace
        // the older, a list of them adding to the config's.
        let map = json!({"sep_token": null, "extra_special_tokens": {"audio": "<aud>"}});
        assert_eq!(
            sorted(named(Some(config.clone()), Some(map))),
            ["</s>", "<aud>", "<img>", "<pad>"]
        );
        let mut listed = config.clone();
        listed["extra_special_tokens"] = json!(["<b>"]);
        let map = json!({"extra_special_tokens": ["<b>", "<c>"]});
        assert_eq!(
            sorted(named(Some(listed), Some(map))),
            ["</s>", "<b>", "<c>", "<img>", "<pad>", "[SEP]"]
        );
        // With `added_tokens_decoder` (every save since transformers 4.34) the map is not read.
        let mut current = config;
        current["added_tokens_decoder"] = json!({});
        let map = json!({"sep_token": null});
        assert_eq!(
            sorted(named(Some(current), Some(map))),
            ["</s>", "<a>", "<img>", "<pad>", "[SEP]"]
        );
    }

    #[test]
    fn without_named_tokens_the_files_special_flags_stand_in() {
        assert_eq!(named(None, None), ["[SEP]", "<x>"]);
        assert_eq!(
            named(Some(json!({"model_max_length": 8})), None),
            ["[SEP]", "<x>"]
        );
    }
}
