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

mod added;
pub(crate) mod bpe;
mod charsmap;
mod nfc;
mod pretok;
mod spm;
mod template;
pub(crate) mod unigram;
mod wordpiece;

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::path::Path;

use serde_json::Value;

use self::added::{added_ids, AddedTokens};
use self::template::Template;
use super::{PairEncoding, Scratch, Tokenizer, Truncation, TruncationSide};
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
    /// One past the largest id of the model and the added tokens ([`Tokenizer::id_bound`] adds the template's,
    /// which special tokens left out drop).
    id_bound: usize,
    /// Every added token's id by its content in the file, for [`Tokenizer::token_id`].
    added_ids: FxMap<Box<str>, u32>,
}

impl FastTokenizer {
    pub fn from_file(path: &Path, truncation: Option<Truncation>) -> Result<Self> {
        Self::from_file_registered(path, truncation, &[])
    }

    /// [`FastTokenizer::from_file`] with `registered` added after the file's added tokens as special ones matched on
    /// the raw text ([`super::load_registered`]).
    pub fn from_file_registered(
        path: &Path,
        truncation: Option<Truncation>,
        registered: &[String],
    ) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(Error::io(path))?;
        let mut json: Value = serde_json::from_str(&text).map_err(|source| Error::Json {
            path: path.to_owned(),
            source,
        })?;
        if !registered.is_empty() {
            let entries = registered.iter().map(|t| {
                serde_json::json!({"content": t, "single_word": false, "lstrip": false, "rstrip": false,
                                   "normalized": false, "special": true})
            });
            match json.get_mut("added_tokens").and_then(Value::as_array_mut) {
                Some(added) => added.extend(entries),
                None => json["added_tokens"] = Value::Array(entries.collect()),
            }
        }
        Self::from_json(&json, truncation).map_err(|e| super::in_file(path, e))
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
        if let Some(t) = normalized.first() {
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
        // As the crate counts it: the union of the model's pieces and the added tokens, by their contents in the
        // file (not normalised).
        let vocab_size =
            model.vocab_size() + ids.keys().filter(|t| model.token_id(t).is_none()).count();
        let id_bound = ids
            .values()
            .map(|&id| id as usize + 1)
            .fold(model.id_bound(), usize::max);
        FastTokenizer {
            model,
            added,
            normalized,
            template,
            truncation: None,
            vocab_size,
            id_bound,
            added_ids: ids.into_iter().map(|(t, id)| (t.into(), id)).collect(),
        }
        .truncated(truncation)
    }

    /// Without `add_special_tokens`, its post-processor's special tokens are left out. Before
    /// [`FastTokenizer::truncated`]: a limit need only hold the special tokens an encode adds.
    pub fn with_special_tokens(mut self, add_special_tokens: bool) -> Self {
        if !add_special_tokens {
            self.template = Template::default();
        }
        self
    }

    /// Truncates its encodes as `truncation` says; refused when the limit cannot hold the special tokens.
    pub fn truncated(mut self, truncation: Option<Truncation>) -> Result<Self> {
        if let Some(t) = truncation {
            if t.max_length < self.template.len() {
                return Err(bad(format!(
                    "max length {} is shorter than the {} special tokens",
                    t.max_length,
                    self.template.len()
                )));
            }
        }
        self.truncation = truncation;
        Ok(self)
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
        if self.normalized.first().is_none() {
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

    /// Appends the ids of `text` alone (its added tokens and the model's pieces, no template), stopping once
    /// `ids` holds `limit`.
    fn encode_text(
        &self,
        text: &str,
        scratch: &mut Scratch,
        ids: &mut Vec<u32>,
        limit: usize,
    ) -> Result<()> {
        self.added.split(
            text,
            true,
            scratch,
            ids,
            limit,
            &|gap, at_start, scratch, ids| self.encode_gap(gap, at_start, scratch, ids, limit),
        )
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
        self.encode_text(text, scratch, ids, self.limit(start))?;
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

    fn encode_pair(
        &self,
        a: &str,
        b: &str,
        scratch: &mut Scratch,
        ids: &mut Vec<u32>,
    ) -> Result<PairEncoding> {
        let (mut first, mut second) = (Vec::new(), Vec::new());
        self.encode_text(a, scratch, &mut first, usize::MAX)?;
        self.encode_text(b, scratch, &mut second, usize::MAX)?;
        let mut cut = false;
        if let Some(t) = self.truncation {
            let room = t.max_length.saturating_sub(self.template.pair_len()?);
            let (n1, n2) = super::longest_first(first.len(), second.len(), room);
            cut = n1 < first.len() || n2 < second.len();
            super::cut(&mut first, n1, t.side);
            super::cut(&mut second, n2, t.side);
        }
        Ok(PairEncoding {
            type1_from: self.template.join_pair(&first, &second, ids)?,
            cut,
        })
    }

    fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    fn id_bound(&self) -> usize {
        let Template {
            prefix,
            suffix,
            pair,
        } = &self.template;
        let pair_ids =
            pair.as_deref()
                .unwrap_or_default()
                .iter()
                .flat_map(|(part, _)| match part {
                    template::Part::Ids(ids) => ids.as_slice(),
                    template::Part::A | template::Part::B => &[],
                });
        prefix
            .iter()
            .chain(suffix)
            .chain(pair_ids)
            .map(|&id| id as usize + 1)
            .fold(self.id_bound, usize::max)
    }

    fn token_id(&self, token: &str) -> Option<u32> {
        self.added_ids
            .get(token)
            .copied()
            .or_else(|| self.model.token_id(token))
    }

    fn max_length(&self) -> usize {
        self.truncation.map_or(usize::MAX, |t| t.max_length)
    }

    fn specials_around(&self) -> (usize, usize) {
        (self.template.prefix.len(), self.template.suffix.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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

    /// `base` with each edit (a JSON pointer and the value set there) must fail to load, naming `needle`.
    fn refused_edited(base: &Value, edits: &[(&str, Value)], needle: &str) {
        let mut j = base.clone();
        for (at, v) in edits {
            *j.pointer_mut(at).unwrap_or_else(|| panic!("no {at}")) = v.clone();
        }
        refused(j, needle);
    }

    #[test]
    fn unsupported_pipelines_are_refused() {
        let minilm = minilm();
        let xlmr = vocab_json("xlmr_style_unigram_1k_tokenizer.json");
        let mut metaspace = xlmr["pre_tokenizer"].clone();
        metaspace["prepend_scheme"] = "first".into();
        let split_then_first =
            json!({"type": "Sequence", "pretokenizers": [{"type": "WhitespaceSplit"}, metaspace]});
        for (base, edits, needle) in [
            (
                &minilm,
                vec![("/normalizer", json!({"type": "NFKC"}))],
                "NFKC",
            ),
            (
                &minilm,
                vec![("/pre_tokenizer", json!({"type": "Whitespace"}))],
                "Whitespace",
            ),
            (
                &minilm,
                vec![("/model/type", json!("WordLevel"))],
                "WordLevel",
            ),
            (
                &minilm,
                vec![("/post_processor", json!({"type": "RobertaProcessing"}))],
                "RobertaProcessing: `cls`",
            ),
            (
                &minilm,
                vec![("/post_processor", json!({"type": "ElectraProcessing"}))],
                "ElectraProcessing",
            ),
            (
                &minilm,
                vec![(
                    "/post_processor",
                    json!({"type": "Sequence", "processors": [minilm["post_processor"],
                        {"type": "BertProcessing", "sep": ["[SEP]", 102], "cls": ["[CLS]", 101]}]}),
                )],
                "more than one step adds special tokens",
            ),
            (
                &minilm,
                vec![("/added_tokens/0/single_word", json!(true))],
                "single_word",
            ),
            (
                &minilm,
                vec![
                    ("/added_tokens/0/rstrip", json!(true)),
                    ("/added_tokens/1/content", json!("\n\n")),
                ],
                "rstrip",
            ),
            (
                &xlmr,
                vec![("/pre_tokenizer", split_then_first)],
                "first\" after WhitespaceSplit",
            ),
            (
                &xlmr,
                vec![(
                    "/normalizer/normalizers/2/pattern",
                    json!({"Regex": "\\s+"}),
                )],
                "regex",
            ),
            (
                &xlmr,
                vec![(
                    "/normalizer/normalizers/0/precompiled_charsmap",
                    json!("AAAA!"),
                )],
                "base64",
            ),
        ] {
            refused_edited(base, &edits, needle);
        }
    }

    #[test]
    fn unsupported_bpe_pipelines_are_refused() {
        let qwen2 = vocab_json("qwen2_style_bpe_4k_tokenizer.json");
        for (edits, needle) in [
            (
                vec![(
                    "/pre_tokenizer/pretokenizers/0/pattern/Regex",
                    json!("\\w+|\\s+"),
                )],
                "Split regex",
            ),
            (
                vec![("/pre_tokenizer/pretokenizers/0/behavior", json!("Removed"))],
                "Isolated",
            ),
            (
                vec![("/pre_tokenizer/pretokenizers/1/use_regex", json!(true))],
                "ByteLevel without its regex",
            ),
            (vec![("/normalizer", json!({"type": "NFKC"}))], "NFKC"),
            (vec![("/model/dropout", json!(0.1))], "dropout"),
            (
                vec![("/model/continuing_subword_prefix", json!("##"))],
                "continuing_subword_prefix",
            ),
            (
                vec![("/model/merges/0", json!(["Ġ", "no such token"]))],
                "no such token",
            ),
        ] {
            refused_edited(&qwen2, &edits, needle);
        }
        for field in ["add_prefix_space", "trim_offsets"] {
            let mut j = qwen2.clone();
            let byte_level = j["pre_tokenizer"]["pretokenizers"][1].as_object_mut();
            byte_level.expect("ByteLevel").remove(field);
            refused(j, &format!("`{field}` is missing"));
        }
    }

    #[test]
    fn unsupported_sentencepiece_bpe_pipelines_are_refused() {
        let gemma = vocab_json("gemma_style_spbpe_4k_tokenizer.json");
        let mistral = vocab_json("mistral_style_spbpe_4k_tokenizer.json");
        let llama2 = vocab_json("llama2_style_spbpe_4k_tokenizer.json");
        for (base, edits, needle) in [
            (
                &gemma,
                vec![("/pre_tokenizer/pattern", json!({"Regex": "\\s+"}))],
                "String pattern",
            ),
            (
                &gemma,
                vec![("/pre_tokenizer/invert", json!(true))],
                "invert",
            ),
            (
                &gemma,
                vec![("/pre_tokenizer", json!({"type": "Whitespace"}))],
                "Whitespace",
            ),
            (&gemma, vec![("/normalizer", json!({"type": "NFC"}))], "NFC"),
            (
                &mistral,
                vec![(
                    "/normalizer",
                    json!({"type": "Strip", "strip_left": true, "strip_right": false}),
                )],
                "strips or shortens",
            ),
            (
                &mistral,
                vec![(
                    "/normalizer",
                    json!({"type": "Replace", "pattern": {"String": "ab"}, "content": "h"}),
                )],
                "strips or shortens",
            ),
            (
                &llama2,
                vec![("/pre_tokenizer", mistral["pre_tokenizer"].clone())],
                "behind a normaliser",
            ),
        ] {
            refused_edited(base, &edits, needle);
        }
    }
}
