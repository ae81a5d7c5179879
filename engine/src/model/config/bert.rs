//! BERT-family encoders' `config.json` (BERT, RoBERTa, XLM-RoBERTa, CamemBERT, MPNet, DistilBERT, ALBERT, ELECTRA,
//! DeBERTa v2 and v3, whose own keys `deberta.rs` reads; JinaBERT's, a BERT with ALiBi positions and a GeGLU
//! feed-forward).

use std::path::Path;

use serde::Deserialize;

use super::deberta::{read_deberta, DebertaConfig};
use super::{default_act, read_json};
use crate::backend::ops::{Activation, AttentionShape, PositionIds};
use crate::error::{Error, Result};

/// The subset of a Hugging Face `config.json` that a BERT-family encoder needs: BERT's, RoBERTa's and
/// XLM-RoBERTa's, MPNet's, DistilBERT's, ALBERT's, ELECTRA's, DeBERTa's (the same network: [`BertFamily`] says how
/// they differ).
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
    /// `absolute`, or `alibi` (JinaBERT: no position table, ALiBi biases on the attention scores).
    #[serde(default = "default_pos")]
    pub position_embedding_type: String,
    /// JinaBERT's feed-forward: BERT's (`original`, the default) or `geglu`.
    pub feed_forward_type: Option<String>,
    /// The padding id, which RoBERTa's position ids count from (transformers' default for RoBERTa: 1).
    pub pad_token_id: Option<u32>,
    /// Rows of MPNet's relative attention bias table.
    #[serde(default = "default_buckets")]
    pub relative_attention_num_buckets: usize,
    /// ALBERT's and ELECTRA's embedding width, projected to `hidden_size` before the layers (read through
    /// [`BertConfig::embedding_size`]).
    pub embedding_size: Option<usize>,
    /// ALBERT's groups of shared layers: layer `i` of `num_hidden_layers` runs group `i · groups / layers`, each a
    /// run of `inner_group_num` layers.
    #[serde(default = "one")]
    pub num_hidden_groups: usize,
    #[serde(default = "one")]
    pub inner_group_num: usize,
    /// DeBERTa's keys beyond BERT's (its family's only).
    #[serde(skip)]
    pub deberta: Option<DebertaConfig>,
}

fn one() -> usize {
    1
}

/// The most layers an ALBERT pass may run (`num_hidden_layers × inner_group_num`; its largest, xxlarge, runs 12).
const MAX_LAYER_RUNS: usize = 4096;

fn default_buckets() -> usize {
    32
}

/// The encoders that run as BERT's network: BERT itself; RoBERTa (and XLM-RoBERTa), whose position ids count
/// after the padding id; MPNet, which numbers positions as RoBERTa, has no token types, and adds a relative
/// position bias to its attention scores; DistilBERT, BERT without token types under other names; ALBERT, whose
/// narrower embeddings are projected to the layers' width and whose layers share their weights in groups; ELECTRA,
/// BERT's layers behind ALBERT's narrower embeddings; DeBERTa v2 and v3, BERT's layers under other names with
/// disentangled attention (each score also reads the key's relative position) and, in v3, no position table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BertFamily {
    Bert,
    Roberta,
    Mpnet,
    DistilBert,
    Albert,
    Electra,
    Deberta,
}

/// Each family's `model_type`s and architecture names.
const FAMILIES: [(BertFamily, &str, &[&str]); 9] = [
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
    (
        BertFamily::Albert,
        "albert",
        &["AlbertModel", "AlbertForMaskedLM", "AlbertForPreTraining"],
    ),
    (
        BertFamily::Electra,
        "electra",
        &[
            "ElectraModel",
            "ElectraForPreTraining",
            "ElectraForMaskedLM",
        ],
    ),
    (
        BertFamily::Deberta,
        "deberta-v2",
        &["DebertaV2Model", "DebertaV2ForMaskedLM"],
    ),
];

impl BertFamily {
    /// The family a config's `model_type` or `architectures` name, if any.
    pub(super) fn of(model_type: &str, architectures: &[String]) -> Option<BertFamily> {
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
            BertFamily::Bert
            | BertFamily::DistilBert
            | BertFamily::Albert
            | BertFamily::Electra
            | BertFamily::Deberta => PositionIds::Index,
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

    /// The embeddings' width: ALBERT's and ELECTRA's own (128 unless the config says), the hidden size elsewhere.
    pub fn embedding_size(&self) -> usize {
        match self.family() {
            BertFamily::Albert | BertFamily::Electra => self.embedding_size.unwrap_or(128),
            BertFamily::Deberta => self.embedding_size.unwrap_or(self.hidden_size),
            _ => self.hidden_size,
        }
    }

    /// The feed-forward's activation: the exact GELU, or its tanh approximation (ALBERT's `gelu_new`).
    pub fn activation(&self) -> Activation {
        match self.hidden_act.as_str() {
            "gelu_new" | "gelu_pytorch_tanh" => Activation::GeluTanh,
            _ => Activation::Gelu,
        }
    }

    /// How many sets of layer weights the checkpoint holds: one per layer, or ALBERT's `inner_group_num` in each
    /// of its groups.
    pub fn layer_sets(&self) -> usize {
        match self.family() {
            BertFamily::Albert => self.num_hidden_groups * self.inner_group_num,
            _ => self.num_hidden_layers,
        }
    }

    /// The set of layer weights each step of the pass runs, in order: each layer its own, or each of ALBERT's
    /// layers its group's `inner_group_num` in turn (group `int(i / (layers / groups))`, as transformers picks it;
    /// set `g · inner + j` is group g's layer j).
    pub fn layer_order(&self) -> Vec<usize> {
        let layers = self.num_hidden_layers;
        match self.family() {
            BertFamily::Albert => {
                let inner = self.inner_group_num;
                (0..layers)
                    .flat_map(|i| {
                        let group = i * self.num_hidden_groups / layers;
                        (0..inner).map(move |j| group * inner + j)
                    })
                    .collect()
            }
            _ => (0..layers).collect(),
        }
    }

    /// JinaBERT's ALiBi positions instead of a position table.
    pub fn alibi(&self) -> bool {
        self.position_embedding_type == "alibi"
    }

    /// JinaBERT's GeGLU feed-forward (`mlp.gated_layers`, `mlp.wo`, `mlp.layernorm`) instead of BERT's.
    pub fn gated_feed_forward(&self) -> bool {
        self.feed_forward_type.as_deref() == Some("geglu")
    }

    /// Every layer's attention: bidirectional over the whole sequence; DeBERTa's scaled by all its terms and
    /// disentangled where its relative attention is on.
    pub fn attention(&self) -> AttentionShape {
        let heads = self.num_attention_heads;
        let head_dim = self.hidden_size / heads.max(1);
        let shape = AttentionShape::new(heads, heads, head_dim);
        match &self.deberta {
            Some(c) => AttentionShape {
                scale: 1.0 / ((head_dim * c.terms()) as f32).sqrt(),
                disentangled: c.disentangled(),
                ..shape
            },
            None => shape,
        }
    }

    /// Whether the embeddings add a position table's rows: not with JinaBERT's ALiBi, nor in DeBERTa without
    /// `position_biased_input`.
    pub fn position_table(&self) -> bool {
        !self.alibi()
            && self
                .deberta
                .as_ref()
                .is_none_or(|c| c.position_biased_input)
    }
}

fn default_type_vocab() -> usize {
    2
}
fn default_eps() -> f64 {
    1e-12
}
fn default_pos() -> String {
    "absolute".into()
}

pub(super) fn read_bert(config_path: &Path) -> Result<BertConfig> {
    let mut config: BertConfig = read_json(config_path)?;
    if !["gelu", "gelu_new", "gelu_pytorch_tanh"].contains(&config.hidden_act.as_str()) {
        return Err(Error::model(
            config_path,
            format!(
                "unsupported hidden_act {:?} (DistilBERT's `activation`): expected \"gelu\", \"gelu_new\" or \
                 \"gelu_pytorch_tanh\"",
                config.hidden_act
            ),
        ));
    }
    let family = config.family();
    if family == BertFamily::Deberta {
        read_deberta(config_path, &mut config)?;
    }
    if family == BertFamily::Albert {
        let (layers, groups, inner) = (
            config.num_hidden_layers,
            config.num_hidden_groups,
            config.inner_group_num,
        );
        // Bounds before anything is sized by them: a group no layer runs, or more layer runs than any model
        // has, is a broken file.
        let why = if groups == 0 || inner == 0 {
            Some("ALBERT needs at least one of each")
        } else if groups > layers {
            Some("more groups than layers")
        } else if layers
            .checked_mul(inner)
            .is_none_or(|runs| runs > MAX_LAYER_RUNS)
        {
            Some("more layer runs than 4096")
        } else {
            None
        };
        if let Some(why) = why {
            return Err(Error::model(
                config_path,
                format!(
                    "num_hidden_layers {layers}, num_hidden_groups {groups}, inner_group_num {inner}: {why}"
                ),
            ));
        }
    }
    let jina = family == BertFamily::Bert;
    if !(config.position_embedding_type == "absolute" || jina && config.alibi()) {
        // Jina's XLM-RoBERTa for its remote code (jina-embeddings-v3's, its rerankers') has rotary positions.
        let whose = if config.position_embedding_type == "rotary" {
            " (Jina's XLM-RoBERTa for its remote code; for jina-embeddings-v3, with its LoRA adapters, \
             use jinaai/jina-embeddings-v3-hf, which the engine runs)"
        } else {
            ""
        };
        return Err(Error::model(
            config_path,
            format!(
                "unsupported position_embedding_type {:?}{whose}: expected \"absolute\" (or JinaBERT's \"alibi\")",
                config.position_embedding_type
            ),
        ));
    }
    match config.feed_forward_type.as_deref() {
        None | Some("original") => {}
        Some("geglu") if jina => {}
        Some(other) => {
            return Err(Error::model(
                config_path,
                format!(
                    "unsupported feed_forward_type {other:?}: expected \"original\" (or JinaBERT's \"geglu\")"
                ),
            ))
        }
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

    /// ALBERT's layers run its groups as transformers' `int(i / (layers / groups))` picks them, each group's
    /// inner layers in turn; its and ELECTRA's embeddings are 128 wide unless the config says; `gelu_new` is
    /// GELU's tanh form.
    #[test]
    fn albert_groups_embedding_widths_and_activations() {
        use serde_json::json;
        let order = |layers: usize, groups: usize, inner: usize| {
            let c = config(json!({"model_type": "albert", "num_hidden_layers": layers,
                "num_hidden_groups": groups, "inner_group_num": inner}));
            (c.layer_sets(), c.layer_order())
        };
        assert_eq!(order(5, 2, 1), (2, vec![0, 0, 0, 1, 1]));
        assert_eq!(order(12, 1, 1), (1, vec![0; 12]));
        assert_eq!(order(4, 4, 1), (4, vec![0, 1, 2, 3]));
        assert_eq!(order(3, 2, 2), (4, vec![0, 1, 0, 1, 2, 3]));
        let bert = config(json!({"model_type": "bert", "num_hidden_layers": 3}));
        assert_eq!((bert.layer_sets(), bert.layer_order()), (3, vec![0, 1, 2]));
        for (json, width) in [
            (json!({"model_type": "albert"}), 128),
            (json!({"model_type": "electra", "embedding_size": 4}), 4),
            (json!({"model_type": "bert", "embedding_size": 4}), 8),
        ] {
            assert_eq!(config(json.clone()).embedding_size(), width, "{json}");
        }
        assert_eq!(
            config(json!({"hidden_act": "gelu_new"})).activation(),
            Activation::GeluTanh
        );
        assert_eq!(config(json!({})).activation(), Activation::Gelu);
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

    /// JinaBERT's ALiBi and GeGLU are read for a BERT config; elsewhere, and its other feed-forwards, refused
    /// by name (jina-embeddings-v3's rotary XLM-R config naming the checkpoint the engine runs).
    #[test]
    fn jinabert_settings_are_read_and_the_rest_refused() {
        let read = |extra: serde_json::Value| {
            let dir = tempfile::tempdir().expect("tempdir");
            let path = dir.path().join("config.json");
            let mut json = serde_json::json!({"vocab_size": 10, "hidden_size": 8, "num_hidden_layers": 1,
                "num_attention_heads": 2, "intermediate_size": 16, "max_position_embeddings": 40});
            for (k, v) in extra.as_object().expect("object") {
                json[k] = v.clone();
            }
            std::fs::write(&path, json.to_string()).expect("write");
            read_bert(&path).map_err(|e| e.to_string())
        };
        let jina = read(
            serde_json::json!({"model_type": "bert", "position_embedding_type": "alibi",
            "feed_forward_type": "geglu"}),
        )
        .expect("JinaBERT");
        assert!(jina.alibi() && jina.gated_feed_forward());
        let plain =
            read(serde_json::json!({"model_type": "bert", "feed_forward_type": "original"}))
                .expect("BERT's feed-forward by name");
        assert!(!plain.alibi() && !plain.gated_feed_forward());
        for (extra, needle) in [
            (
                serde_json::json!({"model_type": "bert", "feed_forward_type": "reglu"}),
                "feed_forward_type \"reglu\"",
            ),
            (
                serde_json::json!({"model_type": "roberta", "position_embedding_type": "alibi"}),
                "position_embedding_type \"alibi\"",
            ),
            (
                serde_json::json!({"model_type": "xlm-roberta", "position_embedding_type": "rotary"}),
                "use jinaai/jina-embeddings-v3-hf",
            ),
            (
                serde_json::json!({"model_type": "bert", "position_embedding_type": "relative_key"}),
                "position_embedding_type \"relative_key\"",
            ),
            (
                serde_json::json!({"model_type": "albert", "num_hidden_groups": 0}),
                "ALBERT needs at least one of each",
            ),
            (
                serde_json::json!({"model_type": "albert", "num_hidden_groups": 2}),
                "more groups than layers",
            ),
            (
                serde_json::json!({"model_type": "albert", "inner_group_num": usize::MAX}),
                "more layer runs than 4096",
            ),
            (
                serde_json::json!({"model_type": "bert", "hidden_act": "relu"}),
                "unsupported hidden_act \"relu\"",
            ),
        ] {
            let e = read(extra.clone()).expect_err("refused");
            assert!(e.contains(needle), "{extra}: {e}");
        }
    }
}
