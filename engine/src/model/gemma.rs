//! Gemma 2's and Gemma 3's text models as embedding models (bge-multilingual-gemma2, EmbeddingGemma), over the
//! backend op set, for any device.
//!
//! Mirrors Hugging Face transformers' `modeling_gemma3.py` (Gemma3TextScaledWordEmbedding, Gemma3RMSNorm,
//! Gemma3Attention with its per-head q/k norms, Gemma3MLP, Gemma3DecoderLayer, Gemma3TextModel) and
//! `modeling_gemma2.py` (the same blocks without the q/k norms, its eager attention's soft-capped scores) block for
//! block, then sentence-transformers' modules (EmbeddingGemma's: mean pooling, two Dense, Normalize;
//! bge-multilingual-gemma2's: last-token pooling, Normalize). Each layer has four norms: before and after
//! attention, before and after the MLP, the "after" ones applied to the block's output before its residual;
//! layers are global or sliding-window (bidirectional with `use_bidirectional_attention`, as EmbeddingGemma),
//! each kind with its rotary base. Folded at load, exact in real arithmetic: the embedding scale √hidden into the
//! table, Gemma's `1 + weight` norms into their weights. Sequences are concatenated without padding, so attention
//! needs no padding mask.

use super::decoder::{qkv_projection, QkNormRotary, RmsNorm};
use super::{
    pre_norm_layout, stacked_linear, Encoder, EncoderLayout, GemmaConfig, LayerRotary, ModelConfig,
    ModelDir, PreNormActs, Tensor, Weights,
};
use crate::backend::ops::{Activation, AttentionShape, Device, Embedding, Glu, Ops, PositionIds};
use crate::batch::Batch;
use crate::error::{Error, Result};

/// Gemma3DecoderLayer (Gemma2DecoderLayer): input norm, fused QKV, q/k norms (Gemma 3's) and rotary,
/// grouped-query attention (global or sliding-window; Gemma 2's scores soft-capped), output projection, its norm
/// added to the residual; then the MLP (GeGLU) between its own two norms, added to the residual.
pub struct Layer<D: Device> {
    input_norm: RmsNorm<D>,
    qkv: D::Linear,
    qk_norm_rotary: QkNormRotary<D>,
    o_proj: D::Linear,
    post_attention_norm: RmsNorm<D>,
    pre_feedforward_norm: RmsNorm<D>,
    gate_up: D::Linear,
    down: D::Linear,
    post_feedforward_norm: RmsNorm<D>,
    gate: Glu,
    attention: AttentionShape,
}

impl<D: Device> Layer<D> {
    pub fn load(w: &Weights, d: &D, c: &GemmaConfig, i: usize) -> Result<Self> {
        let (h, f, hd) = (c.hidden_size, c.intermediate_size, c.head_dim);
        let attention = c.attention(i);
        let q = attention.heads * hd;
        let (p, eps) = (format!("layers.{i}"), c.rms_norm_eps);
        let (a, m) = (format!("{p}.self_attn"), format!("{p}.mlp"));
        // Gemma's norms scale by 1 + weight.
        let norm = |name: &str| RmsNorm::load(w, d, &format!("{p}.{name}"), h, eps, 1.0);
        let norms = c.qk_norms().then_some((eps, 1.0));
        let (qkv, qk_norm_rotary) = qkv_projection(w, d, &a, attention, h, false, norms)?;
        Ok(Layer {
            input_norm: norm("input_layernorm")?,
            qkv,
            qk_norm_rotary,
            o_proj: stacked_linear(w, d, &[(format!("{a}.o_proj"), h)], q, false)?,
            post_attention_norm: norm("post_attention_layernorm")?,
            pre_feedforward_norm: norm("pre_feedforward_layernorm")?,
            gate_up: stacked_linear(
                w,
                d,
                &[(format!("{m}.gate_proj"), f), (format!("{m}.up_proj"), f)],
                h,
                false,
            )?,
            down: stacked_linear(w, d, &[(format!("{m}.down_proj"), h)], f, false)?,
            post_feedforward_norm: norm("post_feedforward_layernorm")?,
            gate: match c.hidden_activation.as_str() {
                "gelu" => Glu::Gelu,
                _ => Glu::GeluTanh,
            },
            attention,
        })
    }

    /// The layer's input is in `a.hidden` and its output lands there; `rotary` is the table of its kind of layer.
    fn forward<O: Ops<Device = D>>(
        &self,
        ops: &O,
        batch: &Batch,
        rotary: &D::Param,
        a: &PreNormActs<O::Mat>,
    ) {
        self.input_norm.forward(ops, a.hidden, a.normed);
        ops.linear(a.normed, &self.qkv, Activation::None, None, a.qkv);
        self.qk_norm_rotary.forward(ops, batch, a.qkv, rotary);
        ops.attention(batch, a.qkv, self.attention, None, a.ctx);
        ops.linear(a.ctx, &self.o_proj, Activation::None, None, a.normed);
        self.post_attention_norm.add_to(ops, a.normed, a.hidden);
        self.pre_feedforward_norm.forward(ops, a.hidden, a.normed);
        ops.linear(a.normed, &self.gate_up, Activation::None, None, a.gate_up);
        ops.glu(a.gate_up, self.gate, a.act);
        ops.linear(a.act, &self.down, Activation::None, None, a.normed);
        self.post_feedforward_norm.add_to(ops, a.normed, a.hidden);
    }
}

/// Gemma 2 or 3 as an embedding model's network: scaled token embeddings, decoder layers, final norm (the head
/// is [`super::Model`]'s).
pub struct Gemma<D: Device> {
    pub config: GemmaConfig,
    embeddings: Embedding<D>,
    /// Rotary tables of the global and of the local layers (their bases differ).
    rotary: LayerRotary<D>,
    layers: Vec<Layer<D>>,
    norm: RmsNorm<D>,
}

impl<D: Device> Gemma<D> {
    pub fn load(dir: &ModelDir, device: &D) -> Result<Self> {
        let ModelConfig::Gemma(c) = &dir.config else {
            return Err(Error::model(&dir.root, "not a Gemma model directory"));
        };
        let w = Weights::open(&dir.weights_path, "embed_tokens.weight")?;
        let h = c.hidden_size;
        // Gemma's scaled embedding multiplies by √hidden in f32; so does this, once.
        let scale = (h as f64).sqrt() as f32;
        let table = w.get("embed_tokens.weight", &[c.vocab_size, h])?;
        let table = table.data().iter().map(|v| v * scale).collect();
        Ok(Gemma {
            embeddings: Embedding {
                word: device.param(Tensor::from_vec(table))?,
                position: None,
                position_ids: PositionIds::Index,
                row: None,
                type1_row: None,
                dim: h,
                norm: None,
            },
            rotary: LayerRotary::load(device, dir, c.head_dim, |global| c.rope(global))?,
            layers: (0..c.num_hidden_layers)
                .map(|i| Layer::load(&w, device, c, i))
                .collect::<Result<_>>()?,
            norm: RmsNorm::load(&w, device, "norm", h, c.rms_norm_eps, 1.0)?,
            config: c.clone(),
        })
    }
}

impl<D: Device> Encoder<D> for Gemma<D> {
    fn layout(&self) -> EncoderLayout {
        let c = &self.config;
        pre_norm_layout(c.hidden_size, c.attention(0), c.intermediate_size)
    }

    fn forward<O: Ops<Device = D>>(&self, ops: &O, batch: &Batch, acts: &[O::Mat]) -> O::Mat {
        let a = PreNormActs::of(acts, batch.tokens());
        ops.embed(batch, &self.embeddings, a.hidden);
        for layer in &self.layers {
            layer.forward(ops, batch, self.rotary.of(&layer.attention), &a);
        }
        self.norm.forward(ops, a.hidden, a.hidden);
        a.hidden
    }
}
