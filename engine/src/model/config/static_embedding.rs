//! sentence-transformers' StaticEmbedding module (and its WordEmbeddings one) has no `config.json`: its table's
//! shape in its `model.safetensors` is the configuration.

use std::path::Path;

use super::check_dims;
use crate::error::{Error, Result};
use crate::model::Weights;

/// A static embedding's table: a row of `dim` for each of `vocab_size` token ids.
#[derive(Clone, Debug, PartialEq)]
pub struct StaticConfig {
    pub vocab_size: usize,
    /// Rows of the stored table: one per token id, or fewer shared through `mapping`.
    pub rows: usize,
    pub dim: usize,
    /// The tensor holding it: sentence-transformers' `embedding.weight` (StaticEmbedding) or `emb_layer.weight`
    /// (WordEmbeddings), or model2vec's `embeddings`.
    pub table: &'static str,
    /// model2vec's vocabulary quantisation: `mapping`, the table row of each token id.
    pub mapping: bool,
    /// model2vec's per-token weights (`weights`, one per token id), which sentence-transformers folds into the
    /// rows.
    pub token_weights: bool,
}

/// Where a WordEmbeddings module keeps its table (a StaticEmbedding's names differ).
pub const WORD_EMBEDDINGS_TABLE: &str = "emb_layer.weight";

impl StaticConfig {
    /// Whether the table is a WordEmbeddings module's, whose token rows a Pooling module pools (a StaticEmbedding
    /// averages its own).
    pub fn is_word_embeddings(&self) -> bool {
        self.table == WORD_EMBEDDINGS_TABLE
    }

    /// The table's shape in the module's weights at `path` (the first of `tables`, the names the module may
    /// store it under, that the file holds), and the token count its `mapping` gives if any.
    pub fn read(path: &Path, tables: &[&'static str]) -> Result<Self> {
        let Some((&first, others)) = tables.split_first() else {
            return Err(Error::model(path, "no table name to look for"));
        };
        // The first name's error is the one reported: it says what is missing.
        let (weights, table) = match Weights::open(path, first) {
            Ok(w) => (w, first),
            Err(e) => others
                .iter()
                .find_map(|&t| Weights::open(path, t).ok().map(|w| (w, t)))
                .ok_or(e)?,
        };
        let Some(&[rows, dim]) = weights.shape(table) else {
            return Err(Error::model(
                path,
                format!("`{table}` is not a matrix of one row per token"),
            ));
        };
        // sentence-transformers folds these into a model2vec table only.
        let model2vec = table == "embeddings";
        let mapping = model2vec && weights.has("mapping");
        let vocab_size = match weights.shape("mapping").filter(|_| mapping) {
            None => rows,
            Some(&[n]) => n,
            Some(other) => {
                return Err(Error::model(
                    path,
                    format!("`mapping` has shape {other:?}: expected one table row per token id"),
                ))
            }
        };
        check_dims(
            path,
            &[
                ("vocab_size", Some(vocab_size)),
                ("rows", Some(rows)),
                ("dim", Some(dim)),
            ],
        )?;
        if vocab_size == 0 || rows == 0 || dim == 0 {
            return Err(Error::model(path, format!("`{table}` is empty")));
        }
        Ok(StaticConfig {
            vocab_size,
            rows,
            dim,
            table,
            mapping,
            token_weights: model2vec && weights.has("weights"),
        })
    }
}
