//! Every engine setting in one place, with defaults and validation. The `bench` commands' engine flags, their
//! `--config` files and the harness's knobs are all this one struct: a field added here is a flag (`--field-name`),
//! a TOML key and a knob (`field_name`) at once.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::backend::BackendKind;
use crate::dtype::Dtype;
use crate::error::{Error, Result};
use crate::plan::{CaptureMode, Ladder};
use crate::tokenizer::TokenizerKind;

/// The clap defaults only feed `--help`: the command line layers the flags actually given over a file or
/// [`EngineConfig::default`], never a default over a file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, clap::Args)]
#[serde(default, deny_unknown_fields)]
pub struct EngineConfig {
    /// Compute threads of the CPU backend; 0 means one per available core.
    #[arg(long, default_value_t = EngineConfig::default().threads)]
    pub threads: usize,
    /// Token budget of one batch: the sum of all sequences' lengths, special tokens included; `auto` (or 0):
    /// the smallest size reaching 95% of the peak forward tokens/s, measured when the engine loads.
    #[arg(long, default_value_t = EngineConfig::default().max_batch_tokens, value_parser = parse_budget)]
    #[serde(deserialize_with = "budget_from_toml")]
    pub max_batch_tokens: usize,
    /// Cap on sequences per batch, whatever their length.
    #[arg(long, default_value_t = EngineConfig::default().max_batch_seqs)]
    pub max_batch_seqs: usize,
    /// Truncate inputs to this many tokens (special tokens included); `None` takes the model's `max_seq_length`.
    #[arg(long)]
    pub max_seq_length: Option<usize>,
    /// Pool as this instead of as the model's files say (TEI's `--pooling`): a checkpoint without
    /// sentence-transformers' files (mean otherwise), or `splade` for a bare `*ForMaskedLM` one.
    #[arg(long, value_enum)]
    pub pooling: Option<PoolingChoice>,
    /// Keep each sparse embedding's this many largest weights and zero the rest (sentence-transformers'
    /// `max_active_dims`, which a SparseEncoder's `config_sentence_transformers.json` may set; this replaces it).
    #[arg(long)]
    pub max_active_dims: Option<usize>,
    /// Which tokenizer implementation reads the model's `tokenizer.json` (`hf`, `fast`, or `auto`: `fast` where it
    /// reproduces the file, else `hf`; the same ids).
    #[arg(long, value_enum, default_value_t = EngineConfig::default().tokenizer)]
    pub tokenizer: TokenizerKind,
    /// How long the scheduler may hold a partial batch waiting for more work, in milliseconds; 0 dispatches as soon
    /// as the backend can take work.
    #[arg(long, default_value_t = EngineConfig::default().max_wait_ms)]
    pub max_wait_ms: u64,
    /// Cut and submit batch N+1 as soon as batch N is computed, while N's results are copied out and answered;
    /// without it, N+1 waits until N is answered.
    #[arg(long, action = clap::ArgAction::Set, default_value_t = EngineConfig::default().overlap)]
    pub overlap: bool,
    /// Each priority's queue bound in tokens; work beyond it is refused as overloaded.
    #[arg(long, default_value_t = EngineConfig::default().max_queue_tokens)]
    pub max_queue_tokens: usize,
    /// Each priority's queue bound in sequences.
    #[arg(long, default_value_t = EngineConfig::default().max_queue_requests)]
    pub max_queue_requests: usize,
    /// Online work's deadline, in milliseconds from admission to answer: refused at admission when the measured
    /// throughput says it would be later, dropped unanswered (but for an error) if still queued past it.
    #[arg(long, default_value_t = EngineConfig::default().online_deadline_ms)]
    pub online_deadline_ms: u64,
    /// Batch work's deadline, as `online_deadline_ms` (a caller that waits for room, as `bench embed`, has none).
    #[arg(long, default_value_t = EngineConfig::default().batch_deadline_ms)]
    pub batch_deadline_ms: u64,
    /// Share of every batch's token budget held for batch work while any is queued, so online traffic cannot
    /// starve it (0 to 1).
    #[arg(long, default_value_t = EngineConfig::default().batch_min_share)]
    pub batch_min_share: f64,
    /// While online work is active, batch work fills a batch only up to what the measured throughput computes in
    /// this share of the online deadline, so a re-index holds a query up by at most one such batch (0 to 1; 0:
    /// batch work fills `max_batch_tokens` whatever runs).
    #[arg(long, default_value_t = EngineConfig::default().online_batch_share)]
    pub online_batch_share: f64,
    /// Precision of the linear layers: `f32`, or `bf16` (weights in bf16, f32 accumulation) where the CPU has
    /// AVX512-BF16; elsewhere bf16 falls back to f32 (the backend's info says which ran).
    #[arg(long, value_enum, default_value_t = EngineConfig::default().dtype)]
    pub dtype: Dtype,
    /// When forward plans are made: `off` (always eager), `startup` (at start-up, as many as the plan cache holds;
    /// `eager` is its old name) or `lazy` (a bucket's second batch captures, later ones replay).
    #[arg(long, value_enum, default_value_t = EngineConfig::default().capture)]
    pub capture: CaptureMode,
    /// Token rungs of the bucket ladder, ascending; empty: doubling from 16 up to `max_batch_tokens`.
    #[arg(long, value_delimiter = ',')]
    pub token_buckets: Vec<usize>,
    /// Sequence rungs of the bucket ladder, ascending; empty: growing fourfold from 1 up to `max_batch_seqs`. A batch
    /// past the top rung runs eager. The CPU backend's plan depends on the token rung alone (an arena), so its
    /// sequence rungs share one plan; a backend whose plans depend on the sequence count keys them by both.
    #[arg(long, value_delimiter = ',')]
    pub seq_buckets: Vec<usize>,
    /// Memory cap of the plan cache, in MiB; the least recently used plans are evicted past it.
    #[arg(long, default_value_t = EngineConfig::default().plan_cache_mib)]
    pub plan_cache_mib: usize,
    /// Engine replicas behind one gateway, each with its own compute threads (`threads` each; 0 shares the cores
    /// among them).
    #[arg(long, default_value_t = EngineConfig::default().replicas)]
    pub replicas: usize,
    /// Which backend runs the model: `cpu`, or `cuda` (a build with `--features cuda` and an NVIDIA GPU).
    #[arg(long, value_enum, default_value_t = EngineConfig::default().backend)]
    pub backend: BackendKind,
    /// The GPU the `cuda` backend runs on (its CUDA ordinal).
    #[arg(long, default_value_t = EngineConfig::default().device)]
    pub device: usize,
    /// The `cuda` backend's attention kernel: `cuda-cores` (f32, kernels/attention.cu) or `tensor-cores` (bf16
    /// MMA tiles with f32 accumulation, kernels/attention_mma.cu). The CPU backend has one attention and ignores
    /// this.
    #[arg(long, value_enum, default_value_t = EngineConfig::default().gpu_attention)]
    pub gpu_attention: GpuAttention,
    /// How the `cuda` backend holds the feed-forward block's intermediate (BERT's GELU input and output,
    /// Qwen3's gate/up projections and SwiGLU's output): `f32`, as every other activation, or `bf16`, the
    /// precision the down-projection reads it in anyway (half the bytes of the block's element-wise traffic).
    /// The CPU backend ignores this.
    #[arg(long, value_enum, default_value_t = EngineConfig::default().gpu_intermediate)]
    pub gpu_intermediate: GpuIntermediate,
}

/// A pooling [`EngineConfig::pooling`] names, TEI's spellings: one of sentence-transformers' modes over the
/// token states, or SPLADE's (SpladePooling's defaults over the checkpoint's MLM head: max over log(1 + ReLU)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum PoolingChoice {
    Cls,
    Mean,
    Max,
    LastToken,
    Splade,
}

/// Which kernel runs attention on a GPU ([`EngineConfig::gpu_attention`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum GpuAttention {
    /// f32 on CUDA cores: the kernel measured on an H200 (2026-12-04), hence still the default.
    #[default]
    CudaCores,
    /// bf16 on tensor cores (mma.sync m16n8k16, sm_80 and later); checked on the CPU by the kernels' host
    /// emulation (engine/tests/kernels_on_host/), not yet run on a GPU.
    TensorCores,
}

/// The precision of the feed-forward intermediate on a GPU ([`EngineConfig::gpu_intermediate`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum GpuIntermediate {
    /// The up-projection writes f32, its activation f32 and the down-projection's bf16 operand beside it: the
    /// path measured on an H200 (2026-12-04), hence still the default.
    #[default]
    F32,
    /// The up-projection writes bf16 (its bias and activation applied in place after it), which the
    /// down-projection reads as its operand; checked on the CPU by the kernels' host emulation, not yet run on a
    /// GPU.
    Bf16,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            threads: 0,
            // A batch of this size already keeps two cores' GEMMs in their efficient regime.
            max_batch_tokens: 8192,
            max_batch_seqs: 512,
            max_seq_length: None,
            pooling: None,
            max_active_dims: None,
            tokenizer: TokenizerKind::Auto,
            max_wait_ms: 0,
            overlap: true,
            // Several full batches: enough to keep the backend busy, short enough that queueing stays bounded.
            max_queue_tokens: 65_536,
            max_queue_requests: 4096,
            // The online SLO the harness measures against (p99 within 100 ms), and its batch SLO.
            online_deadline_ms: 100,
            batch_deadline_ms: 30_000,
            batch_min_share: 0.25,
            // A query waits for at most a running batch and its own: half of its deadline at most.
            online_batch_share: 0.25,
            dtype: Dtype::F32,
            capture: CaptureMode::Lazy,
            token_buckets: Vec::new(),
            seq_buckets: Vec::new(),
            // The default ladder's CPU plans for a MiniLM-sized model take a fraction of it, in f32 or bf16.
            plan_cache_mib: 1024,
            replicas: 1,
            backend: BackendKind::Cpu,
            device: 0,
            gpu_attention: GpuAttention::CudaCores,
            gpu_intermediate: GpuIntermediate::F32,
        }
    }
}

impl EngineConfig {
    pub fn validate(&self) -> Result<()> {
        if self.max_batch_seqs == 0 {
            return Err(Error::Config {
                name: "max_batch_seqs",
                message: "must be at least 1".into(),
            });
        }
        for (name, bound) in [
            ("max_queue_tokens", self.max_queue_tokens),
            ("max_queue_requests", self.max_queue_requests),
            ("replicas", self.replicas),
        ] {
            if bound == 0 {
                return Err(Error::Config {
                    name,
                    message: "must be at least 1".into(),
                });
            }
        }
        for (name, ms) in [
            ("online_deadline_ms", self.online_deadline_ms),
            ("batch_deadline_ms", self.batch_deadline_ms),
        ] {
            if ms == 0 {
                return Err(Error::Config {
                    name,
                    message: "must be at least 1".into(),
                });
            }
        }
        for (name, share) in [
            ("batch_min_share", self.batch_min_share),
            ("online_batch_share", self.online_batch_share),
        ] {
            if !(0.0..=1.0).contains(&share) {
                return Err(Error::Config {
                    name,
                    message: format!("must be between 0 and 1, not {share}"),
                });
            }
        }
        if self.max_seq_length == Some(0) {
            return Err(Error::Config {
                name: "max_seq_length",
                message: "must be at least 1 (it includes the special tokens)".into(),
            });
        }
        if self.max_active_dims == Some(0) {
            return Err(Error::Config {
                name: "max_active_dims",
                message: "must be at least 1".into(),
            });
        }
        self.ladder().validate()
    }

    /// Reads a whole configuration from a TOML file; keys left out keep their defaults, unknown keys are refused.
    pub fn from_toml_file(path: &Path) -> Result<EngineConfig> {
        let text = std::fs::read_to_string(path).map_err(Error::io(path))?;
        toml::from_str(&text).map_err(|e| Error::ConfigFile {
            path: path.to_owned(),
            message: e.to_string(),
        })
    }

    /// This configuration as a TOML file that [`EngineConfig::from_toml_file`] reads back (a `max_seq_length` of
    /// `None` is left out, which reads back as `None`). Fails only for a number past TOML's 64-bit signed range.
    pub fn to_toml(&self) -> Result<String> {
        toml::to_string_pretty(self).map_err(|e| Error::Config {
            name: "config",
            message: e.to_string(),
        })
    }

    /// Whether the token budget is to be measured when the engine loads (`auto`).
    pub fn auto_budget(&self) -> bool {
        self.max_batch_tokens == 0
    }

    /// The bucket ladder: the configured rungs, or the default one for the batch budget (for `auto`, the largest
    /// budget it may pick).
    pub fn ladder(&self) -> Ladder {
        let tokens = match self.max_batch_tokens {
            0 => crate::curve::AUTO_MAX_TOKENS,
            n => n,
        };
        let default = Ladder::up_to(tokens, self.max_batch_seqs);
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

/// `--max-batch-tokens`: a count, or `auto` (kept as 0, as `threads = 0` means one per core).
fn parse_budget(s: &str) -> std::result::Result<usize, String> {
    match s.trim() {
        "auto" => Ok(0),
        n => n
            .parse()
            .map_err(|e| format!("{n:?} is neither a token count nor `auto`: {e}")),
    }
}

/// `max_batch_tokens` in a TOML file: a number, or the string `"auto"`.
fn budget_from_toml<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<usize, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Budget {
        Tokens(usize),
        Word(String),
    }
    match Budget::deserialize(d)? {
        Budget::Tokens(n) => Ok(n),
        Budget::Word(w) => parse_budget(&w).map_err(serde::de::Error::custom),
    }
}

/// `Display` for the settings' enums: their command-line name, which is also their serde name.
pub(crate) fn fmt_value_enum(
    value: &impl clap::ValueEnum,
    f: &mut std::fmt::Formatter<'_>,
) -> std::fmt::Result {
    match value.to_possible_value() {
        Some(v) => f.write_str(v.get_name()),
        None => f.write_str("?"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_config_file_round_trips_and_reads_the_old_capture_name() {
        let config = EngineConfig {
            threads: 2,
            max_seq_length: Some(128),
            tokenizer: TokenizerKind::Hf,
            overlap: false,
            dtype: Dtype::Bf16,
            capture: CaptureMode::Startup,
            token_buckets: vec![16, 256],
            replicas: 3,
            pooling: Some(PoolingChoice::LastToken),
            ..EngineConfig::default()
        };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("engine.toml");
        std::fs::write(&path, config.to_toml().unwrap()).unwrap();
        assert_eq!(EngineConfig::from_toml_file(&path).unwrap(), config);
        // `None` is left out of the file and reads back as `None`.
        let plain = EngineConfig::default();
        std::fs::write(&path, plain.to_toml().unwrap()).unwrap();
        assert_eq!(EngineConfig::from_toml_file(&path).unwrap(), plain);

        std::fs::write(&path, "capture = \"eager\"\n").unwrap();
        let read = EngineConfig::from_toml_file(&path).unwrap();
        assert_eq!(read.capture, CaptureMode::Startup);
        assert!(read.to_toml().unwrap().contains("capture = \"startup\""));
    }

    #[test]
    fn the_budget_reads_auto_from_a_flag_or_a_file() {
        assert_eq!(parse_budget("auto"), Ok(0));
        assert_eq!(parse_budget("512"), Ok(512));
        assert!(parse_budget("lots").unwrap_err().contains("auto"));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("engine.toml");
        std::fs::write(&path, "max_batch_tokens = \"auto\"\n").unwrap();
        assert!(EngineConfig::from_toml_file(&path).unwrap().auto_budget());
        std::fs::write(&path, "max_batch_tokens = 640\n").unwrap();
        assert_eq!(
            EngineConfig::from_toml_file(&path)
                .unwrap()
                .max_batch_tokens,
            640
        );
    }

    #[test]
    fn a_bad_config_file_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("engine.toml");
        std::fs::write(&path, "capture = \"sometimes\"\n").unwrap();
        let e = EngineConfig::from_toml_file(&path).unwrap_err().to_string();
        assert!(e.contains("engine.toml") && e.contains("sometimes"), "{e}");
        let e = EngineConfig::from_toml_file(&dir.path().join("none.toml"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("none.toml"), "{e}");
    }
}
