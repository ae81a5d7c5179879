//! T5's encoder as sentence-t5 and GTR use it, over the backend op set, for any device.
//!
//! Mirrors Hugging Face transformers' `modeling_t5.py` (T5LayerNorm, T5Attention with the relative position bias
//! its first layer computes and every layer adds, T5DenseActDense / T5DenseGatedActDense, T5Block, T5Stack as
//! T5EncoderModel runs it) block for block, then sentence-transformers' Pooling, Dense and Normalize. Differences,
//! exact in real arithmetic: sequences are concatenated without padding; Q, K and V are one fused projection (and
//! the gated units' two input projections another); residuals are added in the output projections' epilogues.
//! The decoder stack and the language-model head are never used.

use super::decoder::RmsNorm;
use super::relative::relative_bias;
use super::{
    pre_norm_layout, stacked_linear, Encoder, EncoderLayout, ModelConfig, ModelDir, PreNormActs,
};
use super::{T5Config, T5FeedForward, Weights};
use crate::backend::ops::{
    Activation, AttentionShape, Device, Embedding, Ops, PositionIds, RelativeBias, ScoreBias,
};
use crate::batch::Batch;
use crate::error::{Error, Result};

/// T5Block of the encoder: pre-norm self-attention (no biases, unscaled scores plus the shared relative bias)
/// and pre-norm feed-forward (ReLU, or a gated unit), each with its residual.
pub struct Layer<D: Device> {
    attn_norm: RmsNorm<D>,
    qkv: D::Linear,
    o: D::Linear,
    ff_norm: RmsNorm<D>,
    /// `wi`, or `wi_0` and `wi_1` stacked (gate first).
    wi: D::Linear,
    wo: D::Linear,
    ff: T5FeedForward,
    attention: AttentionShape,
}

impl<D: Device> Layer<D> {
    pub fn load(w: &Weights, d: &D, c: &T5Config, i: usize) -> Result<Self> {
        let (h, f, inner) = (c.d_model, c.d_ff, c.num_heads * c.d_kv);
        let p = format!("encoder.block.{i}.layer");
        let (attn, ff) = (
            format!("{p}.0.SelfAttention"),
            format!("{p}.1.DenseReluDense"),
        );
        let eps = c.layer_norm_epsilon;
        let qkv = ["q", "k", "v"].map(|n| (format!("{attn}.{n}"), inner));
        let ff_kind = c
            .feed_forward()
            .ok_or_else(|| Error::model(w.path(), "unsupported feed_forward_proj"))?;
        let wi: Vec<(String, usize)> = match ff_kind {
            T5FeedForward::Dense(_) => vec![(format!("{ff}.wi"), f)],
            T5FeedForward::Gated(_) => vec![(format!("{ff}.wi_0"), f), (format!("{ff}.wi_1"), f)],
        };
        Ok(Layer {
            attn_norm: RmsNorm::load(w, d, &format!("{p}.0.layer_norm"), h, eps, 0.0)?,
            qkv: stacked_linear(w, d, &qkv, h, false)?,
            o: stacked_linear(w, d, &[(format!("{attn}.o"), h)], inner, false)?,
            ff_norm: RmsNorm::load(w, d, &format!("{p}.1.layer_norm"), h, eps, 0.0)?,
            wi: stacked_linear(w, d, &wi, h, false)?,
            wo: stacked_linear(w, d, &[(format!("{ff}.wo"), h)], f, false)?,
            ff: ff_kind,
            attention: c.attention(),
        })
    }

    /// The layer's input is in `a.hidden` and its output lands there.
    fn forward<O: Ops<Device = D>>(
        &self,
        ops: &O,
        batch: &Batch,
        bias: &RelativeBias<D>,
        a: &PreNormActs<O::Mat>,
    ) {
        self.attn_norm.forward(ops, a.hidden, a.normed);
        ops.linear(a.normed, &self.qkv, Activation::None, None, a.qkv);
        ops.attention(
            batch,
            a.qkv,
            self.attention,
            Some(ScoreBias::Relative(bias)),
            a.ctx,
        );
        ops.linear(a.ctx, &self.o, Activation::None, Some(a.hidden), a.normed);
        // `normed` now holds the attention block's output (with its residual); the feed-forward reads its norm.
        self.ff_norm.forward(ops, a.normed, a.hidden);
        match self.ff {
            T5FeedForward::Dense(act) => ops.linear(a.hidden, &self.wi, act, None, a.act),
            T5FeedForward::Gated(glu) => {
                ops.linear(a.hidden, &self.wi, Activation::None, None, a.gate_up);
                ops.glu(a.gate_up, glu, a.act);
            }
        }
        ops.linear(a.act, &self.wo, Activation::None, Some(a.normed), a.hidden);
    }
}

/// T5's encoder as an embedding model's network: token embeddings, blocks, final norm (the head is
/// [`super::Model`]'s).
pub struct T5<D: Device> {
    pub config: T5Config,
    embeddings: Embedding<D>,
    /// The first block's relative position bias, which every block adds (as T5Stack passes it on).
    bias: RelativeBias<D>,
    layers: Vec<Layer<D>>,
    final_norm: RmsNorm<D>,
}

impl<D: Device> T5<D> {
    pub fn load(dir: &ModelDir, device: &D) -> Result<Self> {
        let ModelConfig::T5(c) = &dir.config else {
            return Err(Error::model(&dir.root, "not a T5 model directory"));
        };
        let w = Weights::open(&dir.weights_path, "encoder.final_layer_norm.weight")?;
        let h = c.d_model;
        // The token table is shared with the (unused) decoder: saved once, under either name.
        let word = match w.get("shared.weight", &[c.vocab_size, h]) {
            Ok(word) => word,
            // The first error is the one to report (a wrong shape, say), should the other name be missing too.
            Err(first) => w
                .get("encoder.embed_tokens.weight", &[c.vocab_size, h])
                .map_err(|_| first)?,
        };
        Ok(T5 {
            embeddings: Embedding {
                word: device.param(word)?,
                position: None,
                position_ids: PositionIds::Index,
                row: None,
                type1_row: None,
                dim: h,
                norm: None,
            },
            bias: relative_bias(
                &w,
                device,
                "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight",
                (c.relative_attention_num_buckets, c.num_heads),
                (
                    c.relative_attention_num_buckets,
                    c.relative_attention_max_distance,
                ),
                dir.positions.max(1),
            )?,
            layers: (0..c.num_layers)
                .map(|i| Layer::load(&w, device, c, i))
                .collect::<Result<_>>()?,
            final_norm: RmsNorm::load(
                &w,
                device,
                "encoder.final_layer_norm",
                h,
                c.layer_norm_epsilon,
                0.0,
            )?,
            config: c.clone(),
        })
    }
}

impl<D: Device> Encoder<D> for T5<D> {
    fn layout(&self) -> EncoderLayout {
        let c = &self.config;
        pre_norm_layout(c.d_model, c.attention(), c.d_ff)
    }

    fn forward<O: Ops<Device = D>>(&self, ops: &O, batch: &Batch, acts: &[O::Mat]) -> O::Mat {
        let a = PreNormActs::of(acts, batch.tokens());
        ops.embed(batch, &self.embeddings, a.hidden);
        for layer in &self.layers {
            layer.forward(ops, batch, &self.bias, &a);
        }
        self.final_norm.forward(ops, a.hidden, a.hidden);
        a.hidden
    }
}
