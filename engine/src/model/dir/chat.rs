//! sentence-transformers 6's Transformer module as a cross-encoder reads it: its `transformer_task`
//! (`sequence-classification`: a `*ForSequenceClassification` checkpoint's head; `text-generation`: a causal LM
//! whose logits a LogitScore module reads), whether it takes its inputs as chat messages (`modality_config`'s
//! `message`), and the chat template and `apply_chat_template` arguments it then renders a (query, document) pair
//! with (zerank-2's, Qwen3-Reranker's layout).

use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::{Map, Value};

use super::DenseModule;
use crate::backend::ops::Activation;
use crate::error::{Error, Result};
use crate::model::read_json;

/// What `sentence_bert_config.json` says of the Transformer module beyond its length limit.
#[derive(Debug, Default, Deserialize)]
pub(super) struct TransformerModule {
    /// `feature-extraction` (an embedding model's, the default), `sequence-classification`, `text-generation`,
    /// `fill-mask`.
    pub transformer_task: Option<String>,
    /// The input modalities it takes; `None` in a save older than sentence-transformers 6 (text only).
    pub modality_config: Option<Map<String, Value>>,
    /// `processing_kwargs.chat_template`: `apply_chat_template`'s arguments (`add_generation_prompt`, a template's
    /// own variables), and sentence-transformers' `restore_suffix`.
    #[serde(default)]
    processing_kwargs: ProcessingKwargs,
}

#[derive(Debug, Default, Deserialize)]
struct ProcessingKwargs {
    #[serde(default)]
    chat_template: Map<String, Value>,
}

impl TransformerModule {
    /// The module's `sentence_bert_config.json` in `folder`; an absent file is a default module.
    pub fn read(folder: &Path) -> Result<Self> {
        let path = folder.join("sentence_bert_config.json");
        match path.is_file() {
            true => read_json(&path),
            false => Ok(Self::default()),
        }
    }
}

/// `apply_chat_template`'s size arguments, which sentence-transformers routes to the tokenizer: the engine cuts at
/// the model's limit itself.
const SIZE_ARGUMENTS: [&str; 4] = ["padding", "truncation", "max_length", "return_tensors"];

/// A chat template and what it is rendered with.
#[derive(Clone, Debug, PartialEq)]
pub struct ChatTemplateFile {
    /// Where the template was read (`chat_template.jinja`, or `tokenizer_config.json`'s `chat_template`).
    pub path: PathBuf,
    pub source: String,
    /// Variables beside `messages`: `add_generation_prompt` (false unless set) and any others the module passes.
    pub variables: Map<String, Value>,
    /// Whether a pair cut at the limit gets the template's suffix written back over its last tokens
    /// (sentence-transformers' `restore_suffix`, on by default): a causal reranker reads the last position.
    pub restore_suffix: bool,
}

/// The chat template a cross-encoder renders its pairs through, if it takes messages: with `modules.json`
/// (`has_modules`), where `modality_config` names `message`; for a bare checkpoint, wherever the tokenizer has a
/// template (sentence-transformers then infers the message modality). `folder` is the Transformer module's.
pub(super) fn template(
    folder: &Path,
    module: &TransformerModule,
    has_modules: bool,
) -> Result<Option<ChatTemplateFile>> {
    let takes_messages = match &module.modality_config {
        Some(modalities) => modalities.contains_key("message"),
        None => !has_modules,
    };
    if !takes_messages {
        return Ok(None);
    }
    let Some((path, source)) = template_source(folder)? else {
        return match module.modality_config.is_some() {
            true => Err(Error::model(
                folder.join("sentence_bert_config.json"),
                "the module takes messages but the model has no chat template (chat_template.jinja or \
                 tokenizer_config.json's chat_template)",
            )),
            false => Ok(None),
        };
    };
    let mut variables = module.processing_kwargs.chat_template.clone();
    let restore_suffix = match variables.remove("restore_suffix") {
        None => true,
        Some(Value::Bool(b)) => b,
        Some(other) => {
            return Err(Error::model(
                folder.join("sentence_bert_config.json"),
                format!("restore_suffix {other} is not a boolean"),
            ))
        }
    };
    for key in SIZE_ARGUMENTS {
        variables.remove(key);
    }
    variables
        .entry("add_generation_prompt")
        .or_insert(Value::Bool(false));
    Ok(Some(ChatTemplateFile {
        path,
        source,
        variables,
        restore_suffix,
    }))
}

/// transformers 5's `chat_template.jinja`, else an older save's `chat_template` in `tokenizer_config.json` (a
/// string, or named templates of which the `default` one).
fn template_source(folder: &Path) -> Result<Option<(PathBuf, String)>> {
    let file = folder.join("chat_template.jinja");
    if file.is_file() {
        let source = std::fs::read_to_string(&file).map_err(|e| Error::Io {
            path: file.clone(),
            source: e,
        })?;
        return Ok(Some((file, source)));
    }
    let config = folder.join("tokenizer_config.json");
    if !config.is_file() {
        return Ok(None);
    }
    let value: Value = read_json(&config)?;
    let source = match value.get("chat_template") {
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Array(named)) => named
            .iter()
            .find(|t| t.get("name").and_then(Value::as_str) == Some("default"))
            .and_then(|t| t.get("template").and_then(Value::as_str))
            .map(str::to_owned),
        _ => None,
    };
    Ok(source.map(|s| (config, s)))
}

/// LogitScore's `config.json`.
#[derive(Deserialize)]
struct LogitScoreFile {
    true_token_id: usize,
    false_token_id: Option<usize>,
    #[serde(default = "causal_logits")]
    module_input_name: String,
}

fn causal_logits() -> String {
    "causal_logits".into()
}

/// The rows of a causal LM's head a LogitScore reads: the score is the `true` token's logit, less the `false`
/// one's where it has one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogitRows {
    pub true_id: usize,
    pub false_id: Option<usize>,
    pub vocab: usize,
}

/// LogitScore (in `folder`) over a causal LM of `hidden` columns and `vocab` entries whose `config.json` is
/// `config_path`: one Dense row, `W[true] − W[false]` of the LM head (the token embeddings where the config ties
/// them, as transformers does), over the last token's final state: the logit difference without the vocabulary's
/// other logits.
pub(super) fn logit_score(
    folder: &Path,
    config_path: &Path,
    weights_path: &Path,
    hidden: usize,
    vocab: usize,
) -> Result<DenseModule> {
    let path = folder.join("config.json");
    let f: LogitScoreFile = read_json(&path)?;
    if f.module_input_name != "causal_logits" {
        return Err(Error::model(
            &path,
            format!(
                "unsupported module_input_name {:?}: expected causal_logits",
                f.module_input_name
            ),
        ));
    }
    for id in std::iter::once(f.true_token_id).chain(f.false_token_id) {
        if id >= vocab {
            return Err(Error::model(
                &path,
                format!("token id {id} is outside the model's vocabulary of {vocab}"),
            ));
        }
    }
    #[derive(Deserialize)]
    struct Tied {
        #[serde(default)]
        tie_word_embeddings: bool,
    }
    let tied = read_json::<Tied>(config_path)?.tie_word_embeddings;
    Ok(DenseModule {
        weights_path: weights_path.to_owned(),
        name: if tied { "embed_tokens" } else { "lm_head" }.into(),
        in_features: hidden,
        out_features: 1,
        bias: false,
        activation: Activation::None,
        norm: None,
        logit_rows: Some(LogitRows {
            true_id: f.true_token_id,
            false_id: f.false_token_id,
            vocab,
        }),
    })
}
