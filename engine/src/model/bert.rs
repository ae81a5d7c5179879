//! BERT encoder over the backend op set ([`crate::backend::ops`]), for any device.
//!
//! Mirrors Hugging Face transformers' `modeling_bert.py` (BertEmbeddings, BertSelfAttention, BertSelfOutput,
//! BertIntermediate, BertOutput, BertLayer) block for block, and sentence-transformers' Pooling and Normalize
//! modules after it. Differences, all exact in real arithmetic: sequences are concatenated without padding, so
//! attention runs per sequence and needs no mask; Q, K and V are one fused projection; the residual of each
//! block is added in its output projection's epilogue, before the LayerNorm.

use super::{BertConfig, Head, ModelConfig, ModelDir, Weights};
use crate::backend::ops::{
    Activation, Architecture, AttentionShape, Device, Embedding, LayerNormWeights, Layout, Matrix,
    Ops, Slot,
};
use crate::batch::Batch;
use crate::error::{Error, Result};

/// `y = x · Wᵀ + b`, weights read in PyTorch's `[out, in]` layout and handed to the device once.
pub struct Linear<D: Device> {
    inner: D::Linear,
}

impl<D: Device> Linear<D> {
    pub fn load(w: &Weights, d: &D, prefix: &str, out_dim: usize, in_dim: usize) -> Result<Self> {
        Self::load_stacked(w, d, &[prefix], out_dim, in_dim)
    }

    /// Stacks several projections of the same input (Q, K, V → QKV), so one GEMM reads the input once.
    pub fn load_stacked(
        w: &Weights,
        d: &D,
        prefixes: &[&str],
        out_dim: usize,
        in_dim: usize,
    ) -> Result<Self> {
        let (mut weight, mut bias) = (Vec::new(), Vec::new());
        for p in prefixes {
            weight.extend_from_slice(w.get(&format!("{p}.weight"), &[out_dim, in_dim])?.data());
            bias.extend_from_slice(w.get(&format!("{p}.bias"), &[out_dim])?.data());
        }
        let n = out_dim * prefixes.len();
        Ok(Linear {
            inner: d.linear(&weight, Some(&bias), n, in_dim)?,
        })
    }

    /// `out = act(x · Wᵀ + b) + residual?`
    fn forward<O: Ops<Device = D>>(
        &self,
        ops: &O,
        x: O::Mat,
        act: Activation,
        residual: Option<O::Mat>,
        out: O::Mat,
    ) {
        ops.linear(x, &self.inner, act, residual, out);
    }
}

/// BERT's LayerNorm `prefix` over rows of `dim` columns.
fn layer_norm<D: Device>(
    w: &Weights,
    d: &D,
    prefix: &str,
    dim: usize,
    eps: f64,
) -> Result<LayerNormWeights<D>> {
    Ok(LayerNormWeights {
        weight: d.param(w.get(&format!("{prefix}.weight"), &[dim])?)?,
        bias: d.param(w.get(&format!("{prefix}.bias"), &[dim])?)?,
        eps: eps as f32,
    })
}

/// BertEmbeddings: word + absolute position + token type (always type 0 for single sentences), then LayerNorm,
/// as one op.
pub struct Embeddings<D: Device> {
    table: Embedding<D>,
}

impl<D: Device> Embeddings<D> {
    pub fn load(w: &Weights, d: &D, c: &BertConfig) -> Result<Self> {
        let h = c.hidden_size;
        let token_type = w.get(
            "embeddings.token_type_embeddings.weight",
            &[c.type_vocab_size, h],
        )?;
        Ok(Embeddings {
            table: Embedding {
                word: d.param(w.get("embeddings.word_embeddings.weight", &[c.vocab_size, h])?)?,
                position: Some(d.param(w.get(
                    "embeddings.position_embeddings.weight",
                    &[c.max_position_embeddings, h],
                )?)?),
                position_ids: c.position_ids(),
                row: Some(d.param(super::Tensor::from_vec(
                    token_type
                        .data()
                        .get(..h)
                        .ok_or_else(|| {
                            Error::model(
                                w.path(),
                                "embeddings.token_type_embeddings.weight has no row for token type 0",
                            )
                        })?
                        .to_vec(),
                ))?),
                dim: h,
                norm: Some(layer_norm(
                    w,
                    d,
                    "embeddings.LayerNorm",
                    h,
                    c.layer_norm_eps,
                )?),
            },
        })
    }

    fn forward<O: Ops<Device = D>>(&self, ops: &O, batch: &Batch, x: O::Mat) {
        ops.embed(batch, &self.table, x);
    }
}

/// The activation matrices of one forward pass, in the order of [`Bert::layout`]'s slots.
struct Acts<M> {
    hidden: M,
    /// The block's intermediate: attention output + residual, before its LayerNorm.
    tmp: M,
    qkv: M,
    ctx: M,
    /// The feed-forward activations, in the memory of QKV and the context once both are dead.
    inter: M,
}

/// One BertLayer: self-attention (BertSelfAttention + BertSelfOutput), then the feed-forward block
/// (BertIntermediate + BertOutput), each closed by residual + LayerNorm (post-norm, as BERT).
pub struct Layer<D: Device> {
    qkv: Linear<D>,
    attn_out: Linear<D>,
    attn_norm: LayerNormWeights<D>,
    intermediate: Linear<D>,
    output: Linear<D>,
    out_norm: LayerNormWeights<D>,
    attention: AttentionShape,
}

impl<D: Device> Layer<D> {
    pub fn load(w: &Weights, d: &D, c: &BertConfig, i: usize) -> Result<Self> {
        let (h, f) = (c.hidden_size, c.intermediate_size);
        let p = format!("encoder.layer.{i}");
        let qkv = ["query", "key", "value"].map(|n| format!("{p}.attention.self.{n}"));
        let eps = c.layer_norm_eps;
        Ok(Layer {
            qkv: Linear::load_stacked(w, d, &qkv.each_ref().map(String::as_str), h, h)?,
            attn_out: Linear::load(w, d, &format!("{p}.attention.output.dense"), h, h)?,
            attn_norm: layer_norm(w, d, &format!("{p}.attention.output.LayerNorm"), h, eps)?,
            intermediate: Linear::load(w, d, &format!("{p}.intermediate.dense"), f, h)?,
            output: Linear::load(w, d, &format!("{p}.output.dense"), h, f)?,
            out_norm: layer_norm(w, d, &format!("{p}.output.LayerNorm"), h, eps)?,
            attention: attention_shape(c),
        })
    }

    /// The layer's input is in `a.hidden` and its output lands there.
    fn forward<O: Ops<Device = D>>(&self, ops: &O, batch: &Batch, a: &Acts<O::Mat>) {
        self.qkv
            .forward(ops, a.hidden, Activation::None, None, a.qkv);
        ops.attention(batch, a.qkv, self.attention, a.ctx);
        self.attn_out
            .forward(ops, a.ctx, Activation::None, Some(a.hidden), a.tmp);
        ops.layer_norm(a.tmp, &self.attn_norm);
        self.intermediate
            .forward(ops, a.tmp, Activation::Gelu, None, a.inter);
        self.output
            .forward(ops, a.inter, Activation::None, Some(a.tmp), a.hidden);
        ops.layer_norm(a.hidden, &self.out_norm);
    }
}

fn attention_shape(c: &BertConfig) -> AttentionShape {
    AttentionShape {
        heads: c.num_attention_heads,
        kv_heads: c.num_attention_heads,
        head_dim: c.hidden_size / c.num_attention_heads,
        causal: false,
    }
}

/// A sentence-embedding BERT: encoder, pooling and optional L2 normalisation.
pub struct Bert<D: Device> {
    pub config: BertConfig,
    pub head: Head,
    embeddings: Embeddings<D>,
    layers: Vec<Layer<D>>,
    /// The longest sequence it runs ([`ModelDir::positions`]).
    positions: usize,
}

impl<D: Device> Bert<D> {
    /// Loads the weights and hands them to `device` in its own form.
    pub fn load(dir: &ModelDir, device: &D) -> Result<Self> {
        let ModelConfig::Bert(c) = &dir.config else {
            return Err(Error::model(&dir.root, "not a BERT model directory"));
        };
        let w = Weights::open(&dir.weights_path, "embeddings.word_embeddings.weight")?;
        Ok(Bert {
            embeddings: Embeddings::load(&w, device, c)?,
            layers: (0..c.num_hidden_layers)
                .map(|i| Layer::load(&w, device, c, i))
                .collect::<Result<_>>()?,
            config: c.clone(),
            head: Head::load(dir),
            positions: dir.positions,
        })
    }
}

impl<D: Device> Architecture<D> for Bert<D> {
    /// Hidden states and the block's intermediate each in a region of their own; QKV and the attention context
    /// share a third with the feed-forward activations, which are only live once both are dead.
    fn layout(&self) -> Layout {
        let (h, f) = (self.config.hidden_size, self.config.intermediate_size);
        let slot = |region, offset, width, operand| Slot {
            region,
            offset,
            width,
            operand,
        };
        Layout {
            slots: vec![
                slot(0, 0, h, false),
                slot(1, 0, h, false),
                slot(2, 0, 3 * h, false),
                slot(2, 3 * h, h, false),
                // The GELU's input and output, read only by the output projection.
                slot(2, 0, f, true),
            ],
            attention: attention_shape(&self.config),
            max_positions: self.positions,
        }
    }

    fn dim(&self) -> usize {
        self.config.hidden_size
    }

    fn vocab_size(&self) -> usize {
        self.config.vocab_size
    }

    fn normalizes(&self) -> bool {
        self.head.normalize
    }

    // Never inlined: `bench gate counts` collects instructions inside this function (one call per pass).
    #[inline(never)]
    fn forward<O: Ops<Device = D>>(&self, ops: &O, batch: &Batch, acts: &[O::Mat], out: O::Mat) {
        let t = batch.tokens();
        let [hidden, tmp, qkv, ctx, inter] = acts else {
            panic!("BERT's layout has five slots, got {}", acts.len());
        };
        let a = Acts {
            hidden: hidden.top(t),
            tmp: tmp.top(t),
            qkv: qkv.top(t),
            ctx: ctx.top(t),
            inter: inter.top(t),
        };
        self.embeddings.forward(ops, batch, a.hidden);
        for layer in &self.layers {
            layer.forward(ops, batch, &a);
        }
        self.head.forward(ops, batch, a.hidden, out);
    }
}
