//! Gemma 3's text `config.json` (EmbeddingGemma's: bidirectional attention), either transformers generation's.

use std::path::Path;

use serde::Deserialize;

use super::{read_json, LayerKinds, Rope};
use crate::backend::ops::AttentionShape;
use crate::error::{Error, Result};

/// The subset of a Hugging Face `config.json` that Gemma 3's text model needs as an embedding model. Read it with
/// [`ModelConfig::read`](super::ModelConfig::read), which makes its rotary positions.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct Gemma3Config {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub num_key_value_heads: usize,
    #[serde(default = "default_head_dim")]
    pub head_dim: usize,
    pub intermediate_size: usize,
    pub max_position_embeddings: usize,
    #[serde(default = "default_rms_eps")]
    pub rms_norm_eps: f64,
    #[serde(default = "default_activation")]
    pub hidden_activation: String,
    /// Attention scores are scaled by its inverse square root (not the head width's).
    #[serde(default = "default_query_scalar")]
    pub query_pre_attn_scalar: f64,
    /// The local layers' window as the file stores it: bidirectional, a token sees half of it on either side;
    /// causal, the `sliding_window − 1` tokens before it.
    #[serde(default = "default_sliding_window")]
    pub sliding_window: usize,
    /// Whether attention sees the whole sequence (EmbeddingGemma) or only the tokens before (Gemma 3).
    #[serde(default)]
    pub use_bidirectional_attention: bool,
    /// transformers' generic switch (5.2+): `false` makes both kinds of layer bidirectional, the sliding ones
    /// seeing `|i − j| ≤` the window transformers holds.
    is_causal: Option<bool>,
    #[serde(default = "default_pattern")]
    sliding_window_pattern: usize,
    rope_theta: Option<f64>,
    rope_local_base_freq: Option<f64>,
    #[serde(flatten)]
    kinds: LayerKinds,
    /// Refused when set: score soft-capping, attention biases.
    #[serde(default)]
    attn_logit_softcapping: Option<f64>,
    #[serde(default)]
    attention_bias: bool,
}

fn default_head_dim() -> usize {
    256
}
fn default_rms_eps() -> f64 {
    1e-6
}
fn default_activation() -> String {
    "gelu_pytorch_tanh".into()
}
fn default_query_scalar() -> f64 {
    256.0
}
fn default_sliding_window() -> usize {
    4096
}
fn default_pattern() -> usize {
    6
}

impl Gemma3Config {
    /// Whether layer `i` attends to the whole sequence (else within its sliding window): `layer_types`, else
    /// every `sliding_window_pattern`-th layer, counting from 1.
    pub fn is_global(&self, i: usize) -> bool {
        let pattern = (i + 1).is_multiple_of(self.sliding_window_pattern.max(1));
        self.kinds.is_global(i, pattern)
    }

    /// The rotary positions of the global layers (`global`) or of the local ones: bases by default 1,000,000 and
    /// 10,000, transformers 4's `rope_scaling` on the global ones (Gemma 3 4B's linear factor 8).
    pub fn rope(&self, global: bool) -> &Rope {
        self.kinds.rope(global)
    }

    /// Layer `i`'s attention; the window as transformers 5 masks it. transformers holds `sliding_window / 2 + 1`
    /// with `use_bidirectional_attention`, else the file's value `sw`; the sliding layers then see
    /// `|i − j| < sw` (bidirectional), `i − j < sw` (causal), or `|i − j| ≤ sw` with `is_causal: false`.
    pub fn attention(&self, i: usize) -> AttentionShape {
        let held = if self.use_bidirectional_attention {
            self.sliding_window / 2 + 1
        } else {
            self.sliding_window
        };
        let not_causal = self.is_causal == Some(false);
        let bidirectional = self.use_bidirectional_attention || not_causal;
        let window = if not_causal {
            held
        } else {
            held.saturating_sub(1)
        };
        AttentionShape {
            heads: self.num_attention_heads,
            kv_heads: self.num_key_value_heads,
            head_dim: self.head_dim,
            causal: !bidirectional,
            window: (!self.is_global(i)).then_some(window),
        }
    }
}

pub(super) fn read_gemma3(config_path: &Path) -> Result<Gemma3Config> {
    let mut config: Gemma3Config = read_json(config_path)?;
    let fail = |message: String| Err(Error::model(config_path, message));
    let bases = [
        config.rope_theta.unwrap_or(1_000_000.0),
        config.rope_local_base_freq.unwrap_or(10_000.0),
    ];
    let positions = config.max_position_embeddings;
    config
        .kinds
        .read_ropes(config_path, bases, false, positions)?;
    if !["gelu_pytorch_tanh", "gelu"].contains(&config.hidden_activation.as_str()) {
        return fail(format!(
            "unsupported hidden_activation {:?}: expected \"gelu_pytorch_tanh\" or \"gelu\"",
            config.hidden_activation
        ));
    }
    if let Some(why) = config.kinds.refusal(config.num_hidden_layers) {
        return fail(why);
    }
    if config.attn_logit_softcapping.is_some() {
        return fail("attn_logit_softcapping is not supported".into());
    }
    if config.attention_bias {
        return fail("attention_bias = true is not supported".into());
    }
    let (heads, kv) = (config.num_attention_heads, config.num_key_value_heads);
    if heads == 0 || kv == 0 || !heads.is_multiple_of(kv) {
        return fail(format!(
            "num_attention_heads {heads} is not a multiple of num_key_value_heads {kv}"
        ));
    }
    if config.head_dim == 0 || !config.head_dim.is_multiple_of(2) {
        return fail(format!(
            "head_dim {} must be even (rotary embedding rotates pairs)",
            config.head_dim
        ));
    }
    if config.sliding_window == 0 || config.query_pre_attn_scalar <= 0.0 {
        return fail("sliding_window and query_pre_attn_scalar must be positive".into());
    }
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gemma3(json: serde_json::Value) -> Gemma3Config {
        let base = serde_json::json!({"vocab_size": 10, "hidden_size": 8, "num_hidden_layers": 6,
            "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 4, "intermediate_size": 16,
            "max_position_embeddings": 40, "sliding_window": 512});
        let mut merged = base.as_object().expect("object").clone();
        merged.extend(json.as_object().expect("object").clone());
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("config.json");
        std::fs::write(&path, serde_json::Value::Object(merged).to_string()).expect("write");
        read_gemma3(&path).expect("a Gemma 3 config")
    }

    /// Gemma 3's pattern (the sixth layer global) and rotary bases of transformers 4's keys, and EmbeddingGemma's
    /// bidirectional window: 512 in the file, 256 either side; causal, the 511 before.
    #[test]
    fn gemma3_layers_windows_and_thetas() {
        use serde_json::json;
        let c = gemma3(
            json!({"use_bidirectional_attention": true, "rope_theta": 5e5,
            "rope_local_base_freq": 2e3}),
        );
        let windows: Vec<_> = (0..6).map(|i| c.attention(i).window).collect();
        assert_eq!(
            windows,
            [Some(256), Some(256), Some(256), Some(256), Some(256), None]
        );
        assert!(!c.attention(0).causal);
        assert_eq!(
            (c.rope(true), c.rope(false)),
            (&Rope::plain(5e5), &Rope::plain(2e3))
        );
        let causal = gemma3(
            json!({"layer_types": ["full_attention", "sliding_attention",
            "sliding_attention", "sliding_attention", "sliding_attention", "full_attention"]}),
        );
        assert_eq!(causal.attention(1).window, Some(511));
        assert_eq!(causal.attention(0).window, None);
        assert!(causal.attention(1).causal);
        assert_eq!(
            (causal.rope(true), causal.rope(false)),
            (&Rope::plain(1e6), &Rope::plain(1e4))
        );
        // transformers' is_causal: false widens the sliding layers' mask to |i − j| ≤ what it holds.
        let open = gemma3(json!({"is_causal": false}));
        assert_eq!(
            (open.attention(0).window, open.attention(0).causal),
            (Some(512), false)
        );
        let both = gemma3(json!({"is_causal": false, "use_bidirectional_attention": true}));
        assert_eq!(
            (both.attention(0).window, both.attention(5).window),
            (Some(257), None)
        );
    }

    /// Gemma 3 4B's transformers 4 keys scale the global layers only (transformers' Gemma3TextConfig merges
    /// `rope_scaling` into `full_attention`'s parameters); transformers 5's nested keys say it per kind.
    #[test]
    fn gemma3_rope_scaling_is_the_global_layers() {
        use super::super::RopeScaling;
        use serde_json::json;
        let old = gemma3(json!({"rope_scaling": {"rope_type": "linear", "factor": 8.0}}));
        assert_eq!(old.rope(true).scaling, RopeScaling::Linear { factor: 8.0 });
        assert_eq!(old.rope(false), &Rope::plain(1e4));
        let new = gemma3(json!({"rope_parameters": {
            "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
            "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}}));
        assert_eq!(
            (new.rope(true), new.rope(false)),
            (old.rope(true), old.rope(false))
        );
    }
}
