//! A Router's SparseStaticEmbedding route (sentence-transformers' `SparseStaticEmbedding`, the query side of an
//! inference-free SPLADE model): no forward pass — each distinct token of the text gets its weight in a table of one
//! per vocabulary entry (IDF weights), every other entry 0. It runs where the text is tokenized (a gateway, or a
//! program through [`crate::ModelFront::lookup`]), never on a backend.

use super::{LookupRoute, Weights, LOOKUP_TABLE};
use crate::error::{Error, Result};
use crate::tokenizer::{
    self, with_thread_scratch, Tokenizer, TokenizerKind, Truncation, TruncationSide,
};

pub struct SparseLookup {
    route: String,
    /// Without special tokens (sentence-transformers encodes with `add_special_tokens=False`), cutting at the
    /// limit from the right and from the left: an input is encoded no further than the limit.
    tokenizers: [Box<dyn Tokenizer>; 2],
    weights: Vec<f32>,
    /// The tokenizer's `model_max_length`, which sentence-transformers cuts at.
    limit: Option<usize>,
    /// The sparse model's top-k ([`super::SparseModule::max_active_dims`]), which applies to every route.
    max_active_dims: Option<usize>,
}

impl SparseLookup {
    /// The route's tokenizer and table, which must hold one weight per entry of the model route's `vocab`.
    pub fn load(
        route: &LookupRoute,
        kind: TokenizerKind,
        vocab: usize,
        max_active_dims: Option<usize>,
    ) -> Result<Self> {
        let cutting = |side| {
            let truncation = route
                .max_seq_length
                .map(|max_length| Truncation { max_length, side });
            tokenizer::load(&route.tokenizer_path, kind, truncation, false)
        };
        let tokenizers = [
            cutting(TruncationSide::Right)?,
            cutting(TruncationSide::Left)?,
        ];
        let tokenizer = &tokenizers[0];
        let table = Weights::open(&route.weights_path, LOOKUP_TABLE).map_err(|e| {
            Error::model(
                &route.weights_path,
                format!("the SparseStaticEmbedding's table `{LOOKUP_TABLE}`: {e}"),
            )
        })?;
        let n = match table.shape(LOOKUP_TABLE) {
            Some(&[n]) if n == vocab => n,
            other => {
                return Err(Error::model(
                    &route.weights_path,
                    format!(
                        "`{LOOKUP_TABLE}` has shape {other:?}: expected one weight per entry of the document \
                         route's vocabulary of {vocab}"
                    ),
                ))
            }
        };
        let weights = table.get(LOOKUP_TABLE, &[n])?.data().to_vec();
        if tokenizer.id_bound() > n {
            return Err(Error::model(
                &route.tokenizer_path,
                format!(
                    "the tokenizer gives ids up to {} but the route's table has {n} weights",
                    tokenizer.id_bound() - 1
                ),
            ));
        }
        Ok(SparseLookup {
            route: route.name.clone(),
            tokenizers,
            weights,
            limit: route.max_seq_length,
            max_active_dims,
        })
    }

    /// The route's name (a request names it as its `prompt_name`).
    pub fn route(&self) -> &str {
        &self.route
    }

    /// `text`'s ids, cut at the limit from `side`, and whether anything was cut.
    pub fn encode(&self, text: &str, side: TruncationSide) -> Result<(Vec<u32>, bool)> {
        let tokenizer = match side {
            TruncationSide::Right => &self.tokenizers[0],
            TruncationSide::Left => &self.tokenizers[1],
        };
        let mut ids = Vec::new();
        let cut = with_thread_scratch(|scratch| tokenizer.encode_cut(text, scratch, &mut ids))?;
        Ok((ids, cut))
    }

    /// The longest token list it embeds whole; `None`: no limit.
    pub fn limit(&self) -> Option<usize> {
        self.limit
    }

    /// Cuts token ids a client sent to the limit at the end `side` names; whether anything was cut.
    pub fn cut(&self, ids: &mut Vec<u32>, side: TruncationSide) -> bool {
        match self.limit {
            Some(limit) if ids.len() > limit => {
                tokenizer::cut(ids, limit, side);
                true
            }
            _ => false,
        }
    }

    /// The vector of a text's `ids` (already cut): each distinct id's weight, every other entry 0, then its
    /// `max_active_dims` largest kept. Ids outside the table add nothing (a gateway refuses them first).
    pub fn embed(&self, ids: &[u32]) -> Vec<f32> {
        let mut vector = vec![0.0; self.weights.len()];
        for &id in ids {
            if let Some((v, w)) = vector
                .get_mut(id as usize)
                .zip(self.weights.get(id as usize))
            {
                *v = *w;
            }
        }
        if let Some(k) = self.max_active_dims {
            crate::backend::keep_largest(&mut vector, k, &mut Vec::new());
        }
        vector
    }
}
