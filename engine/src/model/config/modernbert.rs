//! ModernBERT's `config.json`, either transformers generation's.

use std::path::Path;

use serde::Deserialize;

use super::{default_act, read_json, LayerKinds, Rope};
use crate::backend::ops::AttentionShape;
use crate::error::{Error, Result};

/// The subset of a Hugging Face `config.json` that ModernBERT needs (gte-modernbert, modernbert-embed, granite
/// embedding r2): keys of transformers 4.48+ and of 5 (`layer_types`, `rope_parameters` by layer type). Read it with
/// [`ModelConfig::read`](super::ModelConfig::read), which makes its rotary positions.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct ModernBertConfig {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub intermediate_size: usize,
    pub max_position_embeddings: usize,
    #[serde(default = "default_modernbert_eps")]
    pub norm_eps: f64,
    /// Whether the LayerNorms, the attention's and the MLP's linear layers have biases (none by default).
    #[serde(default)]
    pub norm_bias: bool,
    #[serde(default)]
    pub attention_bias: bool,
    #[serde(default)]
    pub mlp_bias: bool,
    #[serde(default = "default_act")]
    pub hidden_activation: String,
    /// The local layers' whole window: a token sees `local_attention / 2` tokens on either side.
    #[serde(default = "default_local_attention")]
    pub local_attention: usize,
    /// `full_attention` or `sliding_attention` per layer (transformers 5); else every
    /// `global_attn_every_n_layers`-th layer, from the first, is global.
    #[serde(default = "default_global_every")]
    global_attn_every_n_layers: usize,
    global_rope_theta: Option<f64>,
    local_rope_theta: Option<f64>,
    #[serde(flatten)]
    kinds: LayerKinds,
}

fn default_modernbert_eps() -> f64 {
    1e-5
}
fn default_local_attention() -> usize {
    128
}
fn default_global_every() -> usize {
    3
}

impl ModernBertConfig {
    /// Whether layer `i` attends to the whole sequence (else within its sliding window): `layer_types`, else every
    /// `global_attn_every_n_layers`-th layer from the first.
    pub fn is_global(&self, i: usize) -> bool {
        let pattern = i.is_multiple_of(self.global_attn_every_n_layers.max(1));
        self.kinds.is_global(i, pattern)
    }

    /// The rotary positions of the global layers (`global`) or of the local ones: bases by default 160,000 and
    /// 10,000, transformers 4's `rope_scaling` on both.
    pub fn rope(&self, global: bool) -> &Rope {
        self.kinds.rope(global)
    }

    pub fn head_dim(&self) -> usize {
        self.hidden_size / self.num_attention_heads.max(1)
    }

    /// Layer `i`'s attention.
    pub fn attention(&self, i: usize) -> AttentionShape {
        let heads = self.num_attention_heads;
        AttentionShape {
            window: (!self.is_global(i)).then_some(self.local_attention / 2),
            ..AttentionShape::new(heads, heads, self.head_dim())
        }
    }
}

pub(super) fn read_modernbert(config_path: &Path) -> Result<ModernBertConfig> {
    let mut config: ModernBertConfig = read_json(config_path)?;
    let fail = |message: String| Err(Error::model(config_path, message));
    let bases = [
        config.global_rope_theta.unwrap_or(160_000.0),
        config.local_rope_theta.unwrap_or(10_000.0),
    ];
    let positions = config.max_position_embeddings;
    config
        .kinds
        .read_ropes(config_path, bases, true, positions)?;
    // transformers' ACT2FN["gelu"] is the exact (erf) GELU; the tanh forms would be silently different.
    if config.hidden_activation != "gelu" {
        return fail(format!(
            "unsupported hidden_activation {:?}: expected \"gelu\"",
            config.hidden_activation
        ));
    }
    if let Some(why) = config.kinds.refusal(config.num_hidden_layers) {
        return fail(why);
    }
    let heads = config.num_attention_heads;
    if heads == 0
        || !config.hidden_size.is_multiple_of(heads)
        || !config.head_dim().is_multiple_of(2)
    {
        return fail(format!(
            "hidden_size {} must be an even width per each of num_attention_heads {heads} (rotary rotates pairs)",
            config.hidden_size
        ));
    }
    if config.global_attn_every_n_layers == 0 {
        return fail("global_attn_every_n_layers must be at least 1".into());
    }
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::super::ModelConfig;
    use super::*;

    fn modernbert(json: serde_json::Value) -> ModernBertConfig {
        let base = serde_json::json!({"vocab_size": 10, "hidden_size": 8, "num_hidden_layers": 4,
            "num_attention_heads": 2, "intermediate_size": 16, "max_position_embeddings": 40});
        let mut merged = base.as_object().expect("object").clone();
        merged.extend(json.as_object().expect("object").clone());
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("config.json");
        std::fs::write(&path, serde_json::Value::Object(merged).to_string()).expect("write");
        read_modernbert(&path).expect("a ModernBERT config")
    }

    /// Both generations of ModernBERT's config: transformers 4's pattern and thetas, transformers 5's
    /// `layer_types` and `rope_parameters` by layer type; the window is half of `local_attention` on each side.
    #[test]
    fn modernbert_layers_windows_and_thetas_follow_either_config_generation() {
        use serde_json::json;
        let old = modernbert(
            json!({"global_attn_every_n_layers": 2, "global_rope_theta": 8e4,
            "local_rope_theta": 5e3, "local_attention": 64}),
        );
        let windows: Vec<_> = (0..4).map(|i| old.attention(i).window).collect();
        assert_eq!(windows, [None, Some(32), None, Some(32)]);
        assert_eq!(
            (old.rope(true), old.rope(false)),
            (&Rope::plain(8e4), &Rope::plain(5e3))
        );
        let defaults = modernbert(json!({}));
        let windows: Vec<_> = (0..4).map(|i| defaults.attention(i).window).collect();
        assert_eq!(windows, [None, Some(64), Some(64), None]);
        assert_eq!(
            (defaults.rope(true), defaults.rope(false)),
            (&Rope::plain(160_000.0), &Rope::plain(10_000.0))
        );
        let new = modernbert(
            json!({"layer_types": ["sliding_attention", "full_attention",
            "full_attention", "sliding_attention"], "rope_parameters": {
            "full_attention": {"rope_theta": 1e5, "rope_type": "default"},
            "sliding_attention": {"rope_theta": 2e4, "rope_type": "default"}}}),
        );
        let windows: Vec<_> = (0..4).map(|i| new.attention(i).window).collect();
        assert_eq!(windows, [Some(64), None, None, Some(64)]);
        assert_eq!(
            (new.rope(true), new.rope(false)),
            (&Rope::plain(1e5), &Rope::plain(2e4))
        );
        // transformers 4's rope_scaling scales both kinds (ModernBertConfig merges it into each kind's
        // `{rope_type: default}`, so that an older `type` alone changes nothing).
        let scaled = modernbert(json!({"rope_scaling": {"rope_type": "linear", "factor": 2.0}}));
        for global in [true, false] {
            let r = scaled.rope(global);
            assert_eq!(r.scaling, super::super::RopeScaling::Linear { factor: 2.0 });
        }
        let old_type = modernbert(json!({"rope_scaling": {"type": "linear", "factor": 2.0}}));
        assert_eq!(old_type.rope(true), &Rope::plain(160_000.0));
        // YaRN's `truncate` is read from the top of `rope_parameters`, where a file by layer kind has none.
        let yarn = modernbert(json!({"rope_scaling": {"rope_type": "yarn", "factor": 4.0,
            "original_max_position_embeddings": 20, "truncate": false}}));
        for global in [true, false] {
            assert!(matches!(
                yarn.rope(global).scaling,
                super::super::RopeScaling::Yarn { truncate: true, .. }
            ));
        }
    }

    /// What would run silently wrong is refused, naming the key.
    #[test]
    fn modernbert_configs_it_cannot_run_are_refused() {
        use serde_json::json;
        let dir = tempfile::tempdir().expect("tempdir");
        let base = json!({"model_type": "modernbert", "vocab_size": 10, "hidden_size": 8,
            "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 16,
            "max_position_embeddings": 40});
        let cases = [
            (
                json!({"hidden_activation": "gelu_pytorch_tanh"}),
                "hidden_activation",
            ),
            (
                json!({"rope_parameters": {"full_attention": {"rope_theta": 1e4, "rope_type": "longrope"}}}),
                "rope_type",
            ),
            (json!({"rope_scaling": {"rope_type": "linear"}}), "factor"),
            (json!({"layer_types": ["full_attention"]}), "layer_types"),
            (json!({"num_attention_heads": 3}), "num_attention_heads"),
            (
                json!({"global_attn_every_n_layers": 0}),
                "global_attn_every_n_layers",
            ),
        ];
        for (patch, key) in cases {
            let mut config = base.as_object().expect("object").clone();
            config.extend(patch.as_object().expect("object").clone());
            let path = dir.path().join("config.json");
            std::fs::write(&path, serde_json::Value::Object(config).to_string()).expect("write");
            let err = ModelConfig::read(&path).expect_err(key).to_string();
            assert!(err.contains(key), "{key}: {err}");
        }
        std::fs::write(dir.path().join("config.json"), base.to_string()).expect("write");
        assert!(matches!(
            ModelConfig::read(&dir.path().join("config.json")),
            Ok(ModelConfig::ModernBert(_))
        ));
    }
}
