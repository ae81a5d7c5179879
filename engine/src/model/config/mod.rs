//! The architectures' `config.json`s: which architecture a file describes ([`ModelConfig::read`]), and the
//! subset of its keys each needs, checked for what the engine runs (one file per family).

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use crate::backend::ops::AttentionShape;
use crate::error::{Error, Result};

mod bert;
mod deberta;
mod decoder;
mod gemma;
mod modernbert;
mod rope;
mod rotary_bert;
mod static_embedding;
mod t5;

use bert::read_bert;
pub use bert::{BertConfig, BertFamily};
pub use deberta::DebertaConfig;
use decoder::read_decoder;
pub use decoder::{DecoderConfig, DecoderFamily};
use gemma::read_gemma;
pub use gemma::{GemmaConfig, GemmaFamily};
use modernbert::read_modernbert;
pub use modernbert::ModernBertConfig;
pub use rope::{Rope, RopeScaling};
use rotary_bert::read_rotary_bert;
pub use rotary_bert::{RotaryBertConfig, RotaryBertFamily, RotaryBertMlp};
pub use static_embedding::{StaticConfig, WORD_EMBEDDINGS_TABLE};
use t5::read_t5;
pub use t5::{T5Config, T5FeedForward};

/// What a model with global and sliding-window layers (ModernBERT, Gemma 2 and 3) says about them in transformers 5's
/// keys: `layer_types`, and `rope_parameters` by layer type; each family reads its older keys itself.
#[derive(Clone, Debug, Deserialize, PartialEq)]
struct LayerKinds {
    layer_types: Option<Vec<String>>,
    rope_parameters: Option<BTreeMap<String, serde_json::Value>>,
    /// transformers 4's rotary scaling, merged into the global layers' parameters (and the local ones' where the
    /// family says so).
    #[serde(default)]
    rope_scaling: Option<serde_json::Value>,
    /// The global layers' and the local layers' rotary positions, made by [`LayerKinds::read_ropes`].
    #[serde(skip)]
    ropes: [Rope; 2],
}

impl LayerKinds {
    /// Whether layer `i` is global: its `layer_types` entry, else `pattern` (the family's older rule).
    fn is_global(&self, i: usize, pattern: bool) -> bool {
        match &self.layer_types {
            Some(types) => types.get(i).is_some_and(|t| t == "full_attention"),
            None => pattern,
        }
    }

    /// Reads each kind's rotary positions, global then local: `rope_parameters`' entry for the kind, then
    /// `rope_scaling` merged over it (over the global one only, unless `scaling_local`, as the family's
    /// transformers config converts the older keys), the base from `bases` (the family's older keys, else its
    /// defaults) where neither names one.
    /// An error names `config_path`.
    fn read_ropes(
        &mut self,
        config_path: &Path,
        bases: [f64; 2],
        scaling_local: bool,
        max_positions: usize,
    ) -> Result<()> {
        // Without `rope_parameters` (or its entry for a kind), transformers starts the kind from
        // `{rope_type: default}`, which an older `type` in `rope_scaling` does not override.
        let default = serde_json::json!({"rope_type": "default"});
        for (i, kind) in ["full_attention", "sliding_attention"]
            .into_iter()
            .enumerate()
        {
            let layer = self
                .rope_parameters
                .as_ref()
                .and_then(|r| r.get(kind))
                .or(Some(&default));
            let scaling = self
                .rope_scaling
                .as_ref()
                .filter(|_| i == 0 || scaling_local);
            let mut rope = Rope::read(&[layer, scaling], bases[i], max_positions)
                .map_err(|e| Error::model(config_path, format!("{kind} layers: {e}")))?;
            // transformers reads YaRN's `truncate` from the top of `rope_parameters`, where a file nested by
            // layer kind has none: always the default, true.
            if let RopeScaling::Yarn { truncate, .. } = &mut rope.scaling {
                *truncate = true;
            }
            self.ropes[i] = rope;
        }
        Ok(())
    }

    /// The global layers' rotary positions, or the local ones'.
    fn rope(&self, global: bool) -> &Rope {
        &self.ropes[usize::from(!global)]
    }

    /// Why a model of `layers` layers cannot run as these keys say, if it cannot: a `layer_types` of another
    /// length or with other kinds.
    fn refusal(&self, layers: usize) -> Option<String> {
        let types = self.layer_types.as_ref()?;
        (types.len() != layers
            || types
                .iter()
                .any(|t| t != "full_attention" && t != "sliding_attention"))
        .then(|| {
            format!(
                "layer_types {types:?}: expected \"full_attention\" or \"sliding_attention\" for each of the \
                 {layers} layers"
            )
        })
    }
}

/// transformers' default activation name (the exact GELU).
fn default_act() -> String {
    "gelu".into()
}

/// A model directory's architecture and its configuration.
#[derive(Clone, Debug, PartialEq)]
pub enum ModelConfig {
    Bert(BertConfig),
    Decoder(DecoderConfig),
    ModernBert(ModernBertConfig),
    RotaryBert(RotaryBertConfig),
    Gemma(GemmaConfig),
    T5(T5Config),
    /// sentence-transformers' StaticEmbedding (read from its weights, not a `config.json`).
    Static(StaticConfig),
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
        // Stanford's ColBERT checkpoint: a BERT whose projection sits beside it, read from its artifact.metadata.
        if names(&["HF_ColBERT"]) {
            return Err(Error::model(
                path,
                "unsupported: a Stanford ColBERT checkpoint (HF_ColBERT, artifact.metadata); a \
                 sentence-transformers MultiVectorEncoder or PyLate save of the model is read",
            ));
        }
        if names(&[
            "deberta",
            "DebertaModel",
            "DebertaForSequenceClassification",
        ]) {
            return Err(Error::model(
                path,
                "unsupported: DeBERTa v1 (model_type \"deberta\"); DeBERTa v2 and v3 (\"deberta-v2\") are read",
            ));
        }
        if BertFamily::of(&kind.model_type, &kind.architectures).is_some() {
            Ok(ModelConfig::Bert(read_bert(path)?))
        } else if let Some((family, _)) = DecoderFamily::NAMES.iter().find(|(_, n)| names(n)) {
            Ok(ModelConfig::Decoder(read_decoder(path, *family)?))
        } else if names(&["modernbert", "ModernBertModel", "ModernBertForMaskedLM"]) {
            Ok(ModelConfig::ModernBert(read_modernbert(path)?))
        } else if let Some((family, _)) = RotaryBertFamily::NAMES.iter().find(|(_, n)| names(n)) {
            Ok(ModelConfig::RotaryBert(read_rotary_bert(path, *family)?))
        } else if let Some((family, _)) = GemmaFamily::NAMES.iter().find(|(_, n)| names(n)) {
            Ok(ModelConfig::Gemma(read_gemma(path, *family)?))
        } else if names(&[
            "t5",
            "T5EncoderModel",
            "T5Model",
            "T5ForConditionalGeneration",
        ]) {
            Ok(ModelConfig::T5(read_t5(path, false)?))
        } else if names(&[
            "mt5",
            "MT5EncoderModel",
            "MT5Model",
            "MT5ForConditionalGeneration",
        ]) {
            Ok(ModelConfig::T5(read_t5(path, true)?))
        } else {
            Err(Error::model(
                path,
                format!(
                    "unsupported architecture {:?} (model_type {:?}): expected a BERT-family encoder (BertModel, \
                     RobertaModel, XLMRobertaModel, CamembertModel, MPNetModel, DistilBertModel, AlbertModel, \
                     ElectraModel, DebertaV2Model), ModernBertModel, \
                     NomicBertModel, GteModel (NewModel), JinaEmbeddingsV3Model, \
                     a Llama-family decoder (LlamaModel, MistralModel, Qwen2Model, Qwen3Model, EuroBertModel), Gemma 2's \
                     or Gemma 3's text model (Gemma2Model, Gemma3TextModel) or T5's encoder (T5EncoderModel, MT5EncoderModel)",
                    kind.architectures, kind.model_type
                ),
            ))
        }
    }

    pub fn vocab_size(&self) -> usize {
        match self {
            ModelConfig::Bert(c) => c.vocab_size,
            ModelConfig::Decoder(c) => c.vocab_size,
            ModelConfig::ModernBert(c) => c.vocab_size,
            ModelConfig::RotaryBert(c) => c.vocab_size,
            ModelConfig::Gemma(c) => c.vocab_size,
            ModelConfig::T5(c) => c.vocab_size,
            ModelConfig::Static(c) => c.vocab_size,
        }
    }

    /// Width of the hidden states, and so of the pooled embedding.
    pub fn hidden_size(&self) -> usize {
        match self {
            ModelConfig::Bert(c) => c.hidden_size,
            ModelConfig::Decoder(c) => c.hidden_size,
            ModelConfig::ModernBert(c) => c.hidden_size,
            ModelConfig::RotaryBert(c) => c.hidden_size,
            ModelConfig::Gemma(c) => c.hidden_size,
            ModelConfig::T5(c) => c.d_model,
            ModelConfig::Static(c) => c.dim,
        }
    }

    /// Multiply-adds ×2 of one token's forward pass in sequences of `seq_len`: the linear layers, and attention's
    /// scores and weighted sum over the positions it sees (half of them on average when causal, a window's
    /// worth in a sliding-window layer), and DeBERTa's position terms. The figure to set measured tokens/s against
    /// the machine's GEMM peak.
    pub fn flops_per_token(&self, seq_len: usize) -> f64 {
        // No layers: its token's row is added into the mean, one add a column.
        if let ModelConfig::Static(c) = self {
            return c.dim as f64;
        }
        self.layers_shapes()
            .iter()
            .map(|(weights, shape)| {
                let width = (shape.heads * shape.head_dim) as f64;
                // DeBERTa's position terms: each query's (c2p) or key's (p2c) product with the position rows its
                // sequence reads.
                let positions = shape.disentangled.map_or(0.0, |dis| {
                    let rows = (2 * seq_len).saturating_sub(1).min(2 * dis.span) as f64;
                    2.0 * rows * width * f64::from(u8::from(dis.c2p) + u8::from(dis.p2c))
                });
                2.0 * *weights as f64 + 4.0 * mean_keys(shape, seq_len) * width + positions
            })
            .sum()
    }

    /// Each layer's weights (multiply-adds per token) and attention; none for a static model.
    pub fn layers_shapes(&self) -> Vec<(usize, AttentionShape)> {
        match self {
            ModelConfig::Bert(c) => {
                let (h, f) = (c.hidden_size, c.intermediate_size);
                vec![(4 * h * h + 2 * h * f, c.attention()); c.num_hidden_layers]
            }
            ModelConfig::Decoder(c) => {
                let (h, f) = (c.hidden_size, c.intermediate_size);
                let (q, kv) = (
                    c.num_attention_heads * c.head_dim(),
                    c.kv_heads() * c.head_dim(),
                );
                (0..c.num_hidden_layers)
                    .map(|i| (2 * h * q + 2 * h * kv + 3 * h * f, c.attention(i)))
                    .collect()
            }
            ModelConfig::ModernBert(c) => {
                let (h, f) = (c.hidden_size, c.intermediate_size);
                (0..c.num_hidden_layers)
                    .map(|i| (4 * h * h + 3 * h * f, c.attention(i)))
                    .collect()
            }
            ModelConfig::RotaryBert(c) => {
                let (h, f, q) = (
                    c.hidden_size,
                    c.intermediate_size,
                    c.num_attention_heads * c.head_dim,
                );
                vec![(4 * h * q + 3 * h * f, c.attention()); c.num_hidden_layers]
            }
            ModelConfig::Gemma(c) => {
                let (h, f) = (c.hidden_size, c.intermediate_size);
                let (q, kv) = (
                    c.num_attention_heads * c.head_dim,
                    c.num_key_value_heads * c.head_dim,
                );
                (0..c.num_hidden_layers)
                    .map(|i| (2 * h * q + 2 * h * kv + 3 * h * f, c.attention(i)))
                    .collect()
            }
            ModelConfig::T5(c) => {
                let (h, f, inner) = (c.d_model, c.d_ff, c.num_heads * c.d_kv);
                let projections = match c.feed_forward() {
                    Some(T5FeedForward::Gated(_)) => 3,
                    _ => 2,
                };
                vec![(4 * h * inner + projections * h * f, c.attention()); c.num_layers]
            }
            ModelConfig::Static(_) => Vec::new(),
        }
    }

    pub fn layers(&self) -> usize {
        match self {
            ModelConfig::Bert(c) => c.num_hidden_layers,
            ModelConfig::Decoder(c) => c.num_hidden_layers,
            ModelConfig::ModernBert(c) => c.num_hidden_layers,
            ModelConfig::RotaryBert(c) => c.num_hidden_layers,
            ModelConfig::Gemma(c) => c.num_hidden_layers,
            ModelConfig::T5(c) => c.num_layers,
            ModelConfig::Static(_) => 0,
        }
    }

    /// The longest sequence the model takes.
    pub fn max_positions(&self) -> usize {
        match self {
            ModelConfig::Bert(c) => c.max_positions(),
            ModelConfig::Decoder(c) => c.max_position_embeddings,
            ModelConfig::ModernBert(c) => c.max_position_embeddings,
            ModelConfig::RotaryBert(c) => c.max_positions,
            ModelConfig::Gemma(c) => c.max_position_embeddings,
            // Relative positions: no limit of the model's own (sentence-transformers' or the tokenizer's applies).
            ModelConfig::T5(_) => usize::MAX,
            // No positions: sentence-transformers' max_seq_length is infinite for a StaticEmbedding (a tokenizer's
            // own truncation applies) and a WordEmbeddings' own (a million by default).
            ModelConfig::Static(_) => usize::MAX,
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

/// The largest size a config may give a dimension, or a product of heads and their width: past it the config is
/// refused, so that products of a few dimensions (a weight's elements, FLOPs per token) stay inside `usize`
/// whatever a hostile file says.
const MAX_DIM: usize = 1 << 24;

/// Refuses the first of `dims` (a name and its size, `None` where a product overflowed) past [`MAX_DIM`].
pub(super) fn check_dims(path: &Path, dims: &[(&str, Option<usize>)]) -> Result<()> {
    match dims.iter().find(|(_, d)| d.is_none_or(|d| d > MAX_DIM)) {
        Some((name, d)) => Err(Error::model(
            path,
            format!(
                "{name} {}: larger than the {MAX_DIM} the engine takes",
                d.map_or("past usize".into(), |d| d.to_string())
            ),
        )),
        None => Ok(()),
    }
}

/// Tells a key present with `null` (`Some(None)`) from one absent (`None`, serde's default): for
/// `#[serde(default, deserialize_with = "present")]`.
fn present<'de, D: serde::Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> std::result::Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

pub(crate) fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T> {
    let text = std::fs::read_to_string(path).map_err(Error::io(path))?;
    serde_json::from_str(&text).map_err(|source| Error::Json {
        path: path.to_owned(),
        source,
    })
}
