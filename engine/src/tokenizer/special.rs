//! The special tokens transformers names for a tokenizer (its `all_special_tokens`), which sentence-transformers
//! consults when it counts a prompt's tokens: a prompt's last token is left uncounted when it is one of them.

use std::path::Path;

use serde_json::{Map, Value};

use crate::error::Result;
use crate::model::read_json;

/// The special-token attributes transformers 5 keeps (`SPECIAL_TOKENS_ATTRIBUTES`).
const NAMED: [&str; 7] = [
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
];

/// transformers 5's name for the extra special tokens, and 4's.
const EXTRA: &str = "extra_special_tokens";
const ADDITIONAL: &str = "additional_special_tokens";

/// transformers' `all_special_tokens` for the tokenizer in `dir`, read in transformers 5.24's steps
/// (`_from_pretrained`, then `__init__`):
/// 1. `tokenizer_config.json` alone: `additional_special_tokens` become the extras where `extra_special_tokens` is
///    empty or absent; its own `*_token` keys naming a token (`image_token`), and the entries of an
///    `extra_special_tokens` object, become named tokens of the model.
/// 2. `special_tokens_map.json`, only for a legacy save (no `added_tokens_decoder`): each key over the config's, an
///    `extra_special_tokens` list added to the config's; an object of them again named tokens.
/// 3. `additional_special_tokens` become the extras where no `extra_special_tokens` is left; the `*_token` keys the
///    map brought become named tokens unless step 1 named that key.
///
/// The special tokens are the seven standard named ones, the model's named ones, and the extras. A token is a
/// string or an `AddedToken` object's `content`; null names none. Where the files name none at all, the added
/// tokens `tokenizer.json` marks special stand in for the defaults a named tokenizer class would supply
/// (transformers then takes the class's, which for the classes that have them are the tokens such a file marks).
/// A WordEmbeddings model's word list ([`super::WHITESPACE_CONFIG`]) has none.
pub fn special_tokens(dir: &Path, tokenizer_json: &Path) -> Result<Vec<String>> {
    if super::is_word_list(tokenizer_json) {
        return Ok(Vec::new());
    }
    let mut kw = match read(&dir.join("tokenizer_config.json"))? {
        Value::Object(config) => config,
        _ => Map::new(),
    };
    // Step 1: the config alone.
    if kw.contains_key(ADDITIONAL) && !kw.get(EXTRA).is_some_and(truthy) {
        rename(&mut kw, ADDITIONAL, EXTRA);
    }
    let mut model: Map<String, Value> = custom_tokens(&mut kw);
    model.extend(named_extras(&mut kw));
    // Step 2: a legacy save's map.
    if !kw.contains_key("added_tokens_decoder") {
        if let Value::Object(map) = read(&dir.join("special_tokens_map.json"))? {
            for (key, value) in map {
                match (kw.get_mut(&key), value) {
                    (Some(Value::Array(extras)), Value::Array(more)) if key == EXTRA => {
                        for t in more {
                            if !extras.contains(&t) {
                                extras.push(t);
                            }
                        }
                    }
                    (_, value) => {
                        kw.insert(key, value);
                    }
                }
            }
            model.extend(named_extras(&mut kw));
        }
    }
    // Step 3: `__init__`, where the config's own names win over the map's.
    if kw.contains_key(ADDITIONAL) && !kw.contains_key(EXTRA) {
        rename(&mut kw, ADDITIONAL, EXTRA);
    }
    let mut named = custom_tokens(&mut kw);
    named.extend(model);
    let extras = match kw.get(EXTRA) {
        Some(Value::Array(list)) => list.as_slice(),
        _ => &[],
    };
    let mut tokens: Vec<String> = NAMED
        .iter()
        .filter_map(|key| kw.get(*key))
        .chain(named.values())
        .chain(extras)
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

/// Python's truth of a value: null, an empty list or object, an empty string, zero and false are false.
fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64() != Some(0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

/// Takes `extra_special_tokens` out of `kw` where it is an object of named tokens (a list stays).
fn named_extras(kw: &mut Map<String, Value>) -> Map<String, Value> {
    match kw.get_mut(EXTRA) {
        Some(Value::Object(named)) => {
            let named = std::mem::take(named);
            kw.remove(EXTRA);
            named
        }
        _ => Map::new(),
    }
}

fn rename(kw: &mut Map<String, Value>, from: &str, to: &str) {
    if let Some(v) = kw.remove(from) {
        kw.insert(to.to_owned(), v);
    }
}

/// Takes out of `kw` the `*_token` keys beyond the seven standard ones whose value is a token (a string or an
/// `AddedToken` object; `add_bos_token`'s boolean is none).
fn custom_tokens(kw: &mut Map<String, Value>) -> Map<String, Value> {
    let keys: Vec<String> = kw
        .iter()
        .filter(|(k, v)| {
            k.ends_with("_token") && !NAMED.contains(&k.as_str()) && content(v).is_some()
        })
        .map(|(k, _)| k.clone())
        .collect();
    keys.into_iter()
        .filter_map(|k| kw.remove(&k).map(|v| (k, v)))
        .collect()
}

/// transformers' `special_tokens_map` as a chat template sees it: each of the seven named tokens that
/// `tokenizer_config.json` (else a legacy `special_tokens_map.json`) sets, by its attribute's name.
pub fn named_tokens(dir: &Path) -> Result<Vec<(&'static str, String)>> {
    let config = read(&dir.join("tokenizer_config.json"))?;
    let map = read(&dir.join("special_tokens_map.json"))?;
    Ok(NAMED
        .iter()
        .filter_map(|&name| {
            let token = config
                .get(name)
                .and_then(content)
                .or_else(|| map.get(name).and_then(content))?;
            Some((name, token))
        })
        .collect())
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

    /// Each case's tokens as transformers 5.24 lists them (`all_special_tokens`, sorted) for the same two files
    /// beside a `tokenizer.json`, on a config of `pad_token` `[PAD]` and what each case adds.
    #[test]
    fn the_steps_of_transformers_loading_are_kept_apart() {
        let cases = [
            // A non-empty object of extras keeps the older list too, which becomes the extras later.
            (
                json!({"extra_special_tokens": {"image_token": "the"}, "additional_special_tokens": ["a"]}),
                None,
                vec!["[PAD]", "a", "the"],
            ),
            // The config's older list became the extras before the map's older list came.
            (
                json!({"additional_special_tokens": ["a"]}),
                Some(json!({"additional_special_tokens": ["is"]})),
                vec!["[PAD]", "a"],
            ),
            (
                json!({"additional_special_tokens": ["a"]}),
                Some(json!({"extra_special_tokens": ["is"]})),
                vec!["[PAD]", "a", "is"],
            ),
            (
                json!({"extra_special_tokens": {"image_token": "the"}}),
                Some(json!({"extra_special_tokens": ["is"]})),
                vec!["[PAD]", "is", "the"],
            ),
            // The config names its own tokens before the map's are seen.
            (
                json!({"image_token": "the"}),
                Some(json!({"image_token": "is"})),
                vec!["[PAD]", "the"],
            ),
            (
                json!({}),
                Some(json!({"image_token": {"content": "is", "lstrip": false}})),
                vec!["[PAD]", "is"],
            ),
        ];
        for (mut config, map, want) in cases {
            config["pad_token"] = "[PAD]".into();
            assert_eq!(sorted(named(Some(config.clone()), map)), want, "{config}");
        }
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
