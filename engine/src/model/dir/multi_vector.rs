//! A multi-vector (late-interaction, ColBERT) model's files, read as sentence-transformers 6's MultiVectorEncoder
//! reads them: the Transformer module's `query_length`, `document_length` and `query_expansion`
//! (`sentence_bert_config.json`), token-level Dense and Normalize modules, and MultiVectorMask's skiplist; or a
//! PyLate 3 save (`model_type: "ColBERT"`: the same knobs at the top of `config_sentence_transformers.json`, its
//! prefixes as prompts, modules Transformer and Dense only, MultiVectorMask and Normalize implied).

use std::path::Path;

use serde::Deserialize;
use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::model::read_json;

/// What a multi-vector model does besides running its network over every token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MultiVectorModule {
    /// A query's token limit (`task="query"`); `None`: the model's.
    pub query_length: Option<usize>,
    /// A document's token limit (`task="document"`); `None`: the model's.
    pub document_length: Option<usize>,
    pub expansion: Option<QueryExpansion>,
    /// Tokens whose vectors are not returned (MultiVectorMask's `skiplist_words`), for the tasks in
    /// `skiplist_tasks` (`document` counts an input of no task).
    pub skiplist_words: Vec<String>,
    pub skiplist_tasks: Vec<String>,
    /// Where set, a document's vectors are only those of these tokens (ColPali's image patches).
    pub keep_only_token_ids: Option<Vec<u32>>,
    /// A PyLate save's prefixes (`[Q] `, `[unused0]`): sentence-transformers registers such a prefix (or its
    /// first word) as a special token where the tokenizer knows it but splits it.
    pub prefixes: Vec<String>,
    /// Whether a MultiVectorMask says which vectors are returned (PyLate 3's implied); without one, those the
    /// encoder attends to (an unattended expansion's are not).
    pub masked: bool,
    /// Its similarity (`similarity_fn_name`): MaxSim, or (`meanmaxsim`) MaxSim over the query's vector count.
    pub mean_max_sim: bool,
}

/// ColBERT's query expansion (sentence-transformers' `QueryExpansionConfig`): a query shorter than `length` tokens
/// is padded to it with `token` (the tokenizer's mask token where `None`), whose vectors are returned too; `fixed`
/// cuts longer queries at `length`, else they keep up to the query limit. Without `attend`, no token attends to
/// the padding (its positions read the query and are read by none).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct QueryExpansion {
    #[serde(deserialize_with = "strategy")]
    #[serde(rename = "strategy")]
    pub fixed: bool,
    #[serde(default)]
    pub attend: bool,
    #[serde(default)]
    pub token: Option<String>,
    pub length: usize,
}

fn strategy<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<bool, D::Error> {
    match String::deserialize(d)?.as_str() {
        "fixed" => Ok(true),
        "min" => Ok(false),
        other => Err(serde::de::Error::custom(format!(
            "query_expansion strategy {other:?}: expected fixed or min"
        ))),
    }
}

/// A present key's value, `null` included (`Some(None)`), told from an absent key (`None`, by `default`).
fn present<'de, D: serde::Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> std::result::Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

/// The Transformer module's multi-vector knobs (`sentence_bert_config.json`).
#[derive(Clone, Debug, Default, Deserialize)]
pub(super) struct TransformerKnobs {
    pub query_length: Option<usize>,
    pub document_length: Option<usize>,
    #[serde(default, deserialize_with = "present")]
    pub query_expansion: Option<Option<QueryExpansion>>,
}

impl TransformerKnobs {
    /// Whether any is set: only a multi-vector model's Transformer has them.
    pub fn any(&self) -> bool {
        self.query_length.is_some()
            || self.document_length.is_some()
            || matches!(self.query_expansion, Some(Some(_)))
    }
}

/// A Normalize module's `config.json` (sentence-transformers ≥ 6).
#[derive(Deserialize)]
struct NormalizeFile {
    module_input_name: Option<String>,
}

/// Whether the Normalize module in `folder` of a multi-vector model normalizes its token vectors
/// (`module_input_name: token_embeddings`); on the default, the sentence embedding, which such a model has not, it
/// does nothing, as in sentence-transformers.
pub(super) fn normalizes_tokens(folder: &Path) -> Result<bool> {
    let path = folder.join("config.json");
    let name = match path.is_file() {
        true => read_json::<NormalizeFile>(&path)?.module_input_name,
        false => None,
    };
    match name.as_deref().unwrap_or("sentence_embedding") {
        "token_embeddings" => Ok(true),
        "sentence_embedding" => Ok(false),
        other => Err(Error::model(
            &path,
            format!("unsupported: a Normalize module on {other:?}"),
        )),
    }
}

/// MultiVectorMask's `config.json`.
#[derive(Deserialize)]
struct MaskFile {
    #[serde(default)]
    skiplist_words: Option<Vec<String>>,
    #[serde(default)]
    skiplist_tasks: Option<SkiplistTasks>,
    #[serde(default)]
    keep_only_token_ids: Option<Vec<u32>>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum SkiplistTasks {
    One(String),
    Several(Vec<String>),
}

/// A PyLate 3 save's keys in `config_sentence_transformers.json`.
#[derive(Default, Deserialize)]
struct PyLateConfig {
    query_prefix: Option<String>,
    document_prefix: Option<String>,
    query_length: Option<usize>,
    document_length: Option<usize>,
    #[serde(default, deserialize_with = "present")]
    query_expansion: Option<Option<QueryExpansion>>,
    do_query_expansion: Option<bool>,
    attend_to_expansion_tokens: Option<bool>,
    attend_to_mask_tokens: Option<bool>,
    skiplist_words: Option<Vec<String>>,
}

/// PyLate's skiplist where a save names none (Python's `string.punctuation`).
const PUNCTUATION: &str = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~";

/// The model's multi-vector module from its Transformer's knobs, its MultiVectorMask's folder (if it has the
/// module), and `config_sentence_transformers.json`'s other keys (`st`, at `st_path`; `pylate` where its
/// `model_type` is PyLate 3's); `prompts` gets a PyLate save's prefixes put before its prompts, as
/// sentence-transformers puts them.
pub(super) fn read(
    knobs: &TransformerKnobs,
    mask: Option<&Path>,
    (st, pylate, st_path): (&Map<String, Value>, bool, &Path),
    prompts: &mut std::collections::BTreeMap<String, Option<String>>,
) -> Result<MultiVectorModule> {
    let legacy: PyLateConfig = serde_json::from_value(Value::Object(st.clone()))
        .map_err(|e| Error::model(st_path, e.to_string()))?;
    if let Some(Some(_)) = st.get("truncate_dim").map(|v| v.as_u64()) {
        return Err(Error::model(
            st_path,
            "unsupported: a multi-vector model's truncate_dim (its vectors cut and normalized again)",
        ));
    }
    let mut prefixes = Vec::new();
    for (prefix, task) in [
        (&legacy.query_prefix, "query"),
        (&legacy.document_prefix, "document"),
    ] {
        if let Some(prefix) = prefix {
            let prompt = prompts.entry(task.into()).or_default();
            let rest = prompt.as_deref().unwrap_or_default();
            *prompt = Some(format!(
                "{prefix}{}",
                rest.strip_prefix(prefix.as_str()).unwrap_or(rest)
            ));
            if !prefix.trim().is_empty() {
                prefixes.push(prefix.clone());
            }
        }
    }
    // PyLate's flat keys, where the save has any, under the Transformer's own (which win).
    let markers = [
        "query_length",
        "document_length",
        "query_expansion",
        "do_query_expansion",
        "attend_to_expansion_tokens",
        "attend_to_mask_tokens",
        "query_prefix",
        "document_prefix",
        "skiplist_words",
    ];
    let marked = markers.iter().any(|k| st.contains_key(*k));
    let mut query_length = legacy.query_length;
    let legacy_expansion = match legacy.query_expansion {
        Some(e) => e,
        None if marked && legacy.do_query_expansion == Some(false) => None,
        None if marked => {
            // The pad target was PyLate's query_length (ColBERT's 32 by default).
            let length = query_length.take().unwrap_or(32);
            let attend = legacy
                .attend_to_expansion_tokens
                .or(legacy.attend_to_mask_tokens)
                .unwrap_or(false);
            Some(QueryExpansion {
                fixed: true,
                attend,
                token: None,
                length,
            })
        }
        None => None,
    };
    let expansion = match &knobs.query_expansion {
        Some(e) => e.clone(),
        None => legacy_expansion,
    };
    let query_length = knobs.query_length.or(query_length);
    if let Some(e) = &expansion {
        if e.length == 0 {
            return Err(Error::model(st_path, "query_expansion length 0"));
        }
        if query_length.is_some_and(|q| q < e.length) {
            return Err(Error::model(
                st_path,
                "query_length below query_expansion's length (sentence-transformers refuses it)",
            ));
        }
    }
    let (mut skiplist_words, mut skiplist_tasks, mut keep_only_token_ids) =
        (Vec::new(), vec!["document".to_owned()], None);
    match mask {
        Some(folder) => {
            let file: MaskFile = read_json(&folder.join("config.json"))?;
            skiplist_words = file.skiplist_words.unwrap_or_default();
            skiplist_tasks = match file.skiplist_tasks {
                Some(SkiplistTasks::One(t)) => vec![t],
                Some(SkiplistTasks::Several(t)) => t,
                None => skiplist_tasks,
            };
            // An empty allowlist is none, as sentence-transformers reads it.
            keep_only_token_ids = file.keep_only_token_ids.filter(|k| !k.is_empty());
        }
        // PyLate 3 masked inline: its skiplist, punctuation by default.
        None if pylate => {
            skiplist_words = legacy
                .skiplist_words
                .unwrap_or_else(|| PUNCTUATION.chars().map(String::from).collect());
        }
        None => {}
    }
    Ok(MultiVectorModule {
        query_length,
        document_length: knobs.document_length.or(legacy.document_length),
        expansion,
        skiplist_words,
        skiplist_tasks,
        keep_only_token_ids,
        prefixes,
        masked: mask.is_some() || pylate,
        // PyLate's `MaxSim`, like any name sentence-transformers does not know, is MaxSim.
        mean_max_sim: st.get("similarity_fn_name").and_then(Value::as_str) == Some("meanmaxsim"),
    })
}
