//! Gemma 2's and Gemma 3's text `config.json` (bge-multilingual-gemma2's: causal, scores soft-capped;
//! EmbeddingGemma's: bidirectional attention), either transformers generation's.

use std::path::Path;

use serde::Deserialize;

use super::{read_json, rope::scaling_or_parameters, LayerKinds, Rope};
use crate::backend::ops::AttentionShape;
use crate::error::{Error, Result};

/// Which of transformers' Gemma models a config describes; each fixes what its file does not say.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum GemmaFamily {
    /// `Gemma2Model`: no q/k norms; every other layer (the first, the third, ...) within the window; one rotary
    /// base (10,000) for both kinds of layer; scores soft-capped at 50 unless the file says otherwise.
    Gemma2,
    /// `Gemma3TextModel`: per-head q/k norms; every sixth layer global; rotary bases 1,000,000 (global) and
    /// 10,000 (local); no soft cap, whatever the file says (transformers' Gemma3Attention reads
    /// `attn_logit_softcapping` but never passes it to its attention).
    // The default only because `GemmaConfig::family` is `serde(skip)`; `read_gemma` always sets the real one.
    #[default]
    Gemma3,
}

impl GemmaFamily {
    /// Each family's `model_type` and architecture names.
    pub(super) const NAMES: [(GemmaFamily, &'static [&'static str]); 2] = [
        (
            GemmaFamily::Gemma2,
            &["gemma2", "Gemma2Model", "Gemma2ForCausalLM"],
        ),
        (
            GemmaFamily::Gemma3,
            &["gemma3_text", "Gemma3TextModel", "Gemma3ForCausalLM"],
        ),
    ];
}

/// The subset of a Hugging Face `config.json` that Gemma 2's or Gemma 3's text model needs as an embedding model.
/// Read it with [`ModelConfig::read`](super::ModelConfig::read), which makes its rotary positions.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct GemmaConfig {
    /// Set by [`ModelConfig::read`](super::ModelConfig::read) from the names in the file.
    #[serde(skip)]
    pub family: GemmaFamily,
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
    /// causal, the `sliding_window − 1` tokens before it. Absent (outer `None`): 4,096; null: none, which
    /// transformers runs only where no layer slides ([`GemmaConfig::sliding_window`]).
    #[serde(default, deserialize_with = "super::present")]
    sliding_window: Option<Option<usize>>,
    /// Whether attention sees the whole sequence (EmbeddingGemma) or only the tokens before (Gemma 3). Gemma 2
    /// refuses it: transformers' Gemma 2 masks its eager attention causally whatever it says.
    /// Null (transformers 5's Gemma 2 writes it so): false.
    #[serde(default)]
    use_bidirectional_attention: Option<bool>,
    /// transformers' generic switch (5.2+): `false` makes both kinds of layer bidirectional, the sliding ones
    /// seeing `|i − j| ≤` the window transformers holds.
    is_causal: Option<bool>,
    /// Gemma 3's older rule for which layers are global (every this many, counting from 1); Gemma 2's is 2.
    sliding_window_pattern: Option<usize>,
    rope_theta: Option<f64>,
    rope_local_base_freq: Option<f64>,
    #[serde(flatten)]
    kinds: LayerKinds,
    /// Gemma 2's soft cap. Absent (outer `None`): 50; null: none. Gemma 3 ignores it ([`GemmaConfig::softcap`]).
    #[serde(default, deserialize_with = "super::present")]
    attn_logit_softcapping: Option<Option<f64>>,
    /// Refused when set.
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
impl GemmaConfig {
    /// The file's window: its value, 4,096 where it names none, `None` where it says null.
    pub fn sliding_window(&self) -> Option<usize> {
        self.sliding_window.unwrap_or(Some(4096))
    }

    /// Whether layer `i` attends to the whole sequence (else within its sliding window): `layer_types`, else
    /// every `sliding_window_pattern`-th layer (Gemma 2: every second), counting from 1.
    pub fn is_global(&self, i: usize) -> bool {
        let every = match self.family {
            GemmaFamily::Gemma2 => 2,
            GemmaFamily::Gemma3 => self.sliding_window_pattern.unwrap_or(6),
        };
        self.kinds
            .is_global(i, (i + 1).is_multiple_of(every.max(1)))
    }

    /// Whether the layers have Gemma 3's per-head q/k norms.
    pub fn qk_norms(&self) -> bool {
        self.family == GemmaFamily::Gemma3
    }

    /// The scores' soft cap: Gemma 2's, the file's or 50; Gemma 3's none, as transformers runs it.
    pub fn softcap(&self) -> Option<f64> {
        match self.family {
            GemmaFamily::Gemma2 => self.attn_logit_softcapping.unwrap_or(Some(50.0)),
            GemmaFamily::Gemma3 => None,
        }
    }

    /// The rotary positions of the global layers (`global`) or of the local ones. Gemma 3: bases by default
    /// 1,000,000 and 10,000, transformers 4's `rope_scaling` on the global ones (Gemma 3 4B's linear factor 8);
    /// Gemma 2: one for both.
    pub fn rope(&self, global: bool) -> &Rope {
        self.kinds.rope(global)
    }

    /// Layer `i`'s attention; the window as transformers 5 masks it. transformers holds `sliding_window / 2 + 1`
    /// with `use_bidirectional_attention`, else the file's value `sw`; the sliding layers then see
    /// `|i − j| < sw` (bidirectional), `i − j < sw` (causal), or `|i − j| ≤ sw` with `is_causal: false`.
    pub fn attention(&self, i: usize) -> AttentionShape {
        let bidirectional_attention = self.use_bidirectional_attention == Some(true);
        // A null window is refused where a layer slides (`read_gemma`), so a global layer is all that reads this.
        let sw = self.sliding_window().unwrap_or(usize::MAX);
        let held = if bidirectional_attention {
            sw / 2 + 1
        } else {
            sw
        };
        let not_causal = self.is_causal == Some(false);
        let bidirectional = bidirectional_attention || not_causal;
        let window = if not_causal {
            held
        } else {
            held.saturating_sub(1)
        };
        let (heads, kv_heads, head_dim) = (
            self.num_attention_heads,
            self.num_key_value_heads,
            self.head_dim,
        );
        AttentionShape {
            causal: !bidirectional,
            window: (!self.is_global(i)).then_some(window),
            // Gemma scales scores by query_pre_attn_scalar^-½, not by the head width's.
            scale: (1.0 / self.query_pre_attn_scalar.sqrt()) as f32,
            softcap: self.softcap().map(|c| c as f32),
            ..AttentionShape::new(heads, kv_heads, head_dim)
        }
    }
}

pub(super) fn read_gemma(config_path: &Path, family: GemmaFamily) -> Result<GemmaConfig> {
    let mut config: GemmaConfig = read_json(config_path)?;
    config.family = family;
    let fail = |message: String| Err(Error::model(config_path, message));
    let positions = config.max_position_embeddings;
    match family {
        GemmaFamily::Gemma2 => {
            // Gemma2Config's rotary parameters are flat, one set for both kinds of layer.
            let flat = config.kinds.rope_parameters.as_ref().map(|m| {
                serde_json::Value::Object(m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            });
            let parameters =
                scaling_or_parameters(config.kinds.rope_scaling.as_ref(), flat.as_ref());
            let rope = Rope::read(
                &[parameters],
                config.rope_theta.unwrap_or(10_000.0),
                positions,
            )
            .map_err(|e| Error::model(config_path, e))?;
            config.kinds.ropes = [rope.clone(), rope];
            if config.use_bidirectional_attention == Some(true) {
                return fail(
                    "use_bidirectional_attention is not supported for Gemma 2 (transformers masks its \
                     attention causally whatever it says); is_causal: false makes it bidirectional"
                        .into(),
                );
            }
        }
        GemmaFamily::Gemma3 => {
            let bases = [
                config.rope_theta.unwrap_or(1_000_000.0),
                config.rope_local_base_freq.unwrap_or(10_000.0),
            ];
            config
                .kinds
                .read_ropes(config_path, bases, false, positions)?;
        }
    }
    if !["gelu_pytorch_tanh", "gelu"].contains(&config.hidden_activation.as_str()) {
        return fail(format!(
            "unsupported hidden_activation {:?}: expected \"gelu_pytorch_tanh\" or \"gelu\"",
            config.hidden_activation
        ));
    }
    if let Some(why) = config.kinds.refusal(config.num_hidden_layers) {
        return fail(why);
    }
    if config
        .softcap()
        .is_some_and(|c| !(c > 0.0 && c.is_finite()))
    {
        return fail(format!(
            "attn_logit_softcapping {:?} must be positive",
            config.softcap()
        ));
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
    let slides = (0..config.num_hidden_layers).any(|i| !config.is_global(i));
    if config.sliding_window() == Some(0) || (slides && config.sliding_window().is_none()) {
        return fail("sliding_window must be positive where a layer attends within it".into());
    }
    if !(config.query_pre_attn_scalar > 0.0 && config.query_pre_attn_scalar.is_finite()) {
        return fail("query_pre_attn_scalar must be positive".into());
    }
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A config of `family` from a small base config with `json`'s keys over it.
    fn try_gemma(family: GemmaFamily, json: serde_json::Value) -> Result<GemmaConfig> {
        let base = serde_json::json!({"vocab_size": 10, "hidden_size": 8, "num_hidden_layers": 6,
            "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 4, "intermediate_size": 16,
            "max_position_embeddings": 40, "sliding_window": 512});
        let mut merged = base.as_object().expect("object").clone();
        merged.extend(json.as_object().expect("object").clone());
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("config.json");
        std::fs::write(&path, serde_json::Value::Object(merged).to_string()).expect("write");
        read_gemma(&path, family)
    }

    fn gemma(family: GemmaFamily, json: serde_json::Value) -> GemmaConfig {
        try_gemma(family, json).expect("a Gemma config")
    }

    fn gemma3(json: serde_json::Value) -> GemmaConfig {
        gemma(GemmaFamily::Gemma3, json)
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

    /// Gemma 2's defaults: every other layer local from the first, one rotary base for both kinds, either
    /// generation's keys, scores capped at 50 unless the file says otherwise (null: none), scaled by
    /// query_pre_attn_scalar^-½; what transformers' Gemma 2 would not run as written is refused.
    #[test]
    fn gemma2_defaults_caps_and_refusals() {
        use serde_json::json;
        let c = gemma(GemmaFamily::Gemma2, json!({"query_pre_attn_scalar": 16}));
        let windows: Vec<_> = (0..4).map(|i| c.attention(i).window).collect();
        assert_eq!(windows, [Some(511), None, Some(511), None]);
        let a = c.attention(0);
        assert!(a.causal && !c.qk_norms());
        assert_eq!((a.softcap, a.scale), (Some(50.0), 0.25));
        assert_eq!(
            (c.rope(true), c.rope(false)),
            (&Rope::plain(1e4), &Rope::plain(1e4))
        );
        let theirs = gemma(
            GemmaFamily::Gemma2,
            json!({"attn_logit_softcapping": null, "rope_theta": 2e3,
            "rope_scaling": {"rope_type": "linear", "factor": 2.0}}),
        );
        assert_eq!(theirs.attention(1).softcap, None);
        assert_eq!(theirs.rope(false), theirs.rope(true));
        assert_eq!(theirs.rope(true).theta, 2e3);
        assert_eq!(
            theirs.rope(true).scaling,
            super::super::RopeScaling::Linear { factor: 2.0 }
        );
        let five = gemma(
            GemmaFamily::Gemma2,
            json!({"attn_logit_softcapping": 30.0,
            "rope_parameters": {"rope_type": "default", "rope_theta": 5e3}}),
        );
        assert_eq!(five.attention(0).softcap, Some(30.0));
        assert_eq!(
            (five.rope(true), five.rope(false)),
            (&Rope::plain(5e3), &Rope::plain(5e3))
        );
        // Gemma 3 never caps: transformers' Gemma3Attention does not pass the key on to its attention.
        assert_eq!(gemma3(json!({})).attention(0).softcap, None);
        assert_eq!(
            gemma3(json!({"attn_logit_softcapping": 20.0}))
                .attention(0)
                .softcap,
            None
        );
        // A null window runs where every layer is global, as transformers runs it, and is refused where one slides.
        let full = json!({"sliding_window": null, "layer_types": vec!["full_attention"; 6]});
        assert_eq!(gemma(GemmaFamily::Gemma2, full).attention(0).window, None);
        for bad in [
            json!({"use_bidirectional_attention": true}),
            json!({"attn_logit_softcapping": 0.0}),
            json!({"attn_logit_softcapping": -5.0}),
            json!({"query_pre_attn_scalar": 0}),
            json!({"sliding_window": null}),
            json!({"sliding_window": 0}),
        ] {
            assert!(
                try_gemma(GemmaFamily::Gemma2, bad.clone()).is_err(),
                "{bad}"
            );
        }
    }

    /// bge-multilingual-gemma2's config.json as transformers 4 wrote it (its keys; smaller widths): no
    /// `layer_types`, `rope_theta` at the top, the cap explicit, keys the engine does not read beside them.
    #[test]
    fn gemma2_reads_transformers4_keys() {
        let c = gemma(
            GemmaFamily::Gemma2,
            serde_json::json!({"architectures": ["Gemma2Model"], "model_type": "gemma2",
            "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0, "cache_implementation": "hybrid",
            "hidden_act": "gelu_pytorch_tanh", "hidden_activation": "gelu_pytorch_tanh",
            "query_pre_attn_scalar": 256, "rope_theta": 10000.0, "sliding_window": 4096,
            "sliding_window_size": 4096, "rms_norm_eps": 1e-6, "torch_dtype": "float32"}),
        );
        let a: Vec<_> = (0..6).map(|i| c.attention(i)).collect();
        assert_eq!(a[0].window, Some(4095));
        assert_eq!(a[1].window, None);
        assert!(a
            .iter()
            .all(|a| a.causal && a.softcap == Some(50.0) && a.scale == 1.0 / 16.0));
        assert_eq!(
            (c.rope(true), c.rope(false)),
            (&Rope::plain(1e4), &Rope::plain(1e4))
        );
        assert_eq!(
            (c.hidden_activation.as_str(), c.qk_norms()),
            ("gelu_pytorch_tanh", false)
        );
    }
}
