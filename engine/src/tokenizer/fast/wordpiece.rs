//! WordPiece behind the BERT normaliser and pre-tokeniser, fused: each character of the input is cleaned,
//! decomposed, lowercased and classified in one pass, and words are cut into pieces as soon as they end.

use serde_json::Value;
use unicode_categories::UnicodeCategories;
use unicode_normalization_alignments::char::{canonical_combining_class, decompose_canonical};

use super::{bad, bool_field, str_field, FxMap};
use crate::error::Result;
use crate::tokenizer::Scratch;

/// `BertNormalizer` settings, with `strip_accents: None` already resolved to `lowercase`.
#[derive(Clone, Copy)]
struct Normalizer {
    clean_text: bool,
    chinese_chars: bool,
    strip_accents: bool,
    lowercase: bool,
}

/// What an ASCII byte becomes after normalisation, and how the pre-tokeniser sees it.
#[derive(Clone, Copy)]
enum Ascii {
    Dropped,
    Space,
    Punct(char),
    Letter(char),
}

pub(crate) struct WordPiece {
    vocab: FxMap<Box<str>, u32>,
    /// Pieces that continue a word, keyed without the `##` prefix.
    continuing: FxMap<Box<str>, u32>,
    /// Byte lengths of the longest keys of each map: no longer substring can match.
    max_len: usize,
    max_continuing_len: usize,
    unk: Option<u32>,
    unk_token: String,
    max_chars: usize,
    norm: Option<Normalizer>,
    ascii: [Ascii; 128],
}

/// The Unicode categories the normaliser and pre-tokeniser ask about, as bits of a [`classes`] byte.
const OTHER: u8 = 1;
const PUNCTUATION: u8 = 2;
const NONSPACING_MARK: u8 = 4;

/// Each Basic Multilingual Plane character's [`classes`], computed once: `unicode_categories` answers each
/// question by binary searches over its tables (five for "other", seven for punctuation), which took over a third
/// of the encode of multilingual text.
static BMP_CLASSES: std::sync::OnceLock<Box<[u8]>> = std::sync::OnceLock::new();

fn bmp_classes() -> &'static [u8] {
    BMP_CLASSES.get_or_init(|| {
        (0..=0xFFFF)
            .map(|u| char::from_u32(u).map_or(OTHER, category_bits))
            .collect()
    })
}

fn category_bits(c: char) -> u8 {
    let bit = |set: bool, bit: u8| if set { bit } else { 0 };
    bit(c.is_other(), OTHER)
        | bit(c.is_punctuation(), PUNCTUATION)
        | bit(c.is_mark_nonspacing(), NONSPACING_MARK)
}

/// `c`'s category bits: from the table inside the Basic Multilingual Plane, else asked.
fn classes(c: char) -> u8 {
    match bmp_classes().get(c as usize) {
        Some(&bits) => bits,
        None => category_bits(c),
    }
}

// BERT's own definitions, as the crate's BertNormalizer has them: tab, newline and carriage return count as
// whitespace, not as control characters.
fn is_control(c: char) -> bool {
    !matches!(c, '\t' | '\n' | '\r') && classes(c) & OTHER != 0
}

fn is_whitespace(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r') || c.is_whitespace()
}

fn is_chinese(c: char) -> bool {
    matches!(c as u32,
        0x4E00..=0x9FFF | 0x3400..=0x4DBF | 0x20000..=0x2A6DF | 0x2A700..=0x2B73F | 0x2B740..=0x2B81F
        | 0x2B920..=0x2CEAF | 0xF900..=0xFAFF | 0x2F800..=0x2FA1F)
}

fn is_punct(c: char) -> bool {
    c.is_ascii_punctuation() || classes(c) & PUNCTUATION != 0
}

/// `clean_text`: `None` drops the character.
fn clean(c: char) -> Option<char> {
    if c == '\0' || c == '\u{FFFD}' || is_control(c) {
        None
    } else if is_whitespace(c) {
        Some(' ')
    } else {
        Some(c)
    }
}

impl WordPiece {
    pub(crate) fn parse(model: &Value, normalizer: &Value, pre_tokenizer: &Value) -> Result<Self> {
        // Built at load, not in the first request's encode.
        bmp_classes();
        let norm = match normalizer.get("type").and_then(Value::as_str) {
            None if normalizer.is_null() => None,
            Some("BertNormalizer") => {
                let ctx = "BertNormalizer";
                let lowercase = bool_field(normalizer, "lowercase", true, ctx)?;
                Some(Normalizer {
                    clean_text: bool_field(normalizer, "clean_text", true, ctx)?,
                    chinese_chars: bool_field(normalizer, "handle_chinese_chars", true, ctx)?,
                    strip_accents: bool_field(normalizer, "strip_accents", lowercase, ctx)?,
                    lowercase,
                })
            }
            other => {
                return Err(bad(format!(
                    "normalizer {other:?} is not supported with WordPiece (BertNormalizer is)"
                )))
            }
        };
        match pre_tokenizer.get("type").and_then(Value::as_str) {
            Some("BertPreTokenizer") => {}
            other => {
                return Err(bad(format!(
                    "pre_tokenizer {other:?} is not supported with WordPiece (BertPreTokenizer is)"
                )))
            }
        }
        let prefix = str_field(model, "continuing_subword_prefix", "WordPiece")?;
        let unk_token = str_field(model, "unk_token", "WordPiece")?.to_owned();
        let max_chars = model
            .get("max_input_chars_per_word")
            .and_then(Value::as_u64)
            .map_or(100, |n| usize::try_from(n).unwrap_or(usize::MAX));
        let entries = model
            .get("vocab")
            .and_then(Value::as_object)
            .ok_or_else(|| bad("WordPiece: `vocab` is not an object"))?;
        let mut vocab = FxMap::default();
        let mut continuing = FxMap::default();
        for (token, id) in entries {
            let id = id
                .as_u64()
                .and_then(|id| u32::try_from(id).ok())
                .ok_or_else(|| bad(format!("WordPiece: bad id for {token:?}")))?;
            if let Some(rest) = token.strip_prefix(prefix) {
                continuing.insert(rest.into(), id);
            }
            vocab.insert(token.as_str().into(), id);
        }
        let longest = |m: &FxMap<Box<str>, u32>| m.keys().map(|k| k.len()).max().unwrap_or(0);
        let mut wp = WordPiece {
            max_len: longest(&vocab),
            max_continuing_len: longest(&continuing),
            unk: vocab.get(unk_token.as_str()).copied(),
            vocab,
            continuing,
            unk_token,
            max_chars,
            norm,
            ascii: [Ascii::Dropped; 128],
        };
        for b in 0..128u8 {
            wp.ascii[usize::from(b)] = wp.classify_ascii(char::from(b));
        }
        Ok(wp)
    }

    pub(crate) fn vocab_size(&self) -> usize {
        self.vocab.len()
    }

    /// One past the largest id of the vocabulary.
    pub(crate) fn id_bound(&self) -> usize {
        self.vocab.values().max().map_or(0, |&id| id as usize + 1)
    }

    /// The id of a token of the vocabulary.
    pub(crate) fn token_id(&self, token: &str) -> Option<u32> {
        self.vocab.get(token).copied()
    }

    /// The whole pipeline for one ASCII character, which decomposes to itself and lowercases to one character.
    fn classify_ascii(&self, c: char) -> Ascii {
        let c = match self.norm {
            Some(n) => {
                let Some(c) = (if n.clean_text { clean(c) } else { Some(c) }) else {
                    return Ascii::Dropped;
                };
                if n.lowercase {
                    c.to_ascii_lowercase()
                } else {
                    c
                }
            }
            None => c,
        };
        if c.is_whitespace() {
            Ascii::Space
        } else if is_punct(c) {
            Ascii::Punct(c)
        } else {
            Ascii::Letter(c)
        }
    }

    pub(crate) fn has_unk(&self) -> bool {
        self.unk.is_some()
    }

    /// `text` as the BERT normaliser leaves it: itself without one, else written to `out` (the added tokens matched
    /// on normalised text are found in it).
    pub(crate) fn normalized<'a>(
        &self,
        text: &'a str,
        marks: &mut Vec<(u8, char)>,
        out: &'a mut String,
    ) -> &'a str {
        if self.norm.is_none() {
            return text;
        }
        out.clear();
        marks.clear();
        let Ok(()) = text.chars().try_for_each(|c| self.normalize(c, marks, out));
        let Ok(()) = self.flush_marks(marks, out);
        out
    }

    /// Appends the ids of `text` (`normalized`: the normaliser has run over it already, as over the text between
    /// added tokens matched on normalised text), stopping at the word that brings them to `limit`.
    pub(crate) fn encode(
        &self,
        text: &str,
        normalized: bool,
        scratch: &mut Scratch,
        ids: &mut Vec<u32>,
        limit: usize,
    ) -> Result<()> {
        let mut w = Words {
            wp: self,
            word: &mut scratch.a,
            chars: 0,
            ids,
        };
        w.word.clear();
        let marks = &mut scratch.marks;
        marks.clear();
        let bytes = text.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            let b = bytes[i];
            if b < 0x80 {
                // An ASCII character is a starter: the combining marks before it are complete.
                if !marks.is_empty() {
                    self.flush_marks(marks, &mut w)?;
                }
                match self.ascii[usize::from(b)] {
                    Ascii::Dropped => {}
                    Ascii::Space => {
                        w.end_word()?;
                        if w.ids.len() >= limit {
                            return Ok(());
                        }
                    }
                    Ascii::Punct(c) => w.punct(c)?,
                    Ascii::Letter(c) => w.push(c),
                }
                i += 1;
            } else {
                let Some(c) = text[i..].chars().next() else {
                    break;
                };
                i += c.len_utf8();
                // Normalised text is only classified: BERT's normaliser is not idempotent on every character
                // (a lowercase can make a mark that a second accent strip would drop). Its ASCII characters
                // normalise to themselves, so the table above serves both.
                if normalized {
                    w.classify(c)?;
                } else {
                    self.normalize(c, marks, &mut w)?;
                }
            }
        }
        self.flush_marks(marks, &mut w)?;
        w.end_word()
    }

    /// The normaliser for one character (the encode's ASCII ones go through the table instead): clean, isolate
    /// CJK, decompose (holding combining marks back for canonical ordering), then [`WordPiece::emit`].
    fn normalize<S: Sink>(
        &self,
        c: char,
        marks: &mut Vec<(u8, char)>,
        w: &mut S,
    ) -> std::result::Result<(), S::Error> {
        let Some(n) = self.norm else {
            return w.classify(c);
        };
        let c = if n.clean_text {
            match clean(c) {
                Some(c) => c,
                None => return Ok(()),
            }
        } else {
            c
        };
        if n.chinese_chars && is_chinese(c) {
            self.decompose(' ', n, marks, w)?;
            self.decompose(c, n, marks, w)?;
            self.decompose(' ', n, marks, w)
        } else {
            self.decompose(c, n, marks, w)
        }
    }

    fn decompose<S: Sink>(
        &self,
        c: char,
        n: Normalizer,
        marks: &mut Vec<(u8, char)>,
        w: &mut S,
    ) -> std::result::Result<(), S::Error> {
        if !n.strip_accents {
            return self.emit(c, n, w);
        }
        let mut result = Ok(());
        decompose_canonical(c, |d| {
            if result.is_err() {
                return;
            }
            match canonical_combining_class(d) {
                0 => {
                    result = self.flush_marks(marks, w).and_then(|()| self.emit(d, n, w));
                }
                class => marks.push((class, d)),
            }
        });
        result
    }

    /// Emits the held combining marks in canonical order (a stable sort by combining class).
    fn flush_marks<S: Sink>(
        &self,
        marks: &mut Vec<(u8, char)>,
        w: &mut S,
    ) -> std::result::Result<(), S::Error> {
        for i in 1..marks.len() {
            let mut j = i;
            while j > 0 && marks[j - 1].0 > marks[j].0 {
                marks.swap(j - 1, j);
                j -= 1;
            }
        }
        if let Some(n) = self.norm {
            for &(_, m) in marks.iter() {
                self.emit(m, n, w)?;
            }
        }
        marks.clear();
        Ok(())
    }

    /// The end of the normaliser: drop non-spacing marks when stripping accents, lowercase.
    fn emit<S: Sink>(
        &self,
        c: char,
        n: Normalizer,
        w: &mut S,
    ) -> std::result::Result<(), S::Error> {
        if n.strip_accents && classes(c) & NONSPACING_MARK != 0 {
            return Ok(());
        }
        if n.lowercase {
            for l in c.to_lowercase() {
                w.classify(l)?;
            }
            Ok(())
        } else {
            w.classify(c)
        }
    }

    /// Greedy longest-match-first WordPiece of one pre-tokenised word of `chars` characters.
    fn word(&self, word: &str, chars: usize, ids: &mut Vec<u32>) -> Result<()> {
        if chars > self.max_chars {
            return self.push_unk(ids);
        }
        let mark = ids.len();
        let mut start = 0;
        while start < word.len() {
            let (map, max) = if start == 0 {
                (&self.vocab, self.max_len)
            } else {
                (&self.continuing, self.max_continuing_len)
            };
            let mut end = word.len().min(start + max);
            while !word.is_char_boundary(end) {
                end -= 1;
            }
            loop {
                if end <= start {
                    ids.truncate(mark);
                    return self.push_unk(ids);
                }
                if let Some(&id) = map.get(&word[start..end]) {
                    ids.push(id);
                    start = end;
                    break;
                }
                end -= 1;
                while !word.is_char_boundary(end) {
                    end -= 1;
                }
            }
        }
        Ok(())
    }

    fn push_unk(&self, ids: &mut Vec<u32>) -> Result<()> {
        let unk = self.unk.ok_or_else(|| {
            bad(format!(
                "WordPiece: the unknown token {:?} is not in the vocabulary",
                self.unk_token
            ))
        })?;
        ids.push(unk);
        Ok(())
    }
}

/// Where the normaliser's characters go: the pre-tokeniser ([`Words`], which fails on a word it cannot piece
/// without an unknown token) or, for the text added tokens are matched in, a string (which cannot fail).
trait Sink {
    type Error;
    fn classify(&mut self, c: char) -> std::result::Result<(), Self::Error>;
}

impl Sink for String {
    type Error = std::convert::Infallible;
    fn classify(&mut self, c: char) -> std::result::Result<(), Self::Error> {
        self.push(c);
        Ok(())
    }
}

impl Sink for Words<'_> {
    type Error = crate::error::Error;
    fn classify(&mut self, c: char) -> Result<()> {
        if c.is_whitespace() {
            self.end_word()
        } else if is_punct(c) {
            self.punct(c)
        } else {
            self.push(c);
            Ok(())
        }
    }
}

/// The pre-tokeniser: whitespace ends a word, punctuation is a word of its own.
struct Words<'a> {
    wp: &'a WordPiece,
    word: &'a mut String,
    chars: usize,
    ids: &'a mut Vec<u32>,
}

impl Words<'_> {
    fn push(&mut self, c: char) {
        self.word.push(c);
        self.chars += 1;
    }

    fn punct(&mut self, c: char) -> Result<()> {
        self.end_word()?;
        self.push(c);
        self.end_word()
    }

    fn end_word(&mut self) -> Result<()> {
        if !self.word.is_empty() {
            self.wp.word(self.word, self.chars, self.ids)?;
            self.word.clear();
            self.chars = 0;
        }
        Ok(())
    }
}
