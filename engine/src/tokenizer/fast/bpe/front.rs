//! What runs before the merges, by how the vocabulary spells its tokens: GPT-2's byte-level alphabet behind NFC
//! and a regex pre-tokeniser, or SentencePiece's text (spaces as `▁`) behind its normaliser steps and Metaspace or a
//! literal `Split`, or no pre-tokeniser at all (a whole text is one word).

use serde_json::Value;

use super::super::pretok::{PreTokenizer, GPT2};
use super::super::spm::{self, LiteralSplit, Step};
use super::super::{bad, bool_field};
use crate::error::Result;

pub(super) enum Front {
    /// GPT-2's `ByteLevel` (GPT-2, Qwen2/Qwen3, Llama-3): each byte of a pre-token is one printable character, and
    /// the vocabulary is written in those characters.
    Bytes {
        nfc: bool,
        pre: PreTokenizer,
        prefix: PrefixSpace,
    },
    /// SentencePiece's BPE (Llama 2, Mistral, Gemma): tokens are text; a character outside the vocabulary is its
    /// UTF-8 bytes' `<0xXX>` tokens (`byte_fallback`) or the unknown token.
    Chars { steps: Vec<Step>, pre: CharPre },
}

/// Where `ByteLevel`'s `add_prefix_space` puts a space before text that does not start with one: the crate adds it
/// to each piece `ByteLevel` is given, which is the text between added tokens when it splits by its own regex
/// (RoBERTa's and GPT-2's pipelines saved with the option on), and each pre-token when a `Split` runs before it
/// (Qwen2's and Llama-3's).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum PrefixSpace {
    Never,
    /// Before the text between two added tokens (`ByteLevel` with its regex).
    Segment,
    /// Before each pre-token of the `Split` (`ByteLevel` without its regex).
    PreToken,
}

/// How a SentencePiece BPE cuts its normalised text into words.
pub(super) enum CharPre {
    /// No pre-tokeniser: the text between added tokens is one word.
    Whole,
    Metaspace(Box<spm::PreTokenizer>),
    Split(LiteralSplit),
}

impl Front {
    /// Whether it has normaliser steps and Metaspace's `first` prepend, whose "starts the input" an added token
    /// matched on normalised text could move (the crate tells it by offsets inside the normalised text).
    pub(super) fn first_behind_steps(&self) -> bool {
        matches!(self, Front::Chars { steps, pre: CharPre::Metaspace(m) } if !steps.is_empty() && m.prepends_first())
    }

    pub(super) fn parse(normalizer: &Value, pre_tokenizer: &Value) -> Result<Self> {
        let kind = |v: &Value| v.get("type").and_then(Value::as_str).map(str::to_owned);
        let sequence = pre_tokenizer
            .get("pretokenizers")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let byte_level = match kind(pre_tokenizer).as_deref() {
            Some("ByteLevel") => true,
            Some("Sequence") => sequence.last().and_then(kind).as_deref() == Some("ByteLevel"),
            _ => false,
        };
        if byte_level {
            let nfc = parse_normalizer(normalizer)?;
            let (pre, prefix) = parse_pre_tokenizer(pre_tokenizer)?;
            return Ok(Front::Bytes { nfc, pre, prefix });
        }
        let mut normalizers = Vec::new();
        spm::parse_step(normalizer, &mut normalizers)?;
        let pre = match kind(pre_tokenizer).as_deref() {
            None if pre_tokenizer.is_null() => CharPre::Whole,
            Some("Split") => CharPre::Split(LiteralSplit::parse(pre_tokenizer)?),
            Some("Metaspace" | "Sequence") => {
                let metaspace = spm::parse_pre_tokenizer(pre_tokenizer)?;
                spm::check_first(&metaspace, &normalizers)?;
                CharPre::Metaspace(Box::new(metaspace))
            }
            other => {
                return Err(bad(format!(
                    "pre_tokenizer {other:?} is not supported with BPE (ByteLevel, Split then ByteLevel, \
                     Metaspace, a literal Split, or none is)"
                )))
            }
        };
        Ok(Front::Chars {
            steps: normalizers,
            pre,
        })
    }
}

/// GPT-2's `bytes_to_unicode`: printable bytes stand for themselves, the others, in order, for U+0100 onwards.
pub(super) fn byte_chars() -> [char; 256] {
    let mut out = ['\0'; 256];
    let mut n = 0;
    for (b, c) in out.iter_mut().enumerate() {
        let printable = matches!(b, 33..=126 | 161..=172 | 174..=255);
        let code = if printable {
            b as u32
        } else {
            n += 1;
            255 + n
        };
        *c = char::from_u32(code).unwrap_or('\0');
    }
    out
}

/// The byte-level normaliser: NFC (`true`) or none.
fn parse_normalizer(json: &Value) -> Result<bool> {
    match json.get("type").and_then(Value::as_str) {
        None if json.is_null() => Ok(false),
        Some("NFC") => Ok(true),
        Some("Sequence") => {
            let steps = json
                .get("normalizers")
                .and_then(Value::as_array)
                .ok_or_else(|| bad("normalizer Sequence: missing `normalizers`"))?;
            match steps.as_slice() {
                [] => Ok(false),
                [one] => parse_normalizer(one),
                _ => Err(bad(
                    "a normalizer Sequence of several steps is not supported with byte-level BPE",
                )),
            }
        }
        other => Err(bad(format!(
            "normalizer {other:?} is not supported with byte-level BPE (NFC or none is)"
        ))),
    }
}

/// The `ByteLevel` pre-tokeniser's settings: whether it adds a prefix space, and whether it splits by GPT-2's
/// regex.
fn byte_level(json: &Value) -> Result<(bool, bool)> {
    // Both required by the crate's reader, as they are here (`trim_offsets` changes only offsets).
    let required = |key: &str| {
        json.get(key)
            .and_then(Value::as_bool)
            .ok_or_else(|| bad(format!("ByteLevel: `{key}` is missing or not a boolean")))
    };
    required("trim_offsets")?;
    let space = required("add_prefix_space")?;
    Ok((space, bool_field(json, "use_regex", true, "ByteLevel")?))
}

/// The split pattern, `ByteLevel` with its own regex or `Split` by a regex followed by `ByteLevel` without one, and
/// where the prefix space goes.
fn parse_pre_tokenizer(json: &Value) -> Result<(PreTokenizer, PrefixSpace)> {
    let prefix = |on: bool, at: PrefixSpace| if on { at } else { PrefixSpace::Never };
    match json.get("type").and_then(Value::as_str) {
        Some("ByteLevel") => match byte_level(json)? {
            (space, true) => Ok((PreTokenizer::new(GPT2)?, prefix(space, PrefixSpace::Segment))),
            (_, false) => Err(bad(
                "pre_tokenizer ByteLevel without its regex (and no Split before it) is not supported",
            )),
        },
        Some("Sequence") => {
            let steps = json
                .get("pretokenizers")
                .and_then(Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or_default();
            let [split, bytes] = steps else {
                return Err(bad("pre_tokenizer Sequence: Split then ByteLevel is supported"));
            };
            let space = match bytes.get("type").and_then(Value::as_str) {
                Some("ByteLevel") => match byte_level(bytes)? {
                    (space, false) => Some(space),
                    (_, true) => None,
                },
                _ => None,
            };
            let (Some(space), Some("Split")) = (space, split.get("type").and_then(Value::as_str)) else {
                return Err(bad(
                    "pre_tokenizer Sequence: Split then ByteLevel without its regex is supported",
                ));
            };
            if split.get("behavior").and_then(Value::as_str) != Some("Isolated")
                || bool_field(split, "invert", false, "Split")?
            {
                return Err(bad("Split: only the Isolated behaviour, not inverted, is supported"));
            }
            let regex = split
                .get("pattern")
                .and_then(|p| p.get("Regex"))
                .and_then(Value::as_str)
                .ok_or_else(|| bad("Split: only a Regex pattern is supported"))?;
            Ok((PreTokenizer::new(regex)?, prefix(space, PrefixSpace::PreToken)))
        }
        other => Err(bad(format!(
            "pre_tokenizer {other:?} is not supported with BPE (ByteLevel, or Split then ByteLevel, is)"
        ))),
    }
}
