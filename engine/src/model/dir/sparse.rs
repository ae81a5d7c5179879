//! A sparse model: sentence-transformers' SparseEncoder of SPLADE's shape (naver's splade-v3 and
//! splade-cocondenser, opensearch-neural-sparse, granite-embedding-sparse): a Transformer module of task fill-mask,
//! whose `*ForMaskedLM` head gives every token a logit per vocabulary entry, then SpladePooling, each entry's
//! `log(1 + ReLU(logit))` (twice the log for `log1p_relu`) at its maximum over the tokens. The embedding is one
//! weight per vocabulary entry, most of them 0.

use std::path::Path;

use serde::Deserialize;

use super::{classifier, DenseModule, HeadNorm};
use crate::backend::ops::Activation;
use crate::error::{Error, Result};
use crate::model::{read_json, BertFamily, ModelConfig};

/// SPLADE's head over every token: the MLM head's transform (dense, activation, LayerNorm), then the vocabulary
/// projection, through SpladePooling's activation before the max over the tokens.
#[derive(Clone, Debug, PartialEq)]
pub struct SparseModule {
    pub transform: DenseModule,
    /// The projection's weight (`vocab` × hidden) and its bias, each the first of its names the checkpoint holds:
    /// the decoder's own, else (where the config ties them) what transformers ties it to, the word embeddings and
    /// the head's bias. transformers 5 uses a decoder tensor the checkpoint holds even under a tying config. No
    /// bias names: the decoder has none (ModernBERT's `decoder_bias: false`).
    pub decoder: Vec<String>,
    pub decoder_bias: Vec<String>,
    pub vocab: usize,
    pub activation: Activation,
    /// sentence-transformers' `max_active_dims`: each embedding keeps its this many largest weights, the rest
    /// zeroed (`config_sentence_transformers.json`'s, or `--max-active-dims`); `None` keeps them all.
    pub max_active_dims: Option<usize>,
}

/// SpladePooling's `config.json`.
#[derive(Deserialize)]
struct SpladeFile {
    #[serde(default = "max")]
    pooling_strategy: String,
    #[serde(default = "relu")]
    activation_function: String,
}

impl Default for SpladeFile {
    fn default() -> Self {
        SpladeFile {
            pooling_strategy: max(),
            activation_function: relu(),
        }
    }
}

fn max() -> String {
    "max".into()
}

fn relu() -> String {
    "relu".into()
}

/// Just enough of `config.json` to know the checkpoint's head: whether the decoder may be the word embeddings, and
/// whether it has a bias (ModernBERT's `decoder_bias`; the other families' always do).
#[derive(Deserialize)]
struct HeadFile {
    #[serde(default)]
    architectures: Vec<String>,
    #[serde(default = "yes")]
    tie_word_embeddings: bool,
    #[serde(default = "yes")]
    decoder_bias: bool,
}

fn yes() -> bool {
    true
}

/// The MLM head of each family we read: the transform's and its LayerNorm's tensor names, the decoder's own
/// weight and bias, and what transformers ties them to by default, the word embeddings and the head's bias
/// (BertLMPredictionHead, DistilBertForMaskedLM's vocab_* layers, RobertaLMHead — XLM-R's and CamemBERT's — and
/// MPNetLMHead, whose activation is always the exact GELU; DistilBERT's projector keeps its own bias).
fn head_names(family: BertFamily) -> Option<[&'static str; 6]> {
    Some(match family {
        BertFamily::Bert => [
            "cls.predictions.transform.dense",
            "cls.predictions.transform.LayerNorm",
            "cls.predictions.decoder.weight",
            "cls.predictions.decoder.bias",
            "bert.embeddings.word_embeddings.weight",
            "cls.predictions.bias",
        ],
        BertFamily::DistilBert => [
            "vocab_transform",
            "vocab_layer_norm",
            "vocab_projector.weight",
            "vocab_projector.bias",
            "distilbert.embeddings.word_embeddings.weight",
            "vocab_projector.bias",
        ],
        BertFamily::Roberta => [
            "lm_head.dense",
            "lm_head.layer_norm",
            "lm_head.decoder.weight",
            "lm_head.decoder.bias",
            "roberta.embeddings.word_embeddings.weight",
            "lm_head.bias",
        ],
        BertFamily::Mpnet => [
            "lm_head.dense",
            "lm_head.layer_norm",
            "lm_head.decoder.weight",
            "lm_head.decoder.bias",
            "mpnet.embeddings.word_embeddings.weight",
            "lm_head.bias",
        ],
        BertFamily::Albert | BertFamily::Electra | BertFamily::Deberta => return None,
    })
}

/// The SparseEncoder whose SpladePooling module is in `folder` (none: SpladePooling's defaults, as
/// `--pooling splade` asks of a bare checkpoint), over the checkpoint `config_path` describes.
pub(super) fn read(
    folder: Option<&Path>,
    config_path: &Path,
    config: &ModelConfig,
    weights_path: &Path,
) -> Result<SparseModule> {
    let pooling_path = folder.map_or_else(|| config_path.to_owned(), |f| f.join("config.json"));
    let f: SpladeFile = match folder {
        Some(_) if pooling_path.is_file() => read_json(&pooling_path)?,
        _ => SpladeFile::default(),
    };
    // Max pooling commutes with the activation (both monotone): the backend applies it to every logit.
    if f.pooling_strategy != "max" {
        return Err(Error::model(
            &pooling_path,
            format!(
                "unsupported pooling_strategy {:?}: SPLADE's max is run (the original SPLADE's sum is not)",
                f.pooling_strategy
            ),
        ));
    }
    let activation = match f.activation_function.as_str() {
        "relu" => Activation::Log1pRelu,
        "log1p_relu" => Activation::Log1pLog1pRelu,
        other => {
            return Err(Error::model(
                &pooling_path,
                format!("unsupported activation_function {other:?}: expected relu or log1p_relu"),
            ))
        }
    };
    let unsupported = |what: String| {
        Error::model(
            config_path,
            format!(
                "a SparseEncoder over {what}: SPLADE runs on BertForMaskedLM, DistilBertForMaskedLM, \
                 RobertaForMaskedLM (XLM-R's, CamemBERT's), MPNetForMaskedLM and ModernBertForMaskedLM's heads"
            ),
        )
    };
    let head: HeadFile = read_json(config_path)?;
    // A checkpoint without its MLM head (a bare BertModel) would fail only at load, naming a tensor.
    if !head.architectures.is_empty()
        && !head
            .architectures
            .iter()
            .any(|a| a.ends_with("ForMaskedLM"))
    {
        return Err(unsupported(format!(
            "{}, which holds no MLM head",
            head.architectures.join(", ")
        )));
    }
    let tied = head.tie_word_embeddings;
    let (transform, decoder, decoder_bias, vocab) = match config {
        ModelConfig::Bert(c) => {
            let Some([dense, norm, own, own_bias, embeddings, bias]) = head_names(c.family())
            else {
                return Err(unsupported(format!("{:?}", c.family())));
            };
            let activation = match c.family() {
                BertFamily::Roberta | BertFamily::Mpnet => Activation::Gelu,
                _ => c.activation(),
            };
            let transform = DenseModule {
                weights_path: weights_path.to_owned(),
                name: dense.into(),
                in_features: c.hidden_size,
                out_features: c.hidden_size,
                bias: true,
                activation,
                norm: Some(HeadNorm {
                    name: norm.into(),
                    eps: c.norm_eps(),
                    bias: true,
                }),
                logit_rows: None,
            };
            let decoder = names(own, embeddings, tied);
            (
                transform,
                decoder,
                names(own_bias, bias, tied),
                c.vocab_size,
            )
        }
        // ModernBertForMaskedLM: `head` (ModernBertPredictionHead), then `decoder`, tied to the token embeddings;
        // its bias only where `decoder_bias`.
        ModelConfig::ModernBert(c) => {
            let transform =
                classifier::modernbert_transform(config_path, weights_path, c.hidden_size)?;
            let decoder = names(
                "decoder.weight",
                "model.embeddings.tok_embeddings.weight",
                tied,
            );
            let bias = match head.decoder_bias {
                true => vec!["decoder.bias".to_owned()],
                false => Vec::new(),
            };
            (transform, decoder, bias, c.vocab_size)
        }
        _ => return Err(unsupported("this architecture".into())),
    };
    Ok(SparseModule {
        transform,
        decoder,
        decoder_bias,
        vocab,
        activation,
        max_active_dims: None,
    })
}

/// A decoder tensor's names in the order they are looked for: its own, then what it is tied to where it is.
fn names(own: &str, tied_to: &str, tied: bool) -> Vec<String> {
    let mut names = vec![own.to_owned()];
    if tied && tied_to != own {
        names.push(tied_to.to_owned());
    }
    names
}
