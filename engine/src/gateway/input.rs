//! From a request's inputs to model-ready token ids: validation, prompt templating, tokenization and the token
//! limit (refused, or truncated on the chosen side).

use serde::Deserialize;

use super::error::ApiError;
use crate::scheduler::Priority;
use crate::tokenizer::{with_thread_scratch, Tokenizer, Truncation, TruncationSide};
use crate::Engine;

/// What a client asked to embed: texts, or token ids taken as the model's full input (special tokens included).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Inputs {
    Texts(Vec<String>),
    Ids(Vec<Vec<u32>>),
}

impl Inputs {
    pub fn len(&self) -> usize {
        match self {
            Inputs::Texts(t) => t.len(),
            Inputs::Ids(t) => t.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The size of the input, in bytes of text or of ids: what tokenizing or checking it costs, roughly.
    pub fn bytes(&self) -> usize {
        match self {
            Inputs::Texts(t) => t.iter().map(String::len).sum(),
            Inputs::Ids(t) => t.iter().map(|ids| ids.len() * 4).sum(),
        }
    }
}

/// Which end of an input over the token limit is cut.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub enum Direction {
    #[default]
    #[serde(alias = "right")]
    Right,
    #[serde(alias = "left")]
    Left,
}

/// How inputs are turned into ids.
#[derive(Debug, Clone, Default)]
pub struct Options {
    pub prompt_name: Option<String>,
    /// Cut inputs over the limit instead of refusing them.
    pub truncate: bool,
    pub direction: Direction,
    /// Which of the scheduler's queues the inputs join.
    pub priority: Priority,
}

/// The tokenizers the gateway uses: the engine's own (cutting from the right at the model's limit, so it is what
/// the model would see) and, from the same `tokenizer.json`, one cutting from the left. Each input is encoded
/// once, by the one of its direction, which also says whether it cut anything: an input at the limit is told from
/// one over it without a second encode.
pub struct Tokenization {
    left: Box<dyn Tokenizer>,
    prompts: Vec<(String, String)>,
    default_prompt: Option<String>,
    max_len: usize,
    vocab_size: usize,
}

impl Tokenization {
    pub fn new(engine: &Engine, default_prompt_name: Option<&str>) -> crate::Result<Self> {
        let info = engine.info();
        let path = info.path.join("tokenizer.json");
        let left = Truncation {
            max_length: info.max_seq_length,
            side: TruncationSide::Left,
        };
        let left = crate::tokenizer::load(&path, engine.config().tokenizer, Some(left))?;
        let default_prompt = match default_prompt_name {
            None => None,
            Some(name) => {
                Some(
                    find_prompt(&info.prompts, name).ok_or_else(|| crate::Error::Config {
                        name: "default_prompt_name",
                        message: format!(
                            "the model has no prompt `{name}` (it has: {})",
                            prompt_names(&info.prompts)
                        ),
                    })?,
                )
            }
        };
        Ok(Tokenization {
            left,
            prompts: info.prompts.clone(),
            default_prompt: default_prompt.map(str::to_owned),
            max_len: info.max_seq_length,
            vocab_size: engine.backend().info().vocab_size,
        })
    }

    /// Token ids for each input, in order. Refuses empty inputs, unknown prompts, bad token ids, and inputs over
    /// the limit unless `options.truncate`.
    pub fn prepare(
        &self,
        engine: &Engine,
        inputs: Inputs,
        options: &Options,
    ) -> Result<Vec<Vec<u32>>, ApiError> {
        if inputs.is_empty() {
            return Err(ApiError::bad_request(
                "empty_input",
                "the input list is empty",
            ));
        }
        match inputs {
            Inputs::Texts(texts) => {
                let prefix = self.prefix(options.prompt_name.as_deref())?;
                texts
                    .iter()
                    .enumerate()
                    .map(|(i, text)| self.encode_text(engine, i, prefix, text, options))
                    .collect()
            }
            Inputs::Ids(seqs) => seqs
                .into_iter()
                .enumerate()
                .map(|(i, ids)| self.check_ids(i, ids, options))
                .collect(),
        }
    }

    fn prefix(&self, name: Option<&str>) -> Result<&str, ApiError> {
        match name {
            None => Ok(self.default_prompt.as_deref().unwrap_or("")),
            Some(name) => find_prompt(&self.prompts, name).ok_or_else(|| {
                ApiError::bad_request(
                    "unknown_prompt",
                    format!(
                        "unknown prompt_name `{name}`; the model has: {}",
                        prompt_names(&self.prompts)
                    ),
                )
            }),
        }
    }

    fn encode_text(
        &self,
        engine: &Engine,
        i: usize,
        prefix: &str,
        text: &str,
        options: &Options,
    ) -> Result<Vec<u32>, ApiError> {
        // Like OpenAI's API: an empty string is refused rather than embedded as special tokens alone.
        if text.is_empty() {
            return Err(ApiError::bad_request(
                "empty_input",
                format!("input {i} is an empty string"),
            ));
        }
        let templated;
        let text = if prefix.is_empty() {
            text
        } else {
            templated = format!("{prefix}{text}");
            &templated
        };
        let tokenizer = match options.direction {
            Direction::Right => engine.tokenizer(),
            Direction::Left => self.left.as_ref(),
        };
        let mut ids = Vec::new();
        let cut = with_thread_scratch(|scratch| tokenizer.encode_cut(text, scratch, &mut ids))
            .map_err(|e| {
                ApiError::unprocessable("tokenization_failed", format!("input {i}: {e}"))
            })?;
        if cut && !options.truncate {
            return Err(self.too_long(i, None));
        }
        Ok(ids)
    }

    fn check_ids(&self, i: usize, ids: Vec<u32>, options: &Options) -> Result<Vec<u32>, ApiError> {
        if ids.is_empty() {
            return Err(ApiError::bad_request(
                "empty_input",
                format!("input {i} is an empty token list"),
            ));
        }
        if let Some(&id) = ids.iter().find(|&&id| id as usize >= self.vocab_size) {
            return Err(ApiError::bad_request(
                "invalid_token_id",
                format!(
                    "input {i}: token id {id} is outside the vocabulary of {}",
                    self.vocab_size
                ),
            ));
        }
        if ids.len() <= self.max_len {
            return Ok(ids);
        }
        self.over_limit(i, ids, options)
    }

    /// Token ids over the limit sent by the client: refused, or cut to the limit keeping their first and last
    /// ids as the special tokens.
    fn over_limit(
        &self,
        i: usize,
        mut full: Vec<u32>,
        options: &Options,
    ) -> Result<Vec<u32>, ApiError> {
        let (n, max) = (full.len(), self.max_len);
        if !options.truncate {
            return Err(self.too_long(i, Some(n)));
        }
        if max < 2 {
            full.truncate(max);
            return Ok(full);
        }
        Ok(match options.direction {
            Direction::Right => {
                let last = full[n - 1];
                full.truncate(max - 1);
                full.push(last);
                full
            }
            Direction::Left => {
                let first = full[0];
                let mut ids = Vec::with_capacity(max);
                ids.push(first);
                ids.extend_from_slice(&full[n - (max - 1)..]);
                ids
            }
        })
    }

    /// The refusal of input `i`, over the limit (by `n` tokens when counted: a text is encoded only up to it).
    fn too_long(&self, i: usize, n: Option<usize>) -> ApiError {
        let max = self.max_len;
        let has = n.map_or("more".into(), |n| n.to_string());
        ApiError::unprocessable(
            "input_too_long",
            format!(
                "input {i} has {has} tokens, more than the model's limit of {max}; shorten it or set truncation"
            ),
        )
    }

    /// Longest input, in tokens, that is embedded without truncation.
    pub fn max_len(&self) -> usize {
        self.max_len
    }
}

fn find_prompt<'a>(prompts: &'a [(String, String)], name: &str) -> Option<&'a str> {
    prompts
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, p)| p.as_str())
}

fn prompt_names(prompts: &[(String, String)]) -> String {
    if prompts.is_empty() {
        return "no prompts".into();
    }
    prompts
        .iter()
        .map(|(n, _)| n.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}
