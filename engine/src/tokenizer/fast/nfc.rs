//! NFC and NFKD into caller-owned buffers. The crate normalises with `unicode-normalization-alignments`' iterators,
//! whose inline buffers spill to the heap on a run of more than four combining marks; this is the same algorithm
//! over the same tables (canonical or compatibility decomposition, stable ordering of combining marks, then for
//! NFC the crate's composition rules), writing into buffers that a [`crate::tokenizer::Scratch`] keeps warm.

use unicode_normalization_alignments::char::{
    canonical_combining_class, compose, decompose_canonical, decompose_compatible,
};
use unicode_normalization_alignments::{is_nfc_quick, IsNormalized};

/// Whether `text` is already NFC: at once when it has no character from U+0300 on (no combining mark, nor any
/// character NFC changes, lies below it), else by the quick check.
pub(crate) fn is_nfc(text: &str) -> bool {
    text.bytes().all(|b| b < 0xCC) || is_nfc_quick(text.chars()) == IsNormalized::Yes
}

/// Canonical composition of a canonically ordered stream, as `Recompositions` does it: a starter absorbs each
/// following character it composes with unless a character of the same or higher class sits between them.
struct Composer<'a> {
    out: &'a mut String,
    /// Characters after the starter that it did not absorb, in order.
    held: &'a mut Vec<char>,
    starter: Option<char>,
    last_class: Option<u8>,
}

impl Composer<'_> {
    fn push(&mut self, c: char, class: u8) {
        let Some(k) = self.starter else {
            if class == 0 {
                self.starter = Some(c);
            } else {
                self.out.push(c);
            }
            return;
        };
        let blocked = self.last_class.is_some_and(|l| l >= class);
        if !blocked {
            if let Some(r) = compose(k, c) {
                self.starter = Some(r);
                return;
            }
        }
        if class == 0 {
            self.flush();
            self.starter = Some(c);
        } else {
            self.held.push(c);
            self.last_class = Some(class);
        }
    }

    fn flush(&mut self) {
        self.out.extend(self.starter.take());
        self.out.extend(self.held.drain(..));
        self.last_class = None;
    }
}

/// Sorts the pending combining marks by class, keeping the order of equals, and hands them on in that order.
fn drain_marks(marks: &mut Vec<(u8, char)>, mut sink: impl FnMut(char, u8)) {
    for i in 1..marks.len() {
        let mut j = i;
        while j > 0 && marks[j - 1].0 > marks[j].0 {
            marks.swap(j - 1, j);
            j -= 1;
        }
    }
    for &(class, m) in marks.iter() {
        sink(m, class);
    }
    marks.clear();
}

/// Writes the NFC form of `text` into `out` (cleared first).
pub(crate) fn nfc(text: &str, out: &mut String, marks: &mut Vec<(u8, char)>, held: &mut Vec<char>) {
    out.clear();
    marks.clear();
    held.clear();
    let mut composer = Composer {
        out,
        held,
        starter: None,
        last_class: None,
    };
    for c in text.chars() {
        decompose_canonical(c, |d| match canonical_combining_class(d) {
            0 => {
                drain_marks(marks, |m, class| composer.push(m, class));
                composer.push(d, 0);
            }
            class => marks.push((class, d)),
        });
    }
    drain_marks(marks, |m, class| composer.push(m, class));
    composer.flush();
}

/// Appends the NFKD form of `text` to `out`: ASCII as it is, else each character's compatibility decomposition
/// with the combining marks in canonical order.
pub(crate) fn nfkd(text: &str, out: &mut String, marks: &mut Vec<(u8, char)>) {
    if text.is_ascii() {
        out.push_str(text);
        return;
    }
    marks.clear();
    for c in text.chars() {
        decompose_compatible(c, |d| match canonical_combining_class(d) {
            0 => {
                drain_marks(marks, |m, _| out.push(m));
                out.push(d);
            }
            class => marks.push((class, d)),
        });
    }
    drain_marks(marks, |m, _| out.push(m));
}

#[cfg(test)]
mod tests {
    use unicode_normalization_alignments::UnicodeNormalization;

    #[test]
    fn matches_the_crates_nfc_and_nfkd() {
        for s in [
            "",
            "e\u{301}",
            "a\u{308}\u{301}\u{323}b",
            "\u{301}\u{301}x",
            "\u{1100}\u{1161}\u{11A8}\u{1100}\u{1161}",
            "Å\u{30A}\u{0F73}\u{0F75}",
            "q\u{307}\u{323}\u{301}\u{301}\u{301}\u{301}\u{301}\u{301}",
            "\u{212B}\u{2126}\u{F900}",
            "ﬁ ① ㍿ Ｔｅｓｔ ½ ẛ̣ \u{1E9B}\u{0323}",
            "ḱ̟̔",
        ] {
            let (mut out, mut marks, mut held) = (String::new(), Vec::new(), Vec::new());
            super::nfc(s, &mut out, &mut marks, &mut held);
            let want: String = s.nfc().map(|(c, _)| c).collect();
            assert_eq!(out, want, "{s:?}");
            out.clear();
            super::nfkd(s, &mut out, &mut marks);
            let want: String = s.nfkd().map(|(c, _)| c).collect();
            assert_eq!(out, want, "NFKD {s:?}");
        }
    }
}
