//! Nomic BERT's `config.json` (nomic-embed-text-v1 and v1.5), in either generation's keys: contrastors' (the
//! checkpoints' own code: `n_embd`, `n_head`, `rotary_emb_base`, `activation_function: swiglu`, …) and
//! transformers 5's `NomicBertConfig` (`hidden_size`, `rope_parameters`, `hidden_act`); files on the Hub carry
//! both.

use std::path::Path;

use serde::Deserialize;

use super::{check_dims, read_json, RopeParameters};
use crate::backend::ops::{AttentionShape, Glu};
use crate::error::{Error, Result};

/// What a Nomic BERT file says, each size under either generation's name.
#[derive(Clone, Debug, Deserialize, PartialEq)]
struct NomicBertFile {
    vocab_size: usize,
    hidden_size: Option<usize>,
    n_embd: Option<usize>,
    num_attention_heads: Option<usize>,
    n_head: Option<usize>,
    num_hidden_layers: Option<usize>,
    n_layer: Option<usize>,
    intermediate_size: Option<usize>,
    n_inner: Option<usize>,
    head_dim: Option<usize>,
    #[serde(default = "default_type_vocab")]
    type_vocab_size: usize,
    layer_norm_eps: Option<f64>,
    layer_norm_epsilon: Option<f64>,
    max_position_embeddings: Option<usize>,
    /// contrastors' longest sequence (8,192 for v1.5, trained to 2,048: `max_trained_positions`).
    n_positions: Option<usize>,
    rope_parameters: Option<RopeParameters>,
    rope_theta: Option<f64>,
    rotary_emb_base: Option<f64>,
    #[serde(default)]
    rope_scaling: Option<serde_json::Value>,
    /// contrastors' MLP: `swiglu` or `geglu` gated; transformers' is always gated, by `hidden_act`.
    activation_function: Option<String>,
    hidden_act: Option<String>,
    #[serde(default)]
    qkv_proj_bias: bool,
    #[serde(default)]
    mlp_fc1_bias: bool,
    #[serde(default)]
    mlp_fc2_bias: bool,
    // contrastors' switches for what these checkpoints do not do; refused when set.
    #[serde(default)]
    prenorm: bool,
    #[serde(default)]
    parallel_block: bool,
    #[serde(default)]
    causal: bool,
    #[serde(default)]
    use_rms_norm: bool,
    rotary_emb_fraction: Option<f64>,
    #[serde(default)]
    rotary_emb_interleaved: bool,
    rotary_emb_scale_base: Option<serde_json::Value>,
    rotary_scaling_factor: Option<serde_json::Value>,
    #[serde(default)]
    num_experts: usize,
}

fn default_type_vocab() -> usize {
    2
}

/// A Nomic BERT, read from either generation's keys: post-norm BERT layers with rotary positions (GPT-NeoX's
/// halves) on Q and K instead of position embeddings, a gated MLP, and biases only where contrastors' flags say.
#[derive(Clone, Debug, PartialEq)]
pub struct NomicBertConfig {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub num_attention_heads: usize,
    pub head_dim: usize,
    pub num_hidden_layers: usize,
    pub intermediate_size: usize,
    /// Token types (0: none); a single text is type 0.
    pub type_vocab_size: usize,
    pub layer_norm_eps: f64,
    pub max_positions: usize,
    pub rope_theta: f64,
    pub gate: Glu,
    /// Q/K/V and the output projection's biases (contrastors' `qkv_proj_bias`).
    pub attention_bias: bool,
    /// The up and gate projections' (`mlp_fc1_bias`) and the down projection's (`mlp_fc2_bias`).
    pub mlp_biases: (bool, bool),
}

impl NomicBertConfig {
    pub fn attention(&self) -> AttentionShape {
        AttentionShape {
            heads: self.num_attention_heads,
            kv_heads: self.num_attention_heads,
            head_dim: self.head_dim,
            causal: false,
            window: None,
        }
    }
}

/// transformers' `NomicBertConfig.default_theta` (contrastors' `rotary_emb_base` default).
const DEFAULT_ROPE_THETA: f64 = 1000.0;

pub(super) fn read_nomic_bert(path: &Path) -> Result<NomicBertConfig> {
    let f: NomicBertFile = read_json(path)?;
    let fail = |message: String| Error::model(path, message);
    // A size under either name; both given must agree.
    let either = |new: (&str, Option<usize>), old: (&str, Option<usize>)| match (new.1, old.1) {
        (Some(a), Some(b)) if a != b => {
            Err(fail(format!("{} {a} and {} {b} disagree", new.0, old.0)))
        }
        (Some(a), _) | (None, Some(a)) => Ok(a),
        (None, None) => Err(fail(format!("missing {} (or {})", new.0, old.0))),
    };
    let hidden_size = either(("hidden_size", f.hidden_size), ("n_embd", f.n_embd))?;
    let heads = either(
        ("num_attention_heads", f.num_attention_heads),
        ("n_head", f.n_head),
    )?;
    let layers = either(
        ("num_hidden_layers", f.num_hidden_layers),
        ("n_layer", f.n_layer),
    )?;
    let intermediate_size = either(
        ("intermediate_size", f.intermediate_size),
        ("n_inner", f.n_inner),
    )?;
    if heads == 0 {
        return Err(fail("num_attention_heads must be at least 1".into()));
    }
    let head_dim = f.head_dim.unwrap_or(hidden_size / heads);
    check_dims(
        path,
        &[
            ("vocab_size", Some(f.vocab_size)),
            ("hidden_size", Some(hidden_size)),
            ("intermediate_size", Some(intermediate_size)),
            ("type_vocab_size", Some(f.type_vocab_size)),
            ("num_hidden_layers", Some(layers)),
            ("heads × head_dim", heads.checked_mul(head_dim)),
        ],
    )?;
    if head_dim == 0 || !head_dim.is_multiple_of(2) {
        return Err(fail(format!(
            "head width {head_dim} must be even (rotary rotates pairs)"
        )));
    }
    let gate = match (f.activation_function.as_deref(), f.hidden_act.as_deref()) {
        (Some("swiglu"), None | Some("silu")) | (None, Some("silu") | None) => Glu::Silu,
        (Some("geglu"), None | Some("gelu")) | (None, Some("gelu")) => Glu::Gelu,
        (act, hidden) => {
            return Err(fail(format!(
                "unsupported activation (activation_function {act:?}, hidden_act {hidden:?}): expected \
                 swiglu (silu) or geglu (gelu), a gated MLP"
            )))
        }
    };
    let refused = [
        (f.prenorm, "prenorm (pre-norm layers)"),
        (f.parallel_block, "parallel_block"),
        (f.causal, "causal attention"),
        (f.use_rms_norm, "use_rms_norm"),
        (f.num_experts > 0, "num_experts (a mixture of experts)"),
        (
            f.rotary_emb_fraction.is_some_and(|r| r != 1.0),
            "rotary_emb_fraction other than 1 (rotary over part of a head)",
        ),
        (
            f.rotary_emb_interleaved,
            "rotary_emb_interleaved (GPT-J's pairs)",
        ),
        (
            f.rotary_emb_scale_base
                .as_ref()
                .is_some_and(|v| !v.is_null()),
            "rotary_emb_scale_base (xPos)",
        ),
        (
            f.rotary_scaling_factor
                .as_ref()
                .is_some_and(|v| !v.is_null()),
            "rotary_scaling_factor (dynamic NTK rotary scaling)",
        ),
        (
            f.rope_scaling.as_ref().is_some_and(|v| !v.is_null())
                || f.rope_parameters
                    .as_ref()
                    .is_some_and(|r| r.rope_type != "default"),
            "rotary scaling (rope_scaling, or a rope_type other than default)",
        ),
    ];
    if let Some((_, what)) = refused.iter().find(|(set, _)| *set) {
        return Err(fail(format!("unsupported Nomic BERT setting: {what}")));
    }
    Ok(NomicBertConfig {
        vocab_size: f.vocab_size,
        hidden_size,
        num_attention_heads: heads,
        head_dim,
        num_hidden_layers: layers,
        intermediate_size,
        type_vocab_size: f.type_vocab_size,
        layer_norm_eps: f.layer_norm_eps.or(f.layer_norm_epsilon).unwrap_or(1e-12),
        max_positions: f.n_positions.or(f.max_position_embeddings).unwrap_or(2048),
        rope_theta: f
            .rope_parameters
            .as_ref()
            .and_then(|r| r.rope_theta)
            .or(f.rope_theta)
            .or(f.rotary_emb_base)
            .unwrap_or(DEFAULT_ROPE_THETA),
        gate,
        attention_bias: f.qkv_proj_bias,
        mlp_biases: (f.mlp_fc1_bias, f.mlp_fc2_bias),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn read(value: serde_json::Value) -> Result<NomicBertConfig> {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("config.json");
        std::fs::write(&path, value.to_string()).expect("write");
        read_nomic_bert(&path)
    }

    /// nomic-embed-text-v1.5's file as the Hub serves it (both generations' keys), and transformers 5's alone.
    #[test]
    fn either_generation_of_nomic_bert_keys_reads_the_same_model() {
        let hub = read(json!({"model_type": "nomic_bert", "vocab_size": 30528, "n_embd": 768, "n_head": 12,
            "n_layer": 12, "n_inner": 3072, "n_positions": 8192, "max_position_embeddings": 2048,
            "activation_function": "swiglu", "hidden_act": "silu", "rotary_emb_base": 1000,
            "rotary_emb_fraction": 1.0, "rotary_emb_interleaved": false, "rotary_emb_scale_base": null,
            "rotary_scaling_factor": null, "layer_norm_epsilon": 1e-12, "prenorm": false, "causal": false,
            "qkv_proj_bias": false, "mlp_fc1_bias": false, "mlp_fc2_bias": false, "type_vocab_size": 2,
            "rope_parameters": {"rope_theta": 1000.0, "rope_type": "default"}}))
        .expect("the Hub's file");
        let native = read(
            json!({"model_type": "nomic_bert", "vocab_size": 30528, "hidden_size": 768,
            "num_attention_heads": 12, "num_hidden_layers": 12, "intermediate_size": 3072,
            "max_position_embeddings": 8192}),
        )
        .expect("transformers' file");
        assert_eq!(hub, native);
        assert_eq!(
            (hub.head_dim, hub.rope_theta, hub.gate, hub.max_positions),
            (64, 1000.0, Glu::Silu, 8192)
        );
    }

    #[test]
    fn nomic_bert_settings_it_cannot_run_are_refused() {
        let base = json!({"vocab_size": 10, "n_embd": 8, "n_head": 2, "n_layer": 1, "n_inner": 16});
        for (key, value, needle) in [
            ("prenorm", json!(true), "prenorm"),
            ("rotary_emb_fraction", json!(0.5), "rotary_emb_fraction"),
            ("rotary_emb_interleaved", json!(true), "interleaved"),
            ("rotary_scaling_factor", json!(2.0), "NTK"),
            ("activation_function", json!("gelu"), "gated"),
            ("num_experts", json!(8), "experts"),
            ("hidden_size", json!(16), "disagree"),
            ("rope_scaling", json!({"rope_type": "dynamic"}), "scaling"),
        ] {
            let mut config = base.clone();
            config[key] = value;
            let e = read(config).expect_err(key).to_string();
            assert!(e.contains(needle), "{key}: {e}");
        }
    }
}
