use std::path::Path;

use tokenizers::{TruncationDirection, TruncationParams, TruncationStrategy};

use super::Tokenizer;
use crate::error::{Error, Result};

/// The Hugging Face `tokenizers` pipeline read from a `tokenizer.json`, with its own padding switched off (batches
/// are ragged) and truncation set to ours.
pub struct HfTokenizer {
    inner: tokenizers::Tokenizer,
    max_length: usize,
}

impl HfTokenizer {
    pub fn from_file(path: &Path, max_length: usize) -> Result<Self> {
        let mut inner = tokenizers::Tokenizer::from_file(path)
            .map_err(|e| Error::Tokenizer(format!("{}: {e}", path.display())))?;
        inner.with_padding(None);
        inner
            .with_truncation(Some(TruncationParams {
                max_length,
                strategy: TruncationStrategy::LongestFirst,
                stride: 0,
                direction: TruncationDirection::Right,
            }))
            .map_err(|e| Error::Tokenizer(format!("{}: {e}", path.display())))?;
        Ok(HfTokenizer { inner, max_length })
    }
}

impl Tokenizer for HfTokenizer {
    fn encode(&self, text: &str, ids: &mut Vec<u32>) -> Result<()> {
        let enc = self
            .inner
            .encode(text, true)
            .map_err(|e| Error::Tokenizer(e.to_string()))?;
        ids.clear();
        ids.extend_from_slice(enc.get_ids());
        Ok(())
    }

    fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    fn max_length(&self) -> usize {
        self.max_length
    }
}
