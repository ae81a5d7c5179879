//! BPE: byte-level (GPT-2, Qwen2/Qwen3, Llama-3) behind its NFC normaliser and regex pre-tokeniser, or
//! SentencePiece's (Llama 2, Mistral, Gemma) behind its normaliser steps, with `<0xXX>` byte fallback; merges by
//! rank, lowest first and leftmost among equals, as the crate's `Word::merge_all` applies them. `front` parses
//! what runs before the merges.
//!
//! `ByteLevel` maps each byte of a pre-token to a printable character, and the vocabulary is written in those
//! characters. Here the mapping is undone once, at load: vocabulary tokens are keyed by the bytes they stand for,
//! so an encode merges the raw bytes of the text without ever building the mapped string. A SentencePiece
//! vocabulary is text already, keyed by its UTF-8 bytes the same way; its words start as characters, not bytes.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use serde_json::Value;

use super::pretok::PreTokenizer;
use super::{bad, bool_field, nfc, spm, str_field, FxMap, Piece};
use crate::error::Result;
use crate::tokenizer::Scratch;

mod front;

use front::{byte_chars, CharPre, Front, PrefixSpace};

const NONE: u32 = u32::MAX;
/// A pair with no merge: ranks and pairs share one `u64` (rank above, merged id below), so this sorts last.
const NO_MERGE: u64 = u64::MAX;
/// Up to this many symbols a word is merged by rescanning its pairs, which beats a heap on the short pre-tokens
/// of real text; longer ones (a 100k-letter run is one pre-token) take the heap, so no word costs quadratic time.
const SHORT: usize = 48;

/// What one unit of a word (a byte of a byte-level pre-token, a character of a SentencePiece word) starts as,
/// before any merge.
#[derive(Clone, Copy)]
enum Init {
    Id(u32),
    /// `byte_fallback`: the `<0xXX>` tokens of the UTF-8 bytes of the unit's character.
    Fallback([u32; 4], u8),
    Unk(u32),
    /// An unknown token that is not in the vocabulary: the crate fails the encode.
    UnkMissing,
    /// Neither in the vocabulary nor covered by an unknown token: the crate drops it.
    Dropped,
}

/// Reusable working memory of the merges.
#[derive(Default)]
pub(crate) struct Work {
    syms: Vec<u32>,
    ranks: Vec<u64>,
    links: Vec<Link>,
    heap: BinaryHeap<Reverse<(u32, u32)>>,
}

impl Work {
    /// The memory held, in bytes.
    pub(crate) fn bytes(&self) -> usize {
        self.syms.capacity() * size_of::<u32>()
            + self.ranks.capacity() * size_of::<u64>()
            + self.links.capacity() * size_of::<Link>()
            + self.heap.capacity() * size_of::<Reverse<(u32, u32)>>()
    }
}

/// A symbol of a long word: its id (`NONE` once merged into its left neighbour) and its neighbours.
#[derive(Clone, Copy)]
struct Link {
    id: u32,
    prev: u32,
    next: u32,
}

pub(crate) struct Bpe {
    /// Tokens by the bytes they stand for.
    by_bytes: FxMap<Box<[u8]>, u32>,
    /// Tokens with characters outside the byte-level alphabet: no text maps to them, but they count.
    unmapped: FxMap<Box<str>, u32>,
    /// `(left << 32 | right)` to `(rank << 32 | merged)`.
    merges: FxMap<u64, u64>,
    /// What each byte starts as (byte-level), or each ASCII character (SentencePiece; the others are looked up).
    init: [Init; 256],
    /// The `<0xXX>` token of each byte, `NONE` where the vocabulary lacks it; all `NONE` without `byte_fallback`.
    fallback: Box<[u32; 256]>,
    /// What a unit that is neither a token nor covered by its bytes' tokens becomes.
    unknown: Init,
    fuse_unk: bool,
    unk_token: String,
    ignore_merges: bool,
    /// SentencePiece: no merge joins a symbol that ends in another character to one that starts with `▁`; `▁` is
    /// a token; no character is dropped (it has an unknown token that does not end in `▁`, or every byte's
    /// `<0xXX>`); no two tokens share an id (merges are by id, the check by text). So the symbol before a `▁` that
    /// follows another character always ends in that character, and a word's merges never cross that place: the
    /// word is merged in those pieces, each a few symbols, instead of as one long text.
    words_at_space: bool,
    /// What `▁`, which starts most SentencePiece words, starts as: looked up once.
    space: Init,
    front: Front,
}

/// SentencePiece's whitespace.
const SPACE: char = '\u{2581}';

/// Whether `ByteLevel`'s prefix space goes before this piece: the crate adds it to a non-empty piece that does not
/// start with a space.
fn needs_space(piece: &[u8]) -> bool {
    piece.first().is_some_and(|&c| c != b' ')
}

/// `text` after one space, in `out`.
fn spaced(text: &str, out: &mut String) {
    out.clear();
    out.push(' ');
    out.push_str(text);
}

/// `(left, right)` of a merge, in either of the crate's formats: `["a", "b"]` or `"a b"`.
fn merge_pair(m: &Value) -> Option<(&str, &str)> {
    match m {
        Value::Array(p) => match p.as_slice() {
            [a, b] => Some((a.as_str()?, b.as_str()?)),
            _ => None,
        },
        Value::String(s) => s.split_once(' ').filter(|(_, b)| !b.contains(' ')),
        _ => None,
    }
}

impl Bpe {
    pub(crate) fn parse(model: &Value, normalizer: &Value, pre_tokenizer: &Value) -> Result<Self> {
        let front = Front::parse(normalizer, pre_tokenizer)?;
        let byte_level = matches!(front, Front::Bytes { .. });
        if !matches!(model.get("dropout"), None | Some(Value::Null))
            && model.get("dropout").and_then(Value::as_f64) != Some(0.0)
        {
            return Err(bad("BPE: dropout is not supported"));
        }
        for affix in ["continuing_subword_prefix", "end_of_word_suffix"] {
            if !matches!(model.get(affix), None | Some(Value::Null))
                && model.get(affix).and_then(Value::as_str) != Some("")
            {
                return Err(bad(format!("BPE: `{affix}` is not supported")));
            }
        }
        let vocab = model
            .get("vocab")
            .and_then(Value::as_object)
            .ok_or_else(|| bad("BPE: `vocab` is not an object"))?;
        let id_of = |token: &str| {
            vocab
                .get(token)
                .and_then(Value::as_u64)
                .and_then(|id| u32::try_from(id).ok())
        };
        let chars = byte_chars();
        let mut byte_of = FxMap::<char, u8>::default();
        for (b, &c) in chars.iter().enumerate() {
            byte_of.insert(c, b as u8);
        }
        let mut by_bytes = FxMap::default();
        let mut unmapped = FxMap::default();
        for (token, id) in vocab {
            let id = id
                .as_u64()
                .and_then(|id| u32::try_from(id).ok())
                .ok_or_else(|| bad(format!("BPE: bad id for {token:?}")))?;
            let bytes = if byte_level {
                token
                    .chars()
                    .map(|c| byte_of.get(&c).copied())
                    .collect::<Option<Vec<u8>>>()
            } else {
                Some(token.as_bytes().to_vec())
            };
            match bytes {
                Some(bytes) => by_bytes.insert(bytes.into_boxed_slice(), id),
                None => unmapped.insert(token.as_str().into(), id),
            };
        }
        let mut merges = FxMap::default();
        let lines = model
            .get("merges")
            .and_then(Value::as_array)
            .ok_or_else(|| bad("BPE: `merges` is not a list"))?;
        let lines = lines
            .iter()
            .filter(|m| !m.as_str().is_some_and(|s| s.starts_with("#version")));
        let mut crosses_space = false;
        for (rank, m) in lines.enumerate() {
            let (a, b) = merge_pair(m).ok_or_else(|| bad(format!("BPE: bad merge {m}")))?;
            crosses_space |= !a.ends_with(SPACE) && b.starts_with(SPACE);
            let missing = |t: &str| bad(format!("BPE: merge token {t:?} is not in the vocabulary"));
            let merged = format!("{a}{b}");
            let (a, b, merged) = (
                id_of(a).ok_or_else(|| missing(a))?,
                id_of(b).ok_or_else(|| missing(b))?,
                id_of(&merged).ok_or_else(|| missing(&merged))?,
            );
            let rank = u32::try_from(rank).map_err(|_| bad("BPE: too many merges"))?;
            merges.insert(
                u64::from(a) << 32 | u64::from(b),
                u64::from(rank) << 32 | u64::from(merged),
            );
        }
        let unk_token = match model.get("unk_token") {
            None | Some(Value::Null) => None,
            Some(_) => Some(str_field(model, "unk_token", "BPE")?.to_owned()),
        };
        let mut fallback = Box::new([NONE; 256]);
        if bool_field(model, "byte_fallback", false, "BPE")? {
            for (b, id) in fallback.iter_mut().enumerate() {
                *id = id_of(&format!("<{b:#04X}>")).unwrap_or(NONE);
            }
        }
        let unknown = match &unk_token {
            Some(unk) => id_of(unk).map_or(Init::UnkMissing, Init::Unk),
            None => Init::Dropped,
        };
        let never_dropped = match &unknown {
            Init::Unk(_) | Init::UnkMissing => {
                !unk_token.as_deref().is_some_and(|u| u.ends_with(SPACE))
            }
            _ => !fallback.contains(&NONE),
        };
        let ids_unique = {
            let mut seen = std::collections::HashSet::with_capacity(vocab.len());
            by_bytes
                .values()
                .chain(unmapped.values())
                .all(|&id| seen.insert(id))
        };
        let mut bpe = Bpe {
            space: Init::Dropped,
            words_at_space: !byte_level
                && !crosses_space
                && never_dropped
                && ids_unique
                && by_bytes.contains_key(SPACE.encode_utf8(&mut [0; 4]).as_bytes()),
            by_bytes,
            unmapped,
            merges,
            init: [Init::Dropped; 256],
            fallback,
            unknown,
            fuse_unk: bool_field(model, "fuse_unk", false, "BPE")?,
            unk_token: unk_token.unwrap_or_default(),
            ignore_merges: bool_field(model, "ignore_merges", false, "BPE")?,
            front,
        };
        // A byte-level unit is a byte, spelt as its character; a SentencePiece one a character (ASCII here).
        let units = if byte_level { 256 } else { 128 };
        for (b, &c) in chars.iter().enumerate().take(units) {
            let c = if byte_level { c } else { char::from(b as u8) };
            let mut utf8 = [0u8; 4];
            let c = c.encode_utf8(&mut utf8);
            bpe.init[b] = bpe.classify(id_of(c), c.as_bytes());
        }
        let space = SPACE.encode_utf8(&mut [0; 4]).to_owned();
        bpe.space = bpe.classify(id_of(&space), space.as_bytes());
        Ok(bpe)
    }

    /// What a unit spelt `utf8` starts as, given its token if the vocabulary has one.
    fn classify(&self, id: Option<u32>, utf8: &[u8]) -> Init {
        if let Some(id) = id {
            return Init::Id(id);
        }
        let mut ids = [NONE; 4];
        for (slot, &b) in ids.iter_mut().zip(utf8) {
            *slot = self.fallback[usize::from(b)];
        }
        if ids[..utf8.len()].contains(&NONE) {
            self.unknown
        } else {
            // At most four: `utf8` is one character's.
            Init::Fallback(ids, utf8.len() as u8)
        }
    }

    pub(crate) fn vocab_size(&self) -> usize {
        self.by_bytes.len() + self.unmapped.len()
    }

    /// One past the largest id of the vocabulary.
    pub(crate) fn id_bound(&self) -> usize {
        let ids = self.by_bytes.values().chain(self.unmapped.values());
        ids.max().map_or(0, |&id| id as usize + 1)
    }

    /// The id of a token of the vocabulary, as the file spells it (byte-level: in GPT-2's byte characters).
    pub(crate) fn token_id(&self, token: &str) -> Option<u32> {
        if !matches!(self.front, Front::Bytes { .. }) {
            return self.by_bytes.get(token.as_bytes()).copied();
        }
        let chars = byte_chars();
        let bytes: Option<Vec<u8>> = token
            .chars()
            .map(|c| chars.iter().position(|&m| m == c).map(|b| b as u8))
            .collect();
        match bytes {
            Some(b) => self.by_bytes.get(b.as_slice()).copied(),
            None => self.unmapped.get(token).copied(),
        }
    }

    /// Whether Metaspace's `first` prepend sits behind normaliser steps (see `Front::first_behind_steps`).
    pub(crate) fn first_behind_steps(&self) -> bool {
        self.front.first_behind_steps()
    }

    /// Whether no text can fail to encode (only an unknown token missing from the vocabulary fails).
    pub(crate) fn infallible(&self) -> bool {
        let sentencepiece = matches!(self.front, Front::Chars { .. });
        !(self.init.iter().any(|i| matches!(i, Init::UnkMissing))
            || sentencepiece && matches!(self.unknown, Init::UnkMissing))
    }

    /// Appends the ids of `text`, stopping after the pre-token that brings them to `limit`.
    pub(crate) fn encode(
        &self,
        text: &str,
        piece: Piece,
        scratch: &mut Scratch,
        ids: &mut Vec<u32>,
        limit: usize,
    ) -> Result<()> {
        let Scratch {
            a,
            b,
            marks,
            held,
            bpe,
            ..
        } = scratch;
        match &self.front {
            Front::Bytes { nfc, pre, prefix } => {
                let text = if *nfc && !piece.normalized && !nfc::is_nfc(text) {
                    nfc::nfc(text, a, marks, held);
                    a.as_str()
                } else {
                    text
                };
                match prefix {
                    PrefixSpace::Segment if needs_space(text.as_bytes()) => {
                        spaced(text, b);
                        self.byte_words(b.as_str(), pre, None, bpe, ids, limit)
                    }
                    PrefixSpace::Never | PrefixSpace::Segment => {
                        self.byte_words(text, pre, None, bpe, ids, limit)
                    }
                    PrefixSpace::PreToken => self.byte_words(text, pre, Some(b), bpe, ids, limit),
                }
            }
            Front::Chars { steps, pre } => {
                let text = if piece.normalized {
                    text
                } else {
                    spm::normalize(steps, text, a, b, marks)
                };
                let mut word = |w: &str| {
                    self.word_chars(w, bpe, ids)?;
                    Ok(ids.len() < limit)
                };
                match pre {
                    CharPre::Whole => word(text).map(drop),
                    CharPre::Metaspace(m) => m.for_each_pretoken(text, piece.at_start, b, word),
                    CharPre::Split(s) => s.for_each_piece(text, word),
                }
            }
        }
    }

    /// `text` as the normaliser leaves it: itself where it changes nothing (no steps, NFC text already NFC), else
    /// written to `out` with `scratch`'s buffers.
    pub(crate) fn normalized<'a>(
        &self,
        text: &'a str,
        scratch: &mut Scratch,
        out: &'a mut String,
    ) -> &'a str {
        match &self.front {
            Front::Bytes { nfc: true, .. } if !nfc::is_nfc(text) => {
                nfc::nfc(text, out, &mut scratch.marks, &mut scratch.held);
                out
            }
            Front::Bytes { .. } => text,
            Front::Chars { steps, .. } => spm::normalized(steps, text, scratch, out),
        }
    }

    /// The byte-level pre-tokens of `text`, merged, until `ids` holds `limit`; with `spaced_buf`, each one that
    /// does not start with a space gets one, written there.
    fn byte_words(
        &self,
        text: &str,
        pre: &PreTokenizer,
        mut spaced_buf: Option<&mut String>,
        work: &mut Work,
        ids: &mut Vec<u32>,
        limit: usize,
    ) -> Result<()> {
        let mut p = 0;
        while p < text.len() && ids.len() < limit {
            let e = pre.next(text, p);
            // Bytes, not a `str` slice: no character-boundary checks on the hot path.
            let mut word = &text.as_bytes()[p..e];
            if let Some(buf) = spaced_buf.as_deref_mut() {
                if needs_space(word) {
                    spaced(&text[p..e], buf);
                    word = buf.as_bytes();
                }
            }
            let units = word.iter().map(|&b| self.init[usize::from(b)]);
            self.word(word, units, work, ids)?;
            p = e;
        }
        Ok(())
    }

    /// A SentencePiece word: its characters' units, merged (in pieces where `words_at_space` allows).
    fn word_chars(&self, word: &str, work: &mut Work, ids: &mut Vec<u32>) -> Result<()> {
        if !self.words_at_space {
            return self.word(word.as_bytes(), self.char_units(word), work, ids);
        }
        if word.is_empty() || self.whole(word.as_bytes(), ids) {
            return Ok(());
        }
        let mut start = 0;
        for (i, _) in word.match_indices(SPACE) {
            if i > start && !word[..i].ends_with(SPACE) {
                self.merge(self.char_units(&word[start..i]), work, ids)?;
                start = i;
            }
        }
        self.merge(self.char_units(&word[start..]), work, ids)
    }

    /// What each character of a SentencePiece word starts as.
    fn char_units<'a>(&'a self, word: &'a str) -> impl Iterator<Item = Init> + 'a {
        let bytes = word.as_bytes();
        word.char_indices().map(move |(i, c)| {
            if c.is_ascii() {
                return self.init[usize::from(bytes[i])];
            }
            if c == SPACE {
                return self.space;
            }
            let utf8 = &bytes[i..i + c.len_utf8()];
            self.classify(self.by_bytes.get(utf8).copied(), utf8)
        })
    }

    fn pair(&self, a: u32, b: u32) -> u64 {
        self.merges
            .get(&(u64::from(a) << 32 | u64::from(b)))
            .copied()
            .unwrap_or(NO_MERGE)
    }

    /// With `ignore_merges`, a word that is a token is that token: pushes it and says so.
    fn whole(&self, word: &[u8], ids: &mut Vec<u32>) -> bool {
        if !self.ignore_merges {
            return false;
        }
        let id = self.by_bytes.get(word);
        ids.extend(id);
        id.is_some()
    }

    /// One word, spelt `word`: itself with `ignore_merges` if it is a token, else its units' symbols, merged.
    fn word(
        &self,
        word: &[u8],
        units: impl Iterator<Item = Init>,
        work: &mut Work,
        ids: &mut Vec<u32>,
    ) -> Result<()> {
        if word.is_empty() || self.whole(word, ids) {
            return Ok(());
        }
        self.merge(units, work, ids)
    }

    /// The symbols of `units`, merged.
    fn merge(
        &self,
        units: impl Iterator<Item = Init>,
        work: &mut Work,
        ids: &mut Vec<u32>,
    ) -> Result<()> {
        let syms = &mut work.syms;
        syms.clear();
        // The unknown token waiting to be pushed, as the crate holds it back to fuse it with the next.
        let mut unk = None;
        for unit in units {
            match unit {
                Init::Id(id) => {
                    syms.extend(unk.take());
                    syms.push(id);
                }
                // The crate pushes these ahead of a held unknown token.
                Init::Fallback(f, n) => syms.extend_from_slice(&f[..usize::from(n)]),
                Init::Unk(u) => {
                    if !(self.fuse_unk && unk.is_some()) {
                        syms.extend(unk.replace(u));
                    }
                }
                Init::UnkMissing => {
                    return Err(bad(format!(
                        "BPE: the unknown token {:?} is not in the vocabulary",
                        self.unk_token
                    )))
                }
                Init::Dropped => {}
            }
        }
        syms.extend(unk);
        if syms.len() <= SHORT {
            self.merge_short(work);
            ids.extend_from_slice(&work.syms);
        } else {
            self.merge_long(work, ids);
        }
        Ok(())
    }

    /// Merges by rescanning the pairs for the lowest rank (ranks are unique, so the first found is the leftmost).
    fn merge_short(&self, work: &mut Work) {
        let Work { syms, ranks, .. } = work;
        ranks.clear();
        ranks.extend(syms.windows(2).map(|w| self.pair(w[0], w[1])));
        loop {
            let Some((at, &best)) = ranks.iter().enumerate().min_by_key(|&(_, r)| r) else {
                return;
            };
            if best == NO_MERGE {
                return;
            }
            syms[at] = best as u32;
            syms.remove(at + 1);
            ranks.remove(at);
            if at > 0 {
                ranks[at - 1] = self.pair(syms[at - 1], syms[at]);
            }
            if at < ranks.len() {
                ranks[at] = self.pair(syms[at], syms[at + 1]);
            }
        }
    }

    /// Merges through a heap of (rank, position), the crate's own way, skipping entries a merge made stale.
    fn merge_long(&self, work: &mut Work, ids: &mut Vec<u32>) {
        let Work {
            syms, links, heap, ..
        } = work;
        let n = syms.len();
        links.clear();
        links.extend(syms.iter().enumerate().map(|(i, &id)| Link {
            id,
            prev: if i == 0 { NONE } else { i as u32 - 1 },
            next: if i + 1 == n { NONE } else { i as u32 + 1 },
        }));
        heap.clear();
        for i in 0..n - 1 {
            let r = self.pair(syms[i], syms[i + 1]);
            if r != NO_MERGE {
                heap.push(Reverse(((r >> 32) as u32, i as u32)));
            }
        }
        while let Some(Reverse((rank, pos))) = heap.pop() {
            let left = links[pos as usize];
            if left.id == NONE || left.next == NONE {
                continue;
            }
            let right = links[left.next as usize];
            let r = self.pair(left.id, right.id);
            if r == NO_MERGE || (r >> 32) as u32 != rank {
                continue;
            }
            let merged = r as u32;
            links[pos as usize].id = merged;
            links[pos as usize].next = right.next;
            links[left.next as usize].id = NONE;
            if right.next != NONE {
                links[right.next as usize].prev = pos;
                let r = self.pair(merged, links[right.next as usize].id);
                if r != NO_MERGE {
                    heap.push(Reverse(((r >> 32) as u32, pos)));
                }
            }
            if left.prev != NONE {
                let r = self.pair(links[left.prev as usize].id, merged);
                if r != NO_MERGE {
                    heap.push(Reverse(((r >> 32) as u32, left.prev)));
                }
            }
        }
        let mut i = 0;
        while i != NONE {
            ids.push(links[i as usize].id);
            i = links[i as usize].next;
        }
    }
}
