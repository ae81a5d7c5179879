//! SentencePiece's precompiled character map (the `Precompiled` normaliser): a double-array trie over UTF-8
//! byte strings whose leaves point into a blob of NUL-terminated replacements.
//!
//! The lookup rule is the crate's (`spm_precompiled`), quirks included: a grapheme shorter than 6 bytes is
//! replaced by the *first* (shortest) prefix of it that has a leaf; otherwise, or when none has, each of its
//! characters is looked up the same way.

use unicode_segmentation::UnicodeSegmentation;

use super::bad;
use crate::error::Result;

pub(crate) struct CharsMap {
    units: Vec<u32>,
    normalized: String,
    /// The replacement of each ASCII character on its own, as a range of `normalized`.
    ascii: [Option<(u32, u32)>; 128],
    /// Bytes that are ASCII characters the map leaves as they are (CR aside, which can start a CR LF grapheme).
    kept: [bool; 256],
    /// Whether all of printable ASCII (space to `~`) is kept, as in every SentencePiece map seen so far.
    printable_kept: bool,
}

fn decode_base64(s: &str) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(s.len() / 4 * 3);
    let (mut acc, mut bits) = (0u32, 0u32);
    for (i, &c) in s.as_bytes().iter().enumerate() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            b'=' if s.len() - i <= 2 => break,
            _ => return Err(bad("precompiled_charsmap: invalid base64")),
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    Ok(out)
}

impl CharsMap {
    pub(crate) fn from_base64(s: &str) -> Result<Self> {
        let blob = decode_base64(s)?;
        let err = || bad("precompiled_charsmap: truncated");
        let head: [u8; 4] = blob
            .get(..4)
            .and_then(|h| h.try_into().ok())
            .ok_or_else(err)?;
        let trie_bytes = u32::from_le_bytes(head) as usize / 4 * 4;
        let trie = blob.get(4..4 + trie_bytes).ok_or_else(err)?;
        let units = trie
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        let normalized = String::from_utf8(blob[4 + trie_bytes..].to_vec())
            .map_err(|_| bad("precompiled_charsmap: replacements are not UTF-8"))?;
        let mut map = CharsMap {
            units,
            normalized,
            ascii: [None; 128],
            kept: [false; 256],
            printable_kept: false,
        };
        for b in 0..128u8 {
            let r = map.lookup(&[b]);
            map.ascii[usize::from(b)] = r;
            map.kept[usize::from(b)] =
                b != b'\r' && r.is_none_or(|r| map.text(r).as_bytes() == [b]);
        }
        map.printable_kept = map.kept[usize::from(b' ')..=usize::from(b'~')]
            .iter()
            .all(|&k| k);
        Ok(map)
    }

    /// The range of the replacement for the shortest prefix of `key` that has one.
    fn lookup(&self, key: &[u8]) -> Option<(u32, u32)> {
        let unit = |pos: usize| self.units.get(pos).map(|&u| u as usize);
        let offset = |u: usize| (u >> 10) << ((u & (1 << 9)) >> 6);
        let mut pos = offset(unit(0)?);
        for &c in key {
            if c == 0 {
                break;
            }
            pos ^= usize::from(c);
            let u = unit(pos)?;
            if u & ((1 << 31) | 0xFF) != usize::from(c) {
                return None;
            }
            pos ^= offset(u);
            if (u >> 8) & 1 == 1 {
                let start = unit(pos)? & ((1 << 31) - 1);
                let rest = self.normalized.as_bytes().get(start..)?;
                let end = start + rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
                self.normalized.get(start..end)?;
                return Some((u32::try_from(start).ok()?, u32::try_from(end).ok()?));
            }
        }
        None
    }

    fn text(&self, (s, e): (u32, u32)) -> &str {
        self.normalized
            .get(s as usize..e as usize)
            .unwrap_or_default()
    }

    fn push_char_wise(&self, grapheme: &str, out: &mut String) {
        for (i, c) in grapheme.char_indices() {
            match self.lookup(&grapheme.as_bytes()[i..i + c.len_utf8()]) {
                Some(r) => out.push_str(self.text(r)),
                None => out.push(c),
            }
        }
    }

    /// How many bytes at the start of `bytes` are kept ASCII: eight at a time while they are all printable (when
    /// the map keeps all of that), which is most text, then a table lookup a byte.
    fn kept_run(&self, bytes: &[u8]) -> usize {
        const LO: u64 = u64::from_le_bytes([1; 8]);
        const HI: u64 = LO << 7;
        let mut n = 0;
        if self.printable_kept {
            while let Some(w) = bytes.get(n..n + 8) {
                let w = u64::from_le_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]]);
                // Some byte below a space, or above `~` (or not ASCII): the usual SWAR tests, never a false
                // "all printable".
                let below = w.wrapping_sub(LO * u64::from(b' ')) & !w & HI;
                let above = (w.wrapping_add(LO * u64::from(0x7F - b'~')) | w) & HI;
                if below | above != 0 {
                    break;
                }
                n += 8;
            }
        }
        n + bytes[n..]
            .iter()
            .take_while(|&&b| self.kept[usize::from(b)])
            .count()
    }

    /// Appends the normalised `text` to `out`.
    pub(crate) fn normalize(&self, text: &str, out: &mut String) {
        let bytes = text.as_bytes();
        // An ASCII character followed by another (CR LF excepted) or by the end is a grapheme on its own.
        let lone_ascii = |i: usize| {
            bytes[i] < 0x80
                && bytes
                    .get(i + 1)
                    .is_none_or(|&n| n < 0x80 && !(bytes[i] == b'\r' && n == b'\n'))
        };
        let mut i = 0;
        while i < bytes.len() {
            // A stretch of kept ASCII is copied whole, less its last character when a non-ASCII one follows
            // (it may combine with it into one grapheme).
            let kept = self.kept_run(&bytes[i..]);
            let kept = match bytes.get(i + kept) {
                Some(&next) if next >= 0x80 => kept.saturating_sub(1),
                _ => kept,
            };
            if kept > 0 {
                out.push_str(&text[i..i + kept]);
                i += kept;
                continue;
            }
            if lone_ascii(i) {
                match self.ascii[usize::from(bytes[i])] {
                    Some(r) => out.push_str(self.text(r)),
                    None => out.push(char::from(bytes[i])),
                }
                i += 1;
                continue;
            }
            // `i` is a grapheme boundary, so segmenting can restart here.
            for g in text[i..].graphemes(true) {
                match (g.len() < 6).then(|| self.lookup(g.as_bytes())).flatten() {
                    Some(r) => out.push_str(self.text(r)),
                    None => self.push_char_wise(g, out),
                }
                i += g.len();
                if i < bytes.len() && lone_ascii(i) {
                    break;
                }
            }
        }
    }
}
