//! The `config.json` of the Llama family of decoders used as embedding models: Llama (LLM2Vec's, NV-Retriever's
//! backbones), Mistral (e5-mistral, SFR-Embedding, Linq-Embed), Qwen2 (gte-Qwen2, stella_en_1.5B) and Qwen3
//! (Qwen3-Embedding; pplx-embed's bidirectional variant), and EuroBERT (Llama's network as a bidirectional
//! encoder). They share one layer and differ in what the family fixes: biases, per-head q/k norms, which layers
//! attend within a sliding window, whether attention is causal.

use std::path::Path;

use serde::Deserialize;

use super::{check_dims, read_json, rope::scaling_or_parameters, Rope};
use crate::backend::ops::AttentionShape;
use crate::error::{Error, Result};

/// Which of transformers' models a decoder's config describes; each fixes what its file does not say.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DecoderFamily {
    /// `LlamaModel`: every projection's bias from `attention_bias`, the MLP's from `mlp_bias`; no window.
    Llama,
    /// `MistralModel`: no biases; every layer within `sliding_window` unless it is null.
    Mistral,
    /// `Qwen2Model`: Q, K and V with biases; sliding-window layers from `layer_types` or `use_sliding_window`.
    Qwen2,
    /// `Qwen3Model`: Qwen2's windows, biases from `attention_bias`, an RMSNorm per head on Q and K.
    #[default]
    Qwen3,
    /// `EuroBertModel`: Llama's layers with bidirectional attention whatever the file says, an RMSNorm epsilon
    /// of 1e-5 where it says none.
    EuroBert,
}

impl DecoderFamily {
    /// Each family's `model_type` and architecture names.
    pub(super) const NAMES: [(DecoderFamily, &'static [&'static str]); 5] = [
        (
            DecoderFamily::Llama,
            &["llama", "LlamaModel", "LlamaForCausalLM"],
        ),
        (
            DecoderFamily::Mistral,
            &["mistral", "MistralModel", "MistralForCausalLM"],
        ),
        (
            DecoderFamily::Qwen2,
            &["qwen2", "Qwen2Model", "Qwen2ForCausalLM"],
        ),
        (
            DecoderFamily::Qwen3,
            &["qwen3", "Qwen3Model", "Qwen3ForCausalLM"],
        ),
        (
            DecoderFamily::EuroBert,
            &["eurobert", "EuroBertModel", "EuroBertForMaskedLM"],
        ),
    ];
}

/// The subset of a Hugging Face `config.json` that a Llama-family decoder used as an embedding model needs. Read it
/// with [`ModelConfig::read`](super::ModelConfig::read), which makes its rotary positions (deserialised alone, they
/// are plain).
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct DecoderConfig {
    /// Set by [`ModelConfig::read`](super::ModelConfig::read) from the names in the file.
    #[serde(skip)]
    pub family: DecoderFamily,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    /// Grouped-query attention's K/V heads; absent, the family's default; null, one per query head.
    #[serde(default, deserialize_with = "super::present")]
    num_key_value_heads: Option<Option<usize>>,
    /// Per-head width; absent or null, the family's default ([`DecoderConfig::head_dim`]).
    head_dim: Option<usize>,
    pub intermediate_size: usize,
    pub max_position_embeddings: usize,
    /// Absent: the family's default ([`DecoderConfig::rms_norm_eps`]).
    rms_norm_eps: Option<f64>,
    /// Rotary base frequency: top-level in older configs, under `rope_parameters` in newer ones.
    rope_theta: Option<f64>,
    /// transformers 5's rotary parameters (base, scaling).
    #[serde(default)]
    rope_parameters: Option<serde_json::Value>,
    /// transformers 4's rotary scaling (Llama 3.1's `llama3`, Qwen's `yarn`, ...).
    #[serde(default)]
    rope_scaling: Option<serde_json::Value>,
    /// The pretraining length a scaling extends, at the top level (Phi-3's place): it wins over the one in the
    /// rotary parameters, as transformers' `standardize_rope_params` has it.
    original_max_position_embeddings: Option<f64>,
    /// Made from the four above by [`read_decoder`].
    #[serde(skip)]
    rope: Rope,
    /// Biases on the attention projections (Llama, Qwen3: all four; Qwen2 has Q/K/V biases whatever it says).
    #[serde(default)]
    attention_bias: bool,
    /// Biases on the MLP's projections (Llama only).
    #[serde(default)]
    mlp_bias: bool,
    #[serde(default = "default_silu")]
    pub hidden_act: String,
    /// `false` makes attention bidirectional (transformers 5's generic switch; pplx-embed's Qwen3 backbone;
    /// EuroBERT's always, [`DecoderConfig::causal`]). A sliding-window layer then sees `|i − j| ≤ sliding_window`;
    /// a causal one the `sliding_window − 1` tokens before a token and itself, as transformers masks them.
    #[serde(default = "default_causal")]
    is_causal: bool,
    /// Absent (outer `None`) or null (inner `None`): Mistral's default is 4,096, null means no window.
    #[serde(default, deserialize_with = "super::present")]
    sliding_window: Option<Option<usize>>,
    /// Qwen2/Qwen3: whether layers from `max_window_layers` on attend within the window (when `layer_types`
    /// does not say).
    #[serde(default)]
    use_sliding_window: bool,
    #[serde(default = "default_max_window_layers")]
    max_window_layers: usize,
    /// Qwen2/Qwen3 (transformers 5): `full_attention` or `sliding_attention` for each layer.
    #[serde(default)]
    layer_types: Option<Vec<String>>,
}

/// transformers 5's rotary base where a file gives none (`default_theta`, the same for the five families).
const DEFAULT_ROPE_THETA: f64 = 10_000.0;
/// Mistral's window where its file does not say.
const MISTRAL_SLIDING_WINDOW: usize = 4096;

fn default_silu() -> String {
    "silu".into()
}
fn default_causal() -> bool {
    true
}
fn default_max_window_layers() -> usize {
    28
}

impl DecoderConfig {
    /// The rotary positions (base and scaling).
    pub fn rope(&self) -> &Rope {
        &self.rope
    }

    /// The rotary positions the file names: `rope_scaling` where it names any (transformers 5 converts the older
    /// key so), else `rope_parameters`, a top-level `original_max_position_embeddings` over theirs; the base from
    /// them, else `rope_theta`, else the default.
    fn read_rope(&self) -> std::result::Result<Rope, String> {
        let parameters =
            scaling_or_parameters(self.rope_scaling.as_ref(), self.rope_parameters.as_ref());
        let original = self
            .original_max_position_embeddings
            .map(|n| serde_json::json!({ "original_max_position_embeddings": n }));
        Rope::read(
            &[parameters, original.as_ref()],
            self.rope_theta.unwrap_or(DEFAULT_ROPE_THETA),
            self.max_position_embeddings,
        )
    }

    /// Whether attention is causal: as the file says, but EuroBertAttention's never is.
    pub fn causal(&self) -> bool {
        self.is_causal && self.family != DecoderFamily::EuroBert
    }

    /// The RMSNorms' epsilon: the file's, else the family's config class's default.
    pub fn rms_norm_eps(&self) -> f64 {
        self.rms_norm_eps.unwrap_or(match self.family {
            DecoderFamily::EuroBert => 1e-5,
            _ => 1e-6,
        })
    }

    /// Per-head width: the file's, else Qwen3's default (128), else `hidden_size / num_attention_heads`.
    pub fn head_dim(&self) -> usize {
        self.head_dim.unwrap_or(match self.family {
            DecoderFamily::Qwen3 => 128,
            _ => self.hidden_size / self.num_attention_heads.max(1),
        })
    }

    /// K/V heads: the file's, else transformers' default for the family.
    pub fn kv_heads(&self) -> usize {
        match self.num_key_value_heads {
            Some(kv) => kv.unwrap_or(self.num_attention_heads),
            None => match self.family {
                DecoderFamily::Llama | DecoderFamily::EuroBert => self.num_attention_heads,
                DecoderFamily::Mistral => 8,
                DecoderFamily::Qwen2 | DecoderFamily::Qwen3 => 32,
            },
        }
    }

    /// Whether Q, K and V have biases, and whether the output projection has one.
    pub fn attention_biases(&self) -> (bool, bool) {
        match self.family {
            DecoderFamily::Llama | DecoderFamily::Qwen3 | DecoderFamily::EuroBert => {
                (self.attention_bias, self.attention_bias)
            }
            DecoderFamily::Mistral => (false, false),
            DecoderFamily::Qwen2 => (true, false),
        }
    }

    pub fn mlp_bias(&self) -> bool {
        matches!(self.family, DecoderFamily::Llama | DecoderFamily::EuroBert) && self.mlp_bias
    }

    /// Whether Q and K take an RMSNorm per head before rotary.
    pub fn qk_norm(&self) -> bool {
        self.family == DecoderFamily::Qwen3
    }

    /// The window of the sliding-window layers as the file stores it, if any layer has one.
    fn sliding_window(&self) -> Option<usize> {
        match self.family {
            DecoderFamily::Llama | DecoderFamily::EuroBert => None,
            DecoderFamily::Mistral => self.sliding_window.unwrap_or(Some(MISTRAL_SLIDING_WINDOW)),
            // transformers drops the window unless `use_sliding_window`.
            DecoderFamily::Qwen2 | DecoderFamily::Qwen3 => self
                .use_sliding_window
                .then_some(self.sliding_window.flatten())
                .flatten(),
        }
    }

    /// Whether layer `i` attends within the sliding window.
    fn is_sliding(&self, i: usize) -> bool {
        match self.family {
            DecoderFamily::Llama | DecoderFamily::EuroBert => false,
            DecoderFamily::Mistral => self.sliding_window().is_some(),
            DecoderFamily::Qwen2 | DecoderFamily::Qwen3 => match &self.layer_types {
                Some(types) => types.get(i).is_some_and(|t| t == "sliding_attention"),
                None => self.sliding_window().is_some() && i >= self.max_window_layers,
            },
        }
    }

    /// Layer `i`'s attention: grouped-query, causal unless the config says otherwise, within its window if it
    /// is a sliding-window layer.
    pub fn attention(&self, i: usize) -> AttentionShape {
        let window = self
            .sliding_window()
            .filter(|_| self.is_sliding(i))
            .map(|sw| if self.causal() { sw - 1 } else { sw });
        AttentionShape {
            causal: self.causal(),
            window,
            ..AttentionShape::new(self.num_attention_heads, self.kv_heads(), self.head_dim())
        }
    }

    /// Why this config cannot run as its file says, if it cannot.
    fn refusal(&self) -> Option<String> {
        if self.hidden_act != "silu" {
            return Some(format!(
                "unsupported hidden_act {:?}: expected \"silu\"",
                self.hidden_act
            ));
        }
        let (heads, kv) = (self.num_attention_heads, self.kv_heads());
        if heads == 0 || kv == 0 || !heads.is_multiple_of(kv) {
            return Some(format!(
                "num_attention_heads {heads} is not a multiple of num_key_value_heads {kv}"
            ));
        }
        if self.head_dim() == 0 || !self.head_dim().is_multiple_of(2) {
            return Some(format!(
                "head_dim {} must be even (rotary embedding rotates pairs)",
                self.head_dim()
            ));
        }
        if matches!(self.family, DecoderFamily::Qwen2 | DecoderFamily::Qwen3) {
            if let Some(types) = &self.layer_types {
                if types.len() != self.num_hidden_layers
                    || types
                        .iter()
                        .any(|t| t != "full_attention" && t != "sliding_attention")
                {
                    return Some(format!(
                        "layer_types {types:?}: expected \"full_attention\" or \"sliding_attention\" for each \
                         of the {} layers",
                        self.num_hidden_layers
                    ));
                }
                if types.iter().any(|t| t == "sliding_attention") && self.sliding_window().is_none()
                {
                    return Some(
                        "layer_types has sliding_attention layers but no window (use_sliding_window false or \
                         sliding_window null)"
                            .into(),
                    );
                }
            }
        }
        if self.sliding_window() == Some(0) {
            return Some("sliding_window 0: a token would see nothing".into());
        }
        None
    }
}

/// Reads a decoder's `config.json` as `family` describes it, refusing what the engine would run otherwise.
pub(super) fn read_decoder(config_path: &Path, family: DecoderFamily) -> Result<DecoderConfig> {
    let mut config: DecoderConfig = read_json(config_path)?;
    config.family = family;
    let hd = config.head_dim();
    check_dims(
        config_path,
        &[
            ("vocab_size", Some(config.vocab_size)),
            ("hidden_size", Some(config.hidden_size)),
            ("intermediate_size", Some(config.intermediate_size)),
            ("num_hidden_layers", Some(config.num_hidden_layers)),
            (
                "num_attention_heads × head_dim",
                config.num_attention_heads.checked_mul(hd),
            ),
            (
                "num_key_value_heads × head_dim",
                config.kv_heads().checked_mul(hd),
            ),
        ],
    )?;
    config.rope = config
        .read_rope()
        .map_err(|why| Error::model(config_path, why))?;
    match config.refusal() {
        Some(why) => Err(Error::model(config_path, why)),
        None => Ok(config),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn config(family: DecoderFamily, extra: serde_json::Value) -> DecoderConfig {
        let mut v = json!({
            "vocab_size": 100, "hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4,
            "intermediate_size": 96, "max_position_embeddings": 512,
        });
        v.as_object_mut()
            .expect("object")
            .extend(extra.as_object().expect("object").clone());
        let mut c: DecoderConfig = serde_json::from_value(v).expect("config");
        c.family = family;
        c
    }

    /// EuroBERT: Llama's biases and K/V heads, bidirectional whatever the file says, and its own RMSNorm epsilon
    /// where the file gives none (Llama's 1e-6 otherwise).
    #[test]
    fn eurobert_is_bidirectional_with_its_own_norm_epsilon() {
        let euro = DecoderFamily::EuroBert;
        let c = config(
            euro,
            json!({"is_causal": true, "attention_bias": true, "mlp_bias": true}),
        );
        let a = c.attention(0);
        assert_eq!((a.causal, a.window, a.kv_heads), (false, None, 4));
        assert_eq!((c.attention_biases(), c.mlp_bias()), ((true, true), true));
        assert_eq!(c.rms_norm_eps(), 1e-5);
        assert_eq!(
            config(euro, json!({"rms_norm_eps": 1e-6})).rms_norm_eps(),
            1e-6
        );
        let llama = config(DecoderFamily::Llama, json!({}));
        assert_eq!(
            (llama.rms_norm_eps(), llama.attention(0).causal),
            (1e-6, true)
        );
    }

    fn windows(c: &DecoderConfig) -> Vec<Option<usize>> {
        (0..c.num_hidden_layers)
            .map(|i| c.attention(i).window)
            .collect()
    }

    #[test]
    fn mistral_window_defaults_to_4096_and_null_means_none() {
        let absent = config(DecoderFamily::Mistral, json!({}));
        assert_eq!(windows(&absent), vec![Some(4095); 4]);
        assert_eq!(absent.kv_heads(), 8);
        let null_heads = config(DecoderFamily::Qwen2, json!({"num_key_value_heads": null}));
        assert_eq!(null_heads.kv_heads(), 4);
        let null = config(DecoderFamily::Mistral, json!({"sliding_window": null}));
        assert_eq!(windows(&null), vec![None; 4]);
        let bi = config(
            DecoderFamily::Mistral,
            json!({"sliding_window": 16, "is_causal": false}),
        );
        assert_eq!(windows(&bi), vec![Some(16); 4]);
    }

    #[test]
    fn qwen_windows_need_use_sliding_window_and_start_at_max_window_layers() {
        let off = config(DecoderFamily::Qwen2, json!({"sliding_window": 8}));
        assert_eq!(windows(&off), vec![None; 4]);
        let on = config(
            DecoderFamily::Qwen2,
            json!({"sliding_window": 8, "use_sliding_window": true, "max_window_layers": 2}),
        );
        assert_eq!(windows(&on), vec![None, None, Some(7), Some(7)]);
        let typed = config(
            DecoderFamily::Qwen3,
            json!({"sliding_window": 8, "use_sliding_window": true, "num_key_value_heads": 2, "layer_types":
                ["sliding_attention", "full_attention", "sliding_attention", "full_attention"]}),
        );
        assert_eq!(windows(&typed), vec![Some(7), None, Some(7), None]);
        assert!(typed.refusal().is_none());
        let windowless = config(
            DecoderFamily::Qwen3,
            json!({"num_key_value_heads": 2, "layer_types": ["sliding_attention", "full_attention", "full_attention", "full_attention"]}),
        );
        assert!(windowless
            .refusal()
            .is_some_and(|r| r.contains("no window")));
    }

    #[test]
    fn llama_ignores_windows_and_takes_its_biases_from_the_file() {
        let c = config(
            DecoderFamily::Llama,
            json!({"sliding_window": 8, "attention_bias": true, "mlp_bias": true}),
        );
        assert_eq!(windows(&c), vec![None; 4]);
        assert_eq!(
            (c.attention_biases(), c.mlp_bias(), c.qk_norm()),
            ((true, true), true, false)
        );
        assert_eq!((c.kv_heads(), c.head_dim()), (4, 16));
        assert_eq!(config(DecoderFamily::Qwen3, json!({})).head_dim(), 128);
        assert_eq!(c.read_rope(), Ok(Rope::plain(DEFAULT_ROPE_THETA)));
        let q2 = config(DecoderFamily::Qwen2, json!({"mlp_bias": true}));
        assert_eq!(
            (q2.attention_biases(), q2.mlp_bias()),
            ((true, false), false)
        );
    }

    /// Either generation's keys: transformers 4's `rope_scaling` beside a top-level base (Llama 3.2's file), 5's
    /// `rope_parameters` with the base inside; `rope_scaling` wins where both name something, as transformers 5
    /// converts it; what transformers cannot run (longrope's extra factors aside) is refused.
    #[test]
    fn rotary_scaling_in_either_key() {
        use super::super::RopeScaling;
        let llama3 = RopeScaling::Llama3 {
            factor: 32.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original: 8192.0,
        };
        let old = config(
            DecoderFamily::Llama,
            json!({"rope_theta": 5e5, "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0,
                "low_freq_factor": 1.0, "original_max_position_embeddings": 8192, "rope_type": "llama3"},
                "rope_parameters": {"rope_type": "default"}}),
        );
        let new = config(
            DecoderFamily::Llama,
            json!({"rope_scaling": null, "rope_parameters": {"rope_type": "llama3", "rope_theta": 5e5,
                "factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                "original_max_position_embeddings": 8192}}),
        );
        for c in [old, new] {
            assert_eq!(
                c.read_rope(),
                Ok(Rope {
                    theta: 5e5,
                    scaling: llama3.clone()
                })
            );
        }
        // Phi-3's top-level pretraining length wins over the parameters' one.
        let top = config(
            DecoderFamily::Qwen3,
            json!({"original_max_position_embeddings": 8192, "rope_parameters": {"rope_type": "yarn",
                "factor": 4.0, "original_max_position_embeddings": 32768}}),
        );
        assert!(matches!(
            top.read_rope().map(|r| r.scaling),
            Ok(RopeScaling::Yarn { original, .. }) if original == 8192.0
        ));
        let refused = config(
            DecoderFamily::Qwen2,
            json!({"rope_scaling": {"type": "longrope", "factor": 2.0}}),
        );
        assert!(refused
            .read_rope()
            .is_err_and(|e| e.contains("unsupported rope_type")));
    }
}
