//! sentence-transformers' StaticEmbedding module has no `config.json`: its table's shape in its
//! `model.safetensors` is the configuration.

use std::path::Path;

use super::check_dims;
use crate::error::{Error, Result};
use crate::model::Weights;

/// A static embedding's table: `vocab_size` rows of `dim`, one per token id.
#[derive(Clone, Debug, PartialEq)]
pub struct StaticConfig {
    pub vocab_size: usize,
    pub dim: usize,
    /// The tensor holding it: sentence-transformers' `embedding.weight`, or model2vec's `embeddings`.
    pub table: &'static str,
    /// model2vec's per-token weights (`weights`, one per row), which sentence-transformers folds into the rows.
    pub token_weights: bool,
}

impl StaticConfig {
    /// The table's shape in the module's weights at `path`; model2vec's vocabulary-quantised tables (rows shared
    /// through an integer `mapping`) are refused.
    pub fn read(path: &Path) -> Result<Self> {
        let (weights, table) = match Weights::open(path, "embedding.weight") {
            Ok(w) => (w, "embedding.weight"),
            Err(first) => (
                Weights::open(path, "embeddings").map_err(|_| first)?,
                "embeddings",
            ),
        };
        if weights.has("mapping") {
            return Err(Error::model(
                path,
                "unsupported: a model2vec table with a token `mapping` (vocabulary-quantised)",
            ));
        }
        let Some(&[vocab_size, dim]) = weights.shape(table) else {
            return Err(Error::model(
                path,
                format!("`{table}` is not a matrix of one row per token"),
            ));
        };
        check_dims(
            path,
            &[("vocab_size", Some(vocab_size)), ("dim", Some(dim))],
        )?;
        if vocab_size == 0 || dim == 0 {
            return Err(Error::model(path, format!("`{table}` is empty")));
        }
        Ok(StaticConfig {
            vocab_size,
            dim,
            table,
            token_weights: weights.has("weights"),
        })
    }
}
