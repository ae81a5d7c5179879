//! Tokenizers behind one interface. `hf` wraps the Hugging Face `tokenizers` crate: the reference every other
//! implementation is checked against, id for id.

mod hf;

pub use hf::HfTokenizer;

use crate::error::Result;

/// Text to model input ids: normalisation, pre-tokenisation, the model's sub-word algorithm, special tokens, and
/// truncation to the configured maximum length (special tokens kept).
pub trait Tokenizer: Send + Sync {
    /// Writes the ids of `text` into `ids` (cleared first).
    fn encode(&self, text: &str, ids: &mut Vec<u32>) -> Result<()>;
    fn vocab_size(&self) -> usize;
    /// The truncation length, special tokens included.
    fn max_length(&self) -> usize;
}
