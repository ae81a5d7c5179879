//! The longest sequence sentence-transformers runs a model's inputs at: a Transformer module's
//! `sentence_bert_config.json` (else `tokenizer_config.json`), a StaticEmbedding's `tokenizer.json`.

use std::path::Path;

use serde::Deserialize;

use crate::error::{Error, Result};
use crate::model::read_json;

#[derive(Deserialize)]
struct SentenceBertFile {
    max_seq_length: Option<usize>,
    #[serde(default)]
    do_lower_case: bool,
}

/// The names sentence-transformers reads the Transformer module's config from, the first that exists.
const SENTENCE_CONFIGS: [&str; 7] = [
    "sentence_bert_config.json",
    "sentence_roberta_config.json",
    "sentence_distilbert_config.json",
    "sentence_camembert_config.json",
    "sentence_albert_config.json",
    "sentence_xlm-roberta_config.json",
    "sentence_xlnet_config.json",
];

/// A Transformer module's limit as sentence-transformers takes it: the one its config names, else the tokenizer's.
/// sentence-transformers reads the first of [`SENTENCE_CONFIGS`] that exists and is not empty (`{}`).
pub(super) fn sentence_max_length(root: &Path, tokenizer_path: &Path) -> Result<Option<usize>> {
    let mut sentence = None;
    for path in SENTENCE_CONFIGS.iter().map(|name| root.join(name)) {
        if path.is_file() {
            let value: serde_json::Value = read_json(&path)?;
            if value.as_object().is_some_and(|o| o.is_empty()) {
                continue;
            }
            let config = serde_json::from_value::<SentenceBertFile>(value).map_err(|source| {
                Error::Json {
                    path: path.clone(),
                    source,
                }
            })?;
            sentence = Some((config, path));
            break;
        }
    }
    if let Some((s, path)) = &sentence {
        if s.do_lower_case && !tokenizer_lowercases(tokenizer_path)? {
            return Err(Error::model(
                path,
                "unsupported: do_lower_case = true with a tokenizer that keeps case (sentence-transformers \
                 would lowercase the text first)",
            ));
        }
    }
    match sentence.and_then(|(s, _)| s.max_seq_length) {
        Some(n) => Ok(Some(n)),
        None => tokenizer_max_length(root),
    }
}

/// A StaticEmbedding's limit: none of its own (sentence-transformers' is infinite), the truncation its
/// `tokenizer.json` keeps if any. A file cutting from the left is refused: the engine cuts from the right unless a
/// request asks otherwise.
pub(super) fn tokenizer_truncation(path: &Path) -> Result<Option<usize>> {
    let json: serde_json::Value = read_json(path)?;
    let truncation = &json["truncation"];
    if truncation.is_null() {
        return Ok(None);
    }
    if truncation["direction"]
        .as_str()
        .is_some_and(|d| d != "Right")
    {
        return Err(Error::model(
            path,
            format!(
                "unsupported: truncation from the {} in tokenizer.json",
                truncation["direction"]
            ),
        ));
    }
    let max_length = truncation["max_length"]
        .as_u64()
        .ok_or_else(|| Error::model(path, "tokenizer.json's truncation has no max_length"))?;
    Ok(Some(usize::try_from(max_length).unwrap_or(usize::MAX)))
}

/// The tokenizer's `model_max_length` from `tokenizer_config.json`: where sentence-transformers takes the
/// sequence limit from when its own config names none. transformers writes 10^30 for "no limit" (too big for an
/// integer), read as unbounded; a whole number written as a float (`512.0`) is that number.
pub(super) fn tokenizer_max_length(root: &Path) -> Result<Option<usize>> {
    let path = root.join("tokenizer_config.json");
    if !path.is_file() {
        return Ok(None);
    }
    let config: serde_json::Value = read_json(&path)?;
    let limit = &config["model_max_length"];
    Ok(limit
        .as_u64()
        .map(|n| usize::try_from(n).unwrap_or(usize::MAX))
        .or_else(|| {
            limit
                .as_f64()
                .filter(|n| *n >= 1.0 && n.fract() == 0.0)
                // A float cast saturates: 10^30 becomes usize::MAX.
                .map(|n| n as usize)
        }))
}

/// Whether `tokenizer.json`'s normaliser lowercases (BERT's with `lowercase`, or a `Lowercase` step): then
/// sentence-transformers' `do_lower_case` changes nothing.
fn tokenizer_lowercases(path: &Path) -> Result<bool> {
    let json: serde_json::Value = read_json(path)?;
    let lowercases = |n: &serde_json::Value| match n["type"].as_str() {
        Some("Lowercase") => true,
        Some("BertNormalizer") => n["lowercase"].as_bool().unwrap_or(true),
        _ => false,
    };
    let normalizer = &json["normalizer"];
    Ok(lowercases(normalizer)
        || normalizer["normalizers"]
            .as_array()
            .is_some_and(|steps| steps.iter().any(lowercases)))
}
