//! BERT's post-norm encoders with rotary positions, over the backend op set, for any device: Nomic BERT
//! (nomic-embed-text-v1, v1.5), GTE (gte-base-en-v1.5, gte-large-en-v1.5, gte-multilingual-base) and Jina v3
//! (jina-embeddings-v3), [`super::RotaryBertFamily`].
//!
//! Mirrors Hugging Face transformers' `modeling_nomic_bert.py`, `modeling_gte.py` and
//! `modeling_jina_embeddings_v3.py`, the same network (NomicBert / Gte / JinaEmbeddingsV3 Embeddings, Attention,
//! MLP, Layer, Model; contrastors' `NomicBertModel`, Alibaba's `NewModel` and Jina's flash-attention XLM-RoBERTa
//! under other names), block for block, then sentence-transformers' Pooling and Normalize: word and token-type
//! embeddings and their LayerNorm (no position embeddings); post-norm layers as BERT's, whose attention takes
//! rotary positions (GPT-NeoX's halves) on Q and K; an MLP, gated `down(act(gate(x)) · up(x))` (Nomic: SwiGLU,
//! GTE: GeGLU) or BERT's `fc2(act(fc1(x)))` (Jina: the exact GELU, or ReLU); biases as each family has them (GTE: Q/K/V, output and down
//! projections; Jina: all). Checkpoints come in four namings: flash-attention's BERT, as the Hub's Nomic ones
//! have it (contrastors': `encoder.layers.N.attn.Wqkv`, `mlp.fc11` up, `mlp.fc12` gate, `mlp.fc2`, `norm1`,
//! `norm2`, `emb_ln`) and the Hub's Jina v3 ones (`mixer.Wqkv`, `mixer.out_proj`, `mlp.fc1`); the Hub's GTE ones in
//! Alibaba's (`encoder.layer.N.attention.qkv_proj`, `mlp.up_gate_proj` up then gate, `attn_ln`, `mlp_ln`); or
//! transformers' in-memory names (`layers.N.self_attn.q_proj`, …, `post_attention_layernorm`,
//! `post_mlp_layernorm`). Differences, exact in real arithmetic: sequences are concatenated without padding, so
//! attention needs no mask; Q, K and V are one projection; residuals are added in the output projections'
//! epilogues.

use super::decoder::QkNormRotary;
use super::{
    layer_norm, pre_norm_layout, rotary_table, stacked_linear, Encoder, EncoderLayout, ModelConfig,
    ModelDir, PreNormActs, RotaryBertConfig, RotaryBertMlp, Weights,
};
use crate::backend::ops::{
    Activation, AttentionShape, Device, Embedding, LayerNormWeights, Ops, PositionIds,
};
use crate::batch::Batch;
use crate::error::{Error, Result};

/// How a checkpoint names its tensors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Naming {
    /// flash-attention's BERT, as Nomic's checkpoints (contrastors' code: attention `attn`) and Jina's (attention
    /// `mixer`) name it.
    FlashBert { attention: &'static str },
    /// GTE's checkpoints (Alibaba's `NewModel`).
    Alibaba,
    /// transformers' modules, in memory.
    Transformers,
}

impl Naming {
    fn of(w: &Weights) -> Self {
        if w.has("encoder.layers.0.mixer.Wqkv.weight") {
            Naming::FlashBert { attention: "mixer" }
        } else if w.has("emb_ln.weight") {
            Naming::FlashBert { attention: "attn" }
        } else if w.has("encoder.layer.0.attention.qkv_proj.weight") {
            Naming::Alibaba
        } else {
            Naming::Transformers
        }
    }

    fn embedding_norm(self) -> &'static str {
        match self {
            Naming::FlashBert { .. } => "emb_ln",
            Naming::Alibaba | Naming::Transformers => "embeddings.LayerNorm",
        }
    }
}

/// The tensor names of layer `i`.
struct Names {
    /// Q, K, V: one fused tensor or three.
    qkv: Vec<(String, usize)>,
    out: String,
    /// The MLP's input projection: gate then up (the op set's gate reads the first half; Alibaba's one tensor
    /// holds up then gate), or the plain MLP's `fc1`.
    mlp_in: Vec<(String, usize)>,
    mlp_out: String,
    attention_norm: String,
    mlp_norm: String,
}

impl Names {
    fn of(naming: Naming, c: &RotaryBertConfig, i: usize) -> Self {
        let (q, f) = (c.num_attention_heads * c.head_dim, c.intermediate_size);
        let gated = matches!(c.mlp, RotaryBertMlp::Gated(_));
        match naming {
            Naming::FlashBert { attention } => {
                let p = format!("encoder.layers.{i}");
                let mlp = |n: &str| (format!("{p}.mlp.{n}"), f);
                Names {
                    qkv: vec![(format!("{p}.{attention}.Wqkv"), 3 * q)],
                    out: format!("{p}.{attention}.out_proj"),
                    mlp_in: if gated {
                        vec![mlp("fc12"), mlp("fc11")]
                    } else {
                        vec![mlp("fc1")]
                    },
                    mlp_out: format!("{p}.mlp.fc2"),
                    attention_norm: format!("{p}.norm1"),
                    mlp_norm: format!("{p}.norm2"),
                }
            }
            Naming::Alibaba => {
                let p = format!("encoder.layer.{i}");
                Names {
                    qkv: vec![(format!("{p}.attention.qkv_proj"), 3 * q)],
                    out: format!("{p}.attention.o_proj"),
                    mlp_in: vec![(format!("{p}.mlp.up_gate_proj"), 2 * f)],
                    mlp_out: format!("{p}.mlp.down_proj"),
                    attention_norm: format!("{p}.attn_ln"),
                    mlp_norm: format!("{p}.mlp_ln"),
                }
            }
            Naming::Transformers => {
                let p = format!("layers.{i}");
                let attn = |n: &str| (format!("{p}.self_attn.{n}"), q);
                let mlp = |n: &str| (format!("{p}.mlp.{n}"), f);
                let (mlp_in, mlp_out) = if gated {
                    (vec![mlp("gate_proj"), mlp("up_proj")], mlp("down_proj").0)
                } else {
                    (vec![mlp("fc1")], mlp("fc2").0)
                };
                Names {
                    qkv: vec![attn("q_proj"), attn("k_proj"), attn("v_proj")],
                    out: format!("{p}.self_attn.o_proj"),
                    mlp_in,
                    mlp_out,
                    attention_norm: format!("{p}.post_attention_layernorm"),
                    mlp_norm: format!("{p}.post_mlp_layernorm"),
                }
            }
        }
    }
}

/// Alibaba's fused `up_gate_proj` (`[up; gate]`, no bias) as the op set's `[gate | up]` projection.
fn gate_up_from_up_gate<D: Device>(
    w: &Weights,
    d: &D,
    name: &str,
    f: usize,
    h: usize,
) -> Result<D::Linear> {
    let t = w.get(&format!("{name}.weight"), &[2 * f, h])?;
    let (up, gate) = t.data().split_at(f * h);
    let weight: Vec<f32> = gate.iter().chain(up).copied().collect();
    d.linear(&weight, None, 2 * f, h)
}

/// NomicBertLayer / GteLayer / JinaEmbeddingsV3Layer: attention (fused QKV, rotary on Q and K, bidirectional
/// attention, output projection) added to its input and normed; then the MLP added to that and normed.
pub struct Layer<D: Device> {
    qkv: D::Linear,
    rotary: QkNormRotary<D>,
    attention: AttentionShape,
    out: D::Linear,
    attention_norm: LayerNormWeights<D>,
    mlp_in: D::Linear,
    mlp_out: D::Linear,
    mlp_norm: LayerNormWeights<D>,
    mlp: RotaryBertMlp,
}

impl<D: Device> Layer<D> {
    fn load(w: &Weights, d: &D, c: &RotaryBertConfig, naming: Naming, i: usize) -> Result<Self> {
        let (h, f, q) = (
            c.hidden_size,
            c.intermediate_size,
            c.num_attention_heads * c.head_dim,
        );
        let n = Names::of(naming, c, i);
        let norm = |name: &str| layer_norm(w, d, name, h, c.layer_norm_eps, true);
        let (fc1_bias, fc2_bias) = c.mlp_biases;
        Ok(Layer {
            qkv: stacked_linear(w, d, &n.qkv, h, c.attention_bias)?,
            rotary: QkNormRotary::rotary(c.attention()),
            attention: c.attention(),
            out: stacked_linear(w, d, &[(n.out, h)], q, c.attention_bias)?,
            attention_norm: norm(&n.attention_norm)?,
            mlp_in: if naming == Naming::Alibaba {
                gate_up_from_up_gate(w, d, &n.mlp_in[0].0, f, h)?
            } else {
                stacked_linear(w, d, &n.mlp_in, h, fc1_bias)?
            },
            mlp_out: stacked_linear(w, d, &[(n.mlp_out, h)], f, fc2_bias)?,
            mlp_norm: norm(&n.mlp_norm)?,
            mlp: c.mlp,
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
        ops.linear(a.hidden, &self.qkv, Activation::None, None, a.qkv);
        self.rotary.forward(ops, batch, a.qkv, rotary);
        ops.attention(batch, a.qkv, self.attention, None, a.ctx);
        ops.linear(a.ctx, &self.out, Activation::None, Some(a.hidden), a.normed);
        ops.layer_norm(a.normed, None, a.hidden, &self.attention_norm);
        match self.mlp {
            RotaryBertMlp::Gated(gate) => {
                ops.linear(a.hidden, &self.mlp_in, Activation::None, None, a.gate_up);
                ops.glu(a.gate_up, gate, a.act);
            }
            RotaryBertMlp::Plain(act) => ops.linear(a.hidden, &self.mlp_in, act, None, a.act),
        }
        ops.linear(
            a.act,
            &self.mlp_out,
            Activation::None,
            Some(a.hidden),
            a.normed,
        );
        ops.layer_norm(a.normed, None, a.hidden, &self.mlp_norm);
    }
}

/// A rotary BERT as an embedding model's network: embeddings and post-norm rotary layers (the head is
/// [`super::Model`]'s).
pub struct RotaryBert<D: Device> {
    pub config: RotaryBertConfig,
    embeddings: Embedding<D>,
    rotary: D::Param,
    layers: Vec<Layer<D>>,
}

impl<D: Device> RotaryBert<D> {
    pub fn load(dir: &ModelDir, device: &D) -> Result<Self> {
        let ModelConfig::RotaryBert(c) = &dir.config else {
            return Err(Error::model(&dir.root, "not a rotary BERT model directory"));
        };
        let w = Weights::open(&dir.weights_path, "embeddings.word_embeddings.weight")?;
        let naming = Naming::of(&w);
        let h = c.hidden_size;
        let (row, type1_row) = super::token_type_rows(&w, device, c.type_vocab_size, h)?;
        Ok(RotaryBert {
            embeddings: Embedding {
                word: device
                    .param(w.get("embeddings.word_embeddings.weight", &[c.vocab_size, h])?)?,
                position: None,
                position_ids: PositionIds::Index,
                row,
                type1_row,
                dim: h,
                norm: Some(layer_norm(
                    &w,
                    device,
                    naming.embedding_norm(),
                    h,
                    c.layer_norm_eps,
                    true,
                )?),
            },
            rotary: rotary_table(device, dir, c.head_dim, &c.rope)?,
            layers: (0..c.num_hidden_layers)
                .map(|i| Layer::load(&w, device, c, naming, i))
                .collect::<Result<_>>()?,
            config: c.clone(),
        })
    }
}

impl<D: Device> Encoder<D> for RotaryBert<D> {
    fn layout(&self) -> EncoderLayout {
        let c = &self.config;
        pre_norm_layout(c.hidden_size, c.attention(), c.intermediate_size)
    }

    fn forward<O: Ops<Device = D>>(&self, ops: &O, batch: &Batch, acts: &[O::Mat]) -> O::Mat {
        let a = PreNormActs::of(acts, batch.tokens());
        ops.embed(batch, &self.embeddings, a.hidden);
        for layer in &self.layers {
            layer.forward(ops, batch, &self.rotary, &a);
        }
        a.hidden
    }
}
