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

/// transformers' `all_special_tokens` for the tokenizer in `dir`: the named tokens of `tokenizer_config.json`,
/// each overridden by `special_tokens_map.json`'s (a token is a string or an `AddedToken` object's `content`; null
/// names none), then the extra ones (`extra_special_tokens`, a list or a name → token object, else the older
/// `additional_special_tokens`). Where neither file names any, the added tokens `tokenizer.json` marks special
/// stand in for the defaults a named tokenizer class would supply (transformers then takes the class's, which for
/// the classes that have them are the tokens such a file marks).
pub fn special_tokens(dir: &Path, tokenizer_json: &Path) -> Result<Vec<String>> {
    let mut merged = Map::new();
    for file in ["tokenizer_config.json", "special_tokens_map.json"] {
        if let Value::Object(m) = read(&dir.join(file))? {
            merged.extend(m);
        }
    }
    let extra = match merged.get("extra_special_tokens") {
        Some(v) if !v.is_null() => Some(v),
        _ => merged.get("additional_special_tokens"),
    };
    let extra: Vec<&Value> = match extra {
        Some(Value::Array(list)) => list.iter().collect(),
        Some(Value::Object(named)) => named.values().collect(),
        _ => Vec::new(),
    };
    let mut tokens: Vec<String> = NAMED
        .iter()
        .filter_map(|key| merged.get(*key))
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

    #[test]
    fn named_tokens_come_from_the_config_then_the_map_then_the_extras() {
        let config = json!({"eos_token": {"content": "</s>", "special": true}, "pad_token": "<pad>",
            "sep_token": "[SEP]", "additional_special_tokens": ["<a>"], "model_max_length": 8});
        assert_eq!(
            named(Some(config.clone()), None),
            ["</s>", "[SEP]", "<pad>", "<a>"]
        );
        // The map overrides the config key by key; null names none; the newer extras replace the older.
        let map = json!({"sep_token": null, "extra_special_tokens": {"image": "<img>"}});
        assert_eq!(named(Some(config), Some(map)), ["</s>", "<pad>", "<img>"]);
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
