//! sentence-transformers' `WhitespaceTokenizer`, the word tokenizer of its `WordEmbeddings` module (the
//! average_word_embeddings_* models: GloVe, Komninos, Levy): no `tokenizer.json`, a word list and stop words in
//! `whitespacetokenizer_config.json`. Mirrors `sentence_transformers/.../tokenizer/whitespace.py`: lowercase the
//! text if `do_lower_case`, split it on whitespace as Python's `str.split()` does, and for each word try it as it
//! is, then stripped of ASCII punctuation, then lowercased, each time dropping it if it is a stop word and taking
//! its id if the vocabulary has it; a word none of the three finds is left out. Hand-written: the rules are
//! sentence-transformers' own, in no crate.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use serde::Deserialize;

use super::{PairEncoding, Scratch, Tokenizer, Truncation, TruncationSide};
use crate::error::{Error, Result};

/// `whitespacetokenizer_config.json`. sentence-transformers always writes `stop_words`; a file without it (whose
/// tokenizer Python would give its default English list) is refused rather than run without stop words.
#[derive(Deserialize)]
struct Config {
    vocab: Vec<String>,
    stop_words: Vec<String>,
    #[serde(default)]
    do_lower_case: bool,
}

/// The word list's ids (a repeated word's last place, as sentence-transformers' map keeps it), the stop words, and
/// the truncation.
pub struct WhitespaceTokenizer {
    ids: HashMap<String, u32>,
    stop_words: HashSet<String>,
    lower: bool,
    vocab_size: usize,
    truncation: Option<Truncation>,
}

/// Python's `str.isspace()`: Unicode's White_Space and the four ASCII separators (file, group, record, unit) that
/// Python counts and Unicode does not.
fn is_python_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

impl WhitespaceTokenizer {
    /// Reads `whitespacetokenizer_config.json` at `path`; `truncation` as the other tokenizers take it (no special
    /// tokens here).
    pub fn open(path: &Path, truncation: Option<Truncation>) -> Result<Self> {
        let config: Config = crate::model::read_json(path)?;
        let vocab_size = config.vocab.len();
        if u32::try_from(vocab_size).is_err() {
            return Err(Error::Tokenizer(format!(
                "{}: {vocab_size} words do not fit 32-bit ids",
                path.display()
            )));
        }
        // sentence-transformers builds its map with an OrderedDict over the list: a repeated word keeps its last
        // index, which inserting in order gives.
        let ids = config
            .vocab
            .into_iter()
            .zip(0u32..)
            .collect::<HashMap<_, _>>();
        Ok(WhitespaceTokenizer {
            ids,
            stop_words: config.stop_words.into_iter().collect(),
            lower: config.do_lower_case,
            vocab_size,
            truncation,
        })
    }

    /// A word's id by sentence-transformers' three tries, or `None` where it is a stop word or unknown.
    fn word(&self, word: &str) -> Option<u32> {
        // Each try: `None` to go on, `Some(found)` to stop (a stop word stops with nothing).
        let attempt = |candidate: &str, looked_up: bool| {
            if self.stop_words.contains(candidate) {
                return Some(None);
            }
            self.ids
                .get(candidate)
                .filter(|_| looked_up)
                .map(|&id| Some(id))
        };
        if let Some(found) = attempt(word, true) {
            return found;
        }
        let stripped = word.trim_matches(|c: char| c.is_ascii_punctuation());
        // The stripped word is looked up only when something is left of it.
        if let Some(found) = attempt(stripped, !stripped.is_empty()) {
            return found;
        }
        attempt(&stripped.to_lowercase(), true).flatten()
    }
}

impl Tokenizer for WhitespaceTokenizer {
    fn encode_cut(&self, text: &str, _: &mut Scratch, ids: &mut Vec<u32>) -> Result<bool> {
        ids.clear();
        let lowered;
        let text = if self.lower {
            lowered = text.to_lowercase();
            lowered.as_str()
        } else {
            text
        };
        ids.extend(
            text.split(is_python_space)
                .filter(|w| !w.is_empty())
                .filter_map(|w| self.word(w)),
        );
        let Some(t) = self.truncation.filter(|t| ids.len() > t.max_length) else {
            return Ok(false);
        };
        match t.side {
            TruncationSide::Right => ids.truncate(t.max_length),
            TruncationSide::Left => {
                ids.drain(..ids.len() - t.max_length);
            }
        }
        Ok(true)
    }

    fn encode_pair(
        &self,
        _: &str,
        _: &str,
        _: &mut Scratch,
        _: &mut Vec<u32>,
    ) -> Result<PairEncoding> {
        Err(Error::Tokenizer(
            "a word list tokenizes single texts, not pairs".into(),
        ))
    }

    fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    fn token_id(&self, token: &str) -> Option<u32> {
        self.ids.get(token).copied()
    }

    fn id_bound(&self) -> usize {
        self.vocab_size
    }

    fn max_length(&self) -> usize {
        self.truncation.map_or(usize::MAX, |t| t.max_length)
    }

    fn specials_around(&self) -> (usize, usize) {
        (0, 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokenizer(lower: bool, truncation: Option<Truncation>) -> WhitespaceTokenizer {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("whitespacetokenizer_config.json");
        let config = serde_json::json!({
            "vocab": ["the", "cat", "Cat", "sat", "mat", "naïve", "x", "cat", "straße", "-"],
            "stop_words": ["a", "on", "The"], "do_lower_case": lower});
        std::fs::write(&path, config.to_string()).expect("write");
        WhitespaceTokenizer::open(&path, truncation).expect("a whitespace tokenizer")
    }

    fn ids(t: &WhitespaceTokenizer, text: &str) -> Vec<u32> {
        let mut out = Vec::new();
        t.encode(text, &mut out).expect("encode");
        out
    }

    /// sentence-transformers' three tries per word (as is, ASCII punctuation stripped, lowercased), each stopped
    /// by a stop word; Python's whitespace (the ASCII separators \x1c–\x1f included, no-break spaces too); a
    /// repeated word's last index; what `do_lower_case` changes. Expected ids worked out by hand from
    /// whitespace.py's rules.
    #[test]
    fn words_are_found_as_sentence_transformers_finds_them() {
        let t = tokenizer(false, None);
        // "The" is a stop word as it is; "the" is in the list; "Cat" has its own id; "CAT," strips to "CAT",
        // unknown, then lowers to "cat" (index 7, its last place); "(on)" strips to a stop word.
        assert_eq!(ids(&t, "The the Cat CAT, (on) mat."), [0, 2, 7, 4]);
        assert_eq!(
            ids(&t, "cat\u{1c}sat\u{a0}x\u{3000}mat\u{85}cat"),
            [7, 3, 6, 4, 7]
        );
        // A word of ASCII punctuation alone strips to nothing, which no try finds; "«x»" keeps its guillemets.
        assert_eq!(ids(&t, "-- - ... «x»"), [9]);
        // Non-ASCII punctuation is not stripped; lowercasing is Unicode's ("STRASSE" stays unknown).
        assert_eq!(ids(&t, "NAÏVE Straße STRASSE"), [5, 8]);
        assert!(ids(&t, " \t\n").is_empty());
        // Lowercased first, "The" is "the", no longer the stop word.
        let lower = tokenizer(true, None);
        assert_eq!(ids(&lower, "The Cat"), [0, 7]);
    }

    /// Cut to the limit from either end, and told when it was.
    #[test]
    fn truncation_keeps_either_end_and_says_it_cut() {
        for (side, want) in [
            (TruncationSide::Right, vec![0, 7]),
            (TruncationSide::Left, vec![3, 4]),
        ] {
            let t = tokenizer(
                false,
                Some(Truncation {
                    max_length: 2,
                    side,
                }),
            );
            let mut out = Vec::new();
            let cut = t
                .encode_cut("the cat sat mat", &mut Scratch::default(), &mut out)
                .expect("encode");
            assert_eq!((cut, out), (true, want));
            assert_eq!(ids(&t, "the cat"), [0, 7]);
        }
    }
}
