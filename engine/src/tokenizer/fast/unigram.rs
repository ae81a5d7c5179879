//! Unigram (SentencePiece) behind its normaliser sequence and the Metaspace pre-tokeniser: Viterbi over the
//! lattice of vocabulary pieces, walked straight off a byte trie, with the crate's unknown-token rule. `spm`
//! parses and runs what comes before the lattice, `trie` lays out and walks the pieces.

use serde_json::Value;

use super::spm::{self, has_at, parse_pre_tokenizer, parse_step, PreTokenizer, Step};
use super::{bad, bool_field, FxMap, Piece};
use crate::error::Result;
use crate::tokenizer::Scratch;

mod trie;

pub(crate) use trie::Best;
use trie::{relax, Trie};

/// The crate's penalty: an unknown character scores this far below the worst piece.
const UNK_PENALTY: f64 = 10.0;
const NONE: u32 = u32::MAX;

pub(crate) struct Unigram {
    steps: Vec<Step>,
    pre: PreTokenizer,
    pieces: FxMap<Box<str>, u32>,
    /// The length of the vocabulary's list: more than `pieces` holds where a piece repeats (the last one's id
    /// is the piece's, as in the crate).
    ids_taken: usize,
    trie: Trie,
    unk: Option<u32>,
    unk_score: f64,
    byte_ids: Option<Box<[u32; 256]>>,
    whole: WholePieces,
}

/// The pieces that Viterbi encodes as themselves alone, so that a pre-token equal to one of them is that token
/// without a lattice: most words of the language a large vocabulary was trained on are such pieces, and a lookup
/// costs a fraction of their lattice. Open addressing over slots that hold a piece's first eight bytes (the
/// replacement and five letters) and its length, the rest of longer ones in a side array: a lookup hashes a word
/// at a time and mostly reads one slot, where the piece map's hashed a byte at a time and compared through a
/// pointer and a `memcmp` call, together as long as the lattices it saved.
#[derive(Default)]
struct WholePieces {
    slots: Vec<Slot>,
    /// Slot index = the hash's top bits.
    shift: u32,
    /// The bytes of the pieces after their first eight.
    tails: Vec<u8>,
}

#[derive(Clone, Copy, Default)]
struct Slot {
    head: u64,
    id: u32,
    /// Where the piece's tail starts in `tails` (bits 8 up) and its length (low 8 bits; 0 marks an empty slot).
    tail_len: u32,
}

impl WholePieces {
    fn new(pieces: &[(&str, u32)]) -> Self {
        let bits = (pieces.len() * 2)
            .max(2)
            .next_power_of_two()
            .trailing_zeros();
        let mut table = WholePieces {
            slots: vec![Slot::default(); 1 << bits],
            shift: 64 - bits,
            tails: Vec::new(),
        };
        for &(piece, id) in pieces {
            let key = piece.as_bytes();
            let tail = table.tails.len();
            let (Ok(len @ 1..=255), Ok(tail @ ..0x100_0000)) =
                (u8::try_from(key.len()), u32::try_from(tail))
            else {
                continue;
            };
            let mut i = table.first_slot(key);
            while table.slots[i].tail_len != 0 {
                i = (i + 1) % table.slots.len();
            }
            table
                .tails
                .extend_from_slice(key.get(8..).unwrap_or_default());
            table.slots[i] = Slot {
                head: word(key),
                id,
                tail_len: tail << 8 | u32::from(len),
            };
        }
        table
    }

    fn first_slot(&self, key: &[u8]) -> usize {
        const K: u64 = 0x9E37_79B9_7F4A_7C15;
        let h = key
            .chunks(8)
            .fold((key.len() as u64).wrapping_mul(K), |h, w| {
                (h ^ word(w)).wrapping_mul(K)
            });
        (h >> self.shift) as usize
    }

    fn get(&self, key: &[u8]) -> Option<u32> {
        let len = u32::try_from(key.len())
            .ok()
            .filter(|&n| (1..=255).contains(&n))?;
        if self.slots.is_empty() {
            return None;
        }
        let head = word(key);
        let mut i = self.first_slot(key);
        loop {
            let slot = self.slots[i];
            if slot.tail_len == 0 {
                return None;
            }
            if slot.tail_len & 0xFF == len
                && slot.head == head
                && has_at(
                    &self.tails,
                    (slot.tail_len >> 8) as usize,
                    key.get(8..).unwrap_or_default(),
                )
            {
                return Some(slot.id);
            }
            i = (i + 1) % self.slots.len();
        }
    }
}

/// The first eight bytes of `bytes` as a little-endian word, zero-padded.
fn word(bytes: &[u8]) -> u64 {
    match bytes {
        [a, b, c, d, e, f, g, h, ..] => u64::from_le_bytes([*a, *b, *c, *d, *e, *f, *g, *h]),
        _ => bytes.iter().rev().fold(0, |w, &b| w << 8 | u64::from(b)),
    }
}

impl Unigram {
    pub(crate) fn parse(model: &Value, normalizer: &Value, pre_tokenizer: &Value) -> Result<Self> {
        let mut steps = Vec::new();
        parse_step(normalizer, &mut steps)?;
        let pre = parse_pre_tokenizer(pre_tokenizer)?;
        spm::check_first(&pre, &steps)?;
        let vocab = model
            .get("vocab")
            .and_then(Value::as_array)
            .ok_or_else(|| bad("Unigram: `vocab` is not a list"))?;
        let mut scores = Vec::with_capacity(vocab.len());
        let mut pieces: FxMap<Box<str>, u32> = FxMap::default();
        for (id, entry) in vocab.iter().enumerate() {
            let (Some(piece), Some(score)) = (
                entry.get(0).and_then(Value::as_str),
                entry.get(1).and_then(Value::as_f64),
            ) else {
                return Err(bad(format!(
                    "Unigram: vocab entry {id} is not [piece, score]"
                )));
            };
            let id = u32::try_from(id).map_err(|_| bad("Unigram: vocabulary too large"))?;
            pieces.insert(piece.into(), id);
            scores.push(score);
        }
        let unk = match model.get("unk_id") {
            None | Some(Value::Null) => None,
            Some(v) => Some(
                v.as_u64()
                    .and_then(|u| u32::try_from(u).ok())
                    .filter(|&u| (u as usize) < scores.len())
                    .ok_or_else(|| bad("Unigram: `unk_id` is not in the vocabulary"))?,
            ),
        };
        let min_score = scores.iter().copied().fold(f64::INFINITY, f64::min);
        let byte_ids = if bool_field(model, "byte_fallback", false, "Unigram")? {
            let mut ids = Box::new([NONE; 256]);
            for (b, id) in ids.iter_mut().enumerate() {
                *id = pieces
                    .get(format!("<0x{b:02X}>").as_str())
                    .copied()
                    .unwrap_or(NONE);
            }
            Some(ids)
        } else {
            None
        };
        let trie = Trie::build(
            pieces.iter().map(|(p, &id)| (&**p, id)),
            &scores,
            pre.replacement,
        )?;
        let mut unigram = Unigram {
            ids_taken: scores.len(),
            steps,
            pre,
            pieces,
            trie,
            unk,
            unk_score: min_score - UNK_PENALTY,
            byte_ids,
            whole: WholePieces::default(),
        };
        // Which pieces Viterbi keeps whole, by running it on each of them once.
        let (mut best, mut path, mut ids) = (Vec::new(), Vec::new(), Vec::new());
        let mut whole = Vec::new();
        for (piece, &id) in &unigram.pieces {
            ids.clear();
            let ok = unigram.viterbi(piece, &mut best, &mut path, &mut ids);
            if ok.is_ok() && ids == [id] {
                whole.push((&**piece, id));
            }
        }
        unigram.whole = WholePieces::new(&whole);
        Ok(unigram)
    }

    /// Distinct pieces, as the crate counts them.
    pub(crate) fn vocab_size(&self) -> usize {
        self.pieces.len()
    }

    /// The ids the vocabulary's list takes, a repeated piece included (the crate's `get_vocab_size`, from which it
    /// numbers the added tokens the list lacks).
    pub(crate) fn ids_taken(&self) -> usize {
        self.ids_taken
    }

    /// The id of a piece of the vocabulary.
    pub(crate) fn token_id(&self, piece: &str) -> Option<u32> {
        self.pieces.get(piece).copied()
    }

    /// Whether Metaspace's `first` prepend sits behind normaliser steps, whose offsets an added token matched on
    /// normalised text could move.
    pub(crate) fn first_behind_steps(&self) -> bool {
        !self.steps.is_empty() && self.pre.prepends_first()
    }

    pub(crate) fn has_unk(&self) -> bool {
        self.unk.is_some()
    }

    /// `text` as the normaliser leaves it: itself, or written to `out` with `scratch`'s buffers.
    pub(crate) fn normalized<'a>(
        &self,
        text: &'a str,
        scratch: &mut Scratch,
        out: &'a mut String,
    ) -> &'a str {
        spm::normalized(&self.steps, text, scratch, out)
    }

    /// Appends the ids of `text`, stopping after the pre-token that takes them to `limit` or more.
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
            best,
            path,
            ..
        } = scratch;
        let text = if piece.normalized {
            text
        } else {
            spm::normalize(&self.steps, text, a, b, marks)
        };
        self.pre
            .for_each_pretoken(text, piece.at_start, b, |pretoken| {
                match self.whole.get(pretoken.as_bytes()) {
                    Some(id) => ids.push(id),
                    None => self.viterbi(pretoken, best, path, ids)?,
                }
                Ok(ids.len() < limit)
            })
    }

    /// Appends the ids of the best segmentation of `pretoken` into pieces.
    fn viterbi(
        &self,
        pretoken: &str,
        best: &mut Vec<Best>,
        path: &mut Vec<(u32, u32, u32)>,
        ids: &mut Vec<u32>,
    ) -> Result<()> {
        let bytes = pretoken.as_bytes();
        let n = bytes.len();
        if n == 0 {
            return Ok(());
        }
        best.clear();
        best.resize(
            n + 1,
            Best {
                score: 0.0,
                start: NONE,
                id: 0,
            },
        );
        // Slices in locals: through the `Vec`s, the loop reloaded their pointers after every store.
        let best = best.as_mut_slice();
        let mut s = 0;
        // Most pre-tokens start with the replacement, whose walk is the same every time.
        if let Some(r) = self
            .trie
            .rep
            .filter(|r| has_at(bytes, 0, &r.bytes[..r.len]))
        {
            if let Some(leaf) = r.leaf {
                let base = best[0].score;
                relax(&mut best[r.len], base + leaf.score, 0, leaf.id);
            }
            let single = self.trie.walk(bytes, 0, r.len, r.node, r.len, best);
            self.relax_unknown(single || r.leaf.is_some(), 0, r.len, best)?;
            s = r.len;
        }
        while s < n {
            let char_len = utf8_len(bytes[s]);
            let single = self
                .trie
                .walk(bytes, s, s, self.trie.units[0], s + char_len, best);
            self.relax_unknown(single, s, s + char_len, best)?;
            s += char_len;
        }
        // The path back from the end, reversed in place; consecutive unknowns fuse into one token (rare: redone
        // through `path`).
        let first = ids.len();
        let unk = self.unk.unwrap_or(NONE);
        let mut unknown = false;
        let mut end = n;
        while end > 0 && best[end].start != NONE {
            let b = best[end];
            ids.push(b.id);
            unknown |= b.id == unk;
            end = b.start as usize;
        }
        ids[first..].reverse();
        if unknown {
            ids.truncate(first);
            self.push_fused(pretoken, best, path, ids)?;
        }
        Ok(())
    }

    /// The unknown-character edge from `s` to `end`, which the crate adds when no piece is that one character.
    fn relax_unknown(&self, single: bool, s: usize, end: usize, best: &mut [Best]) -> Result<()> {
        if !single {
            let base = best[s].score;
            let end = end.min(best.len() - 1);
            relax(
                &mut best[end],
                base + self.unk_score,
                s,
                self.unk.ok_or_else(missing_unk)?,
            );
        }
        Ok(())
    }

    /// The best path as tokens, consecutive unknowns fused into one, looked up again as a whole.
    fn push_fused(
        &self,
        pretoken: &str,
        best: &[Best],
        path: &mut Vec<(u32, u32, u32)>,
        ids: &mut Vec<u32>,
    ) -> Result<()> {
        path.clear();
        let mut end = best.len() - 1;
        while end > 0 && best[end].start != NONE {
            let b = best[end];
            path.push((b.start, end as u32, b.id));
            end = b.start as usize;
        }
        let mut unknown: Option<(usize, usize)> = None;
        for &(s, e, id) in path.iter().rev() {
            if Some(id) == self.unk {
                unknown = Some((unknown.map_or(s as usize, |u| u.0), e as usize));
                continue;
            }
            if let Some((us, ue)) = unknown.take() {
                self.push_unknown(&pretoken[us..ue], ids)?;
            }
            ids.push(id);
        }
        if let Some((us, ue)) = unknown {
            self.push_unknown(&pretoken[us..ue], ids)?;
        }
        Ok(())
    }

    fn push_unknown(&self, s: &str, ids: &mut Vec<u32>) -> Result<()> {
        if let Some(&id) = self.pieces.get(s) {
            ids.push(id);
            return Ok(());
        }
        if let Some(bytes) = &self.byte_ids {
            if s.bytes().all(|b| bytes[usize::from(b)] != NONE) {
                ids.extend(s.bytes().map(|b| bytes[usize::from(b)]));
                return Ok(());
            }
        }
        ids.push(self.unk.ok_or_else(missing_unk)?);
        Ok(())
    }
}

fn missing_unk() -> crate::error::Error {
    bad("Unigram: an unknown character needs `unk_id`, which this model lacks")
}

/// The length of the UTF-8 character `lead` starts (from its leading ones, without branches).
fn utf8_len(lead: u8) -> usize {
    (lead.leading_ones() as usize).max(1)
}
