//! sentence-transformers' StaticEmbedding (static-retrieval-mrl-en-v1, model2vec's potion models), over the
//! backend op set, for any device.
//!
//! Mirrors `sentence_transformers/sentence_transformer/modules/static_embedding.py`: torch's `EmbeddingBag` in
//! mean mode over the ids of a tokenizer run without special tokens. Here the gather is the embed op and the mean
//! the head's mean pooling, so the network is one table: no attention, no positions, no layers. model2vec's
//! vocabulary quantisation (a token `mapping` onto fewer rows) and per-token weights are folded into one row per
//! token at load, as sentence-transformers folds them. Its WordEmbeddings module (GloVe's) is the same table, its
//! rows pooled by the Pooling module after it ([`ModelDir`]).

use super::{Encoder, EncoderLayout, ModelConfig, ModelDir, Tensor, Weights};
use crate::backend::ops::{Device, Embedding, Matrix, Ops, PositionIds, Slot};
use crate::batch::Batch;
use crate::error::{Error, Result};

/// The table, one row per token id.
pub struct StaticEmbedding<D: Device> {
    embedding: Embedding<D>,
}

impl<D: Device> StaticEmbedding<D> {
    pub fn load(dir: &ModelDir, device: &D) -> Result<Self> {
        let ModelConfig::Static(c) = &dir.config else {
            return Err(Error::model(
                &dir.root,
                "not a StaticEmbedding model directory",
            ));
        };
        let w = Weights::open(&dir.weights_path, c.table)?;
        let mut table = w.get(c.table, &[c.rows, c.dim])?;
        // As sentence-transformers' `_fold_model2vec_weights`: each token id's row through the mapping, then
        // scaled by the token's weight, in one pass into one row per token.
        let mapping = match c.mapping {
            true => Some(w.indices("mapping", c.vocab_size, c.rows)?),
            false => None,
        };
        let scale = match c.token_weights {
            true => Some(w.get("weights", &[c.vocab_size])?),
            false => None,
        };
        if mapping.is_some() || scale.is_some() {
            let (src, dim) = (table.data(), c.dim);
            let mut rows = Vec::with_capacity(c.vocab_size * dim);
            for token in 0..c.vocab_size {
                let row = mapping.as_ref().map_or(token, |m| m[token]);
                let s = scale.as_ref().map_or(1.0, |s| s.data()[token]);
                rows.extend(src[row * dim..(row + 1) * dim].iter().map(|x| x * s));
            }
            table = Tensor::from_vec(rows);
        }
        Ok(StaticEmbedding {
            embedding: Embedding {
                word: device.param(table)?,
                position: None,
                position_ids: PositionIds::Index,
                row: None,
                type1_row: None,
                dim: c.dim,
                norm: None,
            },
        })
    }
}

impl<D: Device> Encoder<D> for StaticEmbedding<D> {
    /// One slot: each token's row.
    fn layout(&self) -> EncoderLayout {
        EncoderLayout {
            slots: vec![Slot::new(0, 0, self.embedding.dim, false)],
            attention: None,
        }
    }

    fn forward<O: Ops<Device = D>>(&self, ops: &O, batch: &Batch, acts: &[O::Mat]) -> O::Mat {
        let rows = acts[0].top(batch.tokens());
        ops.embed(batch, &self.embedding, rows);
        rows
    }
}
