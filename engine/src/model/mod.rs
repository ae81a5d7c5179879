//! Model directories (Hugging Face / sentence-transformers layout) and the architectures that run them, each
//! written once over the backend op set ([`crate::backend::ops`]).

pub mod bert;
mod dir;
pub mod fetch;
#[cfg(test)]
mod operand_slots;
pub mod qwen3;
pub mod synthetic;
pub mod tiny;
mod weights;

pub use dir::{BertConfig, BertFamily, ModelConfig, ModelDir, Pooling, Qwen3Config, MAX_POSITIONS};
pub use weights::{Tensor, Weights};

use crate::backend::ops::{Architecture, Device, Layout, Ops};
use crate::batch::Batch;
use crate::error::Result;

/// sentence-transformers' Pooling and Normalize modules: one embedding per sequence from the last hidden states.
/// The forward pools; the backend applies Normalize ([`Architecture::normalizes`]).
#[derive(Clone, Copy, Debug)]
pub struct Head {
    pub pooling: Pooling,
    pub normalize: bool,
}

impl Head {
    pub fn load(dir: &ModelDir) -> Self {
        Head {
            pooling: dir.pooling,
            normalize: dir.normalize,
        }
    }

    /// Pools `x` (one row per token) into the first `batch.out_rows()` rows of `out` (a sequence that asked for
    /// its token states gets them copied instead).
    pub fn forward<O: Ops>(&self, ops: &O, batch: &Batch, x: O::Mat, out: O::Mat) {
        use crate::backend::ops::Matrix;
        ops.pool(batch, x, self.pooling, out.top(batch.out_rows()));
    }
}

/// The architecture a model directory names, loaded onto a device.
pub enum Model<D: Device> {
    Bert(bert::Bert<D>),
    Qwen3(qwen3::Qwen3<D>),
}

impl<D: Device> Model<D> {
    pub fn load(dir: &ModelDir, device: &D) -> Result<Self> {
        Ok(match dir.config {
            ModelConfig::Bert(_) => Model::Bert(bert::Bert::load(dir, device)?),
            ModelConfig::Qwen3(_) => Model::Qwen3(qwen3::Qwen3::load(dir, device)?),
        })
    }
}

impl<D: Device> Architecture<D> for Model<D> {
    fn layout(&self) -> Layout {
        match self {
            Model::Bert(m) => m.layout(),
            Model::Qwen3(m) => m.layout(),
        }
    }

    fn dim(&self) -> usize {
        match self {
            Model::Bert(m) => m.dim(),
            Model::Qwen3(m) => m.dim(),
        }
    }

    fn vocab_size(&self) -> usize {
        match self {
            Model::Bert(m) => m.vocab_size(),
            Model::Qwen3(m) => m.vocab_size(),
        }
    }

    fn normalizes(&self) -> bool {
        match self {
            Model::Bert(m) => m.normalizes(),
            Model::Qwen3(m) => m.normalizes(),
        }
    }

    fn forward<O: Ops<Device = D>>(&self, ops: &O, batch: &Batch, acts: &[O::Mat], out: O::Mat) {
        match self {
            Model::Bert(m) => m.forward(ops, batch, acts, out),
            Model::Qwen3(m) => m.forward(ops, batch, acts, out),
        }
    }
}
