//! The double-array trie of a Unigram vocabulary's pieces, its layout and the Viterbi step that walks it.

use super::super::bad;
use super::NONE;
use crate::error::Result;

/// A double-array trie of the pieces, in 4-byte units: the child of a node on byte `c` is the unit at its base + `c`,
/// and that unit holds its label (`c`), a flag that it is taken, a flag that a piece ends there, and its own base.
///
/// Why this layout: Viterbi walks the trie from every character of a pre-token, each byte one dependent load.
/// Checking the label instead of the parent (sound because no two nodes share a base, as in SentencePiece's
/// Darts-clone) fits all the walk reads in 4 bytes, where a 16-byte unit with the parent index and the score
/// spread a 96k-piece trie over four times the cache lines. The score and id of a piece sit in a side array
/// indexed like the units, read only where a piece ends.
pub(super) struct Trie {
    pub(super) units: Vec<u32>,
    leaves: Vec<Leaf>,
    /// The walk over the Metaspace replacement, where it is a path of the trie.
    pub(super) rep: Option<RepWalk>,
}

/// The state of the trie after the replacement character (`bytes[..len]`), and the piece it is, if any.
#[derive(Clone, Copy)]
pub(super) struct RepWalk {
    pub(super) bytes: [u8; 4],
    pub(super) len: usize,
    pub(super) node: u32,
    pub(super) leaf: Option<Leaf>,
}

/// Takes the path from `start` scoring `score` for `t` if it is the first or strictly better: called in order
/// of start, this keeps the first of equal paths, as the crate's scan does.
#[inline(always)]
pub(super) fn relax(t: &mut Best, score: f64, start: usize, id: u32) {
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
pub(super) struct Leaf {
    pub(super) score: f64,
    pub(super) id: u32,
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
    /// The trie of `pieces` (with their `scores`, by id), and the walk over the pre-tokeniser's `replacement`.
    pub(super) fn build<'a>(
        pieces: impl Iterator<Item = (&'a str, u32)>,
        scores: &[f64],
        replacement: char,
    ) -> Result<Trie> {
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
        let mut trie = Trie {
            units,
            leaves,
            rep: None,
        };
        let mut bytes = [0; 4];
        let len = replacement.encode_utf8(&mut bytes).len();
        trie.rep = trie.walk_to(&bytes[..len]).map(|(node, at)| RepWalk {
            bytes,
            len,
            node,
            leaf: (node & LEAF != 0).then(|| trie.leaves[at]),
        });
        Ok(trie)
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
    pub(super) fn walk(
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
    pub(super) score: f64,
    pub(super) start: u32,
    pub(super) id: u32,
}
