//! Model directories (Hugging Face / sentence-transformers layout) and the architectures that run them, each
//! written once over the backend op set ([`crate::backend::ops`]).

pub mod bert;
mod config;
mod dir;
pub mod fetch;
mod head;
pub mod modernbert;
#[cfg(test)]
mod operand_slots;
pub mod qwen3;
pub mod synthetic;
pub mod tiny;
mod weights;

pub use config::{BertConfig, BertFamily, ModelConfig, ModernBertConfig, Qwen3Config};
pub use dir::{DenseModule, ModelDir, Pooling, MAX_POSITIONS};
pub use head::Head;
pub use weights::{Tensor, Weights};

use crate::backend::ops::{
    Architecture, AttentionShape, Device, LayerNormWeights, Layout, Matrix, Ops, Slot,
};
use crate::batch::Batch;
use crate::error::Result;

/// Several projections of one input (each a tensor prefix and its output width), stacked into one linear
/// layer so one GEMM reads the input once (Q, K, V → QKV); `bias`: whether the checkpoint has their biases.
pub(crate) fn stacked_linear<D: Device>(
    w: &Weights,
    d: &D,
    names: &[(String, usize)],
    inp: usize,
    bias: bool,
) -> Result<D::Linear> {
    let (mut weight, mut biases) = (Vec::new(), Vec::new());
    for (name, out) in names {
        weight.extend_from_slice(w.get(&format!("{name}.weight"), &[*out, inp])?.data());
        if bias {
            biases.extend_from_slice(w.get(&format!("{name}.bias"), &[*out])?.data());
        }
    }
    let out = names.iter().map(|(_, o)| o).sum();
    d.linear(&weight, bias.then_some(biases.as_slice()), out, inp)
}

/// The LayerNorm `prefix` over rows of `dim` columns; without a bias in the checkpoint (`bias` false, as
/// ModernBERT's `norm_bias`), a zero one.
pub(crate) fn layer_norm<D: Device>(
    w: &Weights,
    d: &D,
    prefix: &str,
    dim: usize,
    eps: f64,
    bias: bool,
) -> Result<LayerNormWeights<D>> {
    let beta = if bias {
        w.get(&format!("{prefix}.bias"), &[dim])?
    } else {
        Tensor::from_vec(vec![0.0; dim])
    };
    Ok(LayerNormWeights {
        weight: d.param(w.get(&format!("{prefix}.weight"), &[dim])?)?,
        bias: d.param(beta)?,
        eps: eps as f32,
    })
}

/// The activation matrices of a pre-norm layer stack with a gated MLP (Qwen3's, ModernBERT's), in the order of
/// [`pre_norm_layout`]'s slots.
pub(crate) struct PreNormActs<M> {
    /// The residual stream.
    pub hidden: M,
    /// A block's normed input, then the attention block's output with its residual.
    pub normed: M,
    pub qkv: M,
    pub ctx: M,
    /// The MLP's gate and up projections, in the memory of QKV and the context once both are dead.
    pub gate_up: M,
    /// The gate's output.
    pub act: M,
}

impl<M: Matrix> PreNormActs<M> {
    /// The views of a pass over `tokens` tokens, from the backend's views of the layout's slots.
    pub fn of(acts: &[M], tokens: usize) -> Self {
        let Some([hidden, normed, qkv, ctx, gate_up, act]) = acts.first_chunk() else {
            panic!("a pre-norm layout has six slots, got {}", acts.len());
        };
        PreNormActs {
            hidden: hidden.top(tokens),
            normed: normed.top(tokens),
            qkv: qkv.top(tokens),
            ctx: ctx.top(tokens),
            gate_up: gate_up.top(tokens),
            act: act.top(tokens),
        }
    }
}

/// The layout of [`PreNormActs`]: the residual stream and the normed copy each in a region of their own; QKV and the attention context
/// share a third with the MLP's gate/up projections and the gate's output, live only once both are dead (the
/// last two read only by the gate and the down projection: operand slots).
pub(crate) fn pre_norm_layout(
    hidden: usize,
    attention: AttentionShape,
    intermediate: usize,
    max_positions: usize,
) -> Layout {
    let (h, f) = (hidden, intermediate);
    let (w, q) = (attention.qkv_width(), attention.heads * attention.head_dim);
    let slot = Slot::new;
    Layout {
        slots: vec![
            slot(0, 0, h, false),
            slot(1, 0, h, false),
            slot(2, 0, w, false),
            slot(2, w, q, false),
            slot(2, 0, 2 * f, true),
            slot(2, 2 * f, f, true),
        ],
        attention,
        max_positions,
    }
}

/// The architecture a model directory names, loaded onto a device.
pub enum Model<D: Device> {
    Bert(bert::Bert<D>),
    Qwen3(qwen3::Qwen3<D>),
    ModernBert(modernbert::ModernBert<D>),
}

impl<D: Device> Model<D> {
    pub fn load(dir: &ModelDir, device: &D) -> Result<Self> {
        Ok(match dir.config {
            ModelConfig::Bert(_) => Model::Bert(bert::Bert::load(dir, device)?),
            ModelConfig::Qwen3(_) => Model::Qwen3(qwen3::Qwen3::load(dir, device)?),
            ModelConfig::ModernBert(_) => {
                Model::ModernBert(modernbert::ModernBert::load(dir, device)?)
            }
        })
    }
}

impl<D: Device> Architecture<D> for Model<D> {
    fn layout(&self) -> Layout {
        match self {
            Model::Bert(m) => m.layout(),
            Model::Qwen3(m) => m.layout(),
            Model::ModernBert(m) => m.layout(),
        }
    }

    fn dim(&self) -> usize {
        match self {
            Model::Bert(m) => m.dim(),
            Model::Qwen3(m) => m.dim(),
            Model::ModernBert(m) => m.dim(),
        }
    }

    fn vocab_size(&self) -> usize {
        match self {
            Model::Bert(m) => m.vocab_size(),
            Model::Qwen3(m) => m.vocab_size(),
            Model::ModernBert(m) => m.vocab_size(),
        }
    }

    fn normalizes(&self) -> bool {
        match self {
            Model::Bert(m) => m.normalizes(),
            Model::Qwen3(m) => m.normalizes(),
            Model::ModernBert(m) => m.normalizes(),
        }
    }

    fn pools_last(&self) -> bool {
        match self {
            Model::Bert(m) => m.pools_last(),
            Model::Qwen3(m) => m.pools_last(),
            Model::ModernBert(m) => m.pools_last(),
        }
    }

    fn forward<O: Ops<Device = D>>(&self, ops: &O, batch: &Batch, acts: &[O::Mat], out: O::Mat) {
        match self {
            Model::Bert(m) => m.forward(ops, batch, acts, out),
            Model::Qwen3(m) => m.forward(ops, batch, acts, out),
            Model::ModernBert(m) => m.forward(ops, batch, acts, out),
        }
    }
}
