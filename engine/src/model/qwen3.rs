//! Qwen3 used as an embedding model, over the backend op set, for any device.
//!
//! Mirrors Hugging Face transformers' `modeling_qwen3.py` (Qwen3RMSNorm, Qwen3Attention with its per-head q/k
//! norms, Qwen3MLP, Qwen3DecoderLayer, Qwen3Model) block for block, then sentence-transformers' Pooling and
//! Normalize. Two conventions, both read from the model directory: Qwen3-Embedding (causal attention, last-token
//! pooling, the tokenizer appending its end-of-text token) and a bidirectional variant (`"is_causal": false` in
//! config.json; full attention, and mean pooling from its Pooling module) as pplx-embed uses. Differences, exact in
//! real arithmetic: sequences are concatenated without padding, so attention needs no padding mask; Q, K and V are
//! one fused projection, and so are the MLP's gate and up projections; the q and k norms and rotary are one op over
//! Q's and K's heads; residuals are added in the output projections' epilogues. The language-model head is never
//! used, so tied or untied embeddings load the same.

use super::{Head, ModelConfig, ModelDir, Qwen3Config, Tensor, Weights};
use crate::backend::ops::{
    Activation, Architecture, AttentionShape, Device, Embedding, Layout, Matrix, Ops, PositionIds,
    Slot,
};
use crate::batch::Batch;
use crate::error::{Error, Result};

/// A bias-free linear layer (Qwen3 has none), several projections of one input stacked into one GEMM.
fn stacked<D: Device>(
    w: &Weights,
    d: &D,
    names: &[(String, usize)],
    inp: usize,
) -> Result<D::Linear> {
    let mut weight = Vec::new();
    for (name, out) in names {
        weight.extend_from_slice(w.get(&format!("{name}.weight"), &[*out, inp])?.data());
    }
    let out = names.iter().map(|(_, o)| o).sum();
    d.linear(&weight, None, out, inp)
}

/// Qwen3RMSNorm: `x · weight / √(mean(x²) + eps)` over each row.
pub struct RmsNorm<D: Device> {
    weight: D::Param,
    eps: f32,
}

impl<D: Device> RmsNorm<D> {
    pub fn load(w: &Weights, d: &D, name: &str, dim: usize, eps: f64) -> Result<Self> {
        Ok(RmsNorm {
            weight: d.param(w.get(&format!("{name}.weight"), &[dim])?)?,
            eps: eps as f32,
        })
    }

    /// `x`'s rows into `out` (`x` itself for in place).
    fn forward<O: Ops<Device = D>>(&self, ops: &O, x: O::Mat, out: O::Mat) {
        ops.rms_norm(x, out, &self.weight, self.eps);
    }
}

/// Qwen3Attention's `q_norm` and `k_norm` (an RMSNorm per head) and the rotary embedding after them, as one op
/// over Q's and K's heads, which are adjacent columns of the fused projection (one pass, one launch on a GPU).
pub struct QkNormRotary<D: Device> {
    /// Each norm's weights repeated over its heads: one value per column of Q and K.
    weight: D::Param,
    eps: f32,
    shape: AttentionShape,
}

impl<D: Device> QkNormRotary<D> {
    /// The norms of the attention block `attn`.
    pub fn load(w: &Weights, d: &D, attn: &str, shape: AttentionShape, eps: f64) -> Result<Self> {
        let hd = shape.head_dim;
        let q = w.get(&format!("{attn}.q_norm.weight"), &[hd])?;
        let k = w.get(&format!("{attn}.k_norm.weight"), &[hd])?;
        let weight: Vec<f32> = std::iter::repeat_n(q.data(), shape.heads)
            .chain(std::iter::repeat_n(k.data(), shape.kv_heads))
            .flatten()
            .copied()
            .collect();
        Ok(QkNormRotary {
            weight: d.param(Tensor::from_vec(weight))?,
            eps: eps as f32,
            shape,
        })
    }

    /// In place on the Q and K columns of `qkv`, at each token's position (`table`: the model's rotary table).
    fn forward<O: Ops<Device = D>>(&self, ops: &O, batch: &Batch, qkv: O::Mat, table: &D::Param) {
        let AttentionShape {
            heads,
            kv_heads,
            head_dim,
            ..
        } = self.shape;
        let qk = qkv.columns(0..(heads + kv_heads) * head_dim);
        ops.rotary(batch, qk, table, head_dim, Some((&self.weight, self.eps)));
    }
}

/// The activation matrices of one forward pass, in the order of [`Qwen3::layout`]'s slots.
struct Acts<M> {
    hidden: M,
    normed: M,
    qkv: M,
    ctx: M,
    /// The MLP's gate and up projections, in the memory of QKV and the context once both are dead.
    gate_up: M,
    act: M,
}

/// Qwen3DecoderLayer: pre-norm attention (fused QKV, per-head q/k RMSNorm, rotary, grouped-query attention) and
/// pre-norm SwiGLU MLP, each with its residual.
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
    pub fn load(w: &Weights, d: &D, c: &Qwen3Config, i: usize) -> Result<Self> {
        let (h, f, hd) = (c.hidden_size, c.intermediate_size, c.head_dim());
        let attention = attention_shape(c);
        let (q, kv) = (attention.heads * hd, attention.kv_heads * hd);
        let p = format!("layers.{i}");
        let a = format!("{p}.self_attn");
        let m = format!("{p}.mlp");
        let eps = c.rms_norm_eps;
        Ok(Layer {
            input_norm: RmsNorm::load(w, d, &format!("{p}.input_layernorm"), h, eps)?,
            qkv: stacked(
                w,
                d,
                &[
                    (format!("{a}.q_proj"), q),
                    (format!("{a}.k_proj"), kv),
                    (format!("{a}.v_proj"), kv),
                ],
                h,
            )?,
            qk_norm_rotary: QkNormRotary::load(w, d, &a, attention, eps)?,
            o_proj: stacked(w, d, &[(format!("{a}.o_proj"), h)], q)?,
            post_norm: RmsNorm::load(w, d, &format!("{p}.post_attention_layernorm"), h, eps)?,
            gate_up: stacked(
                w,
                d,
                &[(format!("{m}.gate_proj"), f), (format!("{m}.up_proj"), f)],
                h,
            )?,
            down: stacked(w, d, &[(format!("{m}.down_proj"), h)], f)?,
            attention,
        })
    }

    /// The layer's input is in `a.hidden` and its output lands there.
    fn forward<O: Ops<Device = D>>(
        &self,
        ops: &O,
        batch: &Batch,
        rotary: &D::Param,
        a: &Acts<O::Mat>,
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
        ops.silu_gate(a.gate_up, a.act);
        ops.linear(
            a.act,
            &self.down,
            Activation::None,
            Some(a.normed),
            a.hidden,
        );
    }
}

fn attention_shape(c: &Qwen3Config) -> AttentionShape {
    AttentionShape {
        heads: c.num_attention_heads,
        kv_heads: c.num_key_value_heads,
        head_dim: c.head_dim(),
        causal: c.is_causal,
    }
}

/// A Qwen3 embedding model: token embeddings, decoder layers, final norm, pooling and optional normalisation.
pub struct Qwen3<D: Device> {
    pub config: Qwen3Config,
    pub head: Head,
    embeddings: Embedding<D>,
    rotary: D::Param,
    layers: Vec<Layer<D>>,
    norm: RmsNorm<D>,
    /// The longest sequence it runs, and the rotary table's length ([`ModelDir::positions`]).
    positions: usize,
}

impl<D: Device> Qwen3<D> {
    pub fn load(dir: &ModelDir, device: &D) -> Result<Self> {
        let ModelConfig::Qwen3(c) = &dir.config else {
            return Err(Error::model(&dir.root, "not a Qwen3 model directory"));
        };
        let w = Weights::open(&dir.weights_path, "embed_tokens.weight")?;
        let h = c.hidden_size;
        Ok(Qwen3 {
            embeddings: Embedding {
                word: device.param(w.get("embed_tokens.weight", &[c.vocab_size, h])?)?,
                position: None,
                position_ids: PositionIds::Index,
                row: None,
                dim: h,
                norm: None,
            },
            rotary: device
                .rotary_table(c.head_dim(), c.rope_theta(), dir.positions)
                .map_err(|e| {
                    Error::model(
                        &dir.root,
                        format!(
                            "the rotary table for {} positions (max_position_embeddings, or a shorter \
                             max_seq_length): {e}",
                            dir.positions
                        ),
                    )
                })?,
            layers: (0..c.num_hidden_layers)
                .map(|i| Layer::load(&w, device, c, i))
                .collect::<Result<_>>()?,
            norm: RmsNorm::load(&w, device, "norm", h, c.rms_norm_eps)?,
            config: c.clone(),
            head: Head::load(dir),
            positions: dir.positions,
        })
    }
}

impl<D: Device> Architecture<D> for Qwen3<D> {
    /// The residual stream and the normed copy each in a region of their own; QKV and the attention context
    /// share a third with the MLP's gate/up projections and its activation, live only once both are dead.
    fn layout(&self) -> Layout {
        let c = &self.config;
        let shape = attention_shape(c);
        let (h, f) = (c.hidden_size, c.intermediate_size);
        let (w, q) = (shape.qkv_width(), shape.heads * shape.head_dim);
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
                slot(2, 0, w, false),
                slot(2, w, q, false),
                // The gate/up projections and SwiGLU's output, read only by the gate and the down projection.
                slot(2, 0, 2 * f, true),
                slot(2, 2 * f, f, true),
            ],
            attention: shape,
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

    fn forward<O: Ops<Device = D>>(&self, ops: &O, batch: &Batch, acts: &[O::Mat], out: O::Mat) {
        let t = batch.tokens();
        let [hidden, normed, qkv, ctx, gate_up, act] = acts else {
            panic!("Qwen3's layout has six slots, got {}", acts.len());
        };
        let a = Acts {
            hidden: hidden.top(t),
            normed: normed.top(t),
            qkv: qkv.top(t),
            ctx: ctx.top(t),
            gate_up: gate_up.top(t),
            act: act.top(t),
        };
        ops.embed(batch, &self.embeddings, a.hidden);
        for layer in &self.layers {
            layer.forward(ops, batch, &self.rotary, &a);
        }
        self.norm.forward(ops, a.hidden, a.hidden);
        self.head.forward(ops, batch, a.hidden, out);
    }
}
