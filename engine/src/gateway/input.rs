//! From a request's inputs to model-ready token ids: validation, prompt templating, tokenization and the token
//! limit (refused, or truncated on the chosen side).

use std::path::PathBuf;
use std::sync::OnceLock;

use serde::Deserialize;

use super::error::{Api, ApiError};
use crate::scheduler::Priority;
use crate::tokenizer::{
    is_word_list, with_thread_scratch, HfTokenizer, TokenDetail, Tokenizer, Truncation,
    TruncationSide,
};
use crate::{ModelFront, Prompt};

/// What a client asked to embed: texts, token ids taken as the model's full input (special tokens included), or a
/// cross-encoder's inputs: pairs of texts (a query and a passage, joined by the tokenizer's pair template), or a
/// text alone where the second is `None`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Inputs {
    Texts(Vec<String>),
    Ids(Vec<Vec<u32>>),
    Pairs(Vec<(String, Option<String>)>),
}

impl Inputs {
    pub fn len(&self) -> usize {
        match self {
            Inputs::Texts(t) => t.len(),
            Inputs::Ids(t) => t.len(),
            Inputs::Pairs(t) => t.len(),
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
            Inputs::Pairs(t) => t
                .iter()
                .map(|(a, b)| a.len() + b.as_ref().map_or(0, String::len))
                .sum(),
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

/// A request's inputs as the model runs them.
#[derive(Debug, Default)]
pub struct Prepared {
    /// Each input's ids, in order.
    pub seqs: Vec<Vec<u32>>,
    /// For pairs, where each one's tokens of type 1 start (`None`: all of type 0); empty for single inputs.
    pub type1_from: Vec<Option<u32>>,
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
    /// Each input's answer: its pooled embedding, or its tokens' states (`/embed_all`). A pooled readout's
    /// `skip` is the gateway's to set ([`Tokenization::readout`]).
    pub readout: crate::Readout,
    /// Whose conventions a refusal follows: OpenAI's (400, and only the server can turn truncation on) or TEI's
    /// (422, and the request's `truncate` can).
    pub api: Api,
}

impl Options {
    /// A TEI route's options: the request's `truncate` (else the server's `auto_truncate`) and
    /// `truncation_direction`, TEI's refusals, and the queue `priority` names.
    pub fn tei(
        truncate: Option<bool>,
        auto_truncate: bool,
        direction: Direction,
        priority: Priority,
    ) -> Options {
        Options {
            truncate: truncate.unwrap_or(auto_truncate),
            direction,
            api: Api::Tei,
            priority,
            ..Options::default()
        }
    }
}

/// The tokenizers the gateway uses: the engine's own (cutting from the right at the model's limit, so it is what
/// the model would see) and, from the same `tokenizer.json`, one cutting from the left. Each input is encoded
/// once, by the one of its direction, which also says whether it cut anything: an input at the limit is told from
/// one over it without a second encode.
pub struct Tokenization {
    left: Box<dyn Tokenizer>,
    /// `/tokenize`'s tokenizers, cutting from the right and from the left: the `tokenizers` crate's pipeline,
    /// which has the tokens' offsets (the ids are the same as the engine's), loaded on first use.
    detailed: OnceLock<Result<[HfTokenizer; 2], String>>,
    path: PathBuf,
    /// Whether the model's tokenizer adds its special tokens (a StaticEmbedding's does not).
    add_special_tokens: bool,
    /// Tokens the model's tokenizers are given as special ones ([`crate::ModelInfo::registered_tokens`]).
    registered: Vec<String>,
    /// How many special ids it puts before a text's and after them: what a cut of client ids keeps.
    specials: (usize, usize),
    prompts: Vec<Prompt>,
    /// The one a request naming none gets.
    default_prompt: Option<Prompt>,
    max_len: usize,
    vocab_size: usize,
}

impl Tokenization {
    pub fn new(front: &ModelFront, default_prompt_name: Option<&str>) -> crate::Result<Self> {
        let info = front.info();
        let path = info.tokenizer_path.clone();
        let left = Truncation {
            max_length: info.max_seq_length,
            side: TruncationSide::Left,
        };
        let left = crate::tokenizer::load_registered(
            &path,
            front.config().tokenizer,
            Some(left),
            info.add_special_tokens,
            &info.registered_tokens,
        )?;
        let default_prompt = front
            .prompt_or_default(default_prompt_name, "default_prompt_name")?
            .cloned();
        Ok(Tokenization {
            left,
            detailed: OnceLock::new(),
            path,
            add_special_tokens: info.add_special_tokens,
            registered: info.registered_tokens.clone(),
            specials: front.tokenizer().specials_around(),
            prompts: info.prompts.clone(),
            default_prompt,
            max_len: info.max_seq_length,
            vocab_size: front.vocab_size(),
        })
    }

    /// Token ids for each input, in order. Refuses empty inputs, unknown prompts, bad token ids, and inputs over
    /// the limit unless `options.truncate`. Pairs take no prompt.
    pub fn prepare(
        &self,
        front: &ModelFront,
        inputs: Inputs,
        options: &Options,
    ) -> Result<Prepared, ApiError> {
        if inputs.is_empty() {
            return Err(ApiError::bad_request(
                "empty_input",
                "the input list is empty",
            ));
        }
        let single = |seqs| {
            Ok(Prepared {
                seqs,
                type1_from: Vec::new(),
            })
        };
        match inputs {
            Inputs::Texts(texts) => {
                let prompt = self.prompt(options.prompt_name.as_deref())?;
                single(
                    texts
                        .iter()
                        .enumerate()
                        .map(|(i, text)| self.encode_text(front, i, prompt, text, options))
                        .collect::<Result<_, _>>()?,
                )
            }
            Inputs::Ids(seqs) => single(
                seqs.into_iter()
                    .enumerate()
                    .map(|(i, ids)| self.check_ids(i, ids, options))
                    .collect::<Result<_, _>>()?,
            ),
            Inputs::Pairs(pairs) => {
                if options.prompt_name.is_some() {
                    return Err(ApiError::bad_request(
                        "invalid_prompt",
                        "pairs of texts take no prompt: a cross-encoder reads them as they are",
                    ));
                }
                let mut prepared = Prepared::default();
                for (i, (a, b)) in pairs.iter().enumerate() {
                    // A text alone is encoded as any text is, without a prompt.
                    let (ids, from) = match b {
                        Some(b) => self.encode_pair(front, i, a, b, options)?,
                        None => (self.encode_text(front, i, None, a, options)?, None),
                    };
                    prepared.seqs.push(ids);
                    prepared.type1_from.push(from);
                }
                Ok(prepared)
            }
        }
    }

    /// A Router model's lookup route `route` ([`ModelFront::lookup`]) over `inputs` (texts or token ids): each
    /// input's vector, one after another, and the tokens looked up. Texts are templated and tokenized as any
    /// text (without special tokens, as the route's tokenizer runs); an input over the route's limit is refused
    /// unless `options.truncate`. A text that gives no tokens is all 0, as sentence-transformers gives it.
    pub fn look_up(
        &self,
        front: &ModelFront,
        route: &str,
        inputs: Inputs,
        options: &Options,
    ) -> Result<(Vec<f32>, usize), ApiError> {
        let lookup = front
            .lookup(Some(route))
            .ok_or_else(|| ApiError::internal(format!("no lookup route {route:?}")))?;
        let prompt = self.prompt(options.prompt_name.as_deref())?;
        let side = match options.direction {
            Direction::Right => TruncationSide::Right,
            Direction::Left => TruncationSide::Left,
        };
        let seqs: Vec<(Vec<u32>, bool)> = match inputs {
            Inputs::Texts(texts) if !texts.is_empty() => texts
                .iter()
                .enumerate()
                .map(|(i, text)| {
                    non_empty(i, text)?;
                    lookup
                        .encode(&Prompt::template(prompt, text), side)
                        .map_err(|e| {
                            ApiError::unprocessable(
                                "tokenization_failed",
                                format!("input {i}: {e}"),
                            )
                        })
                })
                .collect::<Result<_, ApiError>>()?,
            Inputs::Ids(seqs) if !seqs.is_empty() => seqs
                .into_iter()
                .enumerate()
                .map(|(i, mut ids)| {
                    self.check_vocab(i, &ids)?;
                    let cut = lookup.cut(&mut ids, side);
                    Ok((ids, cut))
                })
                .collect::<Result<_, ApiError>>()?,
            Inputs::Pairs(_) => {
                return Err(ApiError::bad_request(
                    "invalid_input",
                    "a sparse model embeds texts, not pairs of texts",
                ))
            }
            _ => {
                return Err(ApiError::bad_request(
                    "empty_input",
                    "the input list is empty",
                ))
            }
        };
        let (mut data, mut tokens) = (Vec::new(), 0);
        for (i, (ids, cut)) in seqs.into_iter().enumerate() {
            if cut && !options.truncate {
                let max = lookup.limit().unwrap_or(ids.len());
                return Err(Self::too_long(max, i, None, options.api));
            }
            tokens += ids.len();
            data.extend(lookup.embed(&ids));
        }
        Ok((data, tokens))
    }

    /// TEI's `/tokenize`: each text's tokens, with their offsets into the templated text, after truncation.
    pub fn tokens(
        &self,
        inputs: Inputs,
        options: &Options,
        add_special_tokens: bool,
    ) -> Result<Vec<Vec<TokenDetail>>, ApiError> {
        let texts = match inputs {
            Inputs::Texts(t) if t.is_empty() => {
                return Err(ApiError::bad_request(
                    "empty_input",
                    "the input list is empty",
                ))
            }
            Inputs::Texts(t) => t,
            Inputs::Ids(_) | Inputs::Pairs(_) => {
                return Err(ApiError::bad_request(
                    "invalid_type",
                    "`/tokenize` takes texts, not token ids",
                ))
            }
        };
        let [right, left] = self.detailed()?;
        let tokenizer = match options.direction {
            Direction::Right => right,
            Direction::Left => left,
        };
        let prompt = self.prompt(options.prompt_name.as_deref())?;
        texts
            .iter()
            .enumerate()
            .map(|(i, text)| {
                non_empty(i, text)?;
                let (tokens, cut) = tokenizer
                    .tokens(&Prompt::template(prompt, text), add_special_tokens)
                    .map_err(|e| {
                        ApiError::unprocessable("tokenization_failed", format!("input {i}: {e}"))
                    })?;
                if cut && !options.truncate {
                    return Err(Self::too_long(self.max_len, i, None, options.api));
                }
                Ok(tokens)
            })
            .collect()
    }

    /// TEI's `/decode`: the text of each list of ids.
    pub fn decode(
        &self,
        seqs: Vec<Vec<u32>>,
        skip_special_tokens: bool,
    ) -> Result<Vec<String>, ApiError> {
        if seqs.is_empty() {
            return Err(ApiError::bad_request("empty_input", "`ids` is empty"));
        }
        let [right, _] = self.detailed()?;
        seqs.iter()
            .enumerate()
            .map(|(i, ids)| {
                self.check_vocab(i, ids)?;
                right.decode(ids, skip_special_tokens).map_err(|e| {
                    ApiError::unprocessable("tokenization_failed", format!("input {i}: {e}"))
                })
            })
            .collect()
    }

    /// The `tokenizers` crate's pipelines cutting from the right and from the left, loaded on first use; a
    /// WordEmbeddings model's word list has none.
    fn detailed(&self) -> Result<&[HfTokenizer; 2], ApiError> {
        if is_word_list(&self.path) {
            return Err(ApiError::unprocessable(
                "unsupported_tokenizer",
                "this model's tokenizer is sentence-transformers' WhitespaceTokenizer (a word list, no \
                 tokenizer.json): /tokenize and /decode need a tokenizer.json",
            ));
        }
        self.detailed
            .get_or_init(|| {
                let load = |side| {
                    let cut = Truncation {
                        max_length: self.max_len,
                        side,
                    };
                    HfTokenizer::open_registered(
                        &self.path,
                        Some(cut),
                        self.add_special_tokens,
                        &self.registered,
                    )
                    .map_err(|e| e.to_string())
                };
                Ok([load(TruncationSide::Right)?, load(TruncationSide::Left)?])
            })
            .as_ref()
            .map_err(|e| ApiError::internal(format!("loading the tokenizer: {e}")))
    }

    /// The prompt a request gets: the one it names, else the server's default, if any.
    /// `prompt_name: ""` asks for none (the model's default left off, as sentence-transformers' `prompt=""`),
    /// unless the model has a prompt of that name.
    fn prompt(&self, name: Option<&str>) -> Result<Option<&Prompt>, ApiError> {
        let Some(name) = name else {
            return Ok(self.default_prompt.as_ref());
        };
        Prompt::find(&self.prompts, name).map_err(|names| {
            ApiError::bad_request(
                "unknown_prompt",
                format!("unknown prompt_name `{name}`; the model has: {names}"),
            )
        })
    }

    /// The answer `options` asks for `inputs`: a pooled one leaves out the prompt's tokens where the model's
    /// Pooling module excludes the prompt (texts only: token ids are the whole input, no prompt put before them).
    pub fn readout(&self, inputs: &Inputs, options: &Options) -> Result<crate::Readout, ApiError> {
        Ok(match (options.readout, inputs) {
            (crate::Readout::Pooled { .. }, Inputs::Texts(_)) => self
                .prompt(options.prompt_name.as_deref())?
                .map_or(crate::Readout::POOLED, Prompt::readout),
            (crate::Readout::Pooled { .. }, Inputs::Ids(_) | Inputs::Pairs(_)) => {
                crate::Readout::POOLED
            }
            // Token ids are the whole input: any expansion in them is the client's, attended to.
            (crate::Readout::Vectors { .. }, Inputs::Ids(_)) => {
                crate::Readout::Vectors { expansion: None }
            }
            (readout @ (crate::Readout::Tokens | crate::Readout::Vectors { .. }), _) => readout,
        })
    }

    fn encode_text(
        &self,
        front: &ModelFront,
        i: usize,
        prompt: Option<&Prompt>,
        text: &str,
        options: &Options,
    ) -> Result<Vec<u32>, ApiError> {
        non_empty(i, text)?;
        // sentence-transformers would render a text alone as a user's message: not a pair's roles.
        if front.chat_pairs().is_some() {
            return Err(ApiError::unprocessable(
                "unsupported_input",
                format!(
                    "input {i} is a text alone, but this cross-encoder scores pairs rendered through its chat \
                     template"
                ),
            ));
        }
        let text = Prompt::template(prompt, text);
        // A multi-vector model's query or document is cut at its task's limit (its route cuts from the right).
        let task = crate::multi_vector::Task::named(options.prompt_name.as_deref());
        let multi_vector = front
            .multi_vector()
            .filter(|_| matches!(options.readout, crate::Readout::Vectors { .. }));
        let tokenizer = match multi_vector {
            Some(mv) => mv.tokenizer(task, front.tokenizer()),
            None => self.tokenizer(front, options.direction),
        };
        let mut ids = Vec::new();
        let cut = with_thread_scratch(|scratch| tokenizer.encode_cut(&text, scratch, &mut ids))
            .map_err(|e| {
                ApiError::unprocessable("tokenization_failed", format!("input {i}: {e}"))
            })?;
        if cut && !options.truncate {
            return Err(Self::too_long(tokenizer.max_length(), i, None, options.api));
        }
        if let Some(mv) = multi_vector {
            mv.expand(task, &mut ids);
        }
        // A tokenizer that adds no special tokens (a StaticEmbedding's, one without a post-processor) gives none
        // for a text of whitespace or of what its normaliser drops, a word list (WordEmbeddings') none for a text
        // of unknown or stop words; sentence-transformers embeds those as zeros, which no forward pass gives.
        if ids.is_empty() {
            return Err(ApiError::bad_request(
                "empty_input",
                format!("input {i} has no tokens for this model"),
            ));
        }
        // Cut from the left, the prompt goes first: pooling would then leave out the text's first tokens in its
        // place. (sentence-transformers cuts from the right only.)
        let pooled = matches!(options.readout, crate::Readout::Pooled { .. });
        let cut_left = cut && options.direction == Direction::Left;
        if let Some(p) = prompt.filter(|p| cut_left && pooled && p.skip > 0) {
            return Err(ApiError::unprocessable(
                "input_too_long",
                format!(
                    "input {i} is over the model's limit of {} tokens, and cutting it from the left would cut \
                     into the prompt `{}`, which this model leaves out of pooling; shorten it, or truncate from \
                     the right",
                    self.max_len, p.name
                ),
            ));
        }
        front.trim_for_head(&mut ids);
        Ok(ids)
    }
    /// A pair's ids as the tokenizer of the request's direction joins them (or the model's chat template renders
    /// them, cut from that direction), and where its tokens of type 1 start.
    fn encode_pair(
        &self,
        front: &ModelFront,
        i: usize,
        a: &str,
        b: &str,
        options: &Options,
    ) -> Result<(Vec<u32>, Option<u32>), ApiError> {
        for (which, text) in [("first", a), ("second", b)] {
            if text.is_empty() {
                return Err(ApiError::bad_request(
                    "empty_input",
                    format!("input {i}: its {which} text is empty"),
                ));
            }
        }
        let mut ids = Vec::new();
        let encoded = with_thread_scratch(|scratch| {
            front.encode_pair_cut(
                a,
                b,
                self.tokenizer(front, options.direction),
                options.direction == Direction::Left,
                scratch,
                &mut ids,
            )
        })
        .map_err(|e| ApiError::unprocessable("tokenization_failed", format!("input {i}: {e}")))?;
        if encoded.cut && !options.truncate {
            return Err(Self::too_long(self.max_len, i, None, options.api));
        }
        if ids.is_empty() {
            return Err(ApiError::bad_request(
                "empty_input",
                format!("input {i} has no tokens for this model"),
            ));
        }
        Ok((ids, encoded.type1_from))
    }

    /// The tokenizer cutting from `direction`'s end.
    fn tokenizer<'a>(&'a self, front: &'a ModelFront, direction: Direction) -> &'a dyn Tokenizer {
        match direction {
            Direction::Right => front.tokenizer(),
            Direction::Left => self.left.as_ref(),
        }
    }

    fn check_ids(&self, i: usize, ids: Vec<u32>, options: &Options) -> Result<Vec<u32>, ApiError> {
        if ids.is_empty() {
            return Err(ApiError::bad_request(
                "empty_input",
                format!("input {i} is an empty token list"),
            ));
        }
        self.check_vocab(i, &ids)?;
        if ids.len() <= self.max_len {
            return Ok(ids);
        }
        self.over_limit(i, ids, options)
    }

    fn check_vocab(&self, i: usize, ids: &[u32]) -> Result<(), ApiError> {
        match ids.iter().find(|&&id| id as usize >= self.vocab_size) {
            Some(&id) => Err(ApiError::bad_request(
                "invalid_token_id",
                format!(
                    "input {i}: token id {id} is outside the vocabulary of {}",
                    self.vocab_size
                ),
            )),
            None => Ok(()),
        }
    }

    /// Token ids over the limit sent by the client: refused, or cut to the limit keeping the special ids the
    /// model's tokenizer puts before and after a text (BERT's `[CLS]` and `[SEP]`, Qwen3's end of text; none of a
    /// StaticEmbedding's), as a text's encode would be cut.
    fn over_limit(
        &self,
        i: usize,
        full: Vec<u32>,
        options: &Options,
    ) -> Result<Vec<u32>, ApiError> {
        let (n, max) = (full.len(), self.max_len);
        if !options.truncate {
            return Err(Self::too_long(self.max_len, i, Some(n), options.api));
        }
        let (before, after) = match self.specials {
            (b, a) if b + a <= max => (b, a),
            _ => (0, 0),
        };
        let keep = max - before - after;
        let text = match options.direction {
            Direction::Right => before..before + keep,
            Direction::Left => n - after - keep..n - after,
        };
        Ok([&full[..before], &full[text], &full[n - after..]].concat())
    }

    /// The refusal of input `i`, over the limit `max` (by `n` tokens when counted: a text is encoded only up to
    /// it), saying how to have it cut instead on the request's surface.
    fn too_long(max: usize, i: usize, n: Option<usize>, api: Api) -> ApiError {
        let what = match n {
            Some(n) => format!("input {i} has {n} tokens, over the model's limit of {max}"),
            None => format!("input {i} is over the model's limit of {max} tokens"),
        };
        match api {
            // OpenAI answers an over-long input 400, and its request has no field to ask for truncation.
            Api::OpenAi => ApiError::bad_request(
                "input_too_long",
                format!("{what}; shorten it, or start the server with `--auto-truncate` to have such inputs cut to the limit"),
            ),
            Api::Tei => ApiError::unprocessable(
                "input_too_long",
                format!("{what}; shorten it, or send `\"truncate\": true` to have it cut to the limit"),
            ),
        }
    }

    /// Longest input, in tokens, that is embedded without truncation.
    pub fn max_len(&self) -> usize {
        self.max_len
    }
}

/// Like OpenAI's API: an empty string is refused rather than embedded as special tokens alone.
fn non_empty(i: usize, text: &str) -> Result<(), ApiError> {
    if text.is_empty() {
        return Err(ApiError::bad_request(
            "empty_input",
            format!("input {i} is an empty string"),
        ));
    }
    Ok(())
}
