//! sentence-transformers' modules after the network: Pooling (either version's keys) and Dense.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::require;
use crate::backend::ops::Activation;
use crate::error::{Error, Result};
use crate::model::read_json;

/// How token states become one vector: one of sentence-transformers' Pooling modes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Pooling {
    /// The tokens' mean.
    Mean,
    /// The first token's hidden state.
    Cls,
    /// The last token's hidden state (sentence-transformers' `pooling_mode_lasttoken`, decoder models).
    #[serde(rename = "last_token")]
    LastToken,
    /// Each column's maximum over the tokens (`pooling_mode_max_tokens`, the NLI models of Sentence-BERT's paper).
    Max,
    /// The tokens' sum over the square root of their count (`pooling_mode_mean_sqrt_len_tokens`).
    #[serde(rename = "mean_sqrt_len")]
    MeanSqrtLen,
    /// The tokens' mean weighted by position, 1 for the first to n for the last (`pooling_mode_weightedmean_tokens`,
    /// SGPT's for decoders: later tokens have seen more of the text).
    #[serde(rename = "weighted_mean")]
    WeightedMean,
}

/// sentence-transformers' Pooling module: its modes, whose vectors are concatenated in order (each the hidden
/// states' width), and whether a prompt's tokens are pooled (`include_prompt`: INSTRUCTOR's models leave them out,
/// pooling only the text's; a CLS mode then reads the first token after the prompt).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct PoolingModule {
    /// At least one.
    pub modes: Vec<Pooling>,
    pub include_prompt: bool,
}

impl PoolingModule {
    /// One mode over every token: what a directory without a Pooling module gets (the mean).
    pub fn single(mode: Pooling) -> Self {
        PoolingModule {
            modes: vec![mode],
            include_prompt: true,
        }
    }

    /// Width of the pooled vector for hidden states of `hidden` columns.
    pub fn width(&self, hidden: usize) -> usize {
        self.modes.len() * hidden
    }
}

impl Pooling {
    /// The mode `1_Pooling/config.json` names (`pooling_mode`'s spelling; the old flags are mapped to it).
    fn from_config(mode: &str) -> Option<Pooling> {
        Some(match mode {
            "mean" => Pooling::Mean,
            "cls" => Pooling::Cls,
            "lasttoken" => Pooling::LastToken,
            "max" => Pooling::Max,
            "mean_sqrt_len_tokens" => Pooling::MeanSqrtLen,
            "weightedmean" => Pooling::WeightedMean,
            _ => return None,
        })
    }
}

/// A sentence-transformers Dense module: `act(x · Wᵀ + b)` on each pooled row (LaBSE's, distiluse's, EmbeddingGemma's
/// projections), its weights in its own folder.
#[derive(Clone, Debug, PartialEq)]
pub struct DenseModule {
    pub weights_path: PathBuf,
    /// Its tensors' name before `.weight` and `.bias`: `linear` in a Dense module's own file, a classification
    /// head's layer in a cross-encoder's checkpoint.
    pub name: String,
    pub in_features: usize,
    pub out_features: usize,
    pub bias: bool,
    pub activation: Activation,
    /// A LayerNorm after the activation (ModernBERT's classification head); sentence-transformers' Dense has none.
    pub norm: Option<HeadNorm>,
    /// LogitScore's: the weight is one row made of two of the tensor `name` (a causal LM's head), not the tensor.
    pub logit_rows: Option<super::chat::LogitRows>,
}

/// A LayerNorm's tensors' name (before `.weight` and `.bias`), its epsilon, and whether it has a bias.
#[derive(Clone, Debug, PartialEq)]
pub struct HeadNorm {
    pub name: String,
    pub eps: f64,
    pub bias: bool,
}

/// A Dense module's `config.json`.
#[derive(Deserialize)]
struct DenseFile {
    in_features: usize,
    out_features: usize,
    #[serde(default = "default_true")]
    bias: bool,
    /// A torch class path; sentence-transformers' default is tanh.
    #[serde(default = "default_dense_activation")]
    activation_function: String,
    /// What it reads and writes (sentence-transformers ≥ 6): the sentence embedding, unless set otherwise.
    module_input_name: Option<String>,
    module_output_name: Option<String>,
    /// Refused when set: the input added back to the output (sentence-transformers ≥ 6).
    #[serde(default)]
    use_residual: bool,
}

fn default_dense_activation() -> String {
    "torch.nn.modules.activation.Tanh".into()
}

impl DenseModule {
    /// Reads the module in `folder`, whose input must be `inp` wide (the previous module's output) and named `on`
    /// (`sentence_embedding`; a multi-vector model's `token_embeddings`, what a Dense module without names reads
    /// there, as sentence-transformers' MultiVectorEncoder loads PyLate's).
    pub(super) fn read(folder: &Path, inp: usize, on: &str) -> Result<Self> {
        let config_path = folder.join("config.json");
        let f: DenseFile = read_json(&config_path)?;
        // As sentence-transformers: a class outside torch is not imported (without trust_remote_code), tanh runs.
        let class = match f.activation_function.strip_prefix("torch.") {
            Some(path) => path.rsplit('.').next().unwrap_or_default(),
            None => "Tanh",
        };
        let activation = match class {
            "Tanh" => Activation::Tanh,
            "Identity" => Activation::None,
            _ => {
                return Err(Error::model(
                    &config_path,
                    format!(
                        "unsupported activation_function {:?}: expected Tanh or Identity",
                        f.activation_function
                    ),
                ))
            }
        };
        if f.use_residual {
            return Err(Error::model(
                &config_path,
                "unsupported: a Dense module with use_residual = true",
            ));
        }
        let names = [&f.module_input_name, &f.module_output_name];
        if let Some(name) = names.into_iter().flatten().find(|n| *n != on) {
            return Err(Error::model(
                &config_path,
                format!("unsupported: a Dense module on {name:?} here (on {on:?} only)"),
            ));
        }
        if f.in_features != inp || f.out_features == 0 {
            return Err(Error::model(
                &config_path,
                format!(
                    "a Dense module of {} to {} features after a module of {inp}",
                    f.in_features, f.out_features
                ),
            ));
        }
        Ok(DenseModule {
            name: "linear".into(),
            weights_path: require(
                folder.join("model.safetensors"),
                "the Dense module's weights as model.safetensors (pytorch_model.bin is not read)",
            )?,
            in_features: f.in_features,
            out_features: f.out_features,
            bias: f.bias,
            activation,
            norm: None,
            logit_rows: None,
        })
    }
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

pub(super) fn read_pooling(path: &Path) -> Result<PoolingModule> {
    let p: PoolingFile = read_json(path)?;
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
    if modes.is_empty() {
        return Err(Error::model(
            path,
            "pooling_mode is an empty list: no pooled vector",
        ));
    }
    let modes = modes
        .iter()
        .map(|mode| {
            Pooling::from_config(mode).ok_or_else(|| {
                Error::model(
                    path,
                    format!(
                        "unsupported pooling mode {mode:?}: expected mean, cls, lasttoken, max, \
                         mean_sqrt_len_tokens or weightedmean"
                    ),
                )
            })
        })
        .collect::<Result<_>>()?;
    Ok(PoolingModule {
        modes,
        include_prompt: p.include_prompt,
    })
}
