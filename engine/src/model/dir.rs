//! Reads a model directory the way sentence-transformers does: `modules.json` names the pipeline (Transformer,
//! Pooling, Normalize), `1_Pooling/config.json` the pooling (either version's keys), `sentence_bert_config.json` (else
//! `tokenizer_config.json`) the max sequence length.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::backend::ops::PositionIds;
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
}

/// A model directory's architecture and its configuration.
#[derive(Clone, Debug, PartialEq)]
pub enum ModelConfig {
    Bert(BertConfig),
    Qwen3(Qwen3Config),
}

impl ModelConfig {
    pub fn vocab_size(&self) -> usize {
        match self {
            ModelConfig::Bert(c) => c.vocab_size,
            ModelConfig::Qwen3(c) => c.vocab_size,
        }
    }

    /// Width of the hidden states, and so of the pooled embedding.
    pub fn hidden_size(&self) -> usize {
        match self {
            ModelConfig::Bert(c) => c.hidden_size,
            ModelConfig::Qwen3(c) => c.hidden_size,
        }
    }

    /// Multiply-adds ×2 of one token's forward pass in sequences of `seq_len`: the linear layers, and attention's
    /// scores and weighted sum over the positions it sees (half of them on average when causal). The figure to
    /// set measured tokens/s against the machine's GEMM peak.
    pub fn flops_per_token(&self, seq_len: usize) -> f64 {
        let (per_layer, attn_width, causal) = match self {
            ModelConfig::Bert(c) => {
                let (h, f) = (c.hidden_size, c.intermediate_size);
                (4 * h * h + 2 * h * f, h, false)
            }
            ModelConfig::Qwen3(c) => {
                let (h, f) = (c.hidden_size, c.intermediate_size);
                let (q, kv) = (
                    c.num_attention_heads * c.head_dim(),
                    c.num_key_value_heads * c.head_dim(),
                );
                (2 * h * q + 2 * h * kv + 3 * h * f, q, c.is_causal)
            }
        };
        let seen = if causal {
            (seq_len as f64 + 1.0) / 2.0
        } else {
            seq_len as f64
        };
        let layer = 2.0 * per_layer as f64 + 4.0 * seen * attn_width as f64;
        layer * self.layers() as f64
    }

    pub fn layers(&self) -> usize {
        match self {
            ModelConfig::Bert(c) => c.num_hidden_layers,
            ModelConfig::Qwen3(c) => c.num_hidden_layers,
        }
    }

    /// The longest sequence the model takes.
    pub fn max_positions(&self) -> usize {
        match self {
            ModelConfig::Bert(c) => c.max_positions(),
            ModelConfig::Qwen3(c) => c.max_position_embeddings,
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

/// How token states become one sentence embedding.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Pooling {
    Mean,
    Cls,
    /// The last token's hidden state (sentence-transformers' `pooling_mode_lasttoken`, decoder models).
    #[serde(rename = "last_token")]
    LastToken,
}

/// The longest sequence the engine runs, whatever a config says: a rotary table is computed at load for every
/// position served (at head_dim 128, 64 MiB here), so `max_position_embeddings` (3,276,832,768 in a fuzzed
/// config; rope-scaled models say millions) must not size it alone. Longer than the context of the embedding
/// models we know of (Qwen3-Embedding's is 32,768); `--max-seq-length` lowers it, never raises it.
pub const MAX_POSITIONS: usize = 1 << 17;

/// A parsed model directory: configuration, pooling, normalisation and where the weights are.
#[derive(Clone, Debug)]
pub struct ModelDir {
    pub root: PathBuf,
    pub config: ModelConfig,
    pub pooling: Pooling,
    pub normalize: bool,
    /// sentence-transformers' `max_seq_length`, capped by the position table.
    pub max_seq_length: usize,
    /// The longest sequence the backend loads the model for: the model's positions up to [`MAX_POSITIONS`], or
    /// fewer once an engine truncates sooner ([`ModelDir::serving`]). What position tables computed at load
    /// (Qwen3's rotary one) cover, so a config's `max_position_embeddings` alone never sizes an allocation.
    pub positions: usize,
    /// Prompt prefixes by name from `config_sentence_transformers.json` (e.g. `query` → `"query: "`).
    pub prompts: Vec<(String, String)>,
    pub weights_path: PathBuf,
    pub tokenizer_path: PathBuf,
}

#[derive(Deserialize)]
struct Module {
    #[serde(default)]
    path: String,
    #[serde(rename = "type")]
    kind: String,
}

/// `1_Pooling/config.json`: sentence-transformers ≥ 6 writes `pooling_mode`; earlier versions one flag per mode
/// (read when `pooling_mode` is absent, as sentence-transformers does).
#[derive(Deserialize)]
struct PoolingFile {
    pooling_mode: Option<PoolingModes>,
    #[serde(default = "default_true")]
    include_prompt: bool,
    #[serde(default)]
    pooling_mode_cls_token: bool,
    #[serde(default)]
    pooling_mode_mean_tokens: bool,
    #[serde(default)]
    pooling_mode_max_tokens: bool,
    #[serde(default)]
    pooling_mode_mean_sqrt_len_tokens: bool,
    #[serde(default)]
    pooling_mode_weightedmean_tokens: bool,
    #[serde(default)]
    pooling_mode_lasttoken: bool,
}

/// One pooling mode, or several whose outputs sentence-transformers concatenates.
#[derive(Deserialize)]
#[serde(untagged)]
enum PoolingModes {
    One(String),
    Several(Vec<String>),
}

fn default_true() -> bool {
    true
}

#[derive(Deserialize)]
struct SentenceBertFile {
    max_seq_length: Option<usize>,
    #[serde(default)]
    do_lower_case: bool,
}

/// The names sentence-transformers reads the Transformer module's config from, the first that exists.
const SENTENCE_CONFIGS: [&str; 7] = [
    "sentence_bert_config.json",
    "sentence_roberta_config.json",
    "sentence_distilbert_config.json",
    "sentence_camembert_config.json",
    "sentence_albert_config.json",
    "sentence_xlm-roberta_config.json",
    "sentence_xlnet_config.json",
];

/// The tokenizer's `model_max_length` from `tokenizer_config.json`: where sentence-transformers takes the
/// sequence limit from when its own config names none. transformers writes 10^30 for "no limit" (too big for an
/// integer), read as unbounded; a whole number written as a float (`512.0`) is that number.
fn tokenizer_max_length(root: &Path) -> Result<Option<usize>> {
    let path = root.join("tokenizer_config.json");
    if !path.is_file() {
        return Ok(None);
    }
    let config: serde_json::Value = read_json(&path)?;
    let limit = &config["model_max_length"];
    Ok(limit
        .as_u64()
        .map(|n| usize::try_from(n).unwrap_or(usize::MAX))
        .or_else(|| {
            limit
                .as_f64()
                .filter(|n| *n >= 1.0 && n.fract() == 0.0)
                // A float cast saturates: 10^30 becomes usize::MAX.
                .map(|n| n as usize)
        }))
}

/// Whether `tokenizer.json`'s normaliser lowercases (BERT's with `lowercase`, or a `Lowercase` step): then
/// sentence-transformers' `do_lower_case` changes nothing.
fn tokenizer_lowercases(path: &Path) -> Result<bool> {
    let json: serde_json::Value = read_json(path)?;
    let lowercases = |n: &serde_json::Value| match n["type"].as_str() {
        Some("Lowercase") => true,
        Some("BertNormalizer") => n["lowercase"].as_bool().unwrap_or(true),
        _ => false,
    };
    let normalizer = &json["normalizer"];
    Ok(lowercases(normalizer)
        || normalizer["normalizers"]
            .as_array()
            .is_some_and(|steps| steps.iter().any(lowercases)))
}

#[derive(Deserialize, Default)]
struct SentenceTransformersFile {
    #[serde(default)]
    prompts: std::collections::BTreeMap<String, String>,
}

fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T> {
    let text = std::fs::read_to_string(path).map_err(Error::io(path))?;
    serde_json::from_str(&text).map_err(|source| Error::Json {
        path: path.to_owned(),
        source,
    })
}

fn require(path: PathBuf, what: &str) -> Result<PathBuf> {
    if path.is_file() {
        Ok(path)
    } else {
        Err(Error::model(path, format!("missing: expected {what}")))
    }
}

impl ModelDir {
    pub fn open(root: impl AsRef<Path>) -> Result<Self> {
        let root = root.as_ref().to_owned();
        if !root.is_dir() {
            return Err(Error::model(
                &root,
                "not a directory: expected a model directory with config.json, model.safetensors and tokenizer.json",
            ));
        }
        let config_path = require(root.join("config.json"), "the model's config.json")?;
        let kind: Kind = read_json(&config_path)?;
        let config = if BertFamily::of(&kind.model_type, &kind.architectures).is_some() {
            ModelConfig::Bert(read_bert(&config_path)?)
        } else if kind.model_type == "qwen3"
            || kind
                .architectures
                .iter()
                .any(|a| ["Qwen3Model", "Qwen3ForCausalLM"].contains(&a.as_str()))
        {
            ModelConfig::Qwen3(read_qwen3(&config_path)?)
        } else {
            return Err(Error::model(
                &config_path,
                format!(
                    "unsupported architecture {:?} (model_type {:?}): expected a BERT-family encoder (BertModel, \
                     RobertaModel, XLMRobertaModel, CamembertModel, MPNetModel, DistilBertModel) or a Qwen3 model \
                     (Qwen3Model)",
                    kind.architectures, kind.model_type
                ),
            ));
        };
        let weights_path = require(
            root.join("model.safetensors"),
            "the weights as model.safetensors",
        )?;
        let tokenizer_path = require(root.join("tokenizer.json"), "a Hugging Face tokenizer.json")?;

        // Without modules.json the directory is a bare transformers model: sentence-transformers then defaults to
        // mean pooling without normalisation, and so do we.
        let (mut pooling, mut normalize) = (Pooling::Mean, false);
        let modules_path = root.join("modules.json");
        if modules_path.is_file() {
            let modules: Vec<Module> = read_json(&modules_path)?;
            for m in &modules {
                match m.kind.rsplit('.').next().unwrap_or_default() {
                    "Transformer" => {}
                    "Pooling" => pooling = read_pooling(&root.join(&m.path).join("config.json"))?,
                    "Normalize" => normalize = true,
                    other => {
                        return Err(Error::model(
                            &modules_path,
                            format!(
                                "unsupported module {other:?}: expected Transformer, Pooling and Normalize modules"
                            ),
                        ))
                    }
                }
            }
        }
        let positions = config.max_positions().min(MAX_POSITIONS);
        // As sentence-transformers: the limit its config names, else the tokenizer's, within the positions.
        // sentence-transformers reads the first of these names that exists and is not empty (`{}`).
        let mut sentence = None;
        for path in SENTENCE_CONFIGS.iter().map(|name| root.join(name)) {
            if path.is_file() {
                let value: serde_json::Value = read_json(&path)?;
                if value.as_object().is_some_and(|o| o.is_empty()) {
                    continue;
                }
                let config =
                    serde_json::from_value::<SentenceBertFile>(value).map_err(|source| {
                        Error::Json {
                            path: path.clone(),
                            source,
                        }
                    })?;
                sentence = Some((config, path));
                break;
            }
        }
        if let Some((s, path)) = &sentence {
            if s.do_lower_case && !tokenizer_lowercases(&tokenizer_path)? {
                return Err(Error::model(
                    path,
                    "unsupported: do_lower_case = true with a tokenizer that keeps case (sentence-transformers \
                     would lowercase the text first)",
                ));
            }
        }
        let max_seq_length = match sentence.and_then(|(s, _)| s.max_seq_length) {
            Some(n) => Some(n),
            None => tokenizer_max_length(&root)?,
        }
        .map_or(positions, |n| n.min(positions));
        let st_path = root.join("config_sentence_transformers.json");
        let prompts = if st_path.is_file() {
            read_json::<SentenceTransformersFile>(&st_path)?
                .prompts
                .into_iter()
                .collect()
        } else {
            Vec::new()
        };
        Ok(ModelDir {
            root,
            positions,
            config,
            pooling,
            normalize,
            max_seq_length,
            prompts,
            weights_path,
            tokenizer_path,
        })
    }
}

impl ModelDir {
    /// The directory as an engine that truncates every input to `max_len` tokens runs it.
    pub fn serving(mut self, max_len: usize) -> Self {
        self.positions = self.positions.min(max_len);
        self
    }
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

fn read_pooling(path: &Path) -> Result<Pooling> {
    let p: PoolingFile = read_json(path)?;
    if !p.include_prompt {
        return Err(Error::model(
            path,
            "unsupported pooling: include_prompt = false (pooling without the prompt's tokens)",
        ));
    }
    let modes = match p.pooling_mode {
        Some(PoolingModes::One(mode)) => vec![mode],
        Some(PoolingModes::Several(modes)) => modes,
        None => {
            let legacy = [
                (p.pooling_mode_cls_token, "cls"),
                (p.pooling_mode_max_tokens, "max"),
                (p.pooling_mode_mean_tokens, "mean"),
                (p.pooling_mode_mean_sqrt_len_tokens, "mean_sqrt_len_tokens"),
                (p.pooling_mode_weightedmean_tokens, "weightedmean"),
                (p.pooling_mode_lasttoken, "lasttoken"),
            ];
            let on: Vec<String> = legacy
                .iter()
                .filter(|(set, _)| *set)
                .map(|(_, mode)| mode.to_string())
                .collect();
            // sentence-transformers pools by the mean when no mode is set.
            if on.is_empty() {
                vec!["mean".into()]
            } else {
                on
            }
        }
    };
    match modes.as_slice() {
        [mode] => match mode.as_str() {
            "mean" => Ok(Pooling::Mean),
            "cls" => Ok(Pooling::Cls),
            "lasttoken" => Ok(Pooling::LastToken),
            other => Err(Error::model(
                path,
                format!("unsupported pooling mode {other:?}: expected mean, cls or lasttoken"),
            )),
        },
        _ => Err(Error::model(
            path,
            format!(
                "unsupported pooling: modes {modes:?} (concatenated); expected one of mean, cls or lasttoken"
            ),
        )),
    }
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
}
