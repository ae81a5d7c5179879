//! A cross-encoder: transformers' `*ForSequenceClassification` checkpoint (what sentence-transformers' CrossEncoder
//! loads), read as the first token's hidden state (ModernBERT's: or the tokens' mean, as its config says; a
//! decoder's: its last token's) through the architecture's classification head, one score per label. The head's layers are Dense modules over that row.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use super::{DenseModule, HeadNorm, Pooling};
use crate::backend::ops::Activation;
use crate::error::{Error, Result};
use crate::model::read_json;

/// What a cross-encoder scores: one logit per label, in the order of its `id2label`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Classifier {
    pub labels: Vec<String>,
    /// A causal decoder's head reads the last token that is not this one (its config's `pad_token_id`, as
    /// transformers pools): a sequence's trailing ones are dropped before the forward, which leaves the token read
    /// as it was (it never sees those after it).
    #[serde(skip)]
    pub skips_trailing: Option<u32>,
}

impl Classifier {
    /// Drops `ids`' trailing tokens the head skips, keeping the first however many there are (transformers then
    /// reads position 0).
    pub fn trim(&self, ids: &mut Vec<u32>) {
        if let Some(pad) = self.skips_trailing {
            while ids.len() > 1 && ids.last() == Some(&pad) {
                ids.pop();
            }
        }
    }
}

/// A head's layers: each one's tensor name and activation, in order.
type Layers = &'static [(&'static str, Activation)];

/// Just enough of `config.json` to find a classification head and its labels.
#[derive(Deserialize)]
struct HeadFile {
    #[serde(default)]
    architectures: Vec<String>,
    /// Keys are the labels' indices as strings (`{"0": "LABEL_0"}`).
    #[serde(default)]
    id2label: BTreeMap<String, String>,
    num_labels: Option<usize>,
    /// ModernBertForSequenceClassification's head: its pooling (`cls` or `mean`), its dense layer's bias and
    /// activation, and the LayerNorm after it (transformers' defaults when absent).
    #[serde(default = "cls")]
    classifier_pooling: String,
    #[serde(default)]
    classifier_bias: bool,
    #[serde(default = "gelu")]
    classifier_activation: String,
    #[serde(default = "norm_eps")]
    norm_eps: f64,
    #[serde(default)]
    norm_bias: bool,
    /// A decoder's padding, which its head's pooling skips at the end.
    pad_token_id: Option<u32>,
    /// DeBERTa's ContextPooler's activation.
    #[serde(default = "gelu")]
    pooler_hidden_act: String,
}

fn cls() -> String {
    "cls".into()
}

fn gelu() -> String {
    "gelu".into()
}

fn norm_eps() -> f64 {
    1e-5
}

/// One layer of a head: its tensors' name, activation, bias, and a LayerNorm after it.
struct Layer {
    name: &'static str,
    activation: Activation,
    bias: bool,
    norm: Option<HeadNorm>,
}

impl Layer {
    fn plain(&(name, activation): &(&'static str, Activation)) -> Layer {
        Layer {
            name,
            activation,
            bias: true,
            norm: None,
        }
    }
}

/// The layers of each head we read, from the CLS row: (tensor name, activation) in order, the last one's output
/// the logits. BertForSequenceClassification: the pooler's tanh projection, then the classifier;
/// RobertaClassificationHead (XLM-R's, CamemBERT's) and MPNet's: `classifier.dense` with tanh, then
/// `classifier.out_proj`; DistilBERT: `pre_classifier` with ReLU, then the classifier; ElectraClassificationHead:
/// RoBERTa's layers with exact GELU in place of tanh; GTE's (transformers' and Alibaba's): BERT's, GtePooler's
/// tanh under the base model's prefix.
const HEADS: [(&[&str], Layers); 7] = [
    (
        &["BertForSequenceClassification"],
        &[
            ("bert.pooler.dense", Activation::Tanh),
            ("classifier", Activation::None),
        ],
    ),
    (
        &["AlbertForSequenceClassification"],
        &[
            ("albert.pooler", Activation::Tanh),
            ("classifier", Activation::None),
        ],
    ),
    (
        &[
            "RobertaForSequenceClassification",
            "XLMRobertaForSequenceClassification",
            "CamembertForSequenceClassification",
            "MPNetForSequenceClassification",
        ],
        &[
            ("classifier.dense", Activation::Tanh),
            ("classifier.out_proj", Activation::None),
        ],
    ),
    (
        &["ElectraForSequenceClassification"],
        &[
            ("classifier.dense", Activation::Gelu),
            ("classifier.out_proj", Activation::None),
        ],
    ),
    (
        &["GteForSequenceClassification"],
        &[
            ("gte.pooler.dense", Activation::Tanh),
            ("classifier", Activation::None),
        ],
    ),
    // Alibaba's remote code for GTE (gte-multilingual-reranker-base): its NewPooler under `new.`.
    (
        &["NewForSequenceClassification"],
        &[
            ("new.pooler.dense", Activation::Tanh),
            ("classifier", Activation::None),
        ],
    ),
    (
        &["DistilBertForSequenceClassification"],
        &[
            ("pre_classifier", Activation::Relu),
            ("classifier", Activation::None),
        ],
    ),
];

/// The decoders' sequence classifiers (tomaarsen/Qwen3-Reranker-0.6B-seq-cls's shape): `score`, without a bias,
/// over the last token's final state (transformers reads the last token that is not its `pad_token_id`:
/// [`Classifier::skips_trailing`]).
const DECODER_HEADS: [&str; 4] = [
    "LlamaForSequenceClassification",
    "MistralForSequenceClassification",
    "Qwen2ForSequenceClassification",
    "Qwen3ForSequenceClassification",
];

/// ModernBertForSequenceClassification's head, as its config sets it: ModernBertPredictionHead (`head.dense`, its
/// activation, `head.norm`), then the classifier; over the first token or the tokens' mean.
fn modernbert(config_path: &Path, f: &HeadFile) -> Result<(Vec<Layer>, Pooling)> {
    let pooling = match f.classifier_pooling.as_str() {
        "cls" => Pooling::Cls,
        "mean" => Pooling::Mean,
        other => {
            return Err(Error::model(
                config_path,
                format!("unsupported classifier_pooling {other:?}: expected cls or mean"),
            ))
        }
    };
    Ok((
        vec![
            prediction_head(config_path, f)?,
            Layer::plain(&("classifier", Activation::None)),
        ],
        pooling,
    ))
}

/// The activation transformers' `ACT2FN[name]` is, for the config's `key`.
fn activation(config_path: &Path, key: &str, name: &str) -> Result<Activation> {
    Ok(match name {
        "gelu" => Activation::Gelu,
        "gelu_new" | "gelu_pytorch_tanh" => Activation::GeluTanh,
        "tanh" => Activation::Tanh,
        "relu" => Activation::Relu,
        "linear" | "identity" => Activation::None,
        other => {
            return Err(Error::model(
                config_path,
                format!("unsupported {key} {other:?}"),
            ))
        }
    })
}

/// DebertaV2ForSequenceClassification's head: ContextPooler (`pooler.dense` over the first token, then its
/// `pooler_hidden_act`), then the classifier.
fn deberta(config_path: &Path, f: &HeadFile) -> Result<Vec<Layer>> {
    let act = activation(config_path, "pooler_hidden_act", &f.pooler_hidden_act)?;
    Ok(vec![
        Layer::plain(&("pooler.dense", act)),
        Layer::plain(&("classifier", Activation::None)),
    ])
}

/// ModernBertPredictionHead (`head.dense`, its activation, `head.norm`) as the config sets it.
fn prediction_head(config_path: &Path, f: &HeadFile) -> Result<Layer> {
    let activation = activation(
        config_path,
        "classifier_activation",
        &f.classifier_activation,
    )?;
    Ok(Layer {
        name: "head.dense",
        activation,
        bias: f.classifier_bias,
        norm: Some(HeadNorm {
            name: "head.norm".into(),
            eps: f.norm_eps,
            bias: f.norm_bias,
        }),
    })
}

/// A ModernBertForMaskedLM's transform (its ModernBertPredictionHead, as a sequence classifier's) over `hidden`
/// columns of `weights_path`, as the config at `config_path` sets it: a SPLADE head's ([`super::sparse`]).
pub(super) fn modernbert_transform(
    config_path: &Path,
    weights_path: &Path,
    hidden: usize,
) -> Result<DenseModule> {
    let f: HeadFile = read_json(config_path)?;
    let layer = prediction_head(config_path, &f)?;
    Ok(DenseModule {
        weights_path: weights_path.to_owned(),
        name: layer.name.into(),
        in_features: hidden,
        out_features: hidden,
        bias: layer.bias,
        activation: layer.activation,
        norm: layer.norm,
        logit_rows: None,
    })
}

/// The classification head of the checkpoint `config_path` describes, as Dense modules over rows of `hidden`
/// columns reading `weights_path`, the pooling it reads, and its labels; `None` when the checkpoint is not a
/// sequence classifier. A classifier whose head is not one we read is refused, not run as an embedding model.
pub(super) fn read(
    config_path: &Path,
    weights_path: &Path,
    hidden: usize,
) -> Result<Option<(Vec<DenseModule>, Pooling, Classifier)>> {
    let f: HeadFile = read_json(config_path)?;
    let Some(arch) = f
        .architectures
        .iter()
        .find(|a| a.ends_with("ForSequenceClassification"))
    else {
        return Ok(None);
    };
    let decoder = DECODER_HEADS.contains(&arch.as_str());
    let (layers, pooling) = match HEADS
        .iter()
        .find(|(names, _)| names.contains(&arch.as_str()))
    {
        Some((_, layers)) => (layers.iter().map(Layer::plain).collect(), Pooling::Cls),
        None if arch == "ModernBertForSequenceClassification" => modernbert(config_path, &f)?,
        None if arch == "DebertaV2ForSequenceClassification" => {
            (deberta(config_path, &f)?, Pooling::Cls)
        }
        None if decoder => (
            vec![Layer {
                bias: false,
                ..Layer::plain(&("score", Activation::None))
            }],
            Pooling::LastToken,
        ),
        None => {
            return Err(Error::model(
                config_path,
                format!(
                    "unsupported cross-encoder {arch}: expected a classification head of {}, \
                     ModernBertForSequenceClassification, DebertaV2ForSequenceClassification, {}",
                    HEADS
                        .iter()
                        .flat_map(|(names, _)| names.iter().copied())
                        .collect::<Vec<_>>()
                        .join(", "),
                    DECODER_HEADS.join(", ")
                ),
            ));
        }
    };
    // transformers' labels: `id2label` in index order, else `num_labels` (2 by default) named LABEL_i.
    let mut indexed = Vec::with_capacity(f.id2label.len());
    for (key, label) in f.id2label {
        let i: usize = key.parse().map_err(|_| {
            Error::model(
                config_path,
                format!("id2label has a key {key:?} that is not an index"),
            )
        })?;
        indexed.push((i, label));
    }
    indexed.sort();
    let labels: Vec<String> = match indexed.is_empty() {
        true => (0..f.num_labels.unwrap_or(2))
            .map(|i| format!("LABEL_{i}"))
            .collect(),
        false => {
            if indexed.iter().enumerate().any(|(i, (at, _))| i != *at) {
                return Err(Error::model(
                    config_path,
                    "id2label's indices are not 0, 1, 2, …",
                ));
            }
            indexed.into_iter().map(|(_, label)| label).collect()
        }
    };
    if labels.is_empty() {
        return Err(Error::model(config_path, "a classifier without labels"));
    }
    let n = layers.len();
    let dense = layers
        .into_iter()
        .enumerate()
        .map(|(i, layer)| DenseModule {
            weights_path: weights_path.to_owned(),
            name: layer.name.into(),
            in_features: hidden,
            out_features: if i + 1 == n { labels.len() } else { hidden },
            bias: layer.bias,
            activation: layer.activation,
            norm: layer.norm,
            logit_rows: None,
        })
        .collect();
    let skips_trailing = f.pad_token_id.filter(|_| decoder);
    Ok(Some((
        dense,
        pooling,
        Classifier {
            labels,
            skips_trailing,
        },
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(config: serde_json::Value) -> Result<(Vec<Layer>, Pooling)> {
        let f: HeadFile = serde_json::from_value(config).expect("a config");
        modernbert(Path::new("config.json"), &f)
    }

    /// ModernBERT's head follows its config: transformers' defaults (CLS, no biases, exact GELU, eps 1e-5), and
    /// each setting read where given; what the head cannot run is refused, naming the key.
    #[test]
    fn modernbert_head_reads_its_pooling_biases_activation_and_norm() {
        let (layers, pooling) = head(serde_json::json!({})).expect("defaults");
        assert_eq!(pooling, Pooling::Cls);
        let (dense, last) = (&layers[0], &layers[1]);
        assert_eq!(
            (dense.name, dense.bias, dense.activation),
            ("head.dense", false, Activation::Gelu)
        );
        let norm = dense.norm.as_ref().expect("a norm");
        assert_eq!(
            (norm.name.as_str(), norm.eps, norm.bias),
            ("head.norm", 1e-5, false)
        );
        assert_eq!(
            (last.name, last.bias, last.norm.is_none()),
            ("classifier", true, true)
        );
        let (layers, pooling) = head(serde_json::json!({
            "classifier_pooling": "mean", "classifier_bias": true, "classifier_activation": "gelu_pytorch_tanh",
            "norm_eps": 1e-6, "norm_bias": true,
        }))
        .expect("settings");
        assert_eq!(pooling, Pooling::Mean);
        assert_eq!(
            (layers[0].bias, layers[0].activation),
            (true, Activation::GeluTanh)
        );
        let norm = layers[0].norm.as_ref().expect("a norm");
        assert_eq!((norm.eps, norm.bias), (1e-6, true));
        for (key, value) in [
            ("classifier_pooling", "max"),
            ("classifier_activation", "swish"),
        ] {
            let Err(e) = head(serde_json::json!({ key: value })) else {
                panic!("{key} {value} accepted");
            };
            assert!(e.to_string().contains(key), "{e}");
        }
    }
}
