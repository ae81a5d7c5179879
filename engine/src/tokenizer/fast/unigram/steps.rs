//! What runs before the lattice: the normaliser steps of a SentencePiece conversion (precompiled charsmap,
//! strip, replace) and the Metaspace pre-tokeniser, parsed from `tokenizer.json`.

use serde_json::Value;

use super::super::charsmap::CharsMap;
use super::super::{bad, bool_field, str_field};
use crate::error::Result;

pub(super) enum Pattern {
    Literal(String),
    /// `c{min,}`: a run of at least `min` copies of `c`.
    Run {
        c: char,
        min: usize,
    },
}

pub(super) enum Step {
    Precompiled(Box<CharsMap>),
    Strip { left: bool, right: bool },
    Replace { pattern: Pattern, content: String },
}

/// The Metaspace pre-tokeniser, optionally after `WhitespaceSplit`.
pub(super) struct PreTokenizer {
    whitespace_split: bool,
    pub(super) replacement: char,
    prepend: bool,
    split: bool,
    /// The bytes that may start a character the scan must look at (whitespace, a space, the replacement); any
    /// other byte is passed over without decoding.
    special: [bool; 256],
}

impl Step {
    /// Writes `src` with this step applied to `out`.
    #[inline]
    pub(super) fn apply(&self, src: &str, out: &mut String) {
        match self {
            Step::Precompiled(map) => map.normalize(src, out),
            Step::Strip { left, right } => {
                let mut s = src;
                if *right {
                    s = s.trim_end();
                }
                if *left {
                    s = s.trim_start();
                }
                out.push_str(s);
            }
            Step::Replace { pattern, content } => replace(src, pattern, content, out),
        }
    }
}

pub(super) fn parse_step(n: &Value, steps: &mut Vec<Step>) -> Result<()> {
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
    pub(super) fn for_each_pretoken(
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
pub(super) fn has_at(bytes: &[u8], i: usize, pat: &[u8]) -> bool {
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

pub(super) fn parse_pre_tokenizer(p: &Value) -> Result<PreTokenizer> {
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
