//! A multi-vector (late-interaction, ColBERT) model around the engine, as sentence-transformers 6's
//! MultiVectorEncoder runs one: a text is a query or a document ([`Task`], which a request names as its prompt's
//! name, as `encode_query` and `encode_document` name both), each with its token limit; a query shorter than the
//! expansion length is padded with the expansion token ([`MultiVector::expand`]); the engine answers a vector per
//! token ([`crate::Readout::Vectors`]), and the vectors of the tokens MultiVectorMask leaves out are dropped
//! ([`MultiVector::kept`]).

use std::path::Path;

use crate::error::{Error, Result};
use crate::model::MultiVectorModule;
use crate::tokenizer::{self, TokenizerKind, Truncation};
use crate::{Readout, Tokenizer};

/// The prefixes of `module` (a PyLate save's) that sentence-transformers registers as special tokens of the
/// tokenizer at `path` (its `_register_prefix_tokens`): each, or else its first word, that the tokenizer knows
/// (a vocabulary or added token) but splits, as `[unused0]` is split by BERT's pre-tokenizer; one it knows not
/// stays text.
pub(crate) fn registered(
    module: &MultiVectorModule,
    path: &Path,
    kind: TokenizerKind,
) -> Result<Vec<String>> {
    if module.prefixes.is_empty() {
        return Ok(Vec::new());
    }
    let plain = tokenizer::load(path, kind, None, false)?;
    let mut registered = Vec::new();
    for prefix in &module.prefixes {
        let first = prefix.split_whitespace().next().unwrap_or_default();
        let known = [prefix.as_str(), first]
            .into_iter()
            .find_map(|p| plain.token_id(p).map(|id| (p, id)));
        if let Some((token, id)) = known {
            let mut ids = Vec::new();
            plain.encode(token, &mut ids)?;
            if ids != [id] {
                registered.push(token.to_owned());
            }
        }
    }
    Ok(registered)
}

/// Which side of a late-interaction search a text is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Task {
    Query,
    Document,
}

impl Task {
    /// The task a prompt name asks (`query`, `document`); another name, or none, asks none: the model's limit,
    /// no expansion, and the skiplist as for a document, as sentence-transformers' `encode` without a task.
    pub fn named(prompt_name: Option<&str>) -> Option<Task> {
        match prompt_name {
            Some("query") => Some(Task::Query),
            Some("document") => Some(Task::Document),
            _ => None,
        }
    }
}

/// The expansion of a query: padded to `length` with `id`.
#[derive(Clone, Copy, Debug)]
struct Expansion {
    id: u32,
    length: usize,
    attend: bool,
}

/// What the front of a multi-vector model needs besides the model's tokenizer.
pub struct MultiVector {
    /// A query's and a document's tokenizers, where their limit is not the model's.
    query: Option<Box<dyn Tokenizer>>,
    document: Option<Box<dyn Tokenizer>>,
    expansion: Option<Expansion>,
    /// The skiplist's ids, and whether it applies to queries and to documents.
    skip: Vec<u32>,
    skip_tasks: [bool; 2],
    keep_only: Option<Vec<u32>>,
    /// Whether the model's MultiVectorMask says which vectors are returned; without one, those the encoder
    /// attends to.
    masked: bool,
    /// The longest limit of the two tasks and the model's: what the engine serves.
    longest: usize,
    mean_max_sim: bool,
}

impl MultiVector {
    /// The front of `module` over the tokenizer at `path` (`model`, cutting at `limit`, the model's; `registered`
    /// its prefixes registered as special tokens, [`registered`]), tasks' limits capped at `positions`. Refuses an
    /// expansion token the tokenizer does not have, or one it ends every text with where unattended.
    pub(crate) fn new(
        module: &MultiVectorModule,
        (path, kind, add_special_tokens, registered): (&Path, TokenizerKind, bool, &[String]),
        model: &dyn Tokenizer,
        limit: usize,
        positions: usize,
    ) -> Result<Self> {
        let refuse = |why: String| Err(Error::model(path, why));
        let expansion = match &module.expansion {
            Some(e) => {
                let dir = path.parent().unwrap_or(Path::new("."));
                // The module's token, else the tokenizer's mask token, else its end-of-sequence one, as
                // sentence-transformers picks it.
                let named = tokenizer::named_tokens(dir)?;
                let named = |n: &str| {
                    named
                        .iter()
                        .find(|(name, _)| *name == n)
                        .map(|(_, t)| t.clone())
                };
                let Some(token) = e
                    .token
                    .clone()
                    .or_else(|| named("mask_token"))
                    .or_else(|| named("eos_token"))
                else {
                    return refuse("query expansion without a token, and the tokenizer names no mask or end token".into());
                };
                let Some(id) = model.token_id(&token) else {
                    return refuse(format!(
                        "the query expansion token {token:?} is not in the vocabulary"
                    ));
                };
                // The engine tells the unattended expansion by the run of its token after the text: a token the
                // tokenizer puts after every text would be taken for it.
                let mut ids = Vec::new();
                model.encode("a", &mut ids)?;
                if !e.attend && ids.last() == Some(&id) {
                    return refuse(format!(
                        "unsupported: an unattended query expansion by {token:?}, which the tokenizer puts after \
                         every text"
                    ));
                }
                Some(Expansion {
                    id,
                    length: e.length.min(positions),
                    attend: e.attend,
                })
            }
            None => None,
        };
        // A query's limit: the expansion's length where it is fixed, at least it otherwise.
        // (Without a query limit, `min` cuts at the model's and pads up to the expansion's.)
        let query_limit = match (&module.expansion, module.query_length) {
            (Some(e), _) if e.fixed => Some(e.length),
            (Some(e), q) => q.map(|q| q.max(e.length)),
            (None, q) => q,
        };
        let cut = |n: Option<usize>| {
            n.map(|n| n.min(positions))
                .filter(|&n| n != limit)
                .map(|n| {
                    let cut = Some(Truncation::right(n));
                    tokenizer::load_registered(path, kind, cut, add_special_tokens, registered)
                })
                .transpose()
        };
        let skip = module
            .skiplist_words
            .iter()
            // As sentence-transformers: a word that is no single token would skip the unknown token.
            .filter_map(|w| model.token_id(w))
            .collect();
        let query = cut(query_limit)?;
        let document = cut(module.document_length)?;
        let longest = [&query, &document]
            .into_iter()
            .flatten()
            .map(|t| t.max_length())
            .fold(limit, usize::max);
        Ok(MultiVector {
            query,
            document,
            expansion,
            skip,
            skip_tasks: ["query", "document"].map(|t| module.skiplist_tasks.iter().any(|s| s == t)),
            keep_only: module.keep_only_token_ids.clone(),
            masked: module.masked,
            longest,
            mean_max_sim: module.mean_max_sim,
        })
    }

    /// The tokenizer a text of `task` is cut by: its own where its limit is not the model's (`model`).
    pub fn tokenizer<'a>(
        &'a self,
        task: Option<Task>,
        model: &'a dyn Tokenizer,
    ) -> &'a dyn Tokenizer {
        let own = match task {
            Some(Task::Query) => &self.query,
            Some(Task::Document) => &self.document,
            None => &None,
        };
        own.as_deref().unwrap_or(model)
    }

    /// Pads a query's ids with the expansion token up to the expansion's length.
    pub fn expand(&self, task: Option<Task>, ids: &mut Vec<u32>) {
        if let (Some(Task::Query), Some(e)) = (task, self.expansion) {
            if ids.len() < e.length {
                ids.resize(e.length, e.id);
            }
        }
    }

    /// The answer a text of `task` asks: a vector per token, a query's expansion unattended where the model says.
    pub fn readout(&self, task: Option<Task>) -> Readout {
        let expansion = match (task, self.expansion) {
            (Some(Task::Query), Some(e)) if !e.attend => Some(e.id),
            _ => None,
        };
        Readout::Vectors { expansion }
    }

    /// Whether each token's vector of a text of `task` (its ids, expanded) is returned: not a skiplist token's
    /// (documents', unless the model says otherwise), and a document's only where it is one of `keep_only`'s;
    /// without a MultiVectorMask, not an unattended expansion's (what the encoder does not attend to).
    pub fn kept<'a>(
        &'a self,
        task: Option<Task>,
        ids: &'a [u32],
    ) -> impl Iterator<Item = bool> + 'a {
        let skips = match task {
            Some(Task::Query) => self.skip_tasks[0],
            _ => self.skip_tasks[1],
        };
        let keep_only = self
            .keep_only
            .as_deref()
            .filter(|_| task != Some(Task::Query));
        let returned = match self.readout(task) {
            Readout::Vectors {
                expansion: Some(id),
            } if !self.masked => crate::Batch::attended(ids, id),
            _ => ids.len(),
        };
        ids.iter().enumerate().map(move |(i, id)| {
            i < returned
                && !(skips && self.skip.contains(id))
                && keep_only.is_none_or(|k| k.contains(id))
        })
    }

    /// The model's similarity of a query's vectors and a document's, as sentence-transformers' `similarity`: for
    /// each query vector its largest dot product with a document vector, summed (MaxSim), or averaged over the
    /// query's vectors (`meanmaxsim`). A document of no vectors (all left out by the mask) scores -1e9 (over the
    /// query's vectors for `meanmaxsim`), below every document that has some, as sentence-transformers scores it.
    pub fn max_sim<'a>(
        &self,
        query: impl ExactSizeIterator<Item = &'a [f32]>,
        document: &[&[f32]],
    ) -> f32 {
        let n = query.len();
        let sum: f32 = match document.is_empty() {
            true => -1e9,
            false => query
                .map(|q| {
                    let dots = document
                        .iter()
                        .map(|d| q.iter().zip(*d).map(|(a, b)| a * b).sum::<f32>());
                    dots.fold(f32::NEG_INFINITY, f32::max)
                })
                .sum(),
        };
        match self.mean_max_sim {
            true => sum / n.max(1) as f32,
            false => sum,
        }
    }

    /// The longest input the engine must serve: a task's limit may pass the model's.
    pub fn longest(&self) -> usize {
        self.longest
    }
}
