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
use crate::model::config::ModelConfig;
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
    /// A multi-vector model's `query_length`, `document_length` and `query_expansion`.
    #[serde(flatten)]
    pub multi_vector: super::multi_vector::TransformerKnobs,
    /// Where it was read, for errors.
    #[serde(skip)]
    path: PathBuf,
}

/// `processing_kwargs`: the tokenizer's and the template's arguments, by bucket.
#[derive(Debug, Default, Deserialize)]
struct ProcessingKwargs {
    #[serde(default)]
    chat_template: Map<String, Value>,
    #[serde(default)]
    text: Map<String, Value>,
    #[serde(default)]
    common: Map<String, Value>,
}

impl TransformerModule {
    /// The module's `sentence_bert_config.json` in `folder`; an absent file is a default module.
    pub fn read(folder: &Path) -> Result<Self> {
        let path = folder.join("sentence_bert_config.json");
        let mut module: Self = match path.is_file() {
            true => read_json(&path)?,
            false => Self::default(),
        };
        module.path = path;
        // Cutting is the engine's: a module that turns it off would be run otherwise.
        let kwargs = &module.processing_kwargs;
        for bucket in [&kwargs.chat_template, &kwargs.text, &kwargs.common] {
            match bucket.get("truncation") {
                None | Some(Value::Bool(true)) => {}
                Some(Value::String(s)) if s != "do_not_truncate" => {}
                Some(other) => {
                    return Err(Error::model(
                        &module.path,
                        format!("unsupported processing_kwargs truncation {other}: the engine cuts at the limit"),
                    ))
                }
            }
        }
        Ok(module)
    }

    /// The length limit `processing_kwargs` set in place of `max_seq_length`, as sentence-transformers reads it:
    /// the template's arguments' for messages, else the text tokenizer's, else the common ones.
    pub fn max_length(&self, messages: bool) -> Result<Option<usize>> {
        let kwargs = &self.processing_kwargs;
        let chat = messages.then_some(&kwargs.chat_template);
        for bucket in chat.into_iter().chain([&kwargs.text, &kwargs.common]) {
            match bucket.get("max_length") {
                None | Some(Value::Null) => {}
                Some(v) => {
                    return match v.as_u64() {
                        Some(n) if n > 0 => Ok(usize::try_from(n).ok()),
                        _ => Err(Error::model(
                            &self.path,
                            format!("processing_kwargs max_length {v} is not a positive number"),
                        )),
                    }
                }
            }
        }
        Ok(None)
    }

    /// Whether the module takes messages: with `modules.json` (`has_modules`), where `modality_config` names
    /// `message`; for a bare checkpoint, wherever the tokenizer has a template (sentence-transformers then infers
    /// the message modality).
    fn takes_messages(&self, has_modules: bool) -> bool {
        match &self.modality_config {
            Some(modalities) => modalities.contains_key("message"),
            None => !has_modules,
        }
    }

    /// `modality_config.message.format`, where set to one.
    fn message_format(&self) -> Option<&str> {
        self.modality_config
            .as_ref()?
            .get("message")?
            .get("format")?
            .as_str()
            .filter(|f| *f != "auto")
    }
}

/// sentence-transformers' message formats a model type is known to take whatever its template looks like.
const KNOWN_FLAT: [&str; 5] = ["apertus", "deepseek_v3", "gpt_oss", "minicpm3", "seed_oss"];

/// What in a template says its messages' content is a list of typed items (sentence-transformers' `_infer_format`).
const STRUCTURED_PATTERNS: [&str; 6] = [
    "content[0]",
    ".type",
    "'type'",
    "\"type\"",
    "item.type",
    "message.content[",
];

/// `apply_chat_template`'s size arguments, which sentence-transformers routes to the tokenizer: the engine cuts at
/// the limit itself ([`TransformerModule::max_length`] reads `max_length`).
const SIZE_ARGUMENTS: [&str; 4] = ["padding", "truncation", "max_length", "return_tensors"];

/// A chat template and what it is rendered with.
#[derive(Clone, Debug, PartialEq)]
pub struct ChatTemplateFile {
    /// Where the template was read (`chat_template.jinja`, or `tokenizer_config.json`'s `chat_template`).
    pub path: PathBuf,
    pub source: String,
    /// Variables beside `messages`: `add_generation_prompt` (false unless set) and any others the module passes.
    pub variables: Map<String, Value>,
    /// Whether a message's content is a list of typed items (`[{"type": "text", "text": …}]`, sentence-transformers'
    /// `structured` format) rather than the text itself (`flat`).
    pub structured: bool,
    /// Whether a pair cut at the limit gets the template's suffix written back over its last tokens
    /// (sentence-transformers' `restore_suffix`, on by default): a causal reranker reads the last position.
    pub restore_suffix: bool,
}

/// The chat template a cross-encoder renders its pairs through, if it takes messages
/// ([`TransformerModule::takes_messages`]); `folder` is the Transformer module's, `config_path` its config.json.
pub(super) fn template(
    folder: &Path,
    module: &TransformerModule,
    has_modules: bool,
    config_path: &Path,
) -> Result<Option<ChatTemplateFile>> {
    if !module.takes_messages(has_modules) {
        return Ok(None);
    }
    #[derive(Deserialize)]
    struct Kind {
        #[serde(default)]
        model_type: String,
    }
    let model_type = read_json::<Kind>(config_path)?.model_type;
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
    // transformers' own argument naming one of several templates is not a variable.
    if variables.contains_key("chat_template") {
        return Err(Error::model(
            folder.join("sentence_bert_config.json"),
            "unsupported processing_kwargs chat_template.chat_template (a template chosen by name)",
        ));
    }
    let structured = match module.message_format() {
        Some("flat") => false,
        Some("structured") => true,
        Some(other) => {
            return Err(Error::model(
                folder.join("sentence_bert_config.json"),
                format!("unknown message format {other:?}: expected flat, structured or auto"),
            ))
        }
        None => {
            !KNOWN_FLAT.contains(&model_type.as_str())
                && STRUCTURED_PATTERNS.iter().any(|p| source.contains(p))
        }
    };
    Ok(Some(ChatTemplateFile {
        path,
        source,
        variables,
        structured,
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
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(named)) => {
            // As transformers: the `default` one, which a list without one lacks (an error, not no template).
            let default = named
                .iter()
                .find(|t| t.get("name").and_then(Value::as_str) == Some("default"))
                .and_then(|t| t.get("template").and_then(Value::as_str));
            match default {
                Some(s) => s.to_owned(),
                None => {
                    return Err(Error::model(
                        &config,
                        "chat_template names templates but none `default`",
                    ))
                }
            }
        }
        _ => return Ok(None),
    };
    Ok(Some((config, source)))
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

/// LogitScore (in `folder`) over the causal LM `config` (read from `config_path`): one Dense row, `W[true] − W[false]` of the LM head (the token embeddings where the config ties
/// them, as transformers does), over the last token's final state: the logit difference without the vocabulary's
/// other logits.
pub(super) fn logit_score(
    folder: &Path,
    config_path: &Path,
    weights_path: &Path,
    config: &ModelConfig,
) -> Result<DenseModule> {
    let path = folder.join("config.json");
    // The causal LMs whose logits are the head's alone and whose head is untied unless the config ties it
    // (Gemma's would be capped, and tied by default; an encoder's are not a causal LM's).
    let causal = matches!(config, ModelConfig::Decoder(c) if c.causal());
    if !causal {
        return Err(Error::model(
            config_path,
            "unsupported: LogitScore over a model other than a causal Llama, Mistral, Qwen2 or Qwen3",
        ));
    }
    let (hidden, vocab) = (config.hidden_size(), config.vocab_size());
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
