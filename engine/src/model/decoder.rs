//! The Llama family of decoders used as embedding models, over the backend op set, for any device.
//!
//! Mirrors Hugging Face transformers' `modeling_llama.py`, `modeling_mistral.py`, `modeling_qwen2.py`,
//! `modeling_qwen3.py` and `modeling_eurobert.py` (their RMSNorm, Attention, MLP, DecoderLayer and Model) block
//! for block, then
//! sentence-transformers' Pooling, Dense and Normalize: one layer, in which the family (read from config.json,
//! [`DecoderFamily`](super::DecoderFamily)) decides the biases, Qwen3's per-head q/k norms and which layers attend
//! within a sliding window. Two conventions, both read from the model directory: the decoder's own (causal
//! attention, last-token pooling, the tokenizer appending its end token: Qwen3-Embedding, e5-mistral, gte-Qwen2)
//! and a bidirectional one (`"is_causal": false` in config.json, or EuroBERT; full attention, mean pooling:
//! pplx-embed).
//! Differences, exact in real arithmetic: sequences are concatenated without padding, so attention needs no
//! padding mask; Q, K and V are one fused projection, and so are the MLP's gate and up projections; the q and k
//! norms and rotary are one op over Q's and K's heads; residuals are added in the output projections' epilogues.
//! The language-model head is never used, so tied or untied embeddings load the same.

use super::{
    pre_norm_layout, rotary_table, stacked_linear, DecoderConfig, Encoder, EncoderLayout,
    ModelConfig, ModelDir, PreNormActs, Tensor, Weights,
};
use crate::backend::ops::{
    Activation, AttentionShape, Device, Embedding, Glu, Matrix, Ops, PositionIds,
};
use crate::batch::Batch;
use crate::error::{Error, Result};

/// Qwen3RMSNorm: `x · weight / √(mean(x²) + eps)` over each row. Gemma's stores `weight − 1` (its norm scales by
/// `1 + weight`): `offset` 1 adds it back at load, in f32 as torch does.
pub struct RmsNorm<D: Device> {
    weight: D::Param,
    eps: f32,
}

impl<D: Device> RmsNorm<D> {
    pub fn load(w: &Weights, d: &D, name: &str, dim: usize, eps: f64, offset: f32) -> Result<Self> {
        let weight = w.get(&format!("{name}.weight"), &[dim])?;
        let weight = weight.data().iter().map(|v| v + offset).collect();
        Ok(RmsNorm {
            weight: d.param(Tensor::from_vec(weight))?,
            eps: eps as f32,
        })
    }

    /// `x`'s rows into `out` (`x` itself for in place).
    pub(crate) fn forward<O: Ops<Device = D>>(&self, ops: &O, x: O::Mat, out: O::Mat) {
        ops.rms_norm(x, out, &self.weight, self.eps, false);
    }

    /// `x`'s rows normed and added to `out` (another matrix): Gemma's norm of a block's output before its residual.
    pub(crate) fn add_to<O: Ops<Device = D>>(&self, ops: &O, x: O::Mat, out: O::Mat) {
        ops.rms_norm(x, out, &self.weight, self.eps, true);
    }
}

/// Qwen3Attention's `q_norm` and `k_norm` (an RMSNorm per head) and the rotary embedding after them, as one op
/// over Q's and K's heads, which are adjacent columns of the fused projection (one pass, one launch on a GPU);
/// rotary alone where the family has no q/k norms.
pub struct QkNormRotary<D: Device> {
    /// Each norm's weights repeated over its heads (one value per column of Q and K), and its eps.
    norm: Option<(D::Param, f32)>,
    shape: AttentionShape,
}

impl<D: Device> QkNormRotary<D> {
    /// The norms of the attention block `attn`; `offset` as [`RmsNorm`]'s.
    pub fn load(
        w: &Weights,
        d: &D,
        attn: &str,
        shape: AttentionShape,
        eps: f64,
        offset: f32,
    ) -> Result<Self> {
        let hd = shape.head_dim;
        let q = w.get(&format!("{attn}.q_norm.weight"), &[hd])?;
        let k = w.get(&format!("{attn}.k_norm.weight"), &[hd])?;
        let [q, k] = [q, k].map(|n| n.data().iter().map(|v| v + offset).collect::<Vec<f32>>());
        let weight: Vec<f32> = std::iter::repeat_n(q.as_slice(), shape.heads)
            .chain(std::iter::repeat_n(k.as_slice(), shape.kv_heads))
            .flatten()
            .copied()
            .collect();
        Ok(QkNormRotary {
            norm: Some((d.param(Tensor::from_vec(weight))?, eps as f32)),
            shape,
        })
    }

    /// Rotary alone (Llama, Mistral, Qwen2).
    pub fn rotary(shape: AttentionShape) -> Self {
        QkNormRotary { norm: None, shape }
    }

    /// In place on the Q and K columns of `qkv`, at each token's position (`table`: the model's rotary table).
    pub(crate) fn forward<O: Ops<Device = D>>(
        &self,
        ops: &O,
        batch: &Batch,
        qkv: O::Mat,
        table: &D::Param,
    ) {
        let AttentionShape {
            heads,
            kv_heads,
            head_dim,
            ..
        } = self.shape;
        let qk = qkv.columns(0..(heads + kv_heads) * head_dim);
        let norm = self.norm.as_ref().map(|(w, eps)| (w, *eps));
        ops.rotary(batch, qk, table, head_dim, norm);
    }
}

/// The fused `[Q | K | V]` projection of the attention block `attn` (LlamaAttention's and Gemma's `q_proj`,
/// `k_proj`, `v_proj`, with their biases where `bias`) over `hidden` columns, and its q/k norms (where `norms`
/// gives their eps and [`RmsNorm`]'s offset) with rotary.
pub(crate) fn qkv_projection<D: Device>(
    w: &Weights,
    d: &D,
    attn: &str,
    shape: AttentionShape,
    hidden: usize,
    bias: bool,
    norms: Option<(f64, f32)>,
) -> Result<(D::Linear, QkNormRotary<D>)> {
    let (q, kv) = (
        shape.heads * shape.head_dim,
        shape.kv_heads * shape.head_dim,
    );
    let names = [("q", q), ("k", kv), ("v", kv)].map(|(n, o)| (format!("{attn}.{n}_proj"), o));
    let qkv = stacked_linear(w, d, &names, hidden, bias)?;
    let rotary = match norms {
        Some((eps, offset)) => QkNormRotary::load(w, d, attn, shape, eps, offset)?,
        None => QkNormRotary::rotary(shape),
    };
    Ok((qkv, rotary))
}

/// LlamaDecoderLayer (and Mistral's, Qwen2's, Qwen3's): pre-norm attention (fused QKV, Qwen3's per-head q/k
/// RMSNorm, rotary, grouped-query attention, global or within a sliding window) and pre-norm SwiGLU MLP, each with
/// its residual.
pub struct Layer<D: Device> {
    input_norm: RmsNorm<D>,
    qkv: D::Linear,
    qk_norm_rotary: QkNormRotary<D>,
    o_proj: D::Linear,
    post_norm: RmsNorm<D>,
    gate_up: D::Linear,
    down: D::Linear,
    attention: AttentionShape,
}

impl<D: Device> Layer<D> {
    pub fn load(w: &Weights, d: &D, c: &DecoderConfig, i: usize) -> Result<Self> {
        let (h, f, hd) = (c.hidden_size, c.intermediate_size, c.head_dim());
        let attention = c.attention(i);
        let ((qkv_bias, o_bias), mlp_bias) = (c.attention_biases(), c.mlp_bias());
        let q = attention.heads * hd;
        let p = format!("layers.{i}");
        let a = format!("{p}.self_attn");
        let m = format!("{p}.mlp");
        let eps = c.rms_norm_eps();
        let norms = c.qk_norm().then_some((eps, 0.0));
        let (qkv, qk_norm_rotary) = qkv_projection(w, d, &a, attention, h, qkv_bias, norms)?;
        Ok(Layer {
            input_norm: RmsNorm::load(w, d, &format!("{p}.input_layernorm"), h, eps, 0.0)?,
            qkv,
            qk_norm_rotary,
            o_proj: stacked_linear(w, d, &[(format!("{a}.o_proj"), h)], q, o_bias)?,
            post_norm: RmsNorm::load(w, d, &format!("{p}.post_attention_layernorm"), h, eps, 0.0)?,
            gate_up: stacked_linear(
                w,
                d,
                &[(format!("{m}.gate_proj"), f), (format!("{m}.up_proj"), f)],
                h,
                mlp_bias,
            )?,
            down: stacked_linear(w, d, &[(format!("{m}.down_proj"), h)], f, mlp_bias)?,
            attention,
        })
    }

    /// The layer's input is in `a.hidden` and its output lands there.
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
        ops.linear(
            a.ctx,
            &self.o_proj,
            Activation::None,
            Some(a.hidden),
            a.normed,
        );
        // `normed` now holds the attention block's output (with its residual); the MLP reads its norm.
        self.post_norm.forward(ops, a.normed, a.hidden);
        ops.linear(a.hidden, &self.gate_up, Activation::None, None, a.gate_up);
        ops.glu(a.gate_up, Glu::Silu, a.act);
        ops.linear(
            a.act,
            &self.down,
            Activation::None,
            Some(a.normed),
            a.hidden,
        );
    }
}

/// A Llama-family decoder as an embedding model's network: token embeddings, decoder layers, final norm (the head
/// is [`super::Model`]'s).
pub struct Decoder<D: Device> {
    pub config: DecoderConfig,
    embeddings: Embedding<D>,
    rotary: D::Param,
    layers: Vec<Layer<D>>,
    norm: RmsNorm<D>,
}

impl<D: Device> Decoder<D> {
    pub fn load(dir: &ModelDir, device: &D) -> Result<Self> {
        let ModelConfig::Decoder(c) = &dir.config else {
            return Err(Error::model(
                &dir.root,
                "not a Llama-family decoder's directory",
            ));
        };
        let w = Weights::open(&dir.weights_path, "embed_tokens.weight")?;
        let h = c.hidden_size;
        Ok(Decoder {
            embeddings: Embedding {
                word: device.param(w.get("embed_tokens.weight", &[c.vocab_size, h])?)?,
                position: None,
                position_ids: PositionIds::Index,
                row: None,
                type1_row: None,
                dim: h,
                norm: None,
            },
            rotary: rotary_table(device, dir, c.head_dim(), c.rope())?,
            layers: (0..c.num_hidden_layers)
                .map(|i| Layer::load(&w, device, c, i))
                .collect::<Result<_>>()?,
            norm: RmsNorm::load(&w, device, "norm", h, c.rms_norm_eps(), 0.0)?,
            config: c.clone(),
        })
    }
}

impl<D: Device> Encoder<D> for Decoder<D> {
    fn layout(&self) -> EncoderLayout {
        let c = &self.config;
        pre_norm_layout(c.hidden_size, c.attention(0), c.intermediate_size)
    }

    fn forward<O: Ops<Device = D>>(&self, ops: &O, batch: &Batch, acts: &[O::Mat]) -> O::Mat {
        let a = PreNormActs::of(acts, batch.tokens());
        ops.embed(batch, &self.embeddings, a.hidden);
        for layer in &self.layers {
            layer.forward(ops, batch, &self.rotary, &a);
        }
        self.norm.forward(ops, a.hidden, a.hidden);
        a.hidden
    }
}
