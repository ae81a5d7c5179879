//! Qwen3-style decoders' `config.json` (Qwen3-Embedding; pplx-embed's bidirectional variant).

use std::path::Path;

use serde::Deserialize;

use super::{read_json, RopeParameters};
use crate::backend::ops::AttentionShape;
use crate::error::{Error, Result};

/// The subset of a Hugging Face `config.json` that a Qwen3-style decoder used as an embedding model needs
/// (Qwen3-Embedding; pplx-embed's bidirectional variant).
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct Qwen3Config {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub num_key_value_heads: usize,
    /// Per-head width; `hidden_size / num_attention_heads` when absent.
    pub head_dim: Option<usize>,
    pub intermediate_size: usize,
    pub max_position_embeddings: usize,
    #[serde(default = "default_rms_eps")]
    pub rms_norm_eps: f64,
    /// Rotary base frequency: top-level in older configs, under `rope_parameters` in newer ones.
    rope_theta: Option<f64>,
    #[serde(default)]
    rope_parameters: Option<RopeParameters>,
    #[serde(default)]
    pub attention_bias: bool,
    #[serde(default = "default_silu")]
    pub hidden_act: String,
    /// Attention mask convention, an extension of this project: `true` (the default, as Qwen3-Embedding) lets a
    /// token see only the tokens before it; `false` makes attention bidirectional, as pplx-embed's Qwen3 backbone.
    #[serde(default = "default_causal")]
    pub is_causal: bool,
}

fn default_rms_eps() -> f64 {
    1e-6
}
/// Qwen3's default rotary base.
const DEFAULT_ROPE_THETA: f64 = 1_000_000.0;

fn default_silu() -> String {
    "silu".into()
}
fn default_causal() -> bool {
    true
}

impl Qwen3Config {
    pub fn rope_theta(&self) -> f64 {
        self.rope_parameters
            .as_ref()
            .and_then(|r| r.rope_theta)
            .or(self.rope_theta)
            .unwrap_or(DEFAULT_ROPE_THETA)
    }

    pub fn head_dim(&self) -> usize {
        self.head_dim
            .unwrap_or(self.hidden_size / self.num_attention_heads.max(1))
    }

    /// Every layer's attention: grouped-query, causal unless the config says otherwise.
    pub fn attention(&self) -> AttentionShape {
        AttentionShape {
            heads: self.num_attention_heads,
            kv_heads: self.num_key_value_heads,
            head_dim: self.head_dim(),
            causal: self.is_causal,
            window: None,
        }
    }
}

pub(super) fn read_qwen3(config_path: &Path) -> Result<Qwen3Config> {
    let config: Qwen3Config = read_json(config_path)?;
    let fail = |message: String| Err(Error::model(config_path, message));
    if config.hidden_act != "silu" {
        return fail(format!(
            "unsupported hidden_act {:?}: expected \"silu\"",
            config.hidden_act
        ));
    }
    if let Some(r) = config
        .rope_parameters
        .as_ref()
        .filter(|r| r.rope_type != "default")
    {
        return fail(format!(
            "unsupported rope_type {:?}: expected \"default\" (no rotary scaling)",
            r.rope_type
        ));
    }
    if config.attention_bias {
        return fail(
            "attention_bias = true is not supported (Qwen3 has no attention biases)".into(),
        );
    }
    let (heads, kv) = (config.num_attention_heads, config.num_key_value_heads);
    if heads == 0 || kv == 0 || !heads.is_multiple_of(kv) {
        return fail(format!(
            "num_attention_heads {heads} is not a multiple of num_key_value_heads {kv}"
        ));
    }
    if config.head_dim() == 0 || !config.head_dim().is_multiple_of(2) {
        return fail(format!(
            "head_dim {} must be even (rotary embedding rotates pairs)",
            config.head_dim()
        ));
    }
    Ok(config)
}
