//! The `config.json` of BERT's post-norm encoders with rotary positions, three families:
//! - Nomic BERT (nomic-embed-text-v1, v1.5), in either generation's keys: contrastors' (the checkpoints' own code:
//!   `n_embd`, `n_head`, `rotary_emb_base`, `activation_function: swiglu`, …) and transformers 5's
//!   `NomicBertConfig` (`hidden_size`, `rope_parameters`, `hidden_act`); files on the Hub carry both;
//! - GTE (gte-base-en-v1.5, gte-large-en-v1.5, gte-multilingual-base): Alibaba's
//!   `NewModel` (`model_type: new`, its fixed NTK rotary scaling `rope_scaling: {type: ntk}`) and transformers 5's
//!   `GteConfig`;
//! - Jina v3 (jina-embeddings-v3, as transformers 5's `JinaEmbeddingsV3Config` describes `jinaai/jina-embeddings-v3-hf`):
//!   XLM-RoBERTa's sizes with rotary positions and BERT's plain GELU MLP.

use std::path::Path;

use serde::Deserialize;

use super::{check_dims, read_json, rope::scaling_or_parameters, Rope, RopeScaling};
use crate::backend::ops::{Activation, AttentionShape, Glu};
use crate::error::{Error, Result};

/// Which of the three models a file describes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RotaryBertFamily {
    Nomic,
    Gte,
    JinaV3,
}

impl RotaryBertFamily {
    /// Each family's `model_type`s and architecture names.
    pub(super) const NAMES: [(RotaryBertFamily, &'static [&'static str]); 3] = [
        (
            RotaryBertFamily::Nomic,
            &["nomic_bert", "NomicBertModel", "NomicBertForPreTraining"],
        ),
        (
            RotaryBertFamily::Gte,
            &["gte", "new", "GteModel", "NewModel", "NewForMaskedLM"],
        ),
        (
            RotaryBertFamily::JinaV3,
            &[
                "jina_embeddings_v3",
                "JinaEmbeddingsV3Model",
                "JinaEmbeddingsV3ForMaskedLM",
            ],
        ),
    ];

    /// transformers' defaults for what a file leaves out (each family's config class).
    fn defaults(self) -> Defaults {
        let (theta, token_types, longest, layer_norm_eps, act) = match self {
            RotaryBertFamily::Nomic => (1000.0, 2, 2048, 1e-12, "silu"),
            RotaryBertFamily::Gte => (160_000.0, 1, 8192, 1e-12, "gelu"),
            RotaryBertFamily::JinaV3 => (20_000.0, 1, 8194, 1e-5, "gelu"),
        };
        Defaults {
            theta,
            token_types,
            longest,
            layer_norm_eps,
            act,
        }
    }
}

/// A family's defaults: the rotary base (transformers' `default_theta`; Nomic's is contrastors'
/// `rotary_emb_base` default), token types, the longest sequence, the LayerNorm epsilon and the MLP's activation.
struct Defaults {
    theta: f64,
    token_types: usize,
    longest: usize,
    layer_norm_eps: f64,
    act: &'static str,
}

/// The MLP between a layer's attention and its output norm.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RotaryBertMlp {
    /// `down(act(gate(x)) · up(x))`: Nomic's SwiGLU, GTE's GeGLU.
    Gated(Glu),
    /// BERT's `fc2(act(fc1(x)))`: Jina v3's.
    Plain(Activation),
}

/// What a file says, each size under either generation's name (Nomic's contrastors keys).
#[derive(Clone, Debug, Deserialize, PartialEq)]
struct RotaryBertFile {
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
    type_vocab_size: Option<usize>,
    layer_norm_eps: Option<f64>,
    layer_norm_epsilon: Option<f64>,
    max_position_embeddings: Option<usize>,
    /// contrastors' longest sequence (8,192 for v1.5, trained to 2,048: `max_trained_positions`).
    n_positions: Option<usize>,
    max_trained_positions: Option<usize>,
    rope_parameters: Option<serde_json::Value>,
    rope_theta: Option<f64>,
    rotary_emb_base: Option<f64>,
    #[serde(default)]
    rope_scaling: Option<serde_json::Value>,
    /// contrastors' MLP: `swiglu` or `geglu` gated; transformers' Nomic and GTE MLPs are always gated, by
    /// `hidden_act`, Jina's never.
    activation_function: Option<String>,
    hidden_act: Option<String>,
    /// contrastors' bias switches (its defaults: true; transformers' NomicBertModel has none).
    qkv_proj_bias: Option<bool>,
    mlp_fc1_bias: Option<bool>,
    mlp_fc2_bias: Option<bool>,
    // Switches for what these checkpoints do not do (contrastors', then Alibaba's); refused when set.
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
    /// contrastors' rotary along the head axis (an xformers workaround), and a LayerNorm before `fc2`.
    #[serde(default)]
    rotary_head_dim: bool,
    #[serde(default)]
    norm_mlp: bool,
    /// contrastors' dynamic NTK scaling (nomic-embed-text-v1's 2): past `max_trained_positions` tokens the rotary
    /// base grows with the sequence's length; up to it, rotary is plain. `null` (`Some(None)`) is none; absent,
    /// contrastors' default (1) in a file of its keys alone.
    #[serde(default, deserialize_with = "super::present")]
    rotary_scaling_factor: Option<Option<f64>>,
    #[serde(default)]
    num_experts: usize,
    layer_norm_type: Option<String>,
    position_embedding_type: Option<String>,
    #[serde(default)]
    logn_attention_scale: bool,
    pack_qkv: Option<bool>,
}

/// A post-norm rotary BERT: BERT's layers (attention and MLP each added to their input, then LayerNorm) with rotary
/// positions (GPT-NeoX's halves) on Q and K instead of position embeddings, each family's MLP and biases.
#[derive(Clone, Debug, PartialEq)]
pub struct RotaryBertConfig {
    pub family: RotaryBertFamily,
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
    /// Plain, or linearly scaled (transformers' `linear` rope type; GTE's fixed NTK scaling is one).
    pub rope: Rope,
    pub mlp: RotaryBertMlp,
    /// Q/K/V and the output projection's biases (Nomic: contrastors' `qkv_proj_bias`; GTE and Jina: always).
    pub attention_bias: bool,
    /// The MLP's input projections' (up and gate, or fc1) and its output projection's (Nomic: `mlp_fc1_bias`,
    /// `mlp_fc2_bias`; GTE: the down projection's; Jina: both).
    pub mlp_biases: (bool, bool),
}

impl RotaryBertConfig {
    pub fn attention(&self) -> AttentionShape {
        AttentionShape::new(
            self.num_attention_heads,
            self.num_attention_heads,
            self.head_dim,
        )
    }
}

impl RotaryBertFile {
    /// The file as the family's transformers config class and its checkpoints' own code read it: contrastors'
    /// keys mean something to Nomic alone, Alibaba's to GTE alone (jina-embeddings-v3's original config, for
    /// one, carries `rotary_emb_base` and `position_embedding_type: rotary`, which JinaEmbeddingsV3Config ignores).
    fn read_by(self, family: RotaryBertFamily) -> Self {
        let f = if family == RotaryBertFamily::Nomic {
            self
        } else {
            RotaryBertFile {
                n_embd: None,
                n_head: None,
                n_layer: None,
                n_inner: None,
                layer_norm_epsilon: None,
                n_positions: None,
                max_trained_positions: None,
                rotary_emb_base: None,
                activation_function: None,
                qkv_proj_bias: None,
                mlp_fc1_bias: None,
                mlp_fc2_bias: None,
                prenorm: false,
                parallel_block: false,
                causal: false,
                use_rms_norm: false,
                rotary_emb_fraction: None,
                rotary_emb_interleaved: false,
                rotary_emb_scale_base: None,
                rotary_head_dim: false,
                norm_mlp: false,
                rotary_scaling_factor: None,
                num_experts: 0,
                ..self
            }
        };
        if family == RotaryBertFamily::Gte {
            f
        } else {
            RotaryBertFile {
                layer_norm_type: None,
                position_embedding_type: None,
                logn_attention_scale: false,
                pack_qkv: None,
                ..f
            }
        }
    }
}

pub(super) fn read_rotary_bert(path: &Path, family: RotaryBertFamily) -> Result<RotaryBertConfig> {
    let f = read_json::<RotaryBertFile>(path)?.read_by(family);
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
    let defaults = family.defaults();
    let type_vocab_size = f.type_vocab_size.unwrap_or(defaults.token_types);
    check_dims(
        path,
        &[
            ("vocab_size", Some(f.vocab_size)),
            ("hidden_size", Some(hidden_size)),
            ("intermediate_size", Some(intermediate_size)),
            ("type_vocab_size", Some(type_vocab_size)),
            ("num_hidden_layers", Some(layers)),
            ("heads × head_dim", heads.checked_mul(head_dim)),
        ],
    )?;
    if head_dim == 0 || !head_dim.is_multiple_of(2) {
        return Err(fail(format!(
            "head width {head_dim} must be even (rotary rotates pairs)"
        )));
    }
    // contrastors' `activation_function` names the gated MLP; transformers' `hidden_act` its activation, which
    // must agree where both are given. Jina's MLP is BERT's.
    let by_act = |act: &str| match (family, act) {
        (RotaryBertFamily::JinaV3, "gelu") => Some(RotaryBertMlp::Plain(Activation::Gelu)),
        (RotaryBertFamily::JinaV3, "relu") => Some(RotaryBertMlp::Plain(Activation::Relu)),
        (RotaryBertFamily::JinaV3, _) => None,
        (_, "silu") => Some(RotaryBertMlp::Gated(Glu::Silu)),
        (_, "gelu") => Some(RotaryBertMlp::Gated(Glu::Gelu)),
        _ => None,
    };
    let mlp = match (f.activation_function.as_deref(), f.hidden_act.as_deref()) {
        (Some("swiglu"), None | Some("silu")) if family != RotaryBertFamily::JinaV3 => {
            Some(RotaryBertMlp::Gated(Glu::Silu))
        }
        (Some("geglu"), None | Some("gelu")) if family != RotaryBertFamily::JinaV3 => {
            Some(RotaryBertMlp::Gated(Glu::Gelu))
        }
        (None, act) => by_act(act.unwrap_or(defaults.act)),
        _ => None,
    }
    .ok_or_else(|| {
        fail(format!(
            "unsupported {family:?} activation (activation_function {:?}, hidden_act {:?}): expected a gated MLP, \
             swiglu (silu) or geglu (the exact gelu), for Nomic and GTE; gelu or relu for Jina v3",
            f.activation_function, f.hidden_act
        ))
    })?;
    let rope = rope(&f, family, head_dim).map_err(fail)?;
    // A file in contrastors' keys alone (no transformers generation beside them) takes contrastors' defaults for
    // what it leaves out; transformers' NomicBertConfig has no biases and plain rotary.
    let contrastors_only = f.n_embd.is_some() && f.hidden_size.is_none();
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
        (f.rotary_head_dim, "rotary_head_dim"),
        (f.norm_mlp, "norm_mlp (a LayerNorm inside the MLP)"),
        (
            contrastors_only && f.rotary_emb_fraction.is_none(),
            "no rotary_emb_fraction (contrastors' default 0: learned positions)",
        ),
        (
            f.layer_norm_type
                .as_deref()
                .is_some_and(|t| t != "layer_norm"),
            "layer_norm_type other than layer_norm",
        ),
        (
            f.position_embedding_type
                .as_deref()
                .is_some_and(|t| t != "rope"),
            "position_embedding_type other than rope",
        ),
        (f.logn_attention_scale, "logn_attention_scale"),
        (f.pack_qkv == Some(false), "pack_qkv false"),
    ];
    if let Some((_, what)) = refused.iter().find(|(set, _)| *set) {
        return Err(fail(format!("unsupported {family:?} setting: {what}")));
    }
    let longest = f
        .n_positions
        .or(f.max_position_embeddings)
        .unwrap_or(defaults.longest);
    // Dynamic NTK scaling changes rotary only for sequences longer than the trained length, each by its own
    // length: the engine's one rotary table serves sequences up to that length exactly, and truncates there.
    // (contrastors' default factor is 1, scaling too).
    let max_positions = match (f.rotary_scaling_factor, contrastors_only) {
        (Some(Some(_)), _) | (None, true) => longest.min(f.max_trained_positions.unwrap_or(2048)),
        (Some(None), _) | (None, false) => longest,
    };
    let bias = |b: Option<bool>| b.unwrap_or(contrastors_only);
    let (attention_bias, mlp_biases) = match family {
        RotaryBertFamily::Nomic => (
            bias(f.qkv_proj_bias),
            (bias(f.mlp_fc1_bias), bias(f.mlp_fc2_bias)),
        ),
        RotaryBertFamily::Gte => (true, (false, true)),
        RotaryBertFamily::JinaV3 => (true, (true, true)),
    };
    Ok(RotaryBertConfig {
        family,
        vocab_size: f.vocab_size,
        hidden_size,
        num_attention_heads: heads,
        head_dim,
        num_hidden_layers: layers,
        intermediate_size,
        type_vocab_size,
        layer_norm_eps: f
            .layer_norm_eps
            .or(f.layer_norm_epsilon)
            .unwrap_or(defaults.layer_norm_eps),
        max_positions,
        rope,
        mlp,
        attention_bias,
        mlp_biases,
    })
}

/// The rotary positions: `rope_parameters` (transformers 5) or the older keys, plain or transformers' `linear`;
/// GTE's `rope_scaling: {type: ntk, factor: s}` is Alibaba's fixed NTK scaling (vLLM's
/// `NTKScalingRotaryEmbedding`), frequencies `(θ s)^(-2i/d) · s^(-2/d)`: a base of `θ s`, linearly scaled by
/// `s^(2/d)`. Other scalings are refused (none of these families' checkpoints uses one).
fn rope(
    f: &RotaryBertFile,
    family: RotaryBertFamily,
    head_dim: usize,
) -> std::result::Result<Rope, String> {
    let theta = f
        .rope_theta
        .or(f.rotary_emb_base)
        .unwrap_or(family.defaults().theta);
    let scaling = f.rope_scaling.as_ref().filter(|v| !v.is_null());
    let kind = scaling.and_then(|v| v.get("type").or(v.get("rope_type")));
    // Alibaba's `mixed_b` is another (mixed) NTK scaling, not this one.
    if family == RotaryBertFamily::Gte
        && kind.and_then(serde_json::Value::as_str) == Some("ntk")
        && scaling.is_some_and(|v| v.get("mixed_b").is_none_or(serde_json::Value::is_null))
    {
        let plain = Rope::read(&[f.rope_parameters.as_ref()], theta, 0)?;
        let s = scaling
            .and_then(|v| v.get("factor"))
            .and_then(serde_json::Value::as_f64)
            .filter(|s| *s > 0.0 && s.is_finite())
            .ok_or_else(|| format!("ntk rotary scaling without a positive factor: {scaling:?}"))?;
        if plain.scaling != RopeScaling::None {
            return Err(format!(
                "ntk rotary scaling over another one: {:?}",
                plain.scaling
            ));
        }
        return Ok(Rope {
            theta: plain.theta * s,
            scaling: RopeScaling::Linear {
                factor: s.powf(2.0 / head_dim as f64),
            },
        });
    }
    let rope = Rope::read(
        &[scaling_or_parameters(scaling, f.rope_parameters.as_ref())],
        theta,
        family.defaults().longest,
    )?;
    match rope.scaling {
        RopeScaling::None | RopeScaling::Linear { .. } => Ok(rope),
        _ => Err(format!(
            "unsupported rotary scaling (rope_parameters {:?}, rope_scaling {scaling:?}): expected none, \
             transformers' linear, or GTE's ntk",
            f.rope_parameters
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn read(value: serde_json::Value, family: RotaryBertFamily) -> Result<RotaryBertConfig> {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("config.json");
        std::fs::write(&path, value.to_string()).expect("write");
        read_rotary_bert(&path, family)
    }

    /// nomic-embed-text-v1.5's file as the Hub serves it (both generations' keys), and transformers 5's alone.
    #[test]
    fn either_generation_of_nomic_bert_keys_reads_the_same_model() {
        let nomic = RotaryBertFamily::Nomic;
        let hub = read(json!({"model_type": "nomic_bert", "vocab_size": 30528, "n_embd": 768, "n_head": 12,
            "n_layer": 12, "n_inner": 3072, "n_positions": 8192, "max_position_embeddings": 2048,
            "activation_function": "swiglu", "hidden_act": "silu", "rotary_emb_base": 1000,
            "rotary_emb_fraction": 1.0, "rotary_emb_interleaved": false, "rotary_emb_scale_base": null,
            "rotary_scaling_factor": null, "layer_norm_epsilon": 1e-12, "prenorm": false, "causal": false,
            "qkv_proj_bias": false, "mlp_fc1_bias": false, "mlp_fc2_bias": false, "type_vocab_size": 2,
            "rope_parameters": {"rope_theta": 1000.0, "rope_type": "default"}}), nomic)
        .expect("the Hub's file");
        let native = read(
            json!({"model_type": "nomic_bert", "vocab_size": 30528, "hidden_size": 768,
            "num_attention_heads": 12, "num_hidden_layers": 12, "intermediate_size": 3072,
            "max_position_embeddings": 8192, "type_vocab_size": 2}),
            nomic,
        )
        .expect("transformers' file");
        assert_eq!(hub, native);
        assert_eq!(
            (hub.head_dim, hub.rope.theta, hub.mlp, hub.max_positions),
            (64, 1000.0, RotaryBertMlp::Gated(Glu::Silu), 8192)
        );
    }

    /// nomic-embed-text-v1's dynamic NTK scaling leaves rotary plain up to the trained length, which bounds what
    /// the engine runs.
    #[test]
    fn nomic_dynamic_ntk_scaling_bounds_the_length_at_the_trained_one() {
        let c = read(
            json!({"vocab_size": 10, "n_embd": 8, "n_head": 2, "n_layer": 1, "n_inner": 16,
            "rotary_emb_fraction": 1.0, "n_positions": 8192, "max_trained_positions": 2048,
            "rotary_scaling_factor": 2}),
            RotaryBertFamily::Nomic,
        )
        .expect("v1's scaling");
        assert_eq!((c.max_positions, &c.rope), (2048, &Rope::plain(1000.0)));
    }

    /// gte-base-en-v1.5's file (Alibaba's NewModel: fixed NTK scaling, no token types): the biases and GeGLU of
    /// GTE, and the scaling as a base and a position scale.
    #[test]
    fn gte_reads_its_biases_gelu_gate_and_ntk_scaling() {
        let c = read(json!({"model_type": "new", "architectures": ["NewModel"], "vocab_size": 30528,
            "hidden_size": 768, "num_attention_heads": 12, "num_hidden_layers": 12, "intermediate_size": 3072,
            "hidden_act": "gelu", "max_position_embeddings": 8192, "type_vocab_size": 0, "rope_theta": 500000,
            "rope_scaling": {"type": "ntk", "factor": 2.0}, "layer_norm_type": "layer_norm",
            "position_embedding_type": "rope", "logn_attention_scale": false, "pack_qkv": true}),
            RotaryBertFamily::Gte)
        .expect("gte-base-en-v1.5's file");
        assert_eq!(
            (c.mlp, c.attention_bias, c.mlp_biases, c.type_vocab_size),
            (RotaryBertMlp::Gated(Glu::Gelu), true, (false, true), 0)
        );
        assert_eq!(c.rope.theta, 1e6);
        let RopeScaling::Linear { factor } = c.rope.scaling else {
            panic!("linear: {:?}", c.rope.scaling);
        };
        assert!((factor - 2f64.powf(2.0 / 64.0)).abs() < 1e-15);
        // Alibaba's mixed NTK scaling is another one: refused, not read as the fixed one.
        let mixed = json!({"model_type": "new", "vocab_size": 10, "hidden_size": 8, "num_attention_heads": 2,
            "num_hidden_layers": 1, "intermediate_size": 16,
            "rope_scaling": {"type": "ntk", "factor": 2.0, "mixed_b": 0.5}});
        let e = read(mixed, RotaryBertFamily::Gte).expect_err("mixed_b");
        assert!(e.to_string().contains("rotary scaling"), "{e}");
    }

    /// jina-embeddings-v3-hf's file (transformers' JinaEmbeddingsV3Config, the original's `rotary_emb_base` beside
    /// it) and one leaving everything out read the sizes, biases and plain GELU MLP of Jina v3 and its defaults;
    /// a gated activation is refused.
    #[test]
    fn jina_v3_reads_its_plain_mlp_biases_and_defaults() {
        let jina = RotaryBertFamily::JinaV3;
        let hub = read(json!({"model_type": "jina_embeddings_v3", "architectures": ["JinaEmbeddingsV3Model"],
            "vocab_size": 250002, "hidden_size": 1024, "num_attention_heads": 16, "num_hidden_layers": 24,
            "intermediate_size": 4096, "hidden_act": "gelu", "max_position_embeddings": 8194, "type_vocab_size": 1,
            "layer_norm_eps": 1e-5, "rotary_emb_base": 20000.0,
            "rope_parameters": {"rope_theta": 20000.0, "rope_type": "default"}}), jina)
        .expect("the Hub's file");
        let bare = read(
            json!({"vocab_size": 250002, "hidden_size": 1024, "num_attention_heads": 16,
            "num_hidden_layers": 24, "intermediate_size": 4096}),
            jina,
        )
        .expect("defaults");
        assert_eq!(hub, bare);
        assert_eq!(
            (hub.mlp, hub.attention_bias, hub.mlp_biases, hub.head_dim),
            (
                RotaryBertMlp::Plain(Activation::Gelu),
                true,
                (true, true),
                64
            )
        );
        assert_eq!(
            (
                hub.rope.theta,
                hub.max_positions,
                hub.layer_norm_eps,
                hub.type_vocab_size
            ),
            (20000.0, 8194, 1e-5, 1)
        );
        let small = json!({"vocab_size": 10, "hidden_size": 8, "num_attention_heads": 2,
            "num_hidden_layers": 1, "intermediate_size": 16});
        let with_act = |act: &str| {
            let mut config = small.clone();
            config["hidden_act"] = json!(act);
            read(config, jina)
        };
        assert_eq!(
            with_act("relu").expect("relu").mlp,
            RotaryBertMlp::Plain(Activation::Relu)
        );
        // The tanh GELUs are not the exact one, nor is a gated MLP Jina's.
        for act in ["silu", "gelu_new", "gelu_pytorch_tanh"] {
            let e = with_act(act).expect_err(act).to_string();
            assert!(e.contains("unsupported JinaV3 activation"), "{act}: {e}");
        }
        // What JinaEmbeddingsV3Config does not read (contrastors' and Alibaba's keys, as jina-embeddings-v3's own
        // config has some) changes nothing.
        let mut foreign = small.clone();
        for (key, value) in [
            ("rotary_emb_base", json!(10_000.0)),
            ("activation_function", json!("swiglu")),
            ("rotary_scaling_factor", json!(2)),
            ("position_embedding_type", json!("rotary")),
            ("layer_norm_epsilon", json!(1e-12)),
        ] {
            foreign[key] = value;
        }
        assert_eq!(
            read(foreign, jina).expect("keys it does not read"),
            read(small, jina).expect("the file without them")
        );
    }

    /// A file in contrastors' keys alone takes contrastors' defaults for what it leaves out: biases on, and its
    /// dynamic NTK scaling (factor 1) bounding the length at the trained one.
    #[test]
    fn a_contrastors_only_file_takes_contrastors_defaults() {
        let c = read(
            json!({"vocab_size": 10, "n_embd": 8, "n_head": 2, "n_layer": 1, "n_inner": 16,
            "rotary_emb_fraction": 1.0, "n_positions": 8192}),
            RotaryBertFamily::Nomic,
        )
        .expect("contrastors' keys");
        assert_eq!(
            (c.attention_bias, c.mlp_biases, c.max_positions),
            (true, (true, true), 2048)
        );
    }

    /// Contrastors' switches in a Nomic file, Alibaba's in a GTE (NewModel) one.
    #[test]
    fn rotary_bert_settings_it_cannot_run_are_refused() {
        let (nomic, gte) = (RotaryBertFamily::Nomic, RotaryBertFamily::Gte);
        for (family, key, value, needle) in [
            (nomic, "prenorm", json!(true), "prenorm"),
            (
                nomic,
                "rotary_emb_fraction",
                json!(null),
                "learned positions",
            ),
            (
                nomic,
                "rotary_emb_fraction",
                json!(0.5),
                "rotary_emb_fraction",
            ),
            (nomic, "rotary_emb_interleaved", json!(true), "interleaved"),
            (nomic, "activation_function", json!("gelu"), "gated"),
            (nomic, "num_experts", json!(8), "experts"),
            (nomic, "hidden_size", json!(16), "disagree"),
            (
                nomic,
                "rope_scaling",
                json!({"rope_type": "dynamic"}),
                "scaling",
            ),
            (
                nomic,
                "rope_scaling",
                json!({"type": "ntk", "factor": 2}),
                "scaling",
            ),
            (nomic, "rotary_emb_base", json!(0), "positive"),
            (nomic, "norm_mlp", json!(true), "norm_mlp"),
            (nomic, "rotary_head_dim", json!(true), "rotary_head_dim"),
            (gte, "layer_norm_type", json!("rms_norm"), "layer_norm_type"),
            (gte, "logn_attention_scale", json!(true), "logn"),
            (gte, "position_embedding_type", json!("absolute"), "rope"),
            (gte, "pack_qkv", json!(false), "pack_qkv"),
        ] {
            let mut config = if family == nomic {
                json!({"vocab_size": 10, "n_embd": 8, "n_head": 2, "n_layer": 1, "n_inner": 16,
                    "rotary_emb_fraction": 1.0})
            } else {
                json!({"vocab_size": 10, "hidden_size": 8, "num_attention_heads": 2, "num_hidden_layers": 1,
                    "intermediate_size": 16})
            };
            config[key] = value;
            let e = read(config, family).expect_err(key).to_string();
            assert!(e.contains(needle), "{key}: {e}");
        }
    }
}
