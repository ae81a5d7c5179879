use std::path::Path;

use tokenizers::{PostProcessor, TruncationDirection, TruncationParams, TruncationStrategy};

use super::{PairEncoding, Scratch, Tokenizer, Truncation, TruncationSide};
use crate::error::{Error, Result};

/// The Hugging Face `tokenizers` pipeline read from a `tokenizer.json`, with its own padding switched off (batches
/// are ragged) and truncation set to ours.
pub struct HfTokenizer {
    inner: tokenizers::Tokenizer,
    max_length: usize,
    /// Whether an encode adds the post-processor's special tokens.
    add_special_tokens: bool,
}

impl HfTokenizer {
    pub fn from_file(path: &Path, truncation: Option<Truncation>) -> Result<Self> {
        Self::open(path, truncation, true)
    }

    /// [`HfTokenizer::from_file`], its special tokens left out first where `add_special_tokens` is false (the
    /// limit then need not hold them).
    pub fn open(
        path: &Path,
        truncation: Option<Truncation>,
        add_special_tokens: bool,
    ) -> Result<Self> {
        Self::open_registered(path, truncation, add_special_tokens, &[])
    }

    /// [`HfTokenizer::open`] with `registered` added as special tokens matched on the raw text
    /// ([`super::load_registered`]).
    pub fn open_registered(
        path: &Path,
        truncation: Option<Truncation>,
        add_special_tokens: bool,
        registered: &[String],
    ) -> Result<Self> {
        let mut inner = tokenizers::Tokenizer::from_file(path)
            .map_err(|e| Error::Tokenizer(format!("{}: {e}", path.display())))?;
        inner.with_padding(None);
        if !registered.is_empty() {
            let tokens: Vec<tokenizers::AddedToken> = registered
                .iter()
                .map(|t| tokenizers::AddedToken::from(t.as_str(), true).normalized(false))
                .collect();
            inner.add_special_tokens(&tokens);
        }
        HfTokenizer {
            inner,
            max_length: usize::MAX,
            add_special_tokens: true,
        }
        .with_special_tokens(add_special_tokens)
        .truncated(truncation)
        .map_err(|e| super::in_file(path, e))
    }

    /// Without `add_special_tokens`, its post-processor's special tokens are left out. Before
    /// [`HfTokenizer::truncated`]: a limit need only hold the special tokens an encode adds.
    pub fn with_special_tokens(mut self, add_special_tokens: bool) -> Self {
        self.add_special_tokens = add_special_tokens;
        if !add_special_tokens {
            // Gone rather than skipped: the crate takes its special tokens off a truncation limit whether an
            // encode adds them or not (and underflows on a limit shorter than they are). Its other work, trimming
            // offsets, only `/tokenize` shows.
            self.inner
                .with_post_processor(None::<tokenizers::PostProcessorWrapper>);
        }
        self
    }

    /// Truncates its encodes as `truncation` says; refused when the limit cannot hold the special tokens.
    pub fn truncated(mut self, truncation: Option<Truncation>) -> Result<Self> {
        let params = truncation.map(|t| TruncationParams {
            max_length: t.max_length,
            strategy: TruncationStrategy::LongestFirst,
            stride: 0,
            direction: match t.side {
                TruncationSide::Right => TruncationDirection::Right,
                TruncationSide::Left => TruncationDirection::Left,
            },
        });
        if let Some(t) = &truncation {
            // The crate subtracts the special tokens it adds from the limit unchecked.
            let specials = self.special_count();
            if t.max_length < specials {
                return Err(Error::Tokenizer(format!(
                    "max length {} is shorter than the {specials} special tokens",
                    t.max_length
                )));
            }
        }
        self.inner
            .with_truncation(params)
            .map_err(|e| Error::Tokenizer(e.to_string()))?;
        self.max_length = truncation.map_or(usize::MAX, |t| t.max_length);
        Ok(self)
    }

    /// The special tokens an encode of one sequence adds.
    fn special_count(&self) -> usize {
        match self.inner.get_post_processor() {
            Some(p) if self.add_special_tokens => p.added_tokens(false),
            _ => 0,
        }
    }
}

/// One token of an encoding as TEI's `/tokenize` reports it: the text it covers, by byte offsets into the input
/// (none for a special token, whose text is its own).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct TokenDetail {
    pub id: u32,
    pub text: String,
    pub special: bool,
    pub start: Option<usize>,
    pub stop: Option<usize>,
}

impl HfTokenizer {
    /// The tokens of `text`, with the special tokens if `add_special_tokens` and the tokenizer adds them, and
    /// whether truncation cut it.
    pub fn tokens(&self, text: &str, add_special_tokens: bool) -> Result<(Vec<TokenDetail>, bool)> {
        let enc = self
            .inner
            .encode(text, add_special_tokens && self.add_special_tokens)
            .map_err(|e| Error::Tokenizer(e.to_string()))?;
        let tokens = enc
            .get_ids()
            .iter()
            .zip(enc.get_tokens())
            .zip(enc.get_offsets())
            .zip(enc.get_special_tokens_mask())
            .map(|(((&id, token), &(start, stop)), &special)| {
                if special == 1 {
                    return TokenDetail {
                        id,
                        text: token.clone(),
                        special: true,
                        start: None,
                        stop: None,
                    };
                }
                TokenDetail {
                    id,
                    text: text.get(start..stop).unwrap_or(token).to_owned(),
                    special: false,
                    start: Some(start),
                    stop: Some(stop),
                }
            })
            .collect();
        Ok((tokens, !enc.get_overflowing().is_empty()))
    }
}

impl HfTokenizer {
    /// The text of `ids` (TEI's `/decode`), without the special tokens if `skip_special_tokens`.
    pub fn decode(&self, ids: &[u32], skip_special_tokens: bool) -> Result<String> {
        self.inner
            .decode(ids, skip_special_tokens)
            .map_err(|e| Error::Tokenizer(e.to_string()))
    }
}

impl Tokenizer for HfTokenizer {
    fn encode_cut(&self, text: &str, _: &mut Scratch, ids: &mut Vec<u32>) -> Result<bool> {
        let enc = self
            .inner
            .encode(text, self.add_special_tokens)
            .map_err(|e| Error::Tokenizer(e.to_string()))?;
        ids.clear();
        ids.extend_from_slice(enc.get_ids());
        // Truncation keeps what it cut as the encoding's overflow.
        Ok(!enc.get_overflowing().is_empty())
    }

    fn encode_pair(
        &self,
        a: &str,
        b: &str,
        _: &mut Scratch,
        ids: &mut Vec<u32>,
    ) -> Result<PairEncoding> {
        let enc = self
            .inner
            .encode((a, b), self.add_special_tokens)
            .map_err(|e| Error::Tokenizer(e.to_string()))?;
        ids.clear();
        ids.extend_from_slice(enc.get_ids());
        let types = enc.get_type_ids();
        let from = types.iter().position(|&t| t != 0);
        if from.is_some_and(|f| types[f..].iter().any(|&t| t != 1)) {
            return Err(Error::Tokenizer(
                "pairs of texts: the pair template's token types are not type 0 then type 1".into(),
            ));
        }
        Ok(PairEncoding {
            type1_from: from.map(|f| u32::try_from(f).unwrap_or(u32::MAX)),
            cut: !enc.get_overflowing().is_empty(),
        })
    }

    fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    fn token_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    fn id_bound(&self) -> usize {
        // The vocabulary with its added tokens, and the ids the post-processor adds around a text.
        let specials = self
            .inner
            .encode("", true)
            .map(|e| e.get_ids().to_vec())
            .unwrap_or_default();
        self.inner
            .get_vocab(true)
            .into_values()
            .chain(specials)
            .map(|id| id as usize + 1)
            .max()
            .unwrap_or(0)
    }

    fn max_length(&self) -> usize {
        self.max_length
    }

    fn specials_around(&self) -> (usize, usize) {
        // The post-processor run on one token of an id no vocabulary has: where it lands says what went around
        // it (the special tokens mask would not: RoBERTa's processor marks only its own). The processor itself,
        // not the tokenizer's post_process, which truncates first.
        const MARK: u32 = u32::MAX;
        let Some(processor) = self.inner.get_post_processor() else {
            return (0, 0);
        };
        let one = tokenizers::Encoding::from_tokens(
            vec![tokenizers::Token::new(MARK, "a".into(), (0, 1))],
            0,
        );
        processor
            .process(one, None, self.add_special_tokens)
            .ok()
            .and_then(|e| {
                let ids = e.get_ids();
                let at = ids.iter().position(|&id| id == MARK)?;
                Some((at, ids.len() - at - 1))
            })
            .unwrap_or((0, 0))
    }
}
