//! Added tokens: the ids the crate gives them on load, and the two passes that find them in a text (the raw
//! text's, then the normalised text's between its matches), as the `tokenizers` crate's `AddedVocabulary` does.

use serde_json::Value;

use super::{bad, bool_field, str_field, FxMap, Model};
use crate::error::Result;
use crate::tokenizer::Scratch;

/// Encodes a piece of text onto ids, told whether the piece starts the input.
pub(super) type Encode<'a> = dyn Fn(&str, bool, &mut Scratch, &mut Vec<u32>) -> Result<()> + 'a;

/// Added tokens of one of the crate's two passes, longest match at the leftmost position, as its Aho-Corasick
/// `LeftmostLongest` does: those with `normalized: false` in the raw text, then those with `normalized: true` in
/// the normalised text between the first pass's matches.
pub(super) struct AddedTokens {
    /// Contents with what they match as, longest first.
    tokens: Vec<(Box<str>, Added)>,
    first_byte: [bool; 256],
    /// The first character of every token, when they share one and it is ASCII (`<`, `[`): the scan for it is
    /// then `str::find`'s word-at-a-time search instead of a byte loop.
    first_ascii: Option<char>,
}

/// An added token's id, and whether its match takes in the whitespace before it (`lstrip`, as RoBERTa's and
/// XLM-R's `<mask>`) or after it (`rstrip`): that whitespace then belongs to no other token.
#[derive(Clone, Copy, Debug)]
struct Added {
    id: u32,
    lstrip: bool,
    rstrip: bool,
}

impl AddedTokens {
    /// The added tokens of the pass that matches on normalised text (`normalized`: their contents through
    /// `normalize` first, as the crate matches them) or on the raw text.
    pub(super) fn parse(
        json: &Value,
        ids: &FxMap<&str, u32>,
        normalized: bool,
        normalize: &dyn Fn(&str) -> std::borrow::Cow<str>,
    ) -> Result<Self> {
        let mut map: FxMap<Box<str>, Added> = FxMap::default();
        let all = json.as_array().map(Vec::as_slice).unwrap_or_default();
        // The crate matches the special tokens ahead of the others, each in the file's order, and of two with one
        // content (once normalised) the first matched wins.
        let mut ordered = Vec::with_capacity(all.len());
        for t in all {
            ordered.push((!bool_field(t, "special", false, "added_tokens")?, t));
        }
        ordered.sort_by_key(|&(later, _)| later);
        for (_, t) in ordered {
            let content = str_field(t, "content", "added_tokens")?;
            // The crate ignores an empty one.
            if content.is_empty() {
                continue;
            }
            let id = *ids
                .get(content)
                .ok_or_else(|| bad(format!("added token {content:?}: no id")))?;
            let special = bool_field(t, "special", false, "added_tokens")?;
            if bool_field(t, "single_word", false, "added_tokens")? {
                return Err(bad(format!(
                    "added token {content:?}: `single_word` is not supported"
                )));
            }
            let lstrip = bool_field(t, "lstrip", false, "added_tokens")?;
            let rstrip = bool_field(t, "rstrip", false, "added_tokens")?;
            if bool_field(t, "normalized", !special, "added_tokens")? == normalized {
                let content = if normalized {
                    normalize(content)
                } else {
                    content.into()
                };
                if content.is_empty() {
                    return Err(bad("an added token is empty once normalised"));
                }
                map.entry(content.into())
                    .or_insert(Added { id, lstrip, rstrip });
            }
        }
        let mut tokens: Vec<_> = map.into_iter().collect();
        // The crate goes on searching where an rstrip token's match ended, not where its whitespace did, so a
        // token that begins with whitespace can match inside what the rstrip one took: overlapping pieces, which
        // we do not reproduce. No tokenizer we know has both.
        if tokens.iter().any(|(_, a)| a.rstrip)
            && tokens
                .iter()
                .any(|(t, _)| t.starts_with(char::is_whitespace))
        {
            return Err(bad(
                "added tokens: one strips the whitespace after it (rstrip) and another begins with whitespace",
            ));
        }
        tokens.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then_with(|| a.0.cmp(&b.0)));
        let mut first_byte = [false; 256];
        for (t, _) in &tokens {
            first_byte[usize::from(t.as_bytes()[0])] = true;
        }
        let first_ascii = match first_byte.iter().filter(|&&f| f).count() {
            1 => first_byte[..128]
                .iter()
                .position(|&f| f)
                .map(|b| char::from(b as u8)),
            _ => None,
        };
        Ok(AddedTokens {
            tokens,
            first_byte,
            first_ascii,
        })
    }

    /// The longest token's content (none when the pass has no tokens).
    pub(super) fn first(&self) -> Option<&str> {
        self.tokens.first().map(|(t, _)| &**t)
    }

    /// Encodes `text` (which starts the input when `at_start`) onto `ids`: each match's id, and `gap` for the text
    /// before, between and after them; no further match once `ids` holds `limit`.
    pub(super) fn split(
        &self,
        text: &str,
        at_start: bool,
        scratch: &mut Scratch,
        ids: &mut Vec<u32>,
        limit: usize,
        gap: &Encode,
    ) -> Result<()> {
        let mut from = 0;
        while let Some((s, e, id)) = self.find(text, from).filter(|_| ids.len() < limit) {
            gap(&text[from..s], at_start && from == 0, scratch, ids)?;
            ids.push(id);
            from = e;
        }
        if ids.len() < limit {
            gap(&text[from..], at_start && from == 0, scratch, ids)?;
        }
        Ok(())
    }

    /// The leftmost match at or after `from`: its start, end and id, the start and end taking in the whitespace
    /// the token strips (from `from` on: whitespace before it belongs to the match before).
    fn find(&self, text: &str, from: usize) -> Option<(usize, usize, u32)> {
        if self.tokens.is_empty() {
            return None;
        }
        let bytes = text.as_bytes();
        let at = |i: usize| {
            let (t, added) = self
                .tokens
                .iter()
                .find(|(t, _)| bytes[i..].starts_with(t.as_bytes()))?;
            let mut start = i;
            if added.lstrip {
                start = from.max(text[..i].trim_end_matches(char::is_whitespace).len());
            }
            let mut end = i + t.len();
            if added.rstrip {
                end = text.len() - text[end..].trim_start_matches(char::is_whitespace).len();
            }
            Some((start, end, added.id))
        };
        if let Some(c) = self.first_ascii {
            let mut i = from;
            while let Some(p) = text.get(i..)?.find(c) {
                if let Some(m) = at(i + p) {
                    return Some(m);
                }
                i += p + 1;
            }
            return None;
        }
        (from..bytes.len())
            .filter(|&i| self.first_byte[usize::from(bytes[i])])
            .find_map(at)
    }
}

/// The ids the crate gives the added tokens when it reads the file, whatever ids the file writes beside them (it
/// only warns where they differ): a content the model's vocabulary holds gets the model's id; the others, in the
/// file's order, the ids from the vocabulary's size (its count of tokens) on; a repeated content keeps its first;
/// an empty one is ignored. A content listed twice with other settings is refused: the crate would match it with
/// the last copy's strip flags and sort the copies into passes by their own settings.
pub(super) fn added_ids<'a>(json: &'a Value, model: &Model) -> Result<FxMap<&'a str, u32>> {
    const SETTINGS: [&str; 5] = ["single_word", "lstrip", "rstrip", "normalized", "special"];
    let mut first: FxMap<&str, &Value> = FxMap::default();
    let mut ids = FxMap::default();
    let mut next =
        u32::try_from(model.ids_taken()).map_err(|_| bad("the vocabulary is too large"))?;
    for t in json.as_array().map(Vec::as_slice).unwrap_or_default() {
        let content = str_field(t, "content", "added_tokens")?;
        if content.is_empty() {
            continue;
        }
        if let Some(earlier) = first.insert(content, t) {
            if SETTINGS.iter().any(|k| earlier.get(k) != t.get(k)) {
                return Err(bad(format!(
                    "added token {content:?} is listed twice with different settings"
                )));
            }
            continue;
        }
        let id = match model.token_id(content) {
            Some(id) => id,
            None => {
                let id = next;
                next = next
                    .checked_add(1)
                    .ok_or_else(|| bad("too many added tokens"))?;
                id
            }
        };
        ids.insert(content, id);
    }
    Ok(ids)
}
