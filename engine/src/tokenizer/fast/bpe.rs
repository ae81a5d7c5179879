//! Byte-level BPE (GPT-2, Qwen2/Qwen3, Llama-3) behind its NFC normaliser and regex pre-tokeniser: merges by
//! rank, lowest first and leftmost among equals, as the crate's `Word::merge_all` applies them.
//!
//! `ByteLevel` maps each byte of a pre-token to a printable character, and the vocabulary is written in those
//! characters. Here the mapping is undone once, at load: vocabulary tokens are keyed by the bytes they stand for,
//! so an encode merges the raw bytes of the text without ever building the mapped string.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use serde_json::Value;

use super::nfc;
use super::pretok::{PreTokenizer, GPT2};
use super::{bad, bool_field, str_field, FxMap};
use crate::error::Result;
use crate::tokenizer::Scratch;

const NONE: u32 = u32::MAX;
/// A pair with no merge: ranks and pairs share one `u64` (rank above, merged id below), so this sorts last.
const NO_MERGE: u64 = u64::MAX;
/// Up to this many symbols a word is merged by rescanning its pairs, which beats a heap on the short pre-tokens
/// of real text; longer ones (a 100k-letter run is one pre-token) take the heap, so no word costs quadratic time.
const SHORT: usize = 48;

/// What one byte of a pre-token starts as, before any merge.
#[derive(Clone, Copy)]
enum Init {
    Id(u32),
    /// `byte_fallback`: the `<0xXX>` tokens of the UTF-8 bytes of the byte's character.
    Fallback([u32; 2], usize),
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
    /// Tokens by the bytes they stand for, for `ignore_merges`.
    by_bytes: FxMap<Box<[u8]>, u32>,
    /// Tokens with characters outside the byte-level alphabet: no text maps to them, but they count.
    unmapped: FxMap<Box<str>, u32>,
    /// `(left << 32 | right)` to `(rank << 32 | merged)`.
    merges: FxMap<u64, u64>,
    init: [Init; 256],
    fuse_unk: bool,
    unk_token: String,
    ignore_merges: bool,
    nfc: bool,
    pre: PreTokenizer,
}

/// GPT-2's `bytes_to_unicode`: printable bytes stand for themselves, the others, in order, for U+0100 onwards.
fn byte_chars() -> [char; 256] {
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
                    "a normalizer Sequence of several steps is not supported with BPE",
                )),
            }
        }
        other => Err(bad(format!(
            "normalizer {other:?} is not supported with BPE (NFC or none is)"
        ))),
    }
}

/// The `ByteLevel` pre-tokeniser's settings: its prefix space is refused, and whether it splits by GPT-2's regex.
fn byte_level(json: &Value) -> Result<bool> {
    if bool_field(json, "add_prefix_space", true, "ByteLevel")? {
        return Err(bad("ByteLevel: `add_prefix_space` is not supported"));
    }
    bool_field(json, "use_regex", true, "ByteLevel")
}

/// The split pattern: `ByteLevel` with its own regex, or `Split` by a regex followed by `ByteLevel` without one.
fn parse_pre_tokenizer(json: &Value) -> Result<PreTokenizer> {
    match json.get("type").and_then(Value::as_str) {
        Some("ByteLevel") if byte_level(json)? => PreTokenizer::new(GPT2),
        Some("Sequence") => {
            let steps = json
                .get("pretokenizers")
                .and_then(Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or_default();
            let [split, bytes] = steps else {
                return Err(bad("pre_tokenizer Sequence: Split then ByteLevel is supported"));
            };
            if split.get("type").and_then(Value::as_str) != Some("Split")
                || bytes.get("type").and_then(Value::as_str) != Some("ByteLevel")
                || byte_level(bytes)?
            {
                return Err(bad(
                    "pre_tokenizer Sequence: Split then ByteLevel without its regex is supported",
                ));
            }
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
            PreTokenizer::new(regex)
        }
        other => Err(bad(format!(
            "pre_tokenizer {other:?} is not supported with BPE (ByteLevel, or Split then ByteLevel, is)"
        ))),
    }
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
        let nfc = parse_normalizer(normalizer)?;
        let pre = parse_pre_tokenizer(pre_tokenizer)?;
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
            match token
                .chars()
                .map(|c| byte_of.get(&c).copied())
                .collect::<Option<Vec<u8>>>()
            {
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
        for (rank, m) in lines.enumerate() {
            let (a, b) = merge_pair(m).ok_or_else(|| bad(format!("BPE: bad merge {m}")))?;
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
        let byte_fallback = bool_field(model, "byte_fallback", false, "BPE")?;
        let mut init = [Init::Dropped; 256];
        for (slot, c) in init.iter_mut().zip(chars) {
            let mut utf8 = [0u8; 4];
            let fallback: Option<Vec<u32>> = c
                .encode_utf8(&mut utf8)
                .bytes()
                .map(|b| id_of(&format!("<{b:#04X}>")))
                .collect();
            *slot = match (id_of(c.encode_utf8(&mut utf8)), fallback) {
                (Some(id), _) => Init::Id(id),
                (None, Some(f)) if byte_fallback => {
                    let mut ids = [0; 2];
                    ids[..f.len()].copy_from_slice(&f);
                    Init::Fallback(ids, f.len())
                }
                _ => match &unk_token {
                    Some(unk) => id_of(unk).map_or(Init::UnkMissing, Init::Unk),
                    None => Init::Dropped,
                },
            };
        }
        Ok(Bpe {
            by_bytes,
            unmapped,
            merges,
            init,
            fuse_unk: bool_field(model, "fuse_unk", false, "BPE")?,
            unk_token: unk_token.unwrap_or_default(),
            ignore_merges: bool_field(model, "ignore_merges", false, "BPE")?,
            nfc,
            pre,
        })
    }

    pub(crate) fn vocab_size(&self) -> usize {
        self.by_bytes.len() + self.unmapped.len()
    }

    pub(crate) fn contains(&self, token: &str) -> bool {
        let chars = byte_chars();
        let bytes: Option<Vec<u8>> = token
            .chars()
            .map(|c| chars.iter().position(|&m| m == c).map(|b| b as u8))
            .collect();
        match bytes {
            Some(b) => self.by_bytes.contains_key(b.as_slice()),
            None => self.unmapped.contains_key(token),
        }
    }

    /// Whether no text can fail to encode (only an unknown token missing from the vocabulary fails).
    pub(crate) fn infallible(&self) -> bool {
        !self.init.iter().any(|i| matches!(i, Init::UnkMissing))
    }

    /// Appends the ids of `text`, stopping after the pre-token that brings them to `limit`.
    pub(crate) fn encode(
        &self,
        text: &str,
        scratch: &mut Scratch,
        ids: &mut Vec<u32>,
        limit: usize,
    ) -> Result<()> {
        let Scratch {
            a,
            marks,
            held,
            bpe,
            ..
        } = scratch;
        let text = if self.nfc && !nfc::is_nfc(text) {
            nfc::nfc(text, a, marks, held);
            a.as_str()
        } else {
            text
        };
        let mut p = 0;
        while p < text.len() && ids.len() < limit {
            let e = self.pre.next(text, p);
            self.word(&text.as_bytes()[p..e], bpe, ids)?;
            p = e;
        }
        Ok(())
    }

    /// `text` as the normaliser leaves it (NFC, or none).
    pub(crate) fn normalize<'a>(&self, text: &'a str) -> std::borrow::Cow<'a, str> {
        if self.nfc && !nfc::is_nfc(text) {
            let mut out = String::new();
            nfc::nfc(text, &mut out, &mut Vec::new(), &mut Vec::new());
            out.into()
        } else {
            text.into()
        }
    }

    fn pair(&self, a: u32, b: u32) -> u64 {
        self.merges
            .get(&(u64::from(a) << 32 | u64::from(b)))
            .copied()
            .unwrap_or(NO_MERGE)
    }

    /// One pre-token: its bytes' symbols, merged.
    fn word(&self, word: &[u8], work: &mut Work, ids: &mut Vec<u32>) -> Result<()> {
        if self.ignore_merges {
            if let Some(&id) = self.by_bytes.get(word) {
                ids.push(id);
                return Ok(());
            }
        }
        let syms = &mut work.syms;
        syms.clear();
        // The unknown token waiting to be pushed, as the crate holds it back to fuse it with the next.
        let mut unk = None;
        for &b in word {
            match self.init[usize::from(b)] {
                Init::Id(id) => {
                    syms.extend(unk.take());
                    syms.push(id);
                }
                // The crate pushes these ahead of a held unknown token.
                Init::Fallback(f, n) => syms.extend_from_slice(&f[..n]),
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
