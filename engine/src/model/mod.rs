//! Model directories (Hugging Face / sentence-transformers layout) and the architectures that run them, each
//! written once over the backend op set ([`crate::backend::ops`]).

pub mod bert;
mod config;
pub mod decoder;
mod dir;
mod disentangled;
pub mod fetch;
pub mod gemma;
mod head;
pub mod modernbert;
#[cfg(test)]
mod operand_slots;
mod relative;
pub mod rotary_bert;
mod sparse_lookup;
pub mod static_embedding;
pub mod synthetic;
pub mod t5;
pub mod tiny;
mod weights;

pub(crate) use config::read_json;
pub use config::{
    BertConfig, BertFamily, DebertaConfig, DecoderConfig, DecoderFamily, GemmaConfig, ModelConfig,
    ModernBertConfig, Rope, RopeScaling, RotaryBertConfig, RotaryBertFamily, RotaryBertMlp,
    StaticConfig, T5Config, T5FeedForward,
};
pub use dir::{
    ChatTemplateFile, Classifier, DenseModule, LookupRoute, ModelDir, MultiVectorModule, Pooling,
    PoolingModule, QueryExpansion, Routes, SparseModule, LOOKUP_TABLE, MAX_POSITIONS,
};
pub use head::Head;
pub use sparse_lookup::SparseLookup;
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

/// Token type 0's row and type 1's, where a table has them.
type TypeRows<D> = (Option<<D as Device>::Param>, Option<<D as Device>::Param>);

/// BERT's token type rows (`embeddings.token_type_embeddings.weight`, `types` rows of `dim`) as the embedding
/// adds them: type 0's to every token, type 1's (where the table has one) to a pair's second text; neither
/// without token types.
pub(crate) fn token_type_rows<D: Device>(
    w: &Weights,
    d: &D,
    types: usize,
    dim: usize,
) -> Result<TypeRows<D>> {
    if types == 0 {
        return Ok((None, None));
    }
    let table = w.get("embeddings.token_type_embeddings.weight", &[types, dim])?;
    let row = |t: usize| {
        d.param(Tensor::from_vec(
            table.data()[t * dim..(t + 1) * dim].to_vec(),
        ))
    };
    Ok((Some(row(0)?), (types > 1).then(|| row(1)).transpose()?))
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

/// The rotary table of a model in `dir` ([`Device::rotary_table`]) for its positions `0..dir.positions`, an error
/// naming the directory where it cannot be made.
pub(crate) fn rotary_table<D: Device>(
    device: &D,
    dir: &ModelDir,
    head_dim: usize,
    rope: &Rope,
) -> Result<D::Param> {
    device
        .rotary_table(&rope.frequencies(head_dim), rope.attention_factor(), dir.positions)
        .map_err(|e| {
            crate::error::Error::model(
                &dir.root,
                format!(
                    "the rotary table for {} positions (the model's, or a shorter max_seq_length): {e}",
                    dir.positions
                ),
            )
        })
}

/// The rotary tables of a model with global and sliding-window layers (ModernBERT, Gemma 2 and 3), each kind with its
/// base and scaling, for positions `0..dir.positions`.
pub(crate) struct LayerRotary<D: Device> {
    global: D::Param,
    local: D::Param,
}

impl<D: Device> LayerRotary<D> {
    /// `rope(global)`: the global layers' rotary positions, or the local ones'.
    pub fn load<'a>(
        device: &D,
        dir: &ModelDir,
        head_dim: usize,
        rope: impl Fn(bool) -> &'a Rope,
    ) -> Result<Self> {
        let table = |global| rotary_table(device, dir, head_dim, rope(global));
        Ok(LayerRotary {
            global: table(true)?,
            local: table(false)?,
        })
    }

    /// The table of a layer whose attention is `shape`: the local one where it has a window.
    pub fn of(&self, shape: &AttentionShape) -> &D::Param {
        match shape.window {
            None => &self.global,
            Some(_) => &self.local,
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
) -> EncoderLayout {
    let (h, f) = (hidden, intermediate);
    let (w, q) = (attention.qkv_width(), attention.heads * attention.head_dim);
    let slot = Slot::new;
    EncoderLayout {
        slots: vec![
            slot(0, 0, h, false),
            slot(1, 0, h, false),
            slot(2, 0, w, false),
            slot(2, w, q, false),
            slot(2, 0, 2 * f, true),
            slot(2, 2 * f, f, true),
        ],
        // The widest of the layers' attentions: a window only narrows what a query reads.
        attention: Some(AttentionShape {
            window: None,
            ..attention
        }),
    }
}

/// A network's part of the [`Layout`]: its slots and the attention of its widest layer ([`Model`] adds the head's
/// slots and the longest sequence, the model directory's).
pub struct EncoderLayout {
    pub slots: Vec<Slot>,
    pub attention: Option<AttentionShape>,
}

/// An architecture's own part, which [`Model`] completes into an [`Architecture`] with its head (the
/// sentence-transformers modules after it, which give the embedding's width and its normalisation): its activation
/// layout (the head's slots follow it) and its forward pass up to the last hidden states.
pub trait Encoder<D: Device> {
    fn layout(&self) -> EncoderLayout;
    /// Runs `batch` over `acts` (the views of its layout's slots, in order) and returns the view of the last hidden
    /// states, one row per token, that the head pools.
    fn forward<O: Ops<Device = D>>(&self, ops: &O, batch: &Batch, acts: &[O::Mat]) -> O::Mat;
}

/// The network a model directory names, loaded onto a device.
enum Network<D: Device> {
    Bert(bert::Bert<D>),
    Decoder(decoder::Decoder<D>),
    ModernBert(modernbert::ModernBert<D>),
    RotaryBert(rotary_bert::RotaryBert<D>),
    Gemma(gemma::Gemma<D>),
    T5(t5::T5<D>),
    Static(static_embedding::StaticEmbedding<D>),
}

/// A model directory loaded onto a device: its network, then its head.
pub struct Model<D: Device> {
    network: Network<D>,
    head: Head<D>,
    vocab_size: usize,
    /// The network's slots, before the head's.
    network_slots: usize,
    /// The longest sequence it runs ([`ModelDir::positions`]).
    max_positions: usize,
}

impl<D: Device> Model<D> {
    pub fn load(dir: &ModelDir, device: &D) -> Result<Self> {
        let network = match dir.config {
            ModelConfig::Bert(_) => Network::Bert(bert::Bert::load(dir, device)?),
            ModelConfig::Decoder(_) => Network::Decoder(decoder::Decoder::load(dir, device)?),
            ModelConfig::ModernBert(_) => {
                Network::ModernBert(modernbert::ModernBert::load(dir, device)?)
            }
            ModelConfig::RotaryBert(_) => {
                Network::RotaryBert(rotary_bert::RotaryBert::load(dir, device)?)
            }
            ModelConfig::Gemma(_) => Network::Gemma(gemma::Gemma::load(dir, device)?),
            ModelConfig::T5(_) => Network::T5(t5::T5::load(dir, device)?),
            ModelConfig::Static(_) => {
                Network::Static(static_embedding::StaticEmbedding::load(dir, device)?)
            }
        };
        Ok(Model {
            network_slots: network.layout().slots.len(),
            network,
            head: Head::load(dir, device)?,
            vocab_size: dir.config.vocab_size(),
            max_positions: dir.positions,
        })
    }
}

impl<D: Device> Network<D> {
    fn layout(&self) -> EncoderLayout {
        match self {
            Network::Bert(m) => m.layout(),
            Network::Decoder(m) => m.layout(),
            Network::ModernBert(m) => m.layout(),
            Network::RotaryBert(m) => m.layout(),
            Network::Gemma(m) => m.layout(),
            Network::T5(m) => m.layout(),
            Network::Static(m) => m.layout(),
        }
    }

    fn forward<O: Ops<Device = D>>(&self, ops: &O, batch: &Batch, acts: &[O::Mat]) -> O::Mat {
        match self {
            Network::Bert(m) => m.forward(ops, batch, acts),
            Network::Decoder(m) => m.forward(ops, batch, acts),
            Network::ModernBert(m) => m.forward(ops, batch, acts),
            Network::RotaryBert(m) => m.forward(ops, batch, acts),
            Network::Gemma(m) => m.forward(ops, batch, acts),
            Network::T5(m) => m.forward(ops, batch, acts),
            Network::Static(m) => m.forward(ops, batch, acts),
        }
    }
}

impl<D: Device> Architecture<D> for Model<D> {
    /// The network's layout, the slots of its head after it, and the longest sequence.
    fn layout(&self) -> Layout {
        let EncoderLayout { slots, attention } = self.network.layout();
        let mut layout = Layout {
            slots,
            attention,
            max_positions: self.max_positions,
        };
        self.head.extend(&mut layout);
        layout
    }

    fn dim(&self) -> usize {
        self.head.dim()
    }

    fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    fn normalizes(&self) -> bool {
        self.head.normalize
    }

    fn max_active_dims(&self) -> Option<usize> {
        self.head.max_active_dims
    }

    fn pools_last(&self) -> bool {
        self.head.pools_last()
    }

    fn multi_vector(&self) -> bool {
        self.head.per_token()
    }

    fn forward<O: Ops<Device = D>>(&self, ops: &O, batch: &Batch, acts: &[O::Mat], out: O::Mat) {
        let hidden = self.network.forward(ops, batch, acts);
        self.head
            .forward(ops, batch, hidden, &acts[self.network_slots..], out);
    }
}
