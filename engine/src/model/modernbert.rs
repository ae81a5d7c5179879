//! ModernBERT encoder over the backend op set, for any device.
//!
//! Mirrors Hugging Face transformers' `modeling_modernbert.py` (ModernBertEmbeddings, ModernBertAttention,
//! ModernBertMLP, ModernBertEncoderLayer, ModernBertModel) block for block, then sentence-transformers' Pooling
//! and Normalize: token embeddings and their LayerNorm; pre-norm layers (the first without its attention norm)
//! whose attention takes rotary positions and, in the local layers, a sliding window (a token sees the tokens at
//! most `local_attention / 2` from it), each layer with its own rotary base (global or local); a GeGLU MLP; a final
//! LayerNorm. Biases only where the config asks (`norm_bias`, `attention_bias`, `mlp_bias`). Differences, exact in
//! real arithmetic: sequences are concatenated without padding (as ModernBERT's own unpadded path), so attention
//! needs no padding mask; residuals are added in the output projections' epilogues.

use super::{
    layer_norm, pre_norm_layout, stacked_linear, Encoder, EncoderLayout, LayerRotary, ModelConfig,
    ModelDir, ModernBertConfig, PreNormActs, Weights,
};
use crate::backend::ops::{
    Activation, AttentionShape, Device, Embedding, Glu, LayerNormWeights, Matrix, Ops, PositionIds,
};
use crate::batch::Batch;
use crate::error::{Error, Result};

/// ModernBertEncoderLayer: pre-norm attention (fused Wqkv, rotary on Q and K, global or sliding-window
/// attention, Wo) and pre-norm GeGLU MLP (Wi, GELU gate, Wo), each with its residual.
pub struct Layer<D: Device> {
    /// None in the first layer (its `attn_norm` is an identity: the embeddings end in a LayerNorm).
    attn_norm: Option<LayerNormWeights<D>>,
    wqkv: D::Linear,
    attn_out: D::Linear,
    mlp_norm: LayerNormWeights<D>,
    wi: D::Linear,
    mlp_out: D::Linear,
    attention: AttentionShape,
}

impl<D: Device> Layer<D> {
    pub fn load(w: &Weights, d: &D, c: &ModernBertConfig, i: usize) -> Result<Self> {
        let (h, f) = (c.hidden_size, c.intermediate_size);
        let p = format!("layers.{i}");
        let norm =
            |name: &str| layer_norm(w, d, &format!("{p}.{name}"), h, c.norm_eps, c.norm_bias);
        let linear = |name: &str, out, inp, bias| {
            stacked_linear(w, d, &[(format!("{p}.{name}"), out)], inp, bias)
        };
        Ok(Layer {
            attn_norm: if i == 0 {
                None
            } else {
                Some(norm("attn_norm")?)
            },
            wqkv: linear("attn.Wqkv", 3 * h, h, c.attention_bias)?,
            attn_out: linear("attn.Wo", h, h, c.attention_bias)?,
            mlp_norm: norm("mlp_norm")?,
            wi: linear("mlp.Wi", 2 * f, h, c.mlp_bias)?,
            mlp_out: linear("mlp.Wo", h, f, c.mlp_bias)?,
            attention: c.attention(i),
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
        let input = match &self.attn_norm {
            Some(norm) => {
                ops.layer_norm(a.hidden, None, a.normed, norm);
                a.normed
            }
            None => a.hidden,
        };
        ops.linear(input, &self.wqkv, Activation::None, None, a.qkv);
        let AttentionShape {
            heads, head_dim, ..
        } = self.attention;
        ops.rotary(
            batch,
            a.qkv.columns(0..2 * heads * head_dim),
            rotary,
            head_dim,
            None,
        );
        ops.attention(batch, a.qkv, self.attention, None, a.ctx);
        ops.linear(
            a.ctx,
            &self.attn_out,
            Activation::None,
            Some(a.hidden),
            a.normed,
        );
        // `normed` now holds the attention block's output (with its residual); the MLP reads its norm.
        ops.layer_norm(a.normed, None, a.hidden, &self.mlp_norm);
        ops.linear(a.hidden, &self.wi, Activation::None, None, a.gate_up);
        ops.glu(a.gate_up, Glu::Gelu, a.act);
        ops.linear(
            a.act,
            &self.mlp_out,
            Activation::None,
            Some(a.normed),
            a.hidden,
        );
    }
}

/// ModernBERT as an embedding model's network: embeddings, encoder layers, final norm (the head is
/// [`super::Model`]'s).
pub struct ModernBert<D: Device> {
    pub config: ModernBertConfig,
    embeddings: Embedding<D>,
    /// Rotary tables of the global and of the local layers (their bases differ).
    rotary: LayerRotary<D>,
    layers: Vec<Layer<D>>,
    final_norm: LayerNormWeights<D>,
}

impl<D: Device> ModernBert<D> {
    pub fn load(dir: &ModelDir, device: &D) -> Result<Self> {
        let ModelConfig::ModernBert(c) = &dir.config else {
            return Err(Error::model(&dir.root, "not a ModernBERT model directory"));
        };
        let w = Weights::open(&dir.weights_path, "embeddings.tok_embeddings.weight")?;
        let h = c.hidden_size;
        Ok(ModernBert {
            embeddings: Embedding {
                word: device
                    .param(w.get("embeddings.tok_embeddings.weight", &[c.vocab_size, h])?)?,
                position: None,
                position_ids: PositionIds::Index,
                row: None,
                type1_row: None,
                dim: h,
                norm: Some(layer_norm(
                    &w,
                    device,
                    "embeddings.norm",
                    h,
                    c.norm_eps,
                    c.norm_bias,
                )?),
            },
            rotary: LayerRotary::load(device, dir, c.head_dim(), |global| c.rope(global))?,
            layers: (0..c.num_hidden_layers)
                .map(|i| Layer::load(&w, device, c, i))
                .collect::<Result<_>>()?,
            final_norm: layer_norm(&w, device, "final_norm", h, c.norm_eps, c.norm_bias)?,
            config: c.clone(),
        })
    }
}

impl<D: Device> Encoder<D> for ModernBert<D> {
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
        ops.layer_norm(a.hidden, None, a.hidden, &self.final_norm);
        a.hidden
    }
}
