//! Unigram (SentencePiece) behind its normaliser sequence and the Metaspace pre-tokeniser: Viterbi over the
//! lattice of vocabulary pieces, walked straight off a byte trie, with the crate's unknown-token rule.

use serde_json::Value;

use super::charsmap::CharsMap;
use super::{bad, bool_field, str_field, FxMap};
use crate::error::Result;
use crate::tokenizer::Scratch;

/// The crate's penalty: an unknown character scores this far below the worst piece.
const UNK_PENALTY: f64 = 10.0;
const NONE: u32 = u32::MAX;

enum Pattern {
    Literal(String),
    /// `c{min,}`: a run of at least `min` copies of `c`.
    Run {
        c: char,
        min: usize,
    },
}

enum Step {
    Precompiled(Box<CharsMap>),
    Strip { left: bool, right: bool },
    Replace { pattern: Pattern, content: String },
}

/// The Metaspace pre-tokeniser, optionally after `WhitespaceSplit`.
struct PreTokenizer {
    whitespace_split: bool,
    replacement: char,
    prepend: bool,
    split: bool,
    /// The bytes that may start a character the scan must look at (whitespace, a space, the replacement); any
    /// other byte is passed over without decoding.
    special: [bool; 256],
}

/// A double-array trie of the pieces, in 4-byte units: the child of a node on byte `c` is the unit at its base + `c`,
/// and that unit holds its label (`c`), a flag that it is taken, a flag that a piece ends there, and its own base.
///
/// Why this layout: Viterbi walks the trie from every character of a pre-token, each byte one dependent load.
/// Checking the label instead of the parent (sound because no two nodes share a base, as in SentencePiece's
/// Darts-clone) fits all the walk reads in 4 bytes, where a 16-byte unit with the parent index and the score
/// spread a 96k-piece trie over four times the cache lines. The score and id of a piece sit in a side array
/// indexed like the units, read only where a piece ends.
struct Trie {
    units: Vec<u32>,
    leaves: Vec<Leaf>,
    /// The walk over the Metaspace replacement, where it is a path of the trie.
    rep: Option<RepWalk>,
}

/// The state of the trie after the replacement character (`bytes[..len]`), and the piece it is, if any.
#[derive(Clone, Copy)]
struct RepWalk {
    bytes: [u8; 4],
    len: usize,
    node: u32,
    leaf: Option<Leaf>,
}

/// Takes the path from `start` scoring `score` for `t` if it is the first or strictly better: called in order
/// of start, this keeps the first of equal paths, as the crate's scan does.
#[inline(always)]
fn relax(t: &mut Best, score: f64, start: usize, id: u32) {
    if t.start == NONE || score > t.score {
        *t = Best {
            score,
            start: start as u32,
            id,
        };
    }
}

/// The piece that ends at a unit.
#[derive(Clone, Copy, Default)]
struct Leaf {
    score: f64,
    id: u32,
}

const TAKEN: u32 = 1 << 8;
/// What a unit must hold in its low 9 bits to be the child on a byte: the byte and [`TAKEN`].
const MATCH: u32 = TAKEN | 0xFF;
const LEAF: u32 = 1 << 9;
const BASE_SHIFT: u32 = 10;
/// Units below this are never anyone's child: a childless node has base 0, so every step off it lands there and
/// fails the label check, and the root lives at unit 0 without [`TAKEN`].
const RESERVED: usize = 256;

impl Trie {
    fn build<'a>(pieces: impl Iterator<Item = (&'a str, u32)>, scores: &[f64]) -> Result<Trie> {
        // A pointer trie first, children in label order.
        let mut sorted: Vec<(&str, u32)> = pieces.collect();
        sorted.sort_unstable();
        let mut children: Vec<Vec<(u8, u32)>> = vec![Vec::new()];
        let mut values = vec![NONE];
        for (piece, id) in sorted {
            let mut node = 0usize;
            for &b in piece.as_bytes() {
                node = match children[node].iter().find(|e| e.0 == b) {
                    Some(&(_, c)) => c as usize,
                    None => {
                        let c = children.len();
                        children.push(Vec::new());
                        values.push(NONE);
                        children[node].push((b, c as u32));
                        c
                    }
                };
            }
            values[node] = id;
        }
        // Then place each node's children, breadth first, at the first unused base where all their units are free.
        let mut free = FreeList::default();
        let mut units = Vec::new();
        let mut leaves = Vec::new();
        let mut used_base = Vec::new();
        free.grow(&mut units, RESERVED + 256);
        for i in 0..RESERVED {
            free.unlink(i);
        }
        let mut queue = std::collections::VecDeque::from([(0usize, 0usize)]);
        while let Some((node, unit)) = queue.pop_front() {
            let kids = &children[node];
            let Some(&(lo, _)) = kids.first() else {
                continue;
            };
            let base = free.find(&mut units, lo, |units, base| {
                !used_base.get(base).copied().unwrap_or(false)
                    && kids
                        .iter()
                        .all(|&(l, _)| units[base + usize::from(l)] & TAKEN == 0)
            });
            if base >= 1 << (32 - BASE_SHIFT) {
                return Err(bad("Unigram: vocabulary too large for the piece trie"));
            }
            if used_base.len() <= base {
                used_base.resize(units.len(), false);
            }
            used_base[base] = true;
            units[unit] |= (base as u32) << BASE_SHIFT;
            for &(l, child) in kids {
                let at = base + usize::from(l);
                free.unlink(at);
                units[at] = TAKEN | u32::from(l);
                let id = values[child as usize];
                if id != NONE {
                    units[at] |= LEAF;
                    if leaves.len() <= at {
                        leaves.resize(at + 1, Leaf::default());
                    }
                    leaves[at] = Leaf {
                        score: scores[id as usize],
                        id,
                    };
                }
                queue.push_back((child as usize, at));
            }
        }
        Ok(Trie {
            units,
            leaves,
            rep: None,
        })
    }

    /// Where walking `bytes` from the root ends, if every byte has a child.
    fn walk_to(&self, bytes: &[u8]) -> Option<(u32, usize)> {
        let mut node = self.units[0];
        let mut at = 0;
        for &b in bytes {
            at = (node >> BASE_SHIFT) as usize + usize::from(b);
            node = self.units[at];
            if node & MATCH != TAKEN | u32::from(b) {
                return None;
            }
        }
        Some((node, at))
    }

    /// Relaxes the edges of every piece that starts at `s`, walking `bytes[from..]` from `node` (the state after
    /// `bytes[s..from]`); returns whether one of them ends at `char_end`, i.e. is the single character at `s`.
    #[inline(always)]
    fn walk(
        &self,
        bytes: &[u8],
        s: usize,
        from: usize,
        mut node: u32,
        char_end: usize,
        best: &mut [Best],
    ) -> bool {
        let (units, leaves) = (self.units.as_slice(), self.leaves.as_slice());
        let base = best[s].score;
        let mut single = false;
        for (end, &b) in (from + 1..).zip(&bytes[from..]) {
            let at = (node >> BASE_SHIFT) as usize + usize::from(b);
            node = units[at];
            if node & MATCH != TAKEN | u32::from(b) {
                break;
            }
            if node & LEAF == 0 {
                continue;
            }
            let leaf = leaves[at];
            relax(&mut best[end], base + leaf.score, s, leaf.id);
            single |= end == char_end;
        }
        single
    }
}

/// The free units still worth trying as a first child, in a doubly linked list, so a placement skips the full
/// stretches of the array; a unit that failed many placements leaves the list (it stays free for later children),
/// as in Darts. Without these a 96k-piece trie took 25 s to lay out.
#[derive(Default)]
struct FreeList {
    prev: Vec<u32>,
    next: Vec<u32>,
    listed: Vec<bool>,
    tries: Vec<u8>,
    head: u32,
    tail: u32,
}

/// Failed placements after which a free unit stops being tried as a first child.
const MAX_TRIES: u8 = 16;

impl FreeList {
    fn grow(&mut self, units: &mut Vec<u32>, len: usize) {
        if self.next.is_empty() {
            (self.head, self.tail) = (NONE, NONE);
        }
        for i in units.len()..len {
            units.push(0);
            self.prev.push(self.tail);
            self.next.push(NONE);
            self.listed.push(true);
            self.tries.push(0);
            match self.tail {
                NONE => self.head = i as u32,
                t => self.next[t as usize] = i as u32,
            }
            self.tail = i as u32;
        }
    }

    fn unlink(&mut self, i: usize) {
        if !std::mem::take(&mut self.listed[i]) {
            return;
        }
        let (p, n) = (self.prev[i], self.next[i]);
        match p {
            NONE => self.head = n,
            p => self.next[p as usize] = n,
        }
        match n {
            NONE => self.tail = p,
            n => self.prev[n as usize] = p,
        }
    }

    /// The first base at which `fits` holds, with the lowest child (label `lo`) on a listed free unit; the array
    /// grows so that any label from that base is in bounds.
    fn find(
        &mut self,
        units: &mut Vec<u32>,
        lo: u8,
        fits: impl Fn(&[u32], usize) -> bool,
    ) -> usize {
        let mut pos = self.head;
        loop {
            if pos == NONE {
                let len = units.len();
                self.grow(units, len + 256);
                pos = len as u32;
            }
            let i = pos as usize;
            let next = self.next[i];
            if i > usize::from(lo) {
                let base = i - usize::from(lo);
                if units.len() < base + 256 {
                    self.grow(units, base + 256);
                }
                if fits(units, base) {
                    return base;
                }
                self.tries[i] += 1;
                if self.tries[i] >= MAX_TRIES {
                    self.unlink(i);
                }
            }
            pos = if next == NONE { self.next[i] } else { next };
        }
    }
}

/// The best path ending at one byte position of a pre-token.
#[derive(Clone, Copy)]
pub(crate) struct Best {
    score: f64,
    start: u32,
    id: u32,
}

pub(crate) struct Unigram {
    steps: Vec<Step>,
    pre: PreTokenizer,
    pieces: FxMap<Box<str>, u32>,
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

fn parse_step(n: &Value, steps: &mut Vec<Step>) -> Result<()> {
    match n.get("type").and_then(Value::as_str) {
        Some("Sequence") => {
            let list = n
                .get("normalizers")
                .and_then(Value::as_array)
                .ok_or_else(|| bad("Sequence normalizer: missing `normalizers`"))?;
            for n in list {
                parse_step(n, steps)?;
            }
        }
        Some("Precompiled") => {
            let map = str_field(n, "precompiled_charsmap", "Precompiled")?;
            steps.push(Step::Precompiled(Box::new(CharsMap::from_base64(map)?)));
        }
        Some("Strip") => steps.push(Step::Strip {
            left: bool_field(n, "strip_left", false, "Strip")?,
            right: bool_field(n, "strip_right", false, "Strip")?,
        }),
        Some("Replace") => {
            let content = str_field(n, "content", "Replace")?.to_owned();
            let p = n.get("pattern").unwrap_or(&Value::Null);
            let pattern = if let Some(s) = p.get("String").and_then(Value::as_str) {
                Pattern::Literal(s.to_owned())
            } else if let Some(r) = p.get("Regex").and_then(Value::as_str) {
                parse_regex(r)?
            } else {
                return Err(bad("Replace: `pattern` is neither String nor Regex"));
            };
            if matches!(&pattern, Pattern::Literal(s) if s.is_empty()) {
                return Err(bad("Replace: empty pattern"));
            }
            steps.push(Step::Replace { pattern, content });
        }
        None if n.is_null() => {}
        other => {
            return Err(bad(format!(
                "normalizer {other:?} is not supported with Unigram (Precompiled, Strip, Replace and Sequence are)"
            )))
        }
    }
    Ok(())
}

/// The regexes that appear in SentencePiece conversions: a literal, or `c{n,}`.
fn parse_regex(r: &str) -> Result<Pattern> {
    const META: &str = "\\.^$|?*+()[]{}";
    if !r.chars().any(|c| META.contains(c)) {
        return Ok(Pattern::Literal(r.to_owned()));
    }
    let mut chars = r.chars();
    if let (Some(c), Some(rest)) = (chars.next(), r.get(1..)) {
        if let Some(min) = rest.strip_prefix('{').and_then(|m| m.strip_suffix(",}")) {
            if let (false, Ok(min @ 1..)) = (META.contains(c), min.parse::<usize>()) {
                return Ok(Pattern::Run { c, min });
            }
        }
    }
    Err(bad(format!("Replace: regex {r:?} is not supported")))
}

fn parse_metaspace(p: &Value, whitespace_split: bool) -> Result<PreTokenizer> {
    let ctx = "Metaspace";
    let mut rep = str_field(p, "replacement", ctx)?.chars();
    let (Some(replacement), None) = (rep.next(), rep.next()) else {
        return Err(bad("Metaspace: `replacement` must be one character"));
    };
    let scheme = match p.get("prepend_scheme") {
        None | Some(Value::Null) => "always",
        Some(v) => v
            .as_str()
            .ok_or_else(|| bad("Metaspace: bad prepend_scheme"))?,
    };
    let prepend = match (scheme, p.get("add_prefix_space").and_then(Value::as_bool)) {
        ("never", _) => false,
        (_, Some(false)) => {
            return Err(bad(
                "Metaspace: add_prefix_space contradicts prepend_scheme",
            ))
        }
        ("always", _) => true,
        (s, _) => {
            return Err(bad(format!(
                "Metaspace: prepend_scheme {s:?} is not supported"
            )))
        }
    };
    let split = bool_field(p, "split", true, ctx)?;
    let mut special = [false; 256];
    let mut mark = |c: char| special[usize::from(c.encode_utf8(&mut [0; 4]).as_bytes()[0])] = true;
    mark(' ');
    if split {
        mark(replacement);
    }
    if whitespace_split {
        ('\0'..=char::MAX)
            .filter(|c| c.is_whitespace())
            .for_each(mark);
    }
    Ok(PreTokenizer {
        whitespace_split,
        replacement,
        prepend,
        split,
        special,
    })
}

impl PreTokenizer {
    /// Calls `f` on each pre-token of `text`, while it returns true: words (after `WhitespaceSplit`), spaces replaced, the replacement
    /// prepended, and (with `split`) cut before every replacement. One scan over the text that stops only at
    /// [`PreTokenizer::special`] bytes, where a pass per stage paid a loop exit per word and stage; a pre-token
    /// is copied into `buf` only when it differs from the text.
    fn for_each_pretoken(
        &self,
        text: &str,
        buf: &mut String,
        mut f: impl FnMut(&str) -> Result<bool>,
    ) -> Result<()> {
        let rep = self.replacement;
        // `part` of the text follows a replacement that is not in the text when `virtual_rep`, and holds spaces
        // that become replacements when `spaces`.
        let mut emit = |part: &str, virtual_rep: bool, spaces: bool| {
            if !virtual_rep && !spaces {
                return if part.is_empty() { Ok(true) } else { f(part) };
            }
            buf.clear();
            if virtual_rep {
                buf.push(rep);
            }
            if !spaces {
                buf.push_str(part);
                return f(buf);
            }
            for (k, run) in part.split(' ').enumerate() {
                if k > 0 {
                    buf.push(rep);
                }
                buf.push_str(run);
            }
            f(buf)
        };
        let bytes = text.as_bytes();
        let mut i = 0;
        if self.whitespace_split {
            i = skip_whitespace(text, i);
        }
        if i == bytes.len() {
            return Ok(());
        }
        let (mut start, mut virtual_rep, mut spaces) = (
            i,
            self.prepend && !matches!(first_char(&text[i..]), Some(c) if c == ' ' || c == rep),
            false,
        );
        loop {
            while i < bytes.len() && !self.special[usize::from(bytes[i])] {
                i += 1;
            }
            let Some(c) = first_char(&text[i..]) else {
                return emit(&text[start..], virtual_rep, spaces).map(drop);
            };
            if self.whitespace_split && c.is_whitespace() {
                if !emit(&text[start..i], virtual_rep, spaces)? {
                    return Ok(());
                }
                i = skip_whitespace(text, i);
                if i == bytes.len() {
                    return Ok(());
                }
                (start, virtual_rep) = (i, self.prepend && first_char(&text[i..]) != Some(rep));
            } else if c == ' ' && self.split {
                if !emit(&text[start..i], virtual_rep, spaces)? {
                    return Ok(());
                }
                i += 1;
                (start, virtual_rep, spaces) = (i, true, false);
            } else if c == ' ' {
                spaces = true;
                i += 1;
            } else if c == rep && self.split {
                if !emit(&text[start..i], virtual_rep, spaces)? {
                    return Ok(());
                }
                (start, virtual_rep, spaces) = (i, false, false);
                i += c.len_utf8();
            } else {
                i += c.len_utf8();
            }
        }
    }
}

/// Where the next run of `pat` (a character's bytes) worth a look starts, at or after `i`: for a one-byte `pat`
/// and runs of two or more, the next place it occurs twice in a row, found eight bytes at a time, since a
/// single space between words is the common case and a byte loop stopped (and mispredicted) at each.
fn next_run(bytes: &[u8], i: usize, pat: &[u8], min: usize) -> Option<usize> {
    const LO: u64 = u64::from_le_bytes([1; 8]);
    const HI: u64 = LO << 7;
    let &[c] = pat else {
        return (i..bytes.len()).find(|&j| has_at(bytes, j, pat));
    };
    if min < 2 {
        return (i..bytes.len()).find(|&j| bytes[j] == c);
    }
    // The high bit of each byte of `w` that equals `c` (exactly: no carries cross bytes).
    let eq = |w: u64| {
        let x = w ^ (LO * u64::from(c));
        !(((x & !HI) + !HI) | x) & HI
    };
    let word = |j: usize| {
        let mut w = [0; 8];
        w.copy_from_slice(&bytes[j..j + 8]);
        u64::from_le_bytes(w)
    };
    let mut j = i;
    while j + 9 <= bytes.len() {
        let pairs = eq(word(j)) & eq(word(j + 1));
        if pairs != 0 {
            return Some(j + pairs.trailing_zeros() as usize / 8);
        }
        j += 8;
    }
    (j..bytes.len().saturating_sub(1)).find(|&k| bytes[k] == c && bytes[k + 1] == c)
}

/// The first character of `s`; `str::starts_with(char)` would compare through a `memcmp` call.
fn first_char(s: &str) -> Option<char> {
    s.chars().next()
}

/// Whether `bytes` holds `pat` (a character's few bytes) at `i`, compared inline rather than by a `memcmp` call.
fn has_at(bytes: &[u8], i: usize, pat: &[u8]) -> bool {
    pat.iter()
        .enumerate()
        .all(|(k, &p)| bytes.get(i + k) == Some(&p))
}

/// The end of the whitespace (`char::is_whitespace`, as `WhitespaceSplit`) that starts at `i`.
fn skip_whitespace(text: &str, mut i: usize) -> usize {
    while let Some(c) = first_char(&text[i..]).filter(|c| c.is_whitespace()) {
        i += c.len_utf8();
    }
    i
}

fn kind(v: &Value) -> Option<&str> {
    v.get("type").and_then(Value::as_str)
}

fn parse_pre_tokenizer(p: &Value) -> Result<PreTokenizer> {
    let unsupported = || {
        bad("pre_tokenizer: Unigram supports Metaspace, optionally after WhitespaceSplit in a Sequence")
    };
    match p.get("type").and_then(Value::as_str) {
        Some("Metaspace") => parse_metaspace(p, false),
        Some("Sequence") => {
            let list = p
                .get("pretokenizers")
                .and_then(Value::as_array)
                .ok_or_else(unsupported)?;
            match list.as_slice() {
                [m] if kind(m) == Some("Metaspace") => parse_metaspace(m, false),
                [w, m] if kind(w) == Some("WhitespaceSplit") && kind(m) == Some("Metaspace") => {
                    parse_metaspace(m, true)
                }
                _ => Err(unsupported()),
            }
        }
        _ => Err(unsupported()),
    }
}

impl Unigram {
    pub(crate) fn parse(model: &Value, normalizer: &Value, pre_tokenizer: &Value) -> Result<Self> {
        let mut steps = Vec::new();
        parse_step(normalizer, &mut steps)?;
        let pre = parse_pre_tokenizer(pre_tokenizer)?;
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
        let mut trie = Trie::build(pieces.iter().map(|(p, &id)| (&**p, id)), &scores)?;
        let mut bytes = [0; 4];
        let len = pre.replacement.encode_utf8(&mut bytes).len();
        trie.rep = trie.walk_to(&bytes[..len]).map(|(node, at)| RepWalk {
            bytes,
            len,
            node,
            leaf: (node & LEAF != 0).then(|| trie.leaves[at]),
        });
        let mut unigram = Unigram {
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

    pub(crate) fn contains(&self, piece: &str) -> bool {
        self.pieces.contains_key(piece)
    }

    pub(crate) fn has_unk(&self) -> bool {
        self.unk.is_some()
    }

    /// Appends the ids of `text`, stopping after the pre-token that takes them to `limit` or more.
    pub(crate) fn encode(
        &self,
        text: &str,
        scratch: &mut Scratch,
        ids: &mut Vec<u32>,
        limit: usize,
    ) -> Result<()> {
        let Scratch {
            a, b, best, path, ..
        } = scratch;
        // Each step reads the text (first) or `a` and writes `b`, which then becomes `a`.
        let mut normalized = false;
        for step in &self.steps {
            let src = if normalized { a.as_str() } else { text };
            b.clear();
            match step {
                Step::Precompiled(map) => map.normalize(src, b),
                Step::Strip { left, right } => {
                    let mut s = src;
                    if *right {
                        s = s.trim_end();
                    }
                    if *left {
                        s = s.trim_start();
                    }
                    b.push_str(s);
                }
                Step::Replace { pattern, content } => replace(src, pattern, content, b),
            }
            std::mem::swap(a, b);
            normalized = true;
        }
        let text = if normalized { a.as_str() } else { text };
        self.pre.for_each_pretoken(text, b, |pretoken| {
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

fn replace(s: &str, pattern: &Pattern, content: &str, out: &mut String) {
    match pattern {
        Pattern::Literal(p) => {
            let mut last = 0;
            for (i, m) in s.match_indices(p.as_str()) {
                out.push_str(&s[last..i]);
                out.push_str(content);
                last = i + m.len();
            }
            out.push_str(&s[last..]);
        }
        Pattern::Run { c, min } => {
            // Nothing is copied until a run is replaced, and single `c`s (most of them) are skipped over.
            let mut enc = [0; 4];
            let pat = c.encode_utf8(&mut enc).as_bytes();
            let bytes = s.as_bytes();
            let (mut last, mut i) = (0, 0);
            while let Some(start) = next_run(bytes, i, pat, *min) {
                let (mut end, mut count) = (start, 0);
                while has_at(bytes, end, pat) {
                    (end, count) = (end + pat.len(), count + 1);
                }
                if count >= *min {
                    out.push_str(&s[last..start]);
                    out.push_str(content);
                    last = end;
                }
                i = end;
            }
            out.push_str(&s[last..]);
        }
    }
}
