//! Model directories (Hugging Face / sentence-transformers layout) and the architectures that run them.

pub mod bert;
mod dir;
pub mod fetch;
pub mod tiny;
mod weights;

pub use dir::{BertConfig, ModelDir, Pooling};
pub use weights::{Tensor, Weights};
