//! The byte-level BPE pre-tokenisers: the regexes of GPT-2 and of the Qwen2 / Llama-3 family (tiktoken's
//! cl100k shape), each evaluated by a scanner written for that pattern.
//!
//! Why hand-written: the patterns end in `\s+(?!\S)`, a lookahead the `regex` crate cannot run, so the crate
//! hands them to a backtracking engine (onig or fancy-regex) that retries each alternative at each position. The
//! scanners below decide each match from the character classes at and after the position, which is what that
//! backtracking ends up choosing, in one forward pass that allocates nothing. Any other pattern is refused at
//! load; the `hf` tokenizer still reads it. The classes (`\p{L}`, `\p{N}`, `\s`, case folding) are read from
//! `regex-syntax`, the tables the crate's own regex engine compiles, so the two agree on every code point.

use regex_syntax::hir::{Class as HirClass, HirKind};

use super::bad;
use crate::error::Result;

/// GPT-2's pattern, which `ByteLevel` with `use_regex: true` applies.
pub(crate) const GPT2: &str =
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+";
/// Qwen2's (and Qwen3's): numbers split into single digits.
const QWEN2: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Llama-3's (tiktoken's cl100k_base): numbers in runs of up to three digits.
const LLAMA3: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// What a character is to the patterns: every code point is exactly one of these.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Class {
    Letter,
    Number,
    Space,
    Other,
}

#[derive(Clone, Copy)]
enum Pattern {
    Gpt2,
    /// The Qwen2 / Llama-3 shape, with the longest run of digits one pre-token takes.
    Cl100k {
        max_digits: usize,
    },
}

pub(crate) struct PreTokenizer {
    pattern: Pattern,
    ascii: [Class; 128],
    /// Non-ASCII letters, numbers and white space as sorted, disjoint inclusive ranges; the rest is `Other`.
    ranges: Vec<(u32, u32, Class)>,
    /// Non-ASCII characters that `(?i:...)` folds onto an ASCII letter (the long s, the Kelvin sign).
    folds: Vec<(char, u8)>,
}

/// The code point ranges of a one-character regex, as `regex-syntax` compiles it.
fn ranges(pattern: &str) -> Result<Vec<(u32, u32)>> {
    let hir = regex_syntax::parse(pattern).map_err(|e| bad(format!("{pattern}: {e}")))?;
    match hir.kind() {
        HirKind::Class(HirClass::Unicode(c)) => Ok(c
            .ranges()
            .iter()
            .map(|r| (u32::from(r.start()), u32::from(r.end())))
            .collect()),
        HirKind::Literal(l) => {
            let c = std::str::from_utf8(&l.0)
                .ok()
                .and_then(|s| s.chars().next())
                .ok_or_else(|| bad(format!("{pattern}: not one character")))?;
            Ok(vec![(u32::from(c), u32::from(c))])
        }
        _ => Err(bad(format!("{pattern}: not a character class"))),
    }
}

impl PreTokenizer {
    /// The scanner for `regex`, if it is one of the known patterns.
    pub(crate) fn new(regex: &str) -> Result<Self> {
        let pattern = match regex {
            GPT2 => Pattern::Gpt2,
            QWEN2 => Pattern::Cl100k { max_digits: 1 },
            LLAMA3 => Pattern::Cl100k { max_digits: 3 },
            other => {
                return Err(bad(format!(
                    "Split regex {other:?} is not supported (the GPT-2, Qwen2 and Llama-3 patterns are; \
                     the hf tokenizer reads any)"
                )))
            }
        };
        let mut all = Vec::new();
        for (p, class) in [
            (r"\p{L}", Class::Letter),
            (r"\p{N}", Class::Number),
            (r"\s", Class::Space),
        ] {
            all.extend(ranges(p)?.into_iter().map(|(lo, hi)| (lo, hi, class)));
        }
        all.sort_unstable_by_key(|r| r.0);
        let mut ascii = [Class::Other; 128];
        for &(lo, hi, class) in &all {
            for c in lo..=hi.min(127) {
                ascii[c as usize] = class;
            }
        }
        let mut folds = Vec::new();
        for letter in "strevmld".bytes() {
            let pattern = format!("(?i:{})", char::from(letter));
            for (lo, hi) in ranges(&pattern)? {
                folds.extend(
                    (lo.max(128)..=hi)
                        .filter_map(char::from_u32)
                        .map(|c| (c, letter)),
                );
            }
        }
        Ok(PreTokenizer {
            pattern,
            ascii,
            ranges: all.into_iter().filter(|r| r.1 >= 128).collect(),
            folds,
        })
    }

    fn class(&self, c: char) -> Class {
        let u = u32::from(c);
        if u < 128 {
            return self.ascii[u as usize];
        }
        match self.ranges.binary_search_by(|r| {
            if r.1 < u {
                std::cmp::Ordering::Less
            } else if r.0 > u {
                std::cmp::Ordering::Greater
            } else {
                std::cmp::Ordering::Equal
            }
        }) {
            Ok(i) => self.ranges[i].2,
            Err(_) => Class::Other,
        }
    }

    /// The character at byte `i` of `s`, its class and where it ends.
    #[inline(always)]
    fn at(&self, s: &str, i: usize) -> Option<(char, Class, usize)> {
        let b = *s.as_bytes().get(i)?;
        if b < 0x80 {
            return Some((char::from(b), self.ascii[usize::from(b)], i + 1));
        }
        let c = s[i..].chars().next()?;
        Some((c, self.class(c), i + c.len_utf8()))
    }

    /// Where the run of `class` characters starting at `i` ends.
    fn run(&self, s: &str, mut i: usize, class: Class) -> usize {
        while let Some((_, k, next)) = self.at(s, i) {
            if k != class {
                break;
            }
            i = next;
        }
        i
    }

    /// The lowercase ASCII letter `c` matches, case-insensitively if `fold`.
    fn letter(&self, c: char, fold: bool) -> Option<u8> {
        match u8::try_from(c) {
            Ok(b) if b.is_ascii() => Some(if fold { b.to_ascii_lowercase() } else { b }),
            _ if fold => self.folds.iter().find(|f| f.0 == c).map(|f| f.1),
            _ => None,
        }
    }

    /// `'s|'t|'re|'ve|'m|'ll|'d` after an apostrophe ending at `i`: where the contraction ends.
    fn contraction(&self, s: &str, i: usize, fold: bool) -> Option<usize> {
        let (c, _, j) = self.at(s, i)?;
        match self.letter(c, fold)? {
            b's' | b't' | b'm' | b'd' => Some(j),
            first @ (b'r' | b'v' | b'l') => {
                let (c2, _, k) = self.at(s, j)?;
                let want = if first == b'l' { b'l' } else { b'e' };
                (self.letter(c2, fold)? == want).then_some(k)
            }
            _ => None,
        }
    }

    /// `\s+(?!\S)|\s+` over the white space at `p`, which ends at `end`: all of it at the end of the text, else all
    /// but its last character, so that one joins the next word — unless it is the only one.
    fn spaces(s: &str, p: usize, end: usize) -> usize {
        if end == s.len() {
            return end;
        }
        match s[p..end].char_indices().next_back() {
            Some((last, _)) if last > 0 => p + last,
            _ => end,
        }
    }

    /// Where the match starting at byte `p` (< `s.len()`) ends. Every character starts some alternative, so the
    /// matches tile the text.
    pub(crate) fn next(&self, s: &str, p: usize) -> usize {
        let Some((c, k, n1)) = self.at(s, p) else {
            return s.len();
        };
        match self.pattern {
            Pattern::Gpt2 => self.next_gpt2(s, p, c, k, n1),
            Pattern::Cl100k { max_digits } => self.next_cl100k(s, p, c, k, n1, max_digits),
        }
    }

    /// `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
    fn next_gpt2(&self, s: &str, p: usize, c: char, k: Class, n1: usize) -> usize {
        if c == '\'' {
            if let Some(e) = self.contraction(s, n1, false) {
                return e;
            }
        }
        if k != Class::Space {
            return self.run(s, n1, k);
        }
        if c == ' ' {
            if let Some((_, k2, n2)) = self.at(s, n1).filter(|a| a.1 != Class::Space) {
                return self.run(s, n2, k2);
            }
        }
        Self::spaces(s, p, self.run(s, n1, Class::Space))
    }

    /// `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,max}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|
    /// \s+(?!\S)|\s+`
    fn next_cl100k(
        &self,
        s: &str,
        p: usize,
        c: char,
        k: Class,
        n1: usize,
        max_digits: usize,
    ) -> usize {
        if c == '\'' {
            if let Some(e) = self.contraction(s, n1, true) {
                return e;
            }
        }
        match k {
            Class::Letter => return self.run(s, n1, Class::Letter),
            Class::Number => {
                let mut e = n1;
                for _ in 1..max_digits {
                    match self.at(s, e) {
                        Some((_, Class::Number, next)) => e = next,
                        _ => break,
                    }
                }
                return e;
            }
            _ => {}
        }
        let next = self.at(s, n1);
        // One character other than a newline, a letter or a digit may lead a word.
        if c != '\r' && c != '\n' {
            if let Some((_, Class::Letter, n2)) = next {
                return self.run(s, n2, Class::Letter);
            }
        }
        let others = match (k, next) {
            (Class::Other, _) => Some(n1),
            (_, Some((_, Class::Other, n2))) if c == ' ' => Some(n2),
            _ => None,
        };
        if let Some(o) = others {
            let e = self.run(s, o, Class::Other);
            let nl = s.as_bytes()[e..]
                .iter()
                .position(|&b| b != b'\r' && b != b'\n');
            return nl.map_or(s.len(), |n| e + n);
        }
        // White space: up to its last newline, if it holds one.
        let end = self.run(s, n1, Class::Space);
        match s.as_bytes()[p..end]
            .iter()
            .rposition(|&b| b == b'\r' || b == b'\n')
        {
            Some(nl) => p + nl + 1,
            None => Self::spaces(s, p, end),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(regex: &str, s: &str) -> Vec<String> {
        let t = PreTokenizer::new(regex).expect("known pattern");
        let mut out = Vec::new();
        let mut p = 0;
        while p < s.len() {
            let e = t.next(s, p);
            out.push(s[p..e].to_owned());
            p = e;
        }
        out
    }

    #[test]
    fn qwen2_splits_as_its_regex() {
        assert_eq!(
            split(QWEN2, "I'M here  123 ,!?\n\n  x ſ'S\tab x'ſ"),
            [
                "I", "'M", " here", " ", " ", "1", "2", "3", " ,!?\n\n", " ", " x", " ſ", "'S",
                "\tab", " x", "'ſ"
            ]
        );
        assert_eq!(split(LLAMA3, "12345 a  "), ["123", "45", " a", "  "]);
    }

    #[test]
    fn gpt2_splits_as_its_regex() {
        assert_eq!(
            split(GPT2, "I'M here  123 ,!?\n\n  x's"),
            ["I", "'", "M", " here", " ", " 123", " ,!?", "\n\n ", " x", "'s"]
        );
    }

    #[test]
    fn unknown_patterns_are_refused() {
        assert!(PreTokenizer::new(r"\w+|\s+").is_err());
    }
}
