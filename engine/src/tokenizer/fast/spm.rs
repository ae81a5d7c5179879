//! What runs before a SentencePiece model, Unigram or BPE: the normaliser steps of a SentencePiece conversion
//! (precompiled charsmap, strip, replace, prepend; ALBERT's and XLNet's NFKD, accent stripping and lowercasing)
//! and its pre-tokenisers (Metaspace; a literal `Split`), parsed from `tokenizer.json`.

use serde_json::Value;
use unicode_normalization_alignments::char::is_combining_mark;

use super::charsmap::CharsMap;
use super::nfc::nfkd;
use super::{bad, bool_field, str_field};
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
    Strip {
        left: bool,
        right: bool,
    },
    Replace {
        pattern: Pattern,
        content: String,
    },
    /// Put in front of a text that is not empty (Llama's and Mistral's `▁` before their legacy conversions).
    Prepend(String),
    /// Compatibility decomposition (ALBERT's and XLNet's conversions, before StripAccents).
    Nfkd,
    /// Every combining mark left out (the crate's `StripAccents`: `is_combining_mark`, marks of all three kinds).
    StripAccents,
    /// Each character's lowercase (`char::to_lowercase`, one character at a time as the crate does: no final sigma).
    Lowercase,
}

/// Where Metaspace puts the replacement in front of a pre-token that does not start with one.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Prepend {
    Always,
    /// Only before a piece whose offset in the input, through the normaliser's alignments, is 0 (the crate's
    /// rule): Llama's and Mistral's own. Accepted only where that is the piece that starts the input (see
    /// [`keeps_first_offset`]).
    First,
    Never,
}

/// The Metaspace pre-tokeniser, optionally after `WhitespaceSplit`.
pub(super) struct PreTokenizer {
    whitespace_split: bool,
    pub(super) replacement: char,
    prepend: Prepend,
    split: bool,
    /// The bytes that may start a character the scan must look at (whitespace, a space, the replacement); any
    /// other byte is passed over without decoding.
    special: [bool; 256],
}

impl Step {
    /// Writes `src` with this step applied to `out`; `marks` is NFKD's working memory.
    #[inline]
    pub(super) fn apply(&self, src: &str, out: &mut String, marks: &mut Vec<(u8, char)>) {
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
            Step::Prepend(p) => {
                if !src.is_empty() {
                    out.push_str(p);
                }
                out.push_str(src);
            }
            Step::Nfkd => nfkd(src, out, marks),
            // No ASCII character is a mark.
            Step::StripAccents if src.is_ascii() => out.push_str(src),
            Step::StripAccents => out.extend(src.chars().filter(|&c| !is_combining_mark(c))),
            Step::Lowercase if src.is_ascii() => {
                out.extend(src.bytes().map(|b| char::from(b.to_ascii_lowercase())))
            }
            Step::Lowercase => out.extend(src.chars().flat_map(char::to_lowercase)),
        }
    }
}

/// Whether the first character `steps` leave still starts at offset 0 of their input, by the crate's alignments:
/// no step strips the start or replaces text by less than one character for each, which would move it (and
/// with it Metaspace's `first` prepend). Expanding steps keep it.
pub(super) fn keeps_first_offset(steps: &[Step]) -> bool {
    steps.iter().all(|step| match step {
        Step::Strip { left, .. } => !left,
        Step::Replace {
            pattern: Pattern::Literal(p),
            content,
        } => p.chars().count() == 1 && !content.is_empty(),
        Step::Replace { .. } => false,
        // NFKD's canonical reordering can move a later mark first, StripAccents drop the first character.
        Step::Nfkd | Step::StripAccents => false,
        Step::Precompiled(_) | Step::Prepend(_) | Step::Lowercase => true,
    })
}

/// Refuses Metaspace's `first` behind steps that move the first character (see [`keeps_first_offset`]).
pub(super) fn check_first(pre: &PreTokenizer, steps: &[Step]) -> Result<()> {
    if pre.prepends_first() && !keeps_first_offset(steps) {
        return Err(bad(
            "Metaspace: prepend_scheme \"first\" behind a normaliser that strips or shortens the start of the text \
             is not supported",
        ));
    }
    Ok(())
}

/// `text` through `steps`, each reading the text (first) or `a` and writing `b`, which then becomes `a`.
pub(super) fn normalize<'a>(
    steps: &[Step],
    text: &'a str,
    a: &'a mut String,
    b: &mut String,
    marks: &mut Vec<(u8, char)>,
) -> &'a str {
    if steps.is_empty() {
        return text;
    }
    for (k, step) in steps.iter().enumerate() {
        b.clear();
        step.apply(if k == 0 { text } else { a.as_str() }, b, marks);
        std::mem::swap(a, b);
    }
    a.as_str()
}

/// [`normalize`] into `out`, which outlives the scratch buffers; `text` itself when there are no steps.
pub(super) fn normalized<'a>(
    steps: &[Step],
    text: &'a str,
    scratch: &mut crate::tokenizer::Scratch,
    out: &'a mut String,
) -> &'a str {
    if steps.is_empty() {
        return text;
    }
    out.clear();
    out.push_str(normalize(
        steps,
        text,
        &mut scratch.a,
        &mut scratch.b,
        &mut scratch.marks,
    ));
    out
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
        Some("Prepend") => steps.push(Step::Prepend(
            str_field(n, "prepend", "Prepend")?.to_owned(),
        )),
        Some("NFKD") => steps.push(Step::Nfkd),
        Some("StripAccents") => steps.push(Step::StripAccents),
        Some("Lowercase") => steps.push(Step::Lowercase),
        None if n.is_null() => {}
        other => {
            return Err(bad(format!(
                "normalizer {other:?} is not supported with a SentencePiece model (Precompiled, Strip, Replace, \
                 Prepend, NFKD, StripAccents, Lowercase and Sequence are)"
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
    if let Some((c, rest)) = r.chars().next().map(|c| (c, &r[c.len_utf8()..])) {
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
        ("never", _) => Prepend::Never,
        (_, Some(false)) => {
            return Err(bad(
                "Metaspace: add_prefix_space contradicts prepend_scheme",
            ))
        }
        ("always", _) => Prepend::Always,
        // After WhitespaceSplit, the crate tells the first word by its offset in the input, which whitespace
        // before it moves.
        ("first", _) if whitespace_split => {
            return Err(bad(
                "Metaspace: prepend_scheme \"first\" after WhitespaceSplit is not supported",
            ))
        }
        ("first", _) => Prepend::First,
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
    /// Whether it prepends only to the piece that starts the input (the scheme `first`).
    pub(super) fn prepends_first(&self) -> bool {
        self.prepend == Prepend::First
    }

    /// Calls `f` on each pre-token of `text`, while it returns true: words (after `WhitespaceSplit`), spaces
    /// replaced, the replacement prepended (with the scheme `first`, only when `at_start`: the text starts the
    /// input), and (with `split`) cut before every replacement. One scan over the text that stops only at
    /// [`PreTokenizer::special`] bytes, where a pass per stage paid a loop exit per word and stage; a pre-token
    /// is copied into `buf` only when it differs from the text.
    pub(super) fn for_each_pretoken(
        &self,
        text: &str,
        at_start: bool,
        buf: &mut String,
        mut f: impl FnMut(&str) -> Result<bool>,
    ) -> Result<()> {
        let prepend = match self.prepend {
            Prepend::Always => true,
            Prepend::First => at_start,
            Prepend::Never => false,
        };
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
            prepend && !matches!(first_char(&text[i..]), Some(c) if c == ' ' || c == rep),
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
                (start, virtual_rep) = (i, prepend && first_char(&text[i..]) != Some(rep));
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

/// `s` with each of `matches` replaced by `content`, written to `out`.
fn replace_all<'a>(
    s: &str,
    matches: impl Iterator<Item = (usize, &'a str)>,
    content: &str,
    out: &mut String,
) {
    let mut last = 0;
    for (i, m) in matches {
        out.push_str(&s[last..i]);
        out.push_str(content);
        last = i + m.len();
    }
    out.push_str(&s[last..]);
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
        bad("pre_tokenizer: a SentencePiece model supports Metaspace, optionally after WhitespaceSplit in a \
             Sequence")
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
            let mut chars = p.chars();
            // One character (a space, most often) is found by `memchr`; a string pattern would take the two-way
            // searcher, which cost Llama 2's normaliser twice its copying.
            match (chars.next(), chars.next()) {
                (Some(c), None) => replace_all(s, s.match_indices(c), content, out),
                _ => replace_all(s, s.match_indices(p.as_str()), content, out),
            }
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

/// Where `Split` puts each match of its pattern.
#[derive(Clone, Copy)]
enum Behavior {
    Removed,
    Isolated,
    MergedWithPrevious,
    MergedWithNext,
    Contiguous,
}

/// The `Split` pre-tokeniser by a literal string, not inverted (Gemma's: by a space, which its normaliser has
/// already replaced, so a whole text is one pre-token).
pub(super) struct LiteralSplit {
    pattern: Box<str>,
    behavior: Behavior,
}

impl LiteralSplit {
    pub(super) fn parse(p: &Value) -> Result<Self> {
        let pattern = p
            .get("pattern")
            .and_then(|p| p.get("String"))
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .ok_or_else(|| {
                bad("Split: a SentencePiece model supports a non-empty String pattern")
            })?;
        if bool_field(p, "invert", false, "Split")? {
            return Err(bad("Split: `invert` is not supported"));
        }
        let behavior = match str_field(p, "behavior", "Split")? {
            "Removed" => Behavior::Removed,
            "Isolated" => Behavior::Isolated,
            "MergedWithPrevious" => Behavior::MergedWithPrevious,
            "MergedWithNext" => Behavior::MergedWithNext,
            "Contiguous" => Behavior::Contiguous,
            other => return Err(bad(format!("Split: unknown behavior {other:?}"))),
        };
        Ok(LiteralSplit {
            pattern: pattern.into(),
            behavior,
        })
    }

    /// Calls `f` on each piece of `text` while it returns true. The text is cut into runs that alternate between
    /// matches and the text between them (none empty, as the crate's `find_matches`), and the runs are joined into
    /// pieces as the crate's `NormalizedString::split` folds them.
    pub(super) fn for_each_piece(
        &self,
        text: &str,
        mut f: impl FnMut(&str) -> Result<bool>,
    ) -> Result<()> {
        // The piece that may still grow by the next run, and whether the run before was a match.
        let mut pending: Option<(usize, usize)> = None;
        let mut after_match = false;
        // One run, or `None` at the end of the text.
        let mut run = |run: Option<(usize, usize, bool)>| -> Result<bool> {
            let Some((s, e, is_match)) = run else {
                return pending.take().map_or(Ok(true), |(s, e)| f(&text[s..e]));
            };
            let grows = match self.behavior {
                Behavior::Removed => return if is_match { Ok(true) } else { f(&text[s..e]) },
                Behavior::Isolated => return f(&text[s..e]),
                Behavior::MergedWithNext if !is_match => {
                    let start = pending.take().map_or(s, |p| p.0);
                    return f(&text[start..e]);
                }
                Behavior::MergedWithNext => false,
                Behavior::MergedWithPrevious => is_match && !after_match,
                Behavior::Contiguous => is_match && after_match,
            };
            after_match = is_match;
            match &mut pending {
                Some(p) if grows => {
                    p.1 = e;
                    Ok(true)
                }
                _ => match pending.replace((s, e)) {
                    Some((s, e)) => f(&text[s..e]),
                    None => Ok(true),
                },
            }
        };
        let mut at = 0;
        for (s, m) in text.match_indices(&*self.pattern) {
            if (at < s && !run(Some((at, s, false)))?) || !run(Some((s, s + m.len(), true)))? {
                return Ok(());
            }
            at = s + m.len();
        }
        if at < text.len() && !run(Some((at, text.len(), false)))? {
            return Ok(());
        }
        run(None).map(drop)
    }
}
