//! Reads a model directory the way sentence-transformers does: `modules.json` names the pipeline (a Transformer
//! or a WordEmbeddings module and Pooling, or a StaticEmbedding; then Dense and Normalize), `modules` reads the
//! modules after the network,
//! `limits` the max sequence length, `classifier` a cross-encoder's classification head (a bare
//! `*ForSequenceClassification` checkpoint), `sparse` a SparseEncoder's SPLADE head (a Transformer and
//! SpladePooling).

mod chat;
mod classifier;
mod limits;
mod modules;
mod multi_vector;
mod router;
mod sparse;

use std::path::{Path, PathBuf};

use serde::Deserialize;

pub use self::chat::ChatTemplateFile;
use self::chat::TransformerModule;
pub use self::classifier::Classifier;
use self::limits::{sentence_max_length, tokenizer_truncation};
use self::modules::read_pooling;
pub use self::modules::{DenseModule, HeadNorm, Pooling, PoolingModule};
pub use self::multi_vector::{MultiVectorModule, QueryExpansion};
pub use self::router::{LookupRoute, Routes, LOOKUP_TABLE};
pub use self::sparse::SparseModule;
use super::config::{read_json, BertFamily, ModelConfig, StaticConfig, WORD_EMBEDDINGS_TABLE};
use crate::config::PoolingChoice;
use crate::error::{Error, Result};

/// The longest sequence the engine runs, whatever a config says: a rotary table is computed at load for every
/// position served (at head_dim 128, 64 MiB here), so `max_position_embeddings` (3,276,832,768 in a fuzzed
/// config; rope-scaled models say millions) must not size it alone. Longer than the context of the embedding
/// models we know of (Qwen3-Embedding's is 32,768); `--max-seq-length` lowers it, never raises it.
pub const MAX_POSITIONS: usize = 1 << 17;

/// A parsed model directory: configuration, pooling, normalisation and where the weights are.
#[derive(Clone, Debug)]
pub struct ModelDir {
    pub root: PathBuf,
    pub config: ModelConfig,
    pub pooling: PoolingModule,
    pub normalize: bool,
    /// sentence-transformers' `max_seq_length`, capped by the position table.
    pub max_seq_length: usize,
    /// The longest sequence the backend loads the model for: the model's positions up to [`MAX_POSITIONS`], or
    /// fewer once an engine truncates sooner ([`ModelDir::serving`]). What position tables computed at load
    /// (Qwen3's rotary one) cover, so a config's `max_position_embeddings` alone never sizes an allocation.
    pub positions: usize,
    /// Prompt prefixes by name from `config_sentence_transformers.json` (e.g. `query` → `"query: "`).
    pub prompts: Vec<(String, String)>,
    /// The prompt sentence-transformers puts before a text that names none (its `default_prompt_name`), one of
    /// `prompts`.
    pub default_prompt: Option<String>,
    /// sentence-transformers' Dense modules after pooling, in order; a cross-encoder's classification head.
    pub dense: Vec<DenseModule>,
    /// A cross-encoder's labels (a `*ForSequenceClassification` checkpoint, bare or a sentence-transformers 6
    /// CrossEncoder's; or a causal LM under LogitScore): its output is one logit per label, from the first token
    /// (a decoder's: the last) through its head (`dense`).
    pub classifier: Option<Classifier>,
    /// The chat template a cross-encoder renders each (query, document) pair through, where its Transformer module
    /// takes messages.
    pub chat_template: Option<ChatTemplateFile>,
    /// A sparse model's head (a SparseEncoder's SpladePooling over its MLM head): its output is one weight per
    /// vocabulary entry.
    pub sparse: Option<SparseModule>,
    /// A Router's routes (an inference-free SPLADE model's): the engine runs the Transformer's, the default; a
    /// SparseStaticEmbedding's is answered by lookup.
    pub routes: Option<Routes>,
    /// A multi-vector (ColBERT) model's knobs: its output is a vector per token, `dense` and Normalize applied to
    /// each.
    pub multi_vector: Option<MultiVectorModule>,
    pub weights_path: PathBuf,
    /// The `tokenizer.json`, or a WordEmbeddings module's word list ([`crate::tokenizer::WHITESPACE_CONFIG`]).
    pub tokenizer_path: PathBuf,
    /// Whether the tokenizer's post-processor adds its special tokens: a Transformer module's tokenizer does, a
    /// StaticEmbedding's does not (sentence-transformers encodes with `add_special_tokens=False`).
    pub add_special_tokens: bool,
}

#[derive(Deserialize)]
struct Module {
    #[serde(default)]
    path: String,
    #[serde(rename = "type")]
    kind: String,
}

impl Module {
    /// The module's class without its package path (`sentence_transformers.models.Pooling` → `Pooling`).
    fn class(&self) -> &str {
        self.kind.rsplit('.').next().unwrap_or_default()
    }
}

#[derive(Deserialize, Default)]
struct SentenceTransformersFile {
    /// A `null` prompt is an empty one, as sentence-transformers reads it.
    #[serde(default)]
    prompts: std::collections::BTreeMap<String, Option<String>>,
    default_prompt_name: Option<String>,
    /// A SparseEncoder's top-k ([`SparseModule::max_active_dims`]); a SentenceTransformer ignores it.
    max_active_dims: Option<usize>,
    /// `MultiVectorEncoder`, or a PyLate 3 save's `ColBERT`: a multi-vector model.
    model_type: Option<String>,
    /// The other keys (a PyLate save's multi-vector knobs).
    #[serde(flatten)]
    rest: serde_json::Map<String, serde_json::Value>,
}

/// sentence-transformers' `wordembedding_config.json` (a WordEmbeddings module's).
#[derive(Deserialize)]
struct WordEmbeddingsFile {
    tokenizer_class: String,
    max_seq_length: Option<usize>,
}

/// A WordEmbeddings module's tokenizer file (its WhitespaceTokenizer's word list; other word tokenizers are
/// refused) and the length it cuts the words' ids at (sentence-transformers' default, a million, where the file
/// names none: past [`MAX_POSITIONS`] either way), from the module's `folder`.
fn word_embeddings(folder: &Path) -> Result<(PathBuf, Option<usize>)> {
    let path = folder.join("wordembedding_config.json");
    let file: WordEmbeddingsFile = read_json(&require(path.clone(), "wordembedding_config.json")?)?;
    let class = &file.tokenizer_class;
    if !(class.starts_with("sentence_transformers.") && class.ends_with(".WhitespaceTokenizer")) {
        return Err(Error::model(
            &path,
            format!(
                "unsupported tokenizer_class {:?}: expected sentence-transformers' WhitespaceTokenizer",
                file.tokenizer_class
            ),
        ));
    }
    let tokenizer = require(
        folder.join(crate::tokenizer::WHITESPACE_CONFIG),
        "the WhitespaceTokenizer's word list",
    )?;
    Ok((tokenizer, file.max_seq_length))
}

fn require(path: PathBuf, what: &str) -> Result<PathBuf> {
    if path.is_file() {
        Ok(path)
    } else {
        Err(Error::model(path, format!("missing: expected {what}")))
    }
}

impl ModelDir {
    /// A Transformer module's files at the root: its config, weights and tokenizer.
    fn transformer(root: &Path) -> Result<(ModelConfig, PathBuf, PathBuf)> {
        let config_path = require(root.join("config.json"), "the model's config.json")?;
        let config = ModelConfig::read(&config_path)?;
        // One file, else a sharded checkpoint's index (transformers shards models past a few GB).
        let single = root.join("model.safetensors");
        let sharded = root.join("model.safetensors.index.json");
        let weights_path = if sharded.is_file() && !single.is_file() {
            sharded
        } else {
            require(
                single,
                "the weights as model.safetensors (or sharded, with model.safetensors.index.json)",
            )?
        };
        let tokenizer_path = require(root.join("tokenizer.json"), "a Hugging Face tokenizer.json")?;
        Ok((config, weights_path, tokenizer_path))
    }

    pub fn open(root: impl AsRef<Path>) -> Result<Self> {
        let root = root.as_ref().to_owned();
        if !root.is_dir() {
            return Err(Error::model(
                &root,
                "not a directory: expected a model directory with config.json, model.safetensors and tokenizer.json",
            ));
        }
        // Without modules.json the directory is a bare transformers model: sentence-transformers then defaults to
        // mean pooling without normalisation, and so do we.
        let modules_path = root.join("modules.json");
        let modules: Vec<Module> = if modules_path.is_file() {
            read_json(&modules_path)?
        } else {
            Vec::new()
        };
        // A Router's modules are in folders of their own, under its: the engine runs its Transformer route.
        let (modules, routes) = match modules.as_slice() {
            [m] if m.class() == "Router" => {
                let (modules, routes) = router::read(&root.join(&m.path), &m.path)?;
                (modules, Some(routes))
            }
            [m, after, ..] if m.class() == "Router" => {
                return Err(Error::model(
                    &modules_path,
                    format!("unsupported module {:?} after a Router", after.class()),
                ))
            }
            _ => (modules, None),
        };
        // The Transformer module's folder (the root, but for a Router's or an old save's `0_Transformer`).
        let transformer_root = modules
            .iter()
            .find(|m| ["Transformer", "MLMTransformer"].contains(&m.class()))
            .map_or_else(|| root.clone(), |m| root.join(&m.path));
        // A StaticEmbedding or WordEmbeddings module in place of a Transformer: its own folder holds its table
        // and tokenizer. A StaticEmbedding's output is already the pooled embedding (the tokens' mean); a
        // WordEmbeddings' is each token's row, which a Pooling module pools.
        let table = match modules.first() {
            Some(m) if ["StaticEmbedding", "WordEmbeddings"].contains(&m.class()) => {
                Some((root.join(&m.path), m.class() == "StaticEmbedding"))
            }
            _ => None,
        };
        // `word_limit`: a WordEmbeddings module's own cut (its max_seq_length), read with its tokenizer's file.
        let (config, weights_path, tokenizer_path, word_limit) = match &table {
            Some((folder, is_static)) => {
                let weights = folder.join("model.safetensors");
                if !weights.is_file() && folder.join("pytorch_model.bin").is_file() {
                    return Err(Error::model(
                        folder,
                        "the table is in pytorch_model.bin, which is not read (a pickle): load the model once \
                         in sentence-transformers and save() it, which writes model.safetensors",
                    ));
                }
                let weights_path = require(weights, "the module's table as model.safetensors")?;
                let (tokenizer_path, limit, tables) = match is_static {
                    true => (
                        require(folder.join("tokenizer.json"), "the module's tokenizer.json")?,
                        None,
                        &["embedding.weight", "embeddings"][..],
                    ),
                    false => {
                        let (path, limit) = word_embeddings(folder)?;
                        (path, limit, &[WORD_EMBEDDINGS_TABLE][..])
                    }
                };
                let config = ModelConfig::Static(StaticConfig::read(&weights_path, tables)?);
                (config, weights_path, tokenizer_path, limit)
            }
            None => {
                let (config, weights_path, tokenizer_path) = Self::transformer(&transformer_root)?;
                (config, weights_path, tokenizer_path, None)
            }
        };

        // sentence-transformers 6's task and modalities of the Transformer module.
        let module = match table {
            Some(_) => TransformerModule::default(),
            None => TransformerModule::read(&transformer_root)?,
        };
        let task = module.transformer_task.as_deref();
        let st_path = root.join("config_sentence_transformers.json");
        let mut st = if st_path.is_file() {
            read_json::<SentenceTransformersFile>(&st_path)?
        } else {
            SentenceTransformersFile::default()
        };
        // A MultiVectorEncoder's save, or PyLate 3's (its modules the Transformer and Dense alone).
        let pylate = st.model_type.as_deref() == Some("ColBERT");
        let multi = pylate
            || st.model_type.as_deref() == Some("MultiVectorEncoder")
            || modules.iter().any(|m| m.class() == "MultiVectorMask");
        let mut mask_folder = None;
        let is_static = table.as_ref().is_some_and(|&(_, s)| s);
        let has_table = table.is_some();
        let (mut pooling, mut normalize, mut pooled) =
            (PoolingModule::single(Pooling::Mean), false, is_static);
        let mut dense: Vec<DenseModule> = Vec::new();
        let mut sparse = None;
        let mut classifier = None;
        for m in modules.iter().skip(usize::from(has_table)) {
            if sparse.is_some() {
                return Err(Error::model(
                    &modules_path,
                    format!("unsupported module {:?} after SpladePooling", m.class()),
                ));
            }
            match m.class() {
                "Transformer" if !has_table => {}
                // sentence-transformers 5's name for a Transformer module of task fill-mask.
                "MLMTransformer" if !has_table => {}
                "SpladePooling" if !has_table && !pooled => {
                    sparse = Some(sparse::read(
                        Some(&root.join(&m.path)),
                        &transformer_root.join("config.json"),
                        &config,
                        &weights_path,
                    )?);
                    pooling = PoolingModule::single(Pooling::Max);
                    pooled = true;
                }
                "Pooling" if !is_static && !multi => {
                    pooling = read_pooling(&root.join(&m.path).join("config.json"))?;
                    pooled = true;
                }
                // A multi-vector model's Dense modules run on every token.
                "Dense" if multi && !has_table && mask_folder.is_none() && !normalize => {
                    let inp = dense.last().map_or(config.hidden_size(), |d| d.out_features);
                    dense.push(DenseModule::read(&root.join(&m.path), inp, "token_embeddings")?);
                }
                "MultiVectorMask" if multi && !has_table => {
                    mask_folder = Some(root.join(&m.path));
                }
                "Dense" if pooled && !normalize => {
                    let inp = dense.last().map_or_else(
                        || pooling.width(config.hidden_size()),
                        |d| d.out_features,
                    );
                    dense.push(DenseModule::read(&root.join(&m.path), inp, "sentence_embedding")?);
                }
                "Dense" => {
                    return Err(Error::model(
                        &modules_path,
                        "unsupported: a Dense module before Pooling or after Normalize",
                    ))
                }
                // A multi-vector model's Normalize acts on what its config names: the token vectors, or (the
                // default) the sentence embedding, which such a model has not.
                "Normalize" if multi => {
                    normalize |= multi_vector::normalizes_tokens(&root.join(&m.path))?;
                }
                "Normalize" => normalize = true,
                // A causal LM's logits (`transformer_task` text-generation) scored by two of its tokens'.
                "LogitScore" if task == Some("text-generation") && !pooled => {
                    dense.push(chat::logit_score(
                        &root.join(&m.path),
                        &transformer_root.join("config.json"),
                        &weights_path,
                        &config,
                    )?);
                    pooling = PoolingModule::single(Pooling::LastToken);
                    pooled = true;
                    classifier = Some(Classifier {
                        labels: vec!["LABEL_0".into()],
                        skips_trailing: None,
                    });
                }
                other => {
                    return Err(Error::model(
                        &modules_path,
                        format!(
                            "unsupported module {other:?} here: expected a Transformer or WordEmbeddings and \
                             Pooling, or a StaticEmbedding, first, then Dense and Normalize modules; or a \
                             Transformer and SpladePooling"
                        ),
                    ))
                }
            }
        }
        // A bare checkpoint of a sequence classifier is a cross-encoder (sentence-transformers' CrossEncoder):
        // the first token (ModernBERT's: or the mean; a decoder's: the last) through its head; so is a Transformer
        // module of task sequence-classification (a CrossEncoder's save in sentence-transformers 6). With
        // modules.json and no such task it is a Transformer module like any other.
        let classifies = task == Some("sequence-classification");
        if modules.is_empty() || classifies {
            match classifier::read(
                &transformer_root.join("config.json"),
                &weights_path,
                config.hidden_size(),
            )? {
                Some((head, mode, mut labels)) => {
                    // Dropping the trailing padding leaves the token read as it was only under causal attention.
                    if !matches!(&config, ModelConfig::Decoder(c) if c.causal()) {
                        labels.skips_trailing = None;
                    }
                    pooling = PoolingModule::single(mode);
                    dense = head;
                    classifier = Some(labels);
                }
                None if classifies => {
                    return Err(Error::model(
                        transformer_root.join("config.json"),
                        "transformer_task sequence-classification, but the config names no \
                         *ForSequenceClassification architecture",
                    ))
                }
                None => {}
            }
        }
        let multi_vector =
            match multi {
                true => {
                    // PyLate 3 normalized inline.
                    normalize |= pylate;
                    // A MultiVectorEncoder's default prompts, empty where the save names none: the tasks'.
                    for task in ["query", "document"] {
                        st.prompts.entry(task.into()).or_insert(None);
                    }
                    Some(multi_vector::read(
                        &module.multi_vector,
                        mask_folder.as_deref(),
                        (&st.rest, pylate, &st_path),
                        &mut st.prompts,
                    )?)
                }
                false if module.multi_vector.any() => return Err(Error::model(
                    transformer_root.join("sentence_bert_config.json"),
                    "unsupported: query_length, document_length or query_expansion on a model that is not \
                     multi-vector (sentence-transformers 6 cuts its encode_query and encode_document texts \
                     there; the engine's per-task limits are a MultiVectorEncoder's only)",
                )),
                false => None,
            };
        // An unattended expansion is read by none: each of its positions must still see a key of the query's.
        let unattended = multi_vector
            .as_ref()
            .and_then(|m| m.expansion.as_ref())
            .filter(|e| !e.attend);
        if let Some(e) = unattended {
            // DeBERTa masks a masked token's embedding and its own row of scores too: transformers' expansion
            // vectors are then those of a softmax over nothing (every score the dtype's minimum), which depend on
            // the batch's padding.
            if matches!(&config, ModelConfig::Bert(c) if c.family() == BertFamily::Deberta) {
                return Err(Error::model(
                    &modules_path,
                    "unsupported: a query expansion that no token attends to over DeBERTa (whose masked tokens \
                     transformers zeroes and lets attend to nothing); an attended expansion (`attend: true`) runs",
                ));
            }
            let shapes = config.layers_shapes();
            if let Some(w) = shapes.iter().filter_map(|(_, s)| s.window).min() {
                if e.length > w + 1 {
                    return Err(Error::model(
                        &modules_path,
                        format!(
                            "unsupported: a query expansion to {} tokens that no token attends to, past the \
                             sliding window of {w} positions (its last positions would see no key)",
                            e.length
                        ),
                    ));
                }
            }
        }
        if multi_vector.is_some() && (classifier.is_some() || sparse.is_some() || routes.is_some())
        {
            return Err(Error::model(
                &modules_path,
                "unsupported: a multi-vector model with a classifier, a sparse head or a Router",
            ));
        }
        if task == Some("text-generation") && classifier.is_none() {
            return Err(Error::model(
                &modules_path,
                "unsupported: a text-generation Transformer module without a LogitScore module after it",
            ));
        }
        // Only a cross-encoder's pairs are rendered through a chat template; an embedding model whose module
        // takes messages (its texts would be) is refused.
        let chat_template = match &classifier {
            Some(_) => chat::template(
                &transformer_root,
                &module,
                !modules.is_empty(),
                &transformer_root.join("config.json"),
            )?,
            None if module
                .modality_config
                .as_ref()
                .is_some_and(|m| m.contains_key("message")) =>
            {
                return Err(Error::model(
                    transformer_root.join("sentence_bert_config.json"),
                    "unsupported: an embedding model whose Transformer module takes chat messages \
                     (modality_config names message), which would render each text through its chat template",
                ))
            }
            None => None,
        };
        // A lookup's weights are a sparse model's vocabulary (its table's width is checked where it is loaded,
        // `SparseLookup::load`).
        if routes.as_ref().is_some_and(|r| r.lookup.is_some()) && sparse.is_none() {
            return Err(Error::model(
                &modules_path,
                "unsupported: a SparseStaticEmbedding route beside a dense one (its weights are a sparse \
                 model's vocabulary)",
            ));
        }
        if has_table && !pooled {
            return Err(Error::model(
                &modules_path,
                "unsupported: a WordEmbeddings module without a Pooling module after it",
            ));
        }
        let positions = config.max_positions().min(MAX_POSITIONS);
        let limit = match &table {
            Some((_, true)) => tokenizer_truncation(&tokenizer_path)?,
            Some((_, false)) => word_limit,
            None => sentence_max_length(&transformer_root, &tokenizer_path)?,
        };
        // `processing_kwargs`' max_length takes the place of max_seq_length, as sentence-transformers gives it.
        let limit = match module.max_length(chat_template.is_some())? {
            Some(n) => Some(n),
            None => limit,
        };
        let max_seq_length = limit.map_or(positions, |n| n.min(positions));
        // As sentence-transformers, which refuses a default that names no prompt.
        let default_prompt = st.default_prompt_name;
        // A CrossEncoder puts its default prompt before the query (or as a system message): not done here.
        if classifier.is_some() && default_prompt.is_some() {
            return Err(Error::model(
                &st_path,
                "unsupported: a cross-encoder with a default_prompt_name (sentence-transformers puts the prompt \
                 before each pair's query, or as a system message)",
            ));
        }
        if let Some(name) = default_prompt
            .as_ref()
            .filter(|n| !st.prompts.contains_key(*n))
        {
            return Err(Error::model(
                &st_path,
                format!(
                    "default_prompt_name {name:?} is not one of its prompts ({:?})",
                    st.prompts.keys().collect::<Vec<_>>()
                ),
            ));
        }
        if let Some(sparse) = sparse.as_mut() {
            sparse.max_active_dims = match st.max_active_dims {
                Some(0) => {
                    return Err(Error::model(
                        &st_path,
                        "max_active_dims 0: sentence-transformers wants a positive number",
                    ))
                }
                k => k,
            };
        }
        let prompts = st
            .prompts
            .into_iter()
            .map(|(name, text)| (name, text.unwrap_or_default()))
            .collect();
        Ok(ModelDir {
            root,
            positions,
            config,
            pooling,
            normalize,
            max_seq_length,
            prompts,
            default_prompt,
            dense,
            classifier,
            chat_template,
            sparse,
            routes,
            multi_vector,
            weights_path,
            tokenizer_path,
            add_special_tokens: !has_table,
        })
    }
}

impl ModelDir {
    /// Width of the sentence embedding: the last Dense module's output, else the pooled vector's.
    pub fn dim(&self) -> usize {
        match (&self.sparse, self.dense.last()) {
            (Some(s), _) => s.vocab,
            (None, Some(d)) => d.out_features,
            (None, None) => self.pooling.width(self.config.hidden_size()),
        }
    }

    /// Whether the embedding is the hidden states pooled by one mode, nothing after it but Normalize (nor a
    /// SPLADE head before it): then a sequence's token states are in the embedding's space (served by
    /// `/embed_all`), and a backend may normalize rows as it pools them.
    pub fn pools_last(&self) -> bool {
        self.dense.is_empty()
            && self.pooling.modes.len() == 1
            && self.sparse.is_none()
            && self.multi_vector.is_none()
    }

    /// The directory pooled as `choice` says instead of as its files do (none: as they do). A cross-encoder's
    /// pooling is its head's, a sparse model's SPLADE's, and a Dense module's input the width of what its files
    /// pool: those are refused rather than changed. `splade` over a dense directory reads the checkpoint's MLM
    /// head with SpladePooling's defaults.
    pub fn pooled_by(mut self, choice: Option<PoolingChoice>) -> Result<Self> {
        let Some(choice) = choice else {
            return Ok(self);
        };
        let name = clap::ValueEnum::to_possible_value(&choice)
            .map_or_else(|| format!("{choice:?}"), |v| v.get_name().to_owned());
        let refuse = |why: &str| Err(Error::model(&self.root, format!("--pooling {name}: {why}")));
        if self.classifier.is_some() {
            return refuse("a cross-encoder pools as its classification head does");
        }
        let mode = match choice {
            PoolingChoice::Splade if self.sparse.is_some() => return Ok(self),
            PoolingChoice::Splade => None,
            PoolingChoice::Cls => Some(Pooling::Cls),
            PoolingChoice::Mean => Some(Pooling::Mean),
            PoolingChoice::Max => Some(Pooling::Max),
            PoolingChoice::LastToken => Some(Pooling::LastToken),
        };
        if self.sparse.is_some() {
            return refuse("a sparse model pools by its SpladePooling module");
        }
        // A StaticEmbedding's mean is the model itself (an EmbeddingBag), not a Pooling module's to change.
        let bag = matches!(&self.config, ModelConfig::Static(c) if !c.is_word_embeddings());
        if bag && mode != Some(Pooling::Mean) {
            return refuse("a StaticEmbedding averages its tokens' rows itself");
        }
        if !self.dense.is_empty() && (mode.is_none() || self.pooling.modes.len() != 1) {
            return refuse("the model's Dense modules read what its own Pooling module gives");
        }
        match mode {
            Some(mode) => self.pooling.modes = vec![mode],
            None => {
                if self.normalize || matches!(self.config, ModelConfig::Static(_)) {
                    return refuse(
                        "SPLADE runs a Transformer's MLM head, without Normalize after it",
                    );
                }
                // The Transformer's config.json, beside its weights (or their index).
                let config_path = self.weights_path.with_file_name("config.json");
                self.sparse = Some(sparse::read(
                    None,
                    &config_path,
                    &self.config,
                    &self.weights_path,
                )?);
                self.pooling = PoolingModule::single(Pooling::Max);
            }
        }
        Ok(self)
    }

    /// The sparse model keeping each embedding's `k` largest weights (none: as its files say), as
    /// sentence-transformers' `SparseEncoder(max_active_dims=k)` does; a dense model has no such output.
    pub fn pruned_to(mut self, k: Option<usize>) -> Result<Self> {
        let Some(k) = k else {
            return Ok(self);
        };
        match self.sparse.as_mut() {
            Some(sparse) => sparse.max_active_dims = Some(k),
            None => {
                return Err(Error::model(
                    &self.root,
                    format!(
                        "--max-active-dims {k}: only a sparse model's embedding is pruned (a SparseEncoder, \
                         or --pooling splade)"
                    ),
                ))
            }
        }
        Ok(self)
    }

    /// The directory as an engine that truncates every input to `max_len` tokens runs it.
    pub fn serving(mut self, max_len: usize) -> Self {
        self.positions = self.positions.min(max_len);
        self
    }
}

#[cfg(test)]
mod tests;
