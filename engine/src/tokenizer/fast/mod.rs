//! The in-house tokenizer: WordPiece with the BERT pipeline, Unigram with the SentencePiece / XLM-R pipeline,
//! byte-level BPE with the GPT-2 / Qwen2 / Llama-3 pipelines and SentencePiece BPE with the Llama 2 / Mistral /
//! Gemma ones, read from the same `tokenizer.json` as the `tokenizers` crate and id-for-id equal to it.
//!
//! Why hand-written: the crate runs every encode through generic pipeline objects that keep alignment offsets for
//! each normalised character, allocate a `String` per split and per token, and build an `Encoding` with seven
//! parallel vectors we never read. Here each stage is fused into one pass over the text with the vocabulary
//! lookups inlined, and all working memory lives in a caller-owned [`Scratch`], so a warm encode allocates nothing.
//! Whatever a `tokenizer.json` asks for that this module does not implement is refused at load, never
//! approximated.

pub(crate) mod bpe;
mod charsmap;
mod nfc;
mod pretok;
mod spm;
pub(crate) mod unigram;
mod wordpiece;

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::path::Path;

use serde_json::Value;

use super::{Scratch, Tokenizer, Truncation, TruncationSide};
use crate::error::{Error, Result};

/// FxHash: vocabulary keys are short strings, for which this beats SipHash several times over.
#[derive(Default, Clone, Copy)]
pub(crate) struct FxHasher(u64);

impl Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        const K: u64 = 0x51_7c_c1_b7_27_22_0a_95;
        let mut h = self.0;
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            h = (h.rotate_left(5) ^ u64::from_le_bytes(w)).wrapping_mul(K);
        }
        for &b in chunks.remainder() {
            h = (h.rotate_left(5) ^ u64::from(b)).wrapping_mul(K);
        }
        self.0 = h;
    }

    fn write_u8(&mut self, i: u8) {
        self.write(&[i]);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

pub(crate) type FxMap<K, V> = HashMap<K, V, BuildHasherDefault<FxHasher>>;

fn bad(what: impl std::fmt::Display) -> Error {
    Error::Tokenizer(what.to_string())
}

fn str_field<'a>(v: &'a Value, key: &str, ctx: &str) -> Result<&'a str> {
    v.get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| bad(format!("{ctx}: missing string field `{key}`")))
}

fn bool_field(v: &Value, key: &str, default: bool, ctx: &str) -> Result<bool> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(bad(format!("{ctx}: `{key}` is not a boolean"))),
    }
}

/// The model and the normaliser / pre-tokeniser pipeline in front of it.
enum Model {
    WordPiece(Box<wordpiece::WordPiece>),
    Unigram(Box<unigram::Unigram>),
    Bpe(Box<bpe::Bpe>),
}

impl Model {
    /// The model's count of distinct tokens.
    fn vocab_size(&self) -> usize {
        match self {
            Model::WordPiece(m) => m.vocab_size(),
            Model::Unigram(m) => m.vocab_size(),
            Model::Bpe(m) => m.vocab_size(),
        }
    }

    /// One past the largest id the model's vocabulary holds (its ids may leave gaps).
    fn id_bound(&self) -> usize {
        match self {
            Model::WordPiece(m) => m.id_bound(),
            Model::Unigram(m) => m.ids_taken(),
            Model::Bpe(m) => m.id_bound(),
        }
    }

    /// The ids the model's vocabulary takes (the crate's `get_vocab_size` of the model alone): its count of tokens,
    /// or with Unigram the length of its list, where a piece may repeat.
    fn ids_taken(&self) -> usize {
        match self {
            Model::Unigram(m) => m.ids_taken(),
            other => other.vocab_size(),
        }
    }

    /// The id of a token of the model's vocabulary, spelt as the file spells it.
    fn token_id(&self, token: &str) -> Option<u32> {
        match self {
            Model::WordPiece(m) => m.token_id(token),
            Model::Unigram(m) => m.token_id(token),
            Model::Bpe(m) => m.token_id(token),
        }
    }

    /// `text` as the model's normaliser leaves it: itself, or written to `out`.
    fn normalized<'a>(&self, text: &'a str, scratch: &mut Scratch, out: &'a mut String) -> &'a str {
        match self {
            Model::WordPiece(m) => m.normalized(text, &mut scratch.marks, out),
            Model::Unigram(m) => m.normalized(text, scratch, out),
            Model::Bpe(m) => m.normalized(text, scratch, out),
        }
    }
}

/// Where a piece of text handed to a model sits.
#[derive(Clone, Copy)]
pub(crate) struct Piece {
    /// It starts the input: Metaspace's prepend scheme `first` puts its `▁` only there (the crate's rule, an
    /// offset of 0 in the input through the normaliser's alignments, agrees wherever `first` is accepted).
    at_start: bool,
    /// The normaliser has run over it already (the text between added tokens matched on normalised text).
    normalized: bool,
}

/// Encodes a piece of text onto ids, told whether the piece starts the input.
type Encode<'a> = dyn Fn(&str, bool, &mut Scratch, &mut Vec<u32>) -> Result<()> + 'a;

/// Added tokens of one of the crate's two passes, longest match at the leftmost position, as its Aho-Corasick
/// `LeftmostLongest` does: those with `normalized: false` in the raw text, then those with `normalized: true` in
/// the normalised text between the first pass's matches.
struct AddedTokens {
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
    fn parse(
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

    /// Encodes `text` (which starts the input when `at_start`) onto `ids`: each match's id, and `gap` for the text
    /// before, between and after them; no further match once `ids` holds `limit`.
    fn split(
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

/// The post-processor for a single sequence: special ids before and after it.
struct Template {
    prefix: Vec<u32>,
    suffix: Vec<u32>,
}

impl Template {
    fn parse(json: &Value) -> Result<Self> {
        let mut t = Template {
            prefix: Vec::new(),
            suffix: Vec::new(),
        };
        match json.get("type").and_then(Value::as_str) {
            None if json.is_null() => {}
            // It trims offsets, which we do not keep; the ids are untouched.
            Some("ByteLevel") => {}
            Some("TemplateProcessing") => t.template(json)?,
            // RoBERTa's and BERT's own processors: `cls` before a single sequence, `sep` after it (their other
            // fields trim offsets, which we do not keep).
            Some(kind @ ("RobertaProcessing" | "BertProcessing")) => {
                let special = |key: &str| {
                    json.get(key)
                        .and_then(|pair| pair.get(1))
                        .and_then(Value::as_u64)
                        .and_then(|id| u32::try_from(id).ok())
                        .ok_or_else(|| bad(format!("{kind}: `{key}` is not a [token, id] pair")))
                };
                t.prefix.push(special("cls")?);
                t.suffix.push(special("sep")?);
            }
            // Each step wraps what the steps before it made.
            Some("Sequence") => {
                for step in json
                    .get("processors")
                    .and_then(Value::as_array)
                    .ok_or_else(|| bad("post_processor Sequence: missing `processors`"))?
                {
                    let inner = Template::parse(step)?;
                    t.prefix.splice(0..0, inner.prefix);
                    t.suffix.extend(inner.suffix);
                }
            }
            other => return Err(bad(format!("post_processor {other:?} is not supported"))),
        }
        Ok(t)
    }

    /// `TemplateProcessing`'s `single`.
    fn template(&mut self, json: &Value) -> Result<()> {
        let single = json
            .get("single")
            .and_then(Value::as_array)
            .ok_or_else(|| bad("TemplateProcessing: missing `single`"))?;
        let mut seen_a = false;
        for piece in single {
            if let Some(seq) = piece.get("Sequence") {
                if seen_a || seq.get("id").and_then(Value::as_str) != Some("A") {
                    return Err(bad(
                        "TemplateProcessing: `single` must hold sequence A once",
                    ));
                }
                seen_a = true;
            } else if let Some(special) = piece.get("SpecialToken") {
                let name = str_field(special, "id", "TemplateProcessing")?;
                let ids = json
                    .get("special_tokens")
                    .and_then(|s| s.get(name))
                    .and_then(|s| s.get("ids"))
                    .and_then(Value::as_array)
                    .ok_or_else(|| bad(format!("TemplateProcessing: no ids for {name:?}")))?;
                let out = if seen_a {
                    &mut self.suffix
                } else {
                    &mut self.prefix
                };
                for id in ids {
                    let id = id
                        .as_u64()
                        .and_then(|id| u32::try_from(id).ok())
                        .ok_or_else(|| bad(format!("TemplateProcessing: bad id for {name:?}")))?;
                    out.push(id);
                }
            } else {
                return Err(bad("TemplateProcessing: unknown piece in `single`"));
            }
        }
        if !seen_a {
            return Err(bad("TemplateProcessing: `single` lacks sequence A"));
        }
        Ok(())
    }

    fn len(&self) -> usize {
        self.prefix.len() + self.suffix.len()
    }
}

/// The ids the crate gives the added tokens when it reads the file, whatever ids the file writes beside them (it
/// only warns where they differ): a content the model's vocabulary holds gets the model's id; the others, in the
/// file's order, the ids from the vocabulary's size (its count of tokens) on; a repeated content keeps its first;
/// an empty one is ignored. A content listed twice with other settings is refused: the crate would match it with
/// the last copy's strip flags and sort the copies into passes by their own settings.
fn added_ids<'a>(json: &'a Value, model: &Model) -> Result<FxMap<&'a str, u32>> {
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

/// The in-house tokenizer for one `tokenizer.json`.
pub struct FastTokenizer {
    model: Model,
    added: AddedTokens,
    /// The added tokens matched on normalised text (GPT-NeoX's and ModernBERT's runs of spaces, the tokens
    /// transformers' `add_tokens` gives a BERT vocabulary), found in the normalised text between `added`'s
    /// matches.
    normalized: AddedTokens,
    template: Template,
    truncation: Option<Truncation>,
    vocab_size: usize,
    id_bound: usize,
}

impl FastTokenizer {
    pub fn from_file(path: &Path, truncation: Option<Truncation>) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(Error::io(path))?;
        let json: Value = serde_json::from_str(&text).map_err(|source| Error::Json {
            path: path.to_owned(),
            source,
        })?;
        Self::from_json(&json, truncation).map_err(|e| match e {
            Error::Tokenizer(m) => Error::Tokenizer(format!("{}: {m}", path.display())),
            other => other,
        })
    }

    /// Builds from a parsed `tokenizer.json`; anything it cannot reproduce exactly is an error.
    pub fn from_json(json: &Value, truncation: Option<Truncation>) -> Result<Self> {
        let null = Value::Null;
        let section = |k: &str| json.get(k).unwrap_or(&null);
        let model_json = section("model");
        let model = match model_json.get("type").and_then(Value::as_str) {
            Some("WordPiece") => Model::WordPiece(Box::new(wordpiece::WordPiece::parse(
                model_json,
                section("normalizer"),
                section("pre_tokenizer"),
            )?)),
            Some("Unigram") => Model::Unigram(Box::new(unigram::Unigram::parse(
                model_json,
                section("normalizer"),
                section("pre_tokenizer"),
            )?)),
            Some("BPE") => Model::Bpe(Box::new(bpe::Bpe::parse(
                model_json,
                section("normalizer"),
                section("pre_tokenizer"),
            )?)),
            other => return Err(bad(format!("model type {other:?} is not supported"))),
        };
        let ids = added_ids(section("added_tokens"), &model)?;
        let added = AddedTokens::parse(section("added_tokens"), &ids, false, &|t| t.into())?;
        let normalized = AddedTokens::parse(section("added_tokens"), &ids, true, &|t| {
            let mut out = String::new();
            model
                .normalized(t, &mut Scratch::default(), &mut out)
                .to_owned()
                .into()
        })?;
        if let Some((t, _)) = normalized.tokens.first() {
            let first_behind_steps = match &model {
                Model::WordPiece(_) => false,
                Model::Unigram(m) => m.first_behind_steps(),
                Model::Bpe(m) => m.first_behind_steps(),
            };
            if first_behind_steps {
                return Err(bad(format!(
                    "added token {t:?}: matching on normalised text with Metaspace's prepend_scheme \"first\" \
                     behind a normaliser is not supported"
                )));
            }
        }
        let template = Template::parse(section("post_processor"))?;
        if let Some(t) = truncation {
            if t.max_length < template.len() {
                return Err(bad(format!(
                    "max length {} is shorter than the {} special tokens",
                    t.max_length,
                    template.len()
                )));
            }
        }
        // As the crate counts it: the union of the model's pieces and the added tokens, by their contents in the
        // file (not normalised).
        let vocab_size =
            model.vocab_size() + ids.keys().filter(|t| model.token_id(t).is_none()).count();
        let id_bound = [&template.prefix, &template.suffix]
            .into_iter()
            .flatten()
            .chain(ids.values())
            .map(|&id| id as usize + 1)
            .fold(model.id_bound(), usize::max);
        Ok(FastTokenizer {
            model,
            added,
            normalized,
            template,
            truncation,
            vocab_size,
            id_bound,
        })
    }

    /// Encodes `text` onto `ids`, stopping once `ids` holds `limit` (the rest would be truncated away).
    fn encode_segment(
        &self,
        text: &str,
        piece: Piece,
        scratch: &mut Scratch,
        ids: &mut Vec<u32>,
        limit: usize,
    ) -> Result<()> {
        match &self.model {
            Model::WordPiece(m) => m.encode(text, piece.normalized, scratch, ids, limit),
            Model::Unigram(m) => m.encode(text, piece, scratch, ids, limit),
            Model::Bpe(m) => m.encode(text, piece, scratch, ids, limit),
        }
    }

    /// Encodes the text between two raw-text added tokens: the second pass's added tokens, found in its
    /// normalised form, and the model's pieces between them.
    fn encode_gap(
        &self,
        text: &str,
        at_start: bool,
        scratch: &mut Scratch,
        ids: &mut Vec<u32>,
        limit: usize,
    ) -> Result<()> {
        if self.normalized.tokens.is_empty() {
            let piece = Piece {
                at_start,
                normalized: false,
            };
            return self.encode_segment(text, piece, scratch, ids, limit);
        }
        // The normalised gap (the text itself where normalising changes nothing) in a buffer of its own, taken
        // out of the scratch for the encodes of its pieces.
        let mut buf = std::mem::take(&mut scratch.gap);
        let normalized = self.model.normalized(text, scratch, &mut buf);
        let out = self.normalized.split(
            normalized,
            at_start,
            scratch,
            ids,
            limit,
            &|part, at_start, scratch, ids| {
                let piece = Piece {
                    at_start,
                    normalized: true,
                };
                self.encode_segment(part, piece, scratch, ids, limit)
            },
        );
        scratch.gap = buf;
        out
    }

    /// Where encoding may stop: with right truncation, once one id more than those to keep is there (so a cut
    /// is seen), since the words and pre-tokens after them only add ids that are cut. Only when later text cannot
    /// fail the encode (WordPiece and Unigram fail only without an unknown token).
    fn limit(&self, start: usize) -> usize {
        let infallible = match &self.model {
            Model::WordPiece(m) => m.has_unk(),
            Model::Unigram(m) => m.has_unk(),
            Model::Bpe(m) => m.infallible(),
        };
        match self.truncation {
            Some(t) if t.side == TruncationSide::Right && infallible => {
                start + t.max_length - self.template.len() + 1
            }
            _ => usize::MAX,
        }
    }
}

impl Tokenizer for FastTokenizer {
    fn encode_cut(&self, text: &str, scratch: &mut Scratch, ids: &mut Vec<u32>) -> Result<bool> {
        ids.clear();
        ids.extend_from_slice(&self.template.prefix);
        let start = ids.len();
        let limit = self.limit(start);
        self.added.split(
            text,
            true,
            scratch,
            ids,
            limit,
            &|gap, at_start, scratch, ids| self.encode_gap(gap, at_start, scratch, ids, limit),
        )?;
        let mut cut = false;
        if let Some(t) = self.truncation {
            let keep = t.max_length - self.template.len();
            let excess = (ids.len() - start).saturating_sub(keep);
            cut = excess > 0;
            match t.side {
                TruncationSide::Right => ids.truncate(start + keep.min(ids.len() - start)),
                TruncationSide::Left => drop(ids.drain(start..start + excess)),
            }
        }
        ids.extend_from_slice(&self.template.suffix);
        Ok(cut)
    }

    fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    fn id_bound(&self) -> usize {
        self.id_bound
    }

    fn max_length(&self) -> usize {
        self.truncation.map_or(usize::MAX, |t| t.max_length)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vocab_json(file: &str) -> Value {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../workloads/vocab")
            .join(file);
        serde_json::from_str(&std::fs::read_to_string(path).expect("vocab file")).expect("JSON")
    }

    fn minilm() -> Value {
        vocab_json("all-MiniLM-L6-v2/tokenizer.json")
    }

    fn encode(t: &FastTokenizer, text: &str) -> Vec<u32> {
        let mut ids = Vec::new();
        t.encode(text, &mut ids).expect("encodes");
        ids
    }

    #[test]
    fn truncation_keeps_special_tokens_and_the_chosen_end() {
        let text = "one two three four five six seven eight";
        let full = encode(
            &FastTokenizer::from_json(&minilm(), None).expect("loads"),
            text,
        );
        assert_eq!((full[0], full[full.len() - 1], full.len()), (101, 102, 10));
        let right = FastTokenizer::from_json(&minilm(), Some(Truncation::right(5))).expect("loads");
        assert_eq!(encode(&right, text), [&full[..4], &[102]].concat());
        let left = Truncation {
            max_length: 5,
            side: TruncationSide::Left,
        };
        let left = FastTokenizer::from_json(&minilm(), Some(left)).expect("loads");
        assert_eq!(
            encode(&left, text),
            [&[101], &full[full.len() - 4..]].concat()
        );
        let exact = FastTokenizer::from_json(&minilm(), Some(Truncation::right(2))).expect("loads");
        assert_eq!(encode(&exact, text), [101, 102]);
        assert!(FastTokenizer::from_json(&minilm(), Some(Truncation::right(1))).is_err());
    }

    /// Regression: the gateway encoded an input at the limit two or three times (truncated, untruncated to see
    /// whether it was over, and left-cut) to tell "at the limit" from "over it"; one encode now says whether it
    /// cut anything, on either side and in either implementation.
    #[test]
    fn one_encode_tells_an_input_at_the_limit_from_one_over_it() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../workloads/vocab/all-MiniLM-L6-v2/tokenizer.json");
        let at_limit = "one two three"; // [CLS] one two three [SEP]
        let over = "one two three four";
        for side in [TruncationSide::Right, TruncationSide::Left] {
            let truncation = Some(Truncation {
                max_length: 5,
                side,
            });
            let fast: Box<dyn Tokenizer> =
                Box::new(FastTokenizer::from_json(&minilm(), truncation).expect("loads"));
            let hf: Box<dyn Tokenizer> = Box::new(
                crate::tokenizer::HfTokenizer::from_file(&path, truncation).expect("loads"),
            );
            for t in [fast, hf] {
                let (mut scratch, mut ids) = (Scratch::default(), Vec::new());
                let cut = t
                    .encode_cut(at_limit, &mut scratch, &mut ids)
                    .expect("encodes");
                assert_eq!((cut, ids.len()), (false, 5), "{side:?}: at the limit");
                let cut = t.encode_cut(over, &mut scratch, &mut ids).expect("encodes");
                assert_eq!((cut, ids.len()), (true, 5), "{side:?}: one over");
            }
        }
    }

    #[test]
    fn special_token_text_maps_to_its_id() {
        let t = FastTokenizer::from_json(&minilm(), None).expect("loads");
        assert_eq!(
            encode(&t, "a[SEP]b[MASK]"),
            [101, 1037, 102, 1038, 103, 102]
        );
    }

    /// Loading must fail, naming the part it does not support.
    fn refused(json: Value, needle: &str) {
        match FastTokenizer::from_json(&json, None) {
            Err(Error::Tokenizer(m)) => assert!(m.contains(needle), "{m:?} lacks {needle:?}"),
            Err(e) => panic!("wrong error kind: {e}"),
            Ok(_) => panic!("accepted a tokenizer.json with unsupported {needle}"),
        }
    }

    #[test]
    fn unsupported_pipelines_are_refused() {
        let mut j = minilm();
        j["normalizer"] = serde_json::json!({"type": "NFKC"});
        refused(j, "NFKC");
        let mut j = minilm();
        j["pre_tokenizer"] = serde_json::json!({"type": "Whitespace"});
        refused(j, "Whitespace");
        let mut j = minilm();
        j["model"]["type"] = "WordLevel".into();
        refused(j, "WordLevel");
        let mut j = minilm();
        j["post_processor"] = serde_json::json!({"type": "RobertaProcessing"});
        refused(j, "RobertaProcessing: `cls`");
        let mut j = minilm();
        j["post_processor"] = serde_json::json!({"type": "ElectraProcessing"});
        refused(j, "ElectraProcessing");
        let mut j = minilm();
        j["added_tokens"][0]["single_word"] = true.into();
        refused(j, "single_word");
        let mut j = minilm();
        j["added_tokens"][0]["rstrip"] = true.into();
        j["added_tokens"][1]["content"] = "\n\n".into();
        refused(j, "rstrip");
        let mut j = vocab_json("xlmr_style_unigram_1k_tokenizer.json");
        let mut metaspace = j["pre_tokenizer"].clone();
        metaspace["prepend_scheme"] = "first".into();
        j["pre_tokenizer"] = serde_json::json!({"type": "Sequence",
            "pretokenizers": [{"type": "WhitespaceSplit"}, metaspace]});
        refused(j, "first\" after WhitespaceSplit");
        let mut j = vocab_json("xlmr_style_unigram_1k_tokenizer.json");
        j["normalizer"]["normalizers"][2]["pattern"]["Regex"] = "\\s+".into();
        refused(j, "regex");
        let mut j = vocab_json("xlmr_style_unigram_1k_tokenizer.json");
        j["normalizer"]["normalizers"][0]["precompiled_charsmap"] = "AAAA!".into();
        refused(j, "base64");
    }

    #[test]
    fn unsupported_bpe_pipelines_are_refused() {
        let qwen2 = || vocab_json("qwen2_style_bpe_4k_tokenizer.json");
        let mut j = qwen2();
        j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\w+|\\s+".into();
        refused(j, "Split regex");
        let mut j = qwen2();
        j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed".into();
        refused(j, "Isolated");
        let mut j = qwen2();
        j["pre_tokenizer"]["pretokenizers"][1]["use_regex"] = true.into();
        refused(j, "ByteLevel without its regex");
        let mut j = qwen2();
        let byte_level = j["pre_tokenizer"]["pretokenizers"][1].as_object_mut();
        byte_level.expect("ByteLevel").remove("add_prefix_space");
        refused(j, "`add_prefix_space` is missing");
        let mut j = qwen2();
        let byte_level = j["pre_tokenizer"]["pretokenizers"][1].as_object_mut();
        byte_level.expect("ByteLevel").remove("trim_offsets");
        refused(j, "`trim_offsets` is missing");
        let mut j = qwen2();
        j["normalizer"] = serde_json::json!({"type": "NFKC"});
        refused(j, "NFKC");
        let mut j = qwen2();
        j["model"]["dropout"] = 0.1.into();
        refused(j, "dropout");
        let mut j = qwen2();
        j["model"]["continuing_subword_prefix"] = "##".into();
        refused(j, "continuing_subword_prefix");
        let mut j = qwen2();
        j["model"]["merges"][0] = serde_json::json!(["Ġ", "no such token"]);
        refused(j, "no such token");
    }

    #[test]
    fn unsupported_sentencepiece_bpe_pipelines_are_refused() {
        let gemma = || vocab_json("gemma_style_spbpe_4k_tokenizer.json");
        let mut j = gemma();
        j["pre_tokenizer"]["pattern"] = serde_json::json!({"Regex": "\\s+"});
        refused(j, "String pattern");
        let mut j = gemma();
        j["pre_tokenizer"]["invert"] = true.into();
        refused(j, "invert");
        let mut j = gemma();
        j["pre_tokenizer"] = serde_json::json!({"type": "Whitespace"});
        refused(j, "Whitespace");
        let mut j = gemma();
        j["normalizer"] = serde_json::json!({"type": "NFC"});
        refused(j, "NFC");
        let mistral = || vocab_json("mistral_style_spbpe_4k_tokenizer.json");
        let mut j = mistral();
        j["normalizer"] =
            serde_json::json!({"type": "Strip", "strip_left": true, "strip_right": false});
        refused(j, "strips or shortens");
        let mut j = mistral();
        j["normalizer"] =
            serde_json::json!({"type": "Replace", "pattern": {"String": "ab"}, "content": "h"});
        refused(j, "strips or shortens");
        let mut j = vocab_json("llama2_style_spbpe_4k_tokenizer.json");
        j["pre_tokenizer"] = mistral()["pre_tokenizer"].clone();
        refused(j, "behind a normaliser");
    }
}
