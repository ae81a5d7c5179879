//! Every engine setting in one place, with defaults and validation. The `bench` commands, the harness and the TUI
//! all set this same struct.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::tokenizer::TokenizerKind;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EngineConfig {
    /// Compute threads of the CPU backend; 0 means one per available core.
    pub threads: usize,
    /// Token budget of one batch: the sum of all sequences' lengths, special tokens included.
    pub max_batch_tokens: usize,
    /// Cap on sequences per batch, whatever their length.
    pub max_batch_seqs: usize,
    /// Truncate inputs to this many tokens (special tokens included); `None` takes the model's `max_seq_length`.
    pub max_seq_length: Option<usize>,
    /// Which tokenizer implementation reads the model's `tokenizer.json` (`hf` or `fast`; the same ids).
    pub tokenizer: TokenizerKind,
    /// How long the scheduler may hold a partial batch waiting for more work, in milliseconds; 0 dispatches as soon
    /// as the backend can take work.
    pub max_wait_ms: u64,
    /// Submit batch N+1 while batch N's results are still being copied out and answered (two batches in flight).
    pub overlap: bool,
    /// The scheduler's queue bound in tokens; work beyond it is refused as overloaded.
    pub max_queue_tokens: usize,
    /// The scheduler's queue bound in sequences.
    pub max_queue_requests: usize,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            threads: 0,
            // A batch of this size already keeps two cores' GEMMs in their efficient regime.
            max_batch_tokens: 8192,
            max_batch_seqs: 512,
            max_seq_length: None,
            tokenizer: TokenizerKind::Fast,
            max_wait_ms: 0,
            overlap: true,
            // Several full batches: enough to keep the backend busy, short enough that queueing stays bounded.
            max_queue_tokens: 65_536,
            max_queue_requests: 4096,
        }
    }
}

impl EngineConfig {
    pub fn validate(&self) -> Result<()> {
        if self.max_batch_tokens == 0 {
            return Err(Error::Config {
                name: "max_batch_tokens",
                message: "must be at least 1".into(),
            });
        }
        if self.max_batch_seqs == 0 {
            return Err(Error::Config {
                name: "max_batch_seqs",
                message: "must be at least 1".into(),
            });
        }
        if self.max_queue_tokens == 0 || self.max_queue_requests == 0 {
            return Err(Error::Config {
                name: "max_queue_tokens",
                message: "the queue bounds must be at least 1".into(),
            });
        }
        if self.max_seq_length == Some(0) {
            return Err(Error::Config {
                name: "max_seq_length",
                message: "must be at least 1 (it includes the special tokens)".into(),
            });
        }
        Ok(())
    }

    /// The thread count actually used: `threads`, or the available cores when it is 0.
    pub fn resolved_threads(&self) -> usize {
        match self.threads {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        }
    }
}
