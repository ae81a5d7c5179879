//! Every engine setting in one place, with defaults and validation. The `bench` commands and the harness (its
//! knobs are this struct's fields) all set this same struct.

use serde::{Deserialize, Serialize};

use crate::dtype::Dtype;
use crate::error::{Error, Result};
use crate::plan::{CaptureMode, Ladder};
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
    /// Precision of the linear layers: `f32`, or `bf16` (weights in bf16, f32 accumulation) where the CPU has
    /// AVX512-BF16; elsewhere bf16 falls back to f32 (the backend's info says which ran).
    pub dtype: Dtype,
    /// When forward plans are made: `off` (always eager), `eager` (at start-up, as many as the plan cache holds)
    /// or `lazy` (a bucket's second batch captures, later ones replay).
    pub capture: CaptureMode,
    /// Token rungs of the bucket ladder, ascending; empty: doubling from 16 up to `max_batch_tokens`.
    pub token_buckets: Vec<usize>,
    /// Sequence rungs of the bucket ladder, ascending; empty: growing fourfold from 1 up to `max_batch_seqs`. A batch
    /// past the top rung runs eager. The CPU backend's plan depends on the token rung alone (an arena), so its
    /// sequence rungs share one plan; a backend whose plans depend on the sequence count keys them by both.
    pub seq_buckets: Vec<usize>,
    /// Memory cap of the plan cache, in MiB; the least recently used plans are evicted past it.
    pub plan_cache_mib: usize,
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
            dtype: Dtype::F32,
            capture: CaptureMode::Lazy,
            token_buckets: Vec::new(),
            seq_buckets: Vec::new(),
            // The default ladder's CPU plans for a MiniLM-sized model take a fraction of it, in f32 or bf16.
            plan_cache_mib: 1024,
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
        for (name, bound) in [
            ("max_queue_tokens", self.max_queue_tokens),
            ("max_queue_requests", self.max_queue_requests),
        ] {
            if bound == 0 {
                return Err(Error::Config {
                    name,
                    message: "must be at least 1".into(),
                });
            }
        }
        if self.max_seq_length == Some(0) {
            return Err(Error::Config {
                name: "max_seq_length",
                message: "must be at least 1 (it includes the special tokens)".into(),
            });
        }
        self.ladder().validate()
    }

    /// The bucket ladder: the configured rungs, or the default one for the batch budget.
    pub fn ladder(&self) -> Ladder {
        let default = Ladder::up_to(self.max_batch_tokens, self.max_batch_seqs);
        Ladder {
            tokens: if self.token_buckets.is_empty() {
                default.tokens
            } else {
                self.token_buckets.clone()
            },
            seqs: if self.seq_buckets.is_empty() {
                default.seqs
            } else {
                self.seq_buckets.clone()
            },
        }
    }

    /// The thread count actually used: `threads`, or the available cores when it is 0.
    pub fn resolved_threads(&self) -> usize {
        match self.threads {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        }
    }
}
