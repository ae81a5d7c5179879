//! The architectures' `config.json`s: which architecture a file describes, and the subset of its keys each
//! needs, checked for what the engine runs.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use crate::backend::ops::{AttentionShape, PositionIds};
use crate::error::{Error, Result};

/// The subset of a Hugging Face `config.json` that a BERT-family encoder needs: BERT's, RoBERTa's and
/// XLM-RoBERTa's, MPNet's, DistilBERT's (the same network: [`BertFamily`] says how they differ).
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct BertConfig {
    #[serde(default)]
    pub architectures: Vec<String>,
    #[serde(default)]
    pub model_type: String,
    pub vocab_size: usize,
    // The aliases are DistilBERT's names for the same sizes.
    #[serde(alias = "dim")]
    pub hidden_size: usize,
    #[serde(alias = "n_layers")]
    pub num_hidden_layers: usize,
    #[serde(alias = "n_heads")]
    pub num_attention_heads: usize,
    #[serde(alias = "hidden_dim")]
    pub intermediate_size: usize,
    pub max_position_embeddings: usize,
    #[serde(default = "default_type_vocab")]
    pub type_vocab_size: usize,
    /// Read through [`BertConfig::norm_eps`] (DistilBERT's is fixed).
    #[serde(default = "default_eps")]
    pub layer_norm_eps: f64,
    #[serde(default = "default_act", alias = "activation")]
    pub hidden_act: String,
    #[serde(default = "default_pos")]
    pub position_embedding_type: String,
    /// The padding id, which RoBERTa's position ids count from (transformers' default for RoBERTa: 1).
    pub pad_token_id: Option<u32>,
    /// Rows of MPNet's relative attention bias table.
    #[serde(default = "default_buckets")]
    pub relative_attention_num_buckets: usize,
}

fn default_buckets() -> usize {
    32
}

/// The encoders that run as BERT's network: BERT itself; RoBERTa (and XLM-RoBERTa), whose position ids count
/// after the padding id; MPNet, which numbers positions as RoBERTa, has no token types, and adds a relative
/// position bias to its attention scores; DistilBERT, BERT without token types under other names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BertFamily {
    Bert,
    Roberta,
    Mpnet,
    DistilBert,
}

/// Each family's `model_type`s and architecture names.
const FAMILIES: [(BertFamily, &str, &[&str]); 6] = [
    (BertFamily::Bert, "bert", &["BertModel", "BertForMaskedLM"]),
    (
        BertFamily::Roberta,
        "roberta",
        &["RobertaModel", "RobertaForMaskedLM"],
    ),
    (
        BertFamily::Roberta,
        "xlm-roberta",
        &["XLMRobertaModel", "XLMRobertaForMaskedLM"],
    ),
    // transformers' CamemBERT is RoBERTa's code under another name.
    (
        BertFamily::Roberta,
        "camembert",
        &["CamembertModel", "CamembertForMaskedLM"],
    ),
    (
        BertFamily::Mpnet,
        "mpnet",
        &["MPNetModel", "MPNetForMaskedLM"],
    ),
    (
        BertFamily::DistilBert,
        "distilbert",
        &["DistilBertModel", "DistilBertForMaskedLM"],
    ),
];

impl BertFamily {
    /// The family a config's `model_type` or `architectures` name, if any.
    fn of(model_type: &str, architectures: &[String]) -> Option<BertFamily> {
        FAMILIES
            .iter()
            .find(|(_, t, archs)| {
                *t == model_type || architectures.iter().any(|a| archs.contains(&a.as_str()))
            })
            .map(|&(family, _, _)| family)
    }
}

impl BertConfig {
    pub fn family(&self) -> BertFamily {
        BertFamily::of(&self.model_type, &self.architectures).unwrap_or(BertFamily::Bert)
    }

    /// Which row of the position table each token reads: its index (BERT, DistilBERT), or RoBERTa's numbering
    /// after the padding id (RoBERTa's from its config; MPNetEmbeddings fixes its own at 1, whatever the config says).
    pub fn position_ids(&self) -> PositionIds {
        match self.family() {
            BertFamily::Bert | BertFamily::DistilBert => PositionIds::Index,
            BertFamily::Roberta => PositionIds::AfterPadding {
                pad: self.pad_token_id.unwrap_or(1),
            },
            BertFamily::Mpnet => PositionIds::AfterPadding { pad: 1 },
        }
    }

    /// The LayerNorms' eps: the config's, but DistilBERT's modules fix theirs at 1e-12 whatever it says.
    pub fn norm_eps(&self) -> f64 {
        match self.family() {
            BertFamily::DistilBert => 1e-12,
            _ => self.layer_norm_eps,
        }
    }

    /// The longest sequence the position table serves.
    pub fn max_positions(&self) -> usize {
        self.max_position_embeddings
            .saturating_sub(self.position_ids().rows_for(0))
    }

    /// Every layer's attention: bidirectional over the whole sequence.
    pub fn attention(&self) -> AttentionShape {
        AttentionShape {
            heads: self.num_attention_heads,
            kv_heads: self.num_attention_heads,
            head_dim: self.hidden_size / self.num_attention_heads.max(1),
            causal: false,
            window: None,
        }
    }
}

fn default_type_vocab() -> usize {
    2
}
fn default_eps() -> f64 {
    1e-12
}
fn default_act() -> String {
    "gelu".into()
}
fn default_pos() -> String {
    "absolute".into()
}

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

#[derive(Clone, Debug, Deserialize, PartialEq)]
struct RopeParameters {
    rope_theta: Option<f64>,
    #[serde(default = "default_rope_type")]
    rope_type: String,
}

fn default_rope_type() -> String {
    "default".into()
}
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

/// The subset of a Hugging Face `config.json` that ModernBERT needs (gte-modernbert, modernbert-embed, granite
/// embedding r2): keys of transformers 4.48+ and of 5 (`layer_types`, `rope_parameters` by layer type).
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
    layer_types: Option<Vec<String>>,
    #[serde(default = "default_global_every")]
    global_attn_every_n_layers: usize,
    global_rope_theta: Option<f64>,
    local_rope_theta: Option<f64>,
    rope_parameters: Option<BTreeMap<String, RopeParameters>>,
    /// Refused when set: rotary scaling (transformers 4's key).
    #[serde(default)]
    rope_scaling: Option<serde_json::Value>,
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
    /// Whether layer `i` attends to the whole sequence (else within its sliding window).
    pub fn is_global(&self, i: usize) -> bool {
        match &self.layer_types {
            Some(types) => types.get(i).is_some_and(|t| t == "full_attention"),
            None => i.is_multiple_of(self.global_attn_every_n_layers.max(1)),
        }
    }

    /// The rotary base of the global layers (`global`) or of the local ones: transformers' defaults 160,000 and
    /// 10,000.
    pub fn rope_theta(&self, global: bool) -> f64 {
        let (kind, old, default) = if global {
            ("full_attention", self.global_rope_theta, 160_000.0)
        } else {
            ("sliding_attention", self.local_rope_theta, 10_000.0)
        };
        self.rope_parameters
            .as_ref()
            .and_then(|r| r.get(kind))
            .and_then(|r| r.rope_theta)
            .or(old)
            .unwrap_or(default)
    }

    pub fn head_dim(&self) -> usize {
        self.hidden_size / self.num_attention_heads.max(1)
    }

    /// Layer `i`'s attention.
    pub fn attention(&self, i: usize) -> AttentionShape {
        AttentionShape {
            heads: self.num_attention_heads,
            kv_heads: self.num_attention_heads,
            head_dim: self.head_dim(),
            causal: false,
            window: (!self.is_global(i)).then_some(self.local_attention / 2),
        }
    }
}

/// A model directory's architecture and its configuration.
#[derive(Clone, Debug, PartialEq)]
pub enum ModelConfig {
    Bert(BertConfig),
    Qwen3(Qwen3Config),
    ModernBert(ModernBertConfig),
}

/// The mean number of keys a query of a `seq_len`-token sequence sees under `shape`.
fn mean_keys(shape: &AttentionShape, seq_len: usize) -> f64 {
    let total: usize = (0..seq_len).map(|q| shape.keys(q, seq_len).len()).sum();
    total as f64 / seq_len.max(1) as f64
}

impl ModelConfig {
    /// Reads `config.json` as the architecture it names.
    pub fn read(path: &Path) -> Result<Self> {
        let kind: Kind = read_json(path)?;
        let names = |names: &[&str]| {
            names.contains(&kind.model_type.as_str())
                || kind
                    .architectures
                    .iter()
                    .any(|a| names.contains(&a.as_str()))
        };
        if BertFamily::of(&kind.model_type, &kind.architectures).is_some() {
            Ok(ModelConfig::Bert(read_bert(path)?))
        } else if names(&["qwen3", "Qwen3Model", "Qwen3ForCausalLM"]) {
            Ok(ModelConfig::Qwen3(read_qwen3(path)?))
        } else if names(&["modernbert", "ModernBertModel", "ModernBertForMaskedLM"]) {
            Ok(ModelConfig::ModernBert(read_modernbert(path)?))
        } else {
            Err(Error::model(
                path,
                format!(
                    "unsupported architecture {:?} (model_type {:?}): expected a BERT-family encoder (BertModel, \
                     RobertaModel, XLMRobertaModel, CamembertModel, MPNetModel, DistilBertModel), ModernBertModel \
                     or a Qwen3 model (Qwen3Model)",
                    kind.architectures, kind.model_type
                ),
            ))
        }
    }

    pub fn vocab_size(&self) -> usize {
        match self {
            ModelConfig::Bert(c) => c.vocab_size,
            ModelConfig::Qwen3(c) => c.vocab_size,
            ModelConfig::ModernBert(c) => c.vocab_size,
        }
    }

    /// Width of the hidden states, and so of the pooled embedding.
    pub fn hidden_size(&self) -> usize {
        match self {
            ModelConfig::Bert(c) => c.hidden_size,
            ModelConfig::Qwen3(c) => c.hidden_size,
            ModelConfig::ModernBert(c) => c.hidden_size,
        }
    }

    /// Multiply-adds ×2 of one token's forward pass in sequences of `seq_len`: the linear layers, and attention's
    /// scores and weighted sum over the positions it sees (half of them on average when causal, a window's
    /// worth in a sliding-window layer). The figure to set measured tokens/s against the machine's GEMM peak.
    pub fn flops_per_token(&self, seq_len: usize) -> f64 {
        // Each layer's weights (multiply-adds per token) and attention.
        let layers: Vec<(usize, AttentionShape)> = match self {
            ModelConfig::Bert(c) => {
                let (h, f) = (c.hidden_size, c.intermediate_size);
                vec![(4 * h * h + 2 * h * f, c.attention()); c.num_hidden_layers]
            }
            ModelConfig::Qwen3(c) => {
                let (h, f) = (c.hidden_size, c.intermediate_size);
                let (q, kv) = (
                    c.num_attention_heads * c.head_dim(),
                    c.num_key_value_heads * c.head_dim(),
                );
                vec![(2 * h * q + 2 * h * kv + 3 * h * f, c.attention()); c.num_hidden_layers]
            }
            ModelConfig::ModernBert(c) => {
                let (h, f) = (c.hidden_size, c.intermediate_size);
                (0..c.num_hidden_layers)
                    .map(|i| (4 * h * h + 3 * h * f, c.attention(i)))
                    .collect()
            }
        };
        layers
            .iter()
            .map(|(weights, shape)| {
                let width = (shape.heads * shape.head_dim) as f64;
                2.0 * *weights as f64 + 4.0 * mean_keys(shape, seq_len) * width
            })
            .sum()
    }

    pub fn layers(&self) -> usize {
        match self {
            ModelConfig::Bert(c) => c.num_hidden_layers,
            ModelConfig::Qwen3(c) => c.num_hidden_layers,
            ModelConfig::ModernBert(c) => c.num_hidden_layers,
        }
    }

    /// The longest sequence the model takes.
    pub fn max_positions(&self) -> usize {
        match self {
            ModelConfig::Bert(c) => c.max_positions(),
            ModelConfig::Qwen3(c) => c.max_position_embeddings,
            ModelConfig::ModernBert(c) => c.max_position_embeddings,
        }
    }
}

/// Just enough of `config.json` to tell which architecture it describes.
#[derive(Deserialize)]
struct Kind {
    #[serde(default)]
    architectures: Vec<String>,
    #[serde(default)]
    model_type: String,
}

pub(super) fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T> {
    let text = std::fs::read_to_string(path).map_err(Error::io(path))?;
    serde_json::from_str(&text).map_err(|source| Error::Json {
        path: path.to_owned(),
        source,
    })
}

fn read_bert(config_path: &Path) -> Result<BertConfig> {
    let config: BertConfig = read_json(config_path)?;
    if config.hidden_act != "gelu" {
        return Err(Error::model(
            config_path,
            format!(
                "unsupported hidden_act {:?} (DistilBERT's `activation`): expected \"gelu\"",
                config.hidden_act
            ),
        ));
    }
    if config.position_embedding_type != "absolute" {
        return Err(Error::model(
            config_path,
            format!(
                "unsupported position_embedding_type {:?}: expected \"absolute\"",
                config.position_embedding_type
            ),
        ));
    }
    if config.max_positions() == 0 {
        return Err(Error::model(
            config_path,
            format!(
                "max_position_embeddings {} leaves no position for a token after {} reserved rows",
                config.max_position_embeddings,
                config.position_ids().rows_for(0)
            ),
        ));
    }
    if config.num_attention_heads == 0
        || !config
            .hidden_size
            .is_multiple_of(config.num_attention_heads)
    {
        return Err(Error::model(
            config_path,
            format!(
                "hidden_size {} is not a multiple of num_attention_heads {}",
                config.hidden_size, config.num_attention_heads
            ),
        ));
    }
    Ok(config)
}

fn read_qwen3(config_path: &Path) -> Result<Qwen3Config> {
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

fn read_modernbert(config_path: &Path) -> Result<ModernBertConfig> {
    let config: ModernBertConfig = read_json(config_path)?;
    let fail = |message: String| Err(Error::model(config_path, message));
    // transformers' ACT2FN["gelu"] is the exact (erf) GELU; the tanh forms would be silently different.
    if config.hidden_activation != "gelu" {
        return fail(format!(
            "unsupported hidden_activation {:?}: expected \"gelu\"",
            config.hidden_activation
        ));
    }
    if let Some(r) = config
        .rope_parameters
        .iter()
        .flatten()
        .find(|(_, r)| r.rope_type != "default")
    {
        return fail(format!(
            "unsupported rope_type {:?} for {}: expected \"default\" (no rotary scaling)",
            r.1.rope_type, r.0
        ));
    }
    if config.rope_scaling.as_ref().is_some_and(|r| !r.is_null()) {
        return fail("rope_scaling is not supported (no rotary scaling)".into());
    }
    if let Some(types) = &config.layer_types {
        if types.len() != config.num_hidden_layers
            || types
                .iter()
                .any(|t| t != "full_attention" && t != "sliding_attention")
        {
            return fail(format!(
                "layer_types {types:?}: expected \"full_attention\" or \"sliding_attention\" for each of the {} \
                 layers",
                config.num_hidden_layers
            ));
        }
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
    use super::*;

    fn config(json: serde_json::Value) -> BertConfig {
        let base = serde_json::json!({"vocab_size": 10, "hidden_size": 8, "num_hidden_layers": 1,
            "num_attention_heads": 2, "intermediate_size": 16, "max_position_embeddings": 40});
        let mut merged = base.as_object().expect("object").clone();
        merged.extend(json.as_object().expect("object").clone());
        serde_json::from_value(serde_json::Value::Object(merged)).expect("a BERT-family config")
    }

    /// Each family numbers positions as transformers does: BERT and DistilBERT by index, RoBERTa after its
    /// config's padding id, MPNet after 1 whatever its config says (MPNetEmbeddings fixes `padding_idx = 1`).
    #[test]
    fn position_ids_follow_each_family() {
        use serde_json::json;
        let cases = [
            (
                json!({"model_type": "bert", "pad_token_id": 0}),
                PositionIds::Index,
                40,
            ),
            (
                json!({"model_type": "roberta"}),
                PositionIds::AfterPadding { pad: 1 },
                38,
            ),
            (
                json!({"architectures": ["XLMRobertaModel"], "pad_token_id": 5}),
                PositionIds::AfterPadding { pad: 5 },
                34,
            ),
            (
                json!({"model_type": "camembert"}),
                PositionIds::AfterPadding { pad: 1 },
                38,
            ),
            (
                json!({"model_type": "mpnet", "pad_token_id": 0}),
                PositionIds::AfterPadding { pad: 1 },
                38,
            ),
            (json!({"model_type": "distilbert"}), PositionIds::Index, 40),
        ];
        for (json, ids, positions) in cases {
            let c = config(json.clone());
            assert_eq!(c.position_ids(), ids, "{json}");
            assert_eq!(c.max_positions(), positions, "{json}");
        }
    }

    /// DistilBERT's config names the same sizes otherwise.
    #[test]
    fn distilbert_config_names_are_read() {
        let c: BertConfig = serde_json::from_value(serde_json::json!({"model_type": "distilbert",
            "vocab_size": 10, "dim": 8, "n_layers": 3, "n_heads": 2, "hidden_dim": 16,
            "max_position_embeddings": 40, "activation": "gelu"}))
        .expect("a DistilBERT config");
        assert_eq!(
            (
                c.family(),
                c.hidden_size,
                c.num_hidden_layers,
                c.num_attention_heads
            ),
            (BertFamily::DistilBert, 8, 3, 2)
        );
        assert_eq!((c.intermediate_size, c.hidden_act.as_str()), (16, "gelu"));
        // Its modules fix their LayerNorm eps, whatever a config says; the other families read theirs.
        let with_eps = |family: &str| {
            config(serde_json::json!({"model_type": family, "layer_norm_eps": 1e-5})).norm_eps()
        };
        assert_eq!((with_eps("distilbert"), with_eps("roberta")), (1e-12, 1e-5));
    }

    fn modernbert(json: serde_json::Value) -> ModernBertConfig {
        let base = serde_json::json!({"vocab_size": 10, "hidden_size": 8, "num_hidden_layers": 4,
            "num_attention_heads": 2, "intermediate_size": 16, "max_position_embeddings": 40});
        let mut merged = base.as_object().expect("object").clone();
        merged.extend(json.as_object().expect("object").clone());
        serde_json::from_value(serde_json::Value::Object(merged)).expect("a ModernBERT config")
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
        assert_eq!((old.rope_theta(true), old.rope_theta(false)), (8e4, 5e3));
        let defaults = modernbert(json!({}));
        let windows: Vec<_> = (0..4).map(|i| defaults.attention(i).window).collect();
        assert_eq!(windows, [None, Some(64), Some(64), None]);
        assert_eq!(
            (defaults.rope_theta(true), defaults.rope_theta(false)),
            (160_000.0, 10_000.0)
        );
        let new = modernbert(
            json!({"layer_types": ["sliding_attention", "full_attention",
            "full_attention", "sliding_attention"], "rope_parameters": {
            "full_attention": {"rope_theta": 1e5, "rope_type": "default"},
            "sliding_attention": {"rope_theta": 2e4, "rope_type": "default"}}}),
        );
        let windows: Vec<_> = (0..4).map(|i| new.attention(i).window).collect();
        assert_eq!(windows, [Some(64), None, None, Some(64)]);
        assert_eq!((new.rope_theta(true), new.rope_theta(false)), (1e5, 2e4));
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
                json!({"rope_parameters": {"full_attention": {"rope_theta": 1e4, "rope_type": "linear"}}}),
                "rope_type",
            ),
            (
                json!({"rope_scaling": {"type": "linear", "factor": 2.0}}),
                "rope_scaling",
            ),
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
