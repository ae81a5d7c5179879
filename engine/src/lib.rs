//! # engine — the embedding engine of Embedding Workbench
//!
//! Three types carry a request through the model engine (the served path puts [`gateway::Gateway`], which parses,
//! templates and tokenizes, and [`scheduler::Scheduler`], which batches under a token budget, in front of them):
//!
//! - [`Engine`]: a loaded model (safetensors memory-mapped, linear layers packed once for the kernels,
//!   tokenizer, pooling) behind a [`Backend`]. It tokenizes text; [`Engine::embed`] is the blocking convenience
//!   on top, through a scheduler as serving is, and [`Engine::score`] its counterpart for a cross-encoder's
//!   pairs of texts (a decoder reranker's rendered through its chat template, [`tokenizer::ChatPairs`], as
//!   [`ModelFront::encode_pair`] gives them). A sparse (SPLADE) model's embedding is one weight per vocabulary entry; an inference-free
//!   one's query route is a [`model::SparseLookup`] ([`ModelFront::lookup`]), which needs no backend. A
//!   multi-vector (ColBERT) model's answer is a vector per token ([`Engine::embed_vectors`]; its tasks, query
//!   expansion and MaxSim in [`multi_vector::MultiVector`]), asked by [`Readout::Vectors`].
//! - [`Batch`]: a *ragged* batch — the token ids of several sequences concatenated with no padding, delimited by
//!   cumulative offsets. This is what a backend runs.
//! - [`Handle`]: what [`Backend::submit`] returns at once. The forward pass runs on the backend's own threads; the
//!   handle resolves exactly once to the batch's [`Embeddings`] (awaitable, pollable, or blocking).
//!
//! Behind the backend, the architectures in [`model`] (the BERT family: BERT, RoBERTa, XLM-RoBERTa, CamemBERT,
//! MPNet, DistilBERT, JinaBERT, ALBERT, ELECTRA, DeBERTa v2 and v3; ModernBERT; the rotary BERTs: Nomic BERT, GTE,
//! Jina v3; T5's encoder; the Llama family of decoders: Llama, Mistral, Qwen2, Qwen3, and EuroBERT's bidirectional one; Gemma 2's
//! and Gemma 3's text models; sentence-transformers' StaticEmbedding and WordEmbeddings, a table and no layers),
//! each followed by its sentence-transformers head (pooling, Dense modules, Normalize), are written once over the op set in [`backend::ops`]: a [`backend::ops::Device`]
//! holds the weights in its own form, a [`backend::ops::Ops`] runs one forward pass's operations, and an
//! [`backend::ops::Architecture`] (a [`model::Model`]: an architecture's [`model::Encoder`] and its head)
//! declares its activation memory and calls the ops. Only `backend/` knows a
//! device; [`backend::start`] loads a model directory onto the configured one.
//!
//! ```
//! use engine::{Engine, EngineConfig};
//! # fn main() -> Result<(), engine::Error> {
//! // A tiny random BERT written in the real on-disk format; use `engine::model::fetch::default_model_dir()` or any
//! // sentence-transformers model directory for real embeddings.
//! let dir = std::env::temp_dir().join(format!("engine-doc-{}", std::process::id()));
//! engine::model::tiny::write_tiny_bert(&dir, Default::default())?;
//! let engine = Engine::load(&dir, EngineConfig { threads: 1, ..Default::default() })?;
//!
//! // Blocking: one embedding per text, in order.
//! let vectors = engine.embed(&["the search query", "a passage of text"])?;
//! assert_eq!(vectors.len(), 2);
//! assert_eq!(vectors[0].len(), engine.dim());
//!
//! // Asynchronous: build a ragged batch and submit it; the handle is a future, or can be waited on.
//! let batch = engine::Batch::from_sequences([engine.tokenize("query")?.as_slice(), &engine.tokenize("")?]);
//! let out = engine.backend().submit(batch).wait()?;
//! assert_eq!(out.embeddings.len(), 2);
//! # std::fs::remove_dir_all(&dir).ok();
//! # Ok(())
//! # }
//! ```

pub mod backend;
mod batch;
pub mod config;
pub mod curve;
mod dtype;
mod error;
pub mod gateway;
pub mod model;
pub mod multi_vector;
pub mod plan;
pub mod replica;
pub mod scheduler;
pub mod tokenizer;

use std::path::Path;
use std::sync::Arc;

pub use backend::{Backend, BackendInfo, Embeddings, Handle, Output, Row};
pub use batch::{Batch, Readout};
pub use config::{EngineConfig, PoolingChoice};
pub use dtype::Dtype;
pub use error::{Error, Result};
use model::ModelDir;
pub use plan::CaptureMode;
pub use scheduler::Priority;
use tokenizer::{Tokenizer, Truncation};

/// What a loaded engine reports about itself.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ModelInfo {
    pub path: std::path::PathBuf,
    /// Its `tokenizer.json` (a StaticEmbedding module's is in the module's folder), or a WordEmbeddings module's
    /// word list ([`tokenizer::is_word_list`]).
    pub tokenizer_path: std::path::PathBuf,
    /// Whether its tokenizer adds the post-processor's special tokens ([`model::ModelDir::add_special_tokens`]).
    pub add_special_tokens: bool,
    pub dim: usize,
    pub layers: usize,
    pub max_seq_length: usize,
    pub pooling: model::PoolingModule,
    /// The output widths of the sentence-transformers Dense modules after pooling, in order (none: the embedding
    /// is the pooled hidden states).
    pub dense: Vec<usize>,
    /// Whether token states are served (`/embed_all`): only where they are the embedding's space, one pooling mode
    /// and no Dense module ([`model::ModelDir::pools_last`]).
    pub token_states: bool,
    pub normalize: bool,
    pub prompts: Vec<Prompt>,
    /// The model's own `default_prompt_name`: the prompt a text naming none gets, unless a server's
    /// `--default-prompt-name` replaces it (shown beside this in `/info`'s gateway settings).
    pub default_prompt: Option<String>,
    /// A cross-encoder's labels ([`model::ModelDir::classifier`]): its output is one score per label, for texts
    /// and pairs of texts ([`Engine::score`]), not an embedding.
    pub classifier: Option<model::Classifier>,
    /// Whether it is a sparse (SPLADE) model ([`model::ModelDir::sparse`]): its embedding is one weight per
    /// vocabulary entry, most of them 0, which `/embed_sparse` answers as the entries that are not.
    pub sparse: bool,
    /// A sparse model's top-k ([`model::SparseModule::max_active_dims`]): each embedding keeps its this many
    /// largest weights.
    pub max_active_dims: Option<usize>,
    /// A Router's routes by name ([`model::ModelDir::routes`]): the one the engine runs, its default, first, then
    /// the one answered by lookup ([`ModelFront::lookup`]); empty for a model without a Router.
    pub routes: Vec<String>,
    /// Whether it is a multi-vector (ColBERT) model ([`model::ModelDir::multi_vector`]): its answer is a vector per
    /// token ([`Engine::embed_vectors`]).
    pub multi_vector: bool,
    /// Tokens its tokenizer is given as special ones on load (a PyLate save's prefixes that sentence-transformers
    /// registers: one the tokenizer knows but splits): every tokenizer of the model is loaded with them
    /// ([`tokenizer::load_registered`]).
    pub registered_tokens: Vec<String>,
    /// The architecture and its settings, as read from config.json.
    #[serde(skip)]
    pub config: model::ModelConfig,
}

impl ModelInfo {
    /// The forward pass's FLOPs per token in sequences of `len` ([`model::ModelConfig::flops_per_token`]), with a
    /// sparse model's head, which runs over every token (its transform and vocabulary projection), and a
    /// multi-vector model's Dense modules, which do too; other Dense modules run once per sequence and are left
    /// out.
    pub fn flops_per_token(&self, len: usize) -> f64 {
        let h = self.config.hidden_size() as f64;
        let head = match (self.sparse, self.multi_vector) {
            (true, _) => 2.0 * h * (h + self.dim as f64),
            (false, true) => {
                let inputs = std::iter::once(self.config.hidden_size()).chain(self.dense.clone());
                inputs
                    .zip(&self.dense)
                    .map(|(i, o)| 2.0 * (i * o) as f64)
                    .sum()
            }
            (false, false) => 0.0,
        };
        self.config.flops_per_token(len) + head
    }

    /// How it pools, as one name: `splade` for a sparse model (`splade, max_active_dims 64` where it prunes),
    /// else its modes' names joined by `+` (`mean`, `cls+mean`). A gateway and its replicas compare it: they must
    /// pool alike.
    pub fn pooling_name(&self) -> String {
        if self.multi_vector {
            return "multi-vector".into();
        }
        if self.sparse {
            return match self.max_active_dims {
                Some(k) => format!("splade, max_active_dims {k}"),
                None => "splade".into(),
            };
        }
        let names: Vec<String> = self
            .pooling
            .modes
            .iter()
            .map(|m| {
                serde_json::to_value(m).map_or_else(
                    |_| format!("{m:?}"),
                    |v| v.as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect();
        names.join("+")
    }
}

/// What serving a model needs besides its weights: its settings, tokenizer and description. An [`Engine`] holds
/// one beside its backend; a gateway in front of remote replicas loads only this (no weights, no device).
pub struct ModelFront {
    config: EngineConfig,
    tokenizer: Box<dyn Tokenizer>,
    info: ModelInfo,
    lookup: Option<model::SparseLookup>,
    /// A cross-encoder's pairs through its chat template, where its Transformer module takes messages.
    chat_pairs: Option<tokenizer::ChatPairs>,
    multi_vector: Option<multi_vector::MultiVector>,
}

impl ModelFront {
    /// Reads the model directory's settings and tokenizer; loads no weights.
    pub fn load(dir: impl AsRef<Path>, config: EngineConfig) -> Result<Self> {
        config.validate()?;
        Self::open(
            &ModelDir::open(dir)?
                .pooled_by(config.pooling)?
                .pruned_to(config.max_active_dims)?,
            config,
        )
    }

    fn open(dir: &ModelDir, config: EngineConfig) -> Result<Self> {
        let max_seq_length = config
            .max_seq_length
            .unwrap_or(dir.max_seq_length)
            .min(dir.positions);
        let registered = match &dir.multi_vector {
            Some(m) => multi_vector::registered(m, &dir.tokenizer_path, config.tokenizer)?,
            None => Vec::new(),
        };
        let tokenizer = tokenizer::load_registered(
            &dir.tokenizer_path,
            config.tokenizer,
            Some(Truncation::right(max_seq_length)),
            dir.add_special_tokens,
            &registered,
        )?;
        // Every id the tokenizer can give must have an embedding row: counted by the largest id, not by the
        // tokens, whose ids may leave gaps.
        if tokenizer.id_bound() > dir.config.vocab_size() {
            return Err(Error::model(
                &dir.tokenizer_path,
                format!(
                    "the tokenizer gives ids up to {} but the model's vocab_size is {}",
                    tokenizer.id_bound() - 1,
                    dir.config.vocab_size()
                ),
            ));
        }
        let special = if dir.pooling.include_prompt || dir.prompts.is_empty() {
            Vec::new()
        } else {
            let dir_of_tokenizer = dir.tokenizer_path.parent().unwrap_or(&dir.root);
            let names = tokenizer::special_tokens(dir_of_tokenizer, &dir.tokenizer_path)?;
            // A name the vocabulary lacks (transformers would add it as a new token) ends no prompt's ids.
            names.iter().filter_map(|t| tokenizer.token_id(t)).collect()
        };
        let prompts = dir
            .prompts
            .iter()
            .map(|(name, text)| Prompt::new(tokenizer.as_ref(), &dir.pooling, name, text, &special))
            .collect::<Result<_>>()?;
        let info = ModelInfo {
            path: dir.root.clone(),
            tokenizer_path: dir.tokenizer_path.clone(),
            add_special_tokens: dir.add_special_tokens,
            dim: dir.dim(),
            layers: dir.config.layers(),
            max_seq_length,
            pooling: dir.pooling.clone(),
            dense: dir.dense.iter().map(|d| d.out_features).collect(),
            token_states: dir.pools_last(),
            normalize: dir.normalize,
            prompts,
            default_prompt: dir.default_prompt.clone(),
            classifier: dir.classifier.clone(),
            sparse: dir.sparse.is_some(),
            max_active_dims: dir.sparse.as_ref().and_then(|s| s.max_active_dims),
            routes: dir
                .routes
                .as_ref()
                .map(model::Routes::names)
                .unwrap_or_default(),
            multi_vector: dir.multi_vector.is_some(),
            registered_tokens: registered.clone(),
            config: dir.config.clone(),
        };
        let lookup = dir.routes.as_ref().and_then(|r| r.lookup.as_ref());
        let lookup = lookup
            .map(|route| {
                model::SparseLookup::load(route, config.tokenizer, info.dim, info.max_active_dims)
            })
            .transpose()?;
        let chat_pairs = dir
            .chat_template
            .as_ref()
            .map(|file| {
                let dir_of_tokenizer = dir.tokenizer_path.parent().unwrap_or(&dir.root);
                let plain = tokenizer::load(&dir.tokenizer_path, config.tokenizer, None, false)?;
                tokenizer::ChatPairs::new(
                    file,
                    &tokenizer::named_tokens(dir_of_tokenizer)?,
                    plain,
                    max_seq_length,
                )
            })
            .transpose()?;
        let multi_vector = dir
            .multi_vector
            .as_ref()
            .map(|module| {
                let file = (
                    dir.tokenizer_path.as_path(),
                    config.tokenizer,
                    dir.add_special_tokens,
                    registered.as_slice(),
                );
                multi_vector::MultiVector::new(
                    module,
                    file,
                    tokenizer.as_ref(),
                    max_seq_length,
                    config
                        .max_seq_length
                        .unwrap_or(dir.positions)
                        .min(dir.positions),
                )
            })
            .transpose()?;
        Ok(ModelFront {
            config,
            tokenizer,
            info,
            lookup,
            chat_pairs,
            multi_vector,
        })
    }

    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    pub fn info(&self) -> &ModelInfo {
        &self.info
    }

    pub fn dim(&self) -> usize {
        self.info.dim
    }

    /// Token ids above this are not the model's.
    pub fn vocab_size(&self) -> usize {
        self.info.config.vocab_size()
    }

    pub fn tokenizer(&self) -> &dyn Tokenizer {
        self.tokenizer.as_ref()
    }

    /// A cross-encoder's pair encoder through its chat template, if its module takes messages.
    pub fn chat_pairs(&self) -> Option<&tokenizer::ChatPairs> {
        self.chat_pairs.as_ref()
    }

    /// The ids of the pair `a`, `b` as the cross-encoder reads it, cut from the right at the model's limit: through
    /// its chat template where it has one ([`tokenizer::ChatPairs`]), else the tokenizer's pair template; without
    /// the trailing ids its head skips ([`ModelFront::trim_for_head`]).
    pub fn encode_pair(
        &self,
        a: &str,
        b: &str,
        scratch: &mut tokenizer::Scratch,
        ids: &mut Vec<u32>,
    ) -> Result<tokenizer::PairEncoding> {
        self.encode_pair_cut(a, b, self.tokenizer(), false, scratch, ids)
    }

    /// [`ModelFront::encode_pair`] cut from either side: by `pair_tokenizer` (the model's, or one cutting from the
    /// left), or, through a chat template, from the left where `cut_left`.
    pub fn encode_pair_cut(
        &self,
        a: &str,
        b: &str,
        pair_tokenizer: &dyn Tokenizer,
        cut_left: bool,
        scratch: &mut tokenizer::Scratch,
        ids: &mut Vec<u32>,
    ) -> Result<tokenizer::PairEncoding> {
        let encoded = match &self.chat_pairs {
            Some(chat) => chat.encode(a, b, cut_left, scratch, ids)?,
            None => pair_tokenizer.encode_pair(a, b, scratch, ids)?,
        };
        self.trim_for_head(ids);
        Ok(encoded)
    }

    /// A multi-vector model's tasks, expansion and mask ([`multi_vector::MultiVector`]).
    pub fn multi_vector(&self) -> Option<&multi_vector::MultiVector> {
        self.multi_vector.as_ref()
    }

    /// The longest input the engine serves: the model's limit, or a multi-vector model's task's where longer.
    pub fn longest_input(&self) -> usize {
        self.multi_vector
            .as_ref()
            .map_or(self.info.max_seq_length, multi_vector::MultiVector::longest)
    }

    /// Drops the trailing ids a decoder's classification head skips ([`model::Classifier::trim`]).
    pub fn trim_for_head(&self, ids: &mut Vec<u32>) {
        if let Some(c) = &self.info.classifier {
            c.trim(ids);
        }
    }

    /// A Router model's lookup route if `route` names it (sentence-transformers' `encode_query` for an
    /// inference-free SPLADE model: `Some("query")`); `None` for the route the engine runs.
    pub fn lookup(&self, route: Option<&str>) -> Option<&model::SparseLookup> {
        self.lookup.as_ref().filter(|l| route == Some(l.route()))
    }

    /// Token ids of `text`, with the special tokens its tokenizer adds, truncated to the model's max sequence
    /// length.
    pub fn tokenize(&self, text: &str) -> Result<Vec<u32>> {
        let mut ids = Vec::new();
        self.tokenizer.encode(text, &mut ids)?;
        Ok(ids)
    }

    /// The prompt to put before a text: `name` if given (an error listing the model's prompts if it has no such
    /// one; `what` names the setting that asked), else the model's default, if any.
    /// An empty `name` asks for none (the default left off, as sentence-transformers' `prompt=""`), unless the
    /// model has a prompt of that name.
    pub fn prompt_or_default(
        &self,
        name: Option<&str>,
        what: &'static str,
    ) -> Result<Option<&Prompt>> {
        let Some(name) = name.or(self.info.default_prompt.as_deref()) else {
            return Ok(None);
        };
        Prompt::find(&self.info.prompts, name).map_err(|names| Error::Config {
            name: what,
            message: format!("the model has no prompt `{name}` (it has: {names})"),
        })
    }
}

/// One of the model's prompts (`config_sentence_transformers.json`): its text, put before an input, and how many
/// leading tokens of the templated input pooling leaves out (`skip` of [`Readout::Pooled`]; 0 unless the model's
/// Pooling module excludes the prompt).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Prompt {
    pub name: String,
    pub text: String,
    pub skip: u32,
}

impl Prompt {
    /// The prompt `name` → `text`, with sentence-transformers' count of its tokens where `pooling` leaves them
    /// out (`include_prompt: false`): the prompt tokenized alone, special tokens and truncation included, less a
    /// trailing special token (one of `special`: the separator a post-processor appends); the leading one (CLS,
    /// BOS) stays counted, so it is left out too. An empty prompt leaves out nothing, as sentence-transformers
    /// does not count one. `special` is transformers' `all_special_ids` ([`tokenizer::special_tokens`]).
    fn new(
        tokenizer: &dyn Tokenizer,
        pooling: &model::PoolingModule,
        name: &str,
        text: &str,
        special: &[u32],
    ) -> Result<Self> {
        let mut skip = 0;
        if !pooling.include_prompt && !text.is_empty() {
            let mut ids = Vec::new();
            tokenizer.encode(text, &mut ids)?;
            let trailing_special = ids.last().is_some_and(|id| special.contains(id));
            skip = u32::try_from(ids.len() - usize::from(trailing_special)).unwrap_or(u32::MAX);
        }
        Ok(Prompt {
            name: name.to_owned(),
            text: text.to_owned(),
            skip,
        })
    }

    /// `text` with `prompt`, if any, before it.
    pub fn template<'a>(prompt: Option<&Prompt>, text: &'a str) -> std::borrow::Cow<'a, str> {
        match prompt {
            Some(p) if !p.text.is_empty() => format!("{}{text}", p.text).into(),
            _ => text.into(),
        }
    }

    /// `name` among `prompts`; `""`, where no prompt has that name, asks for none (sentence-transformers'
    /// `prompt=""`). An unknown name's error is the names there are, for the caller's message.
    pub fn find<'a>(
        prompts: &'a [Prompt],
        name: &str,
    ) -> std::result::Result<Option<&'a Prompt>, String> {
        match prompts.iter().find(|p| p.name == name) {
            Some(prompt) => Ok(Some(prompt)),
            None if name.is_empty() => Ok(None),
            None if prompts.is_empty() => Err("no prompts".into()),
            None => Err(prompts
                .iter()
                .map(|p| p.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")),
        }
    }

    /// The readout of an input this prompt was put before: pooled, without the prompt's tokens where they are
    /// left out.
    pub fn readout(&self) -> Readout {
        Readout::Pooled { skip: self.skip }
    }
}

/// A loaded model behind a backend, with its tokenizer and batching settings.
pub struct Engine {
    front: Arc<ModelFront>,
    backend: Arc<dyn Backend>,
}

impl Engine {
    /// Loads the model directory onto the backend `config.backend` names.
    pub fn load(dir: impl AsRef<Path>, config: EngineConfig) -> Result<Self> {
        config.validate()?;
        let dir = ModelDir::open(dir)?
            .pooled_by(config.pooling)?
            .pruned_to(config.max_active_dims)?;
        let mut front = ModelFront::open(&dir, config)?;
        let dir = dir.serving(front.longest_input());
        let backend = backend::start(&dir, &front.config)?;
        if front.config.auto_budget() {
            // The engine's config holds the budget measured, so everything downstream sees a number.
            front.config.max_batch_tokens = curve::auto_budget(backend.as_ref())?.0;
        }
        Ok(Engine {
            front: Arc::new(front),
            backend,
        })
    }

    /// Its settings, tokenizer and description, shared.
    pub fn front(&self) -> &Arc<ModelFront> {
        &self.front
    }

    pub fn config(&self) -> &EngineConfig {
        &self.front.config
    }

    pub fn info(&self) -> &ModelInfo {
        &self.front.info
    }

    pub fn dim(&self) -> usize {
        self.front.dim()
    }

    pub fn backend(&self) -> &Arc<dyn Backend> {
        &self.backend
    }

    pub fn tokenizer(&self) -> &dyn Tokenizer {
        self.front.tokenizer()
    }

    /// Token ids of `text`, with the special tokens its tokenizer adds, truncated to the model's max sequence
    /// length. No prompt is put before it (where the model has a default prompt, [`Engine::embed`] puts it).
    pub fn tokenize(&self, text: &str) -> Result<Vec<u32>> {
        self.front.tokenize(text)
    }

    /// Embeds `texts` and returns one vector per text, in order: the blocking convenience over the serving path,
    /// a [`scheduler::Scheduler`] on a small runtime of this call's own (so batching and overlap are the
    /// scheduler's, cut by its one batch builder). Each text gets the model's default prompt, if it names one,
    /// as sentence-transformers' `encode` does. Not for async code (it blocks): use a scheduler there.
    pub fn embed<S: AsRef<str>>(&self, texts: &[S]) -> Result<Vec<Vec<f32>>> {
        let prompt = self.front.prompt_or_default(None, "default_prompt_name")?;
        let runtime = self.runtime("Engine::embed")?;
        let mut out = Vec::with_capacity(texts.len());
        runtime.block_on(async {
            let scheduler =
                scheduler::Scheduler::start(self.backend.clone(), &self.bulk_config(), |_| {});
            let seqs = texts.iter().enumerate().map(|(i, t)| {
                let ids = self.tokenize(&Prompt::template(prompt, t.as_ref()))?;
                match ids.is_empty() {
                    // A tokenizer that adds no special tokens (a StaticEmbedding's) gives none for whitespace, a
                    // word list none for unknown or stop words.
                    true => Err(Error::Batch(format!("text {i} gives no tokens"))),
                    false => Ok(ids),
                }
            });
            let readout = prompt.map_or(Readout::POOLED, Prompt::readout);
            scheduler
                .embed_all(seqs, readout, |e| {
                    out.push(e.embedding.to_vec());
                    Ok(())
                })
                .await
        })?;
        Ok(out)
    }

    /// A multi-vector (ColBERT) model's vectors of each text: one per token it keeps, in order, as
    /// sentence-transformers' MultiVectorEncoder gives them (`encode_query` where `prompt_name` is `query`,
    /// `encode_document` where it is `document`: the prompt of that name, the task's limit and, for a query, its
    /// expansion; else `encode` with the model's default prompt). Blocking, as [`Engine::embed`].
    pub fn embed_vectors<S: AsRef<str>>(
        &self,
        texts: &[S],
        prompt_name: Option<&str>,
    ) -> Result<Vec<Vec<Vec<f32>>>> {
        let Some(mv) = self.front.multi_vector() else {
            return Err(Error::Config {
                name: "model",
                message:
                    "not a multi-vector model: vectors per token come from a MultiVectorEncoder"
                        .into(),
            });
        };
        let task = multi_vector::Task::named(prompt_name);
        let prompt = self.front.prompt_or_default(prompt_name, "prompt_name")?;
        let tokenizer = mv.tokenizer(task, self.tokenizer());
        let seqs = texts
            .iter()
            .map(|t| {
                let mut ids = Vec::new();
                tokenizer.encode(&Prompt::template(prompt, t.as_ref()), &mut ids)?;
                mv.expand(task, &mut ids);
                Ok(ids)
            })
            .collect::<Result<Vec<_>>>()?;
        let kept: Vec<Vec<bool>> = seqs
            .iter()
            .map(|ids| mv.kept(task, ids).collect())
            .collect();
        let runtime = self.runtime("Engine::embed_vectors")?;
        let dim = self.dim();
        let mut out = Vec::with_capacity(texts.len());
        runtime.block_on(async {
            let scheduler =
                scheduler::Scheduler::start(self.backend.clone(), &self.bulk_config(), |_| {});
            let mut kept = kept.iter();
            let each = |e: scheduler::Embedded| {
                let keep = kept.next().map_or(&[][..], Vec::as_slice);
                let rows = e.embedding.chunks_exact(dim).zip(keep);
                out.push(rows.filter(|(_, k)| **k).map(|(v, _)| v.to_vec()).collect());
                Ok::<_, Error>(())
            };
            scheduler
                .embed_all(seqs.into_iter().map(Ok), mv.readout(task), each)
                .await
        })?;
        Ok(out)
    }

    /// Scores each pair of texts with a cross-encoder ([`ModelInfo::classifier`]): one logit per label, in order,
    /// as sentence-transformers' `CrossEncoder.predict` with an identity activation gives them. Each pair is
    /// tokenized with the tokenizer's pair template, both texts truncated longest first to the model's limit, and
    /// its second text's tokens of type 1 where the template types them; or, for a model that takes messages,
    /// through its chat template ([`ModelFront::encode_pair`]). Blocking, as [`Engine::embed`].
    pub fn score<A: AsRef<str>, B: AsRef<str>>(&self, pairs: &[(A, B)]) -> Result<Vec<Vec<f32>>> {
        if self.info().classifier.is_none() {
            return Err(Error::Config {
                name: "model",
                message:
                    "not a cross-encoder: scores come from a *ForSequenceClassification checkpoint"
                        .into(),
            });
        }
        // Each pair's ids, gathered into runs of pairs whose second texts start at the same token (usually one
        // run: the query is cut only when it is the longer text), a submission each.
        let mut runs: Vec<(Option<u32>, Vec<Vec<u32>>)> = Vec::new();
        tokenizer::with_thread_scratch(|scratch| {
            for (a, b) in pairs {
                let mut ids = Vec::new();
                let from = self
                    .front
                    .encode_pair(a.as_ref(), b.as_ref(), scratch, &mut ids)?
                    .type1_from;
                match runs.last_mut() {
                    Some((f, run)) if *f == from => run.push(ids),
                    _ => runs.push((from, vec![ids])),
                }
            }
            Ok::<_, Error>(())
        })?;
        let runtime = self.runtime("Engine::score")?;
        runtime.block_on(async {
            let scheduler =
                scheduler::Scheduler::start(self.backend.clone(), &self.bulk_config(), |_| {});
            let mut tickets = Vec::with_capacity(runs.len());
            for (type1_from, ids) in runs {
                let work = scheduler::Work {
                    priority: scheduler::Priority::Batch,
                    readout: Readout::POOLED,
                    type1_from,
                };
                tickets.push(scheduler.submit_waiting(ids, work).await?);
            }
            let mut out = Vec::with_capacity(pairs.len());
            for ticket in tickets {
                out.extend(
                    ticket
                        .wait()
                        .await?
                        .into_iter()
                        .map(|e| e.embedding.to_vec()),
                );
            }
            Ok(out)
        })
    }

    /// A small runtime of `what`'s own, for the blocking conveniences over the serving path.
    fn runtime(&self, what: &str) -> Result<tokio::runtime::Runtime> {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .map_err(|e| Error::Spawn {
                what: format!("the runtime of {what}"),
                message: e.to_string(),
            })
    }

    /// The settings of a scheduler fed a whole corpus at once: no partial batch waits for company that is
    /// already queued or will never come.
    pub fn bulk_config(&self) -> EngineConfig {
        EngineConfig {
            max_wait_ms: 0,
            ..self.front.config.clone()
        }
    }
}
