//! Nomic BERT (nomic-embed-text-v1, v1.5) over the backend op set, for any device.
//!
//! Mirrors Hugging Face transformers' `modeling_nomic_bert.py` (NomicBertEmbeddings, NomicBertAttention,
//! NomicBertMLP, NomicBertLayer, NomicBertModel) block for block, which is contrastors' `NomicBertModel` (the
//! checkpoints' own code) under other names, then sentence-transformers' Pooling and Normalize: word and token-type
//! embeddings and their LayerNorm (no position embeddings); post-norm layers as BERT's, whose attention takes
//! rotary positions (GPT-NeoX's halves) on Q and K; a gated MLP (SwiGLU: `down(silu(gate(x)) · up(x))`).
//! Checkpoints come in either naming: contrastors' (`encoder.layers.N.attn.Wqkv`, `mlp.fc11` up, `mlp.fc12` gate,
//! `mlp.fc2`, `norm1`, `norm2`, `emb_ln`), as the Hub serves them, or transformers' (`layers.N.self_attn.q_proj`,
//! …, `post_attention_layernorm`, `post_mlp_layernorm`, `embeddings.LayerNorm`). Differences, exact in real
//! arithmetic: sequences are concatenated without padding, so attention needs no mask; Q, K and V are one
//! projection; residuals are added in the output projections' epilogues.

use super::decoder::QkNormRotary;
use super::{
    layer_norm, pre_norm_layout, stacked_linear, Encoder, Head, ModelConfig, ModelDir,
    NomicBertConfig, PreNormActs, Tensor, Weights,
};
use crate::backend::ops::{
    Activation, AttentionShape, Device, Embedding, Glu, LayerNormWeights, Layout, Ops, PositionIds,
};
use crate::batch::Batch;
use crate::error::{Error, Result};

/// The tensor names of one of the two namings, for layer `i`.
struct Names {
    /// Q, K, V: one fused tensor (contrastors) or three.
    qkv: Vec<(String, usize)>,
    out: String,
    /// Gate then up (the op set's gate reads the first half).
    gate_up: Vec<(String, usize)>,
    down: String,
    attention_norm: String,
    mlp_norm: String,
}

impl Names {
    fn of(contrastors: bool, c: &NomicBertConfig, i: usize) -> Self {
        let (q, f) = (c.num_attention_heads * c.head_dim, c.intermediate_size);
        if contrastors {
            let p = format!("encoder.layers.{i}");
            Names {
                qkv: vec![(format!("{p}.attn.Wqkv"), 3 * q)],
                out: format!("{p}.attn.out_proj"),
                gate_up: vec![(format!("{p}.mlp.fc12"), f), (format!("{p}.mlp.fc11"), f)],
                down: format!("{p}.mlp.fc2"),
                attention_norm: format!("{p}.norm1"),
                mlp_norm: format!("{p}.norm2"),
            }
        } else {
            let p = format!("layers.{i}");
            let attn = |n: &str| (format!("{p}.self_attn.{n}"), q);
            Names {
                qkv: vec![attn("q_proj"), attn("k_proj"), attn("v_proj")],
                out: format!("{p}.self_attn.o_proj"),
                gate_up: vec![
                    (format!("{p}.mlp.gate_proj"), f),
                    (format!("{p}.mlp.up_proj"), f),
                ],
                down: format!("{p}.mlp.down_proj"),
                attention_norm: format!("{p}.post_attention_layernorm"),
                mlp_norm: format!("{p}.post_mlp_layernorm"),
            }
        }
    }
}

/// NomicBertLayer: attention (fused QKV, rotary on Q and K, bidirectional attention, output projection) added to
/// its input and normed; then the gated MLP added to that and normed.
pub struct Layer<D: Device> {
    qkv: D::Linear,
    rotary: QkNormRotary<D>,
    attention: AttentionShape,
    out: D::Linear,
    attention_norm: LayerNormWeights<D>,
    gate_up: D::Linear,
    down: D::Linear,
    mlp_norm: LayerNormWeights<D>,
    gate: Glu,
}

impl<D: Device> Layer<D> {
    pub fn load(
        w: &Weights,
        d: &D,
        c: &NomicBertConfig,
        contrastors: bool,
        i: usize,
    ) -> Result<Self> {
        let (h, f, q) = (
            c.hidden_size,
            c.intermediate_size,
            c.num_attention_heads * c.head_dim,
        );
        let n = Names::of(contrastors, c, i);
        let norm = |name: &str| layer_norm(w, d, name, h, c.layer_norm_eps, true);
        let (fc1_bias, fc2_bias) = c.mlp_biases;
        Ok(Layer {
            qkv: stacked_linear(w, d, &n.qkv, h, c.attention_bias)?,
            rotary: QkNormRotary::rotary(c.attention()),
            attention: c.attention(),
            out: stacked_linear(w, d, &[(n.out, h)], q, c.attention_bias)?,
            attention_norm: norm(&n.attention_norm)?,
            gate_up: stacked_linear(w, d, &n.gate_up, h, fc1_bias)?,
            down: stacked_linear(w, d, &[(n.down, h)], f, fc2_bias)?,
            mlp_norm: norm(&n.mlp_norm)?,
            gate: c.gate,
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
        ops.layer_norm(a.normed, a.hidden, &self.attention_norm);
        ops.linear(a.hidden, &self.gate_up, Activation::None, None, a.gate_up);
        ops.glu(a.gate_up, self.gate, a.act);
        ops.linear(
            a.act,
            &self.down,
            Activation::None,
            Some(a.hidden),
            a.normed,
        );
        ops.layer_norm(a.normed, a.hidden, &self.mlp_norm);
    }
}

/// A sentence-embedding Nomic BERT: embeddings, post-norm rotary layers, pooling and optional normalisation.
pub struct NomicBert<D: Device> {
    pub config: NomicBertConfig,
    head: Head<D>,
    embeddings: Embedding<D>,
    rotary: D::Param,
    layers: Vec<Layer<D>>,
    /// The longest sequence it runs, and the rotary table's length ([`ModelDir::positions`]).
    positions: usize,
}

impl<D: Device> NomicBert<D> {
    pub fn load(dir: &ModelDir, device: &D) -> Result<Self> {
        let ModelConfig::NomicBert(c) = &dir.config else {
            return Err(Error::model(&dir.root, "not a Nomic BERT model directory"));
        };
        let w = Weights::open(&dir.weights_path, "embeddings.word_embeddings.weight")?;
        let contrastors = w.has("emb_ln.weight");
        let h = c.hidden_size;
        // A single text is token type 0: its row is added to every token (none without token types).
        let row = if c.type_vocab_size > 0 {
            let types = w.get(
                "embeddings.token_type_embeddings.weight",
                &[c.type_vocab_size, h],
            )?;
            Some(device.param(Tensor::from_vec(types.data()[..h].to_vec()))?)
        } else {
            None
        };
        let norm = if contrastors {
            "emb_ln"
        } else {
            "embeddings.LayerNorm"
        };
        Ok(NomicBert {
            embeddings: Embedding {
                word: device
                    .param(w.get("embeddings.word_embeddings.weight", &[c.vocab_size, h])?)?,
                position: None,
                position_ids: PositionIds::Index,
                row,
                dim: h,
                norm: Some(layer_norm(&w, device, norm, h, c.layer_norm_eps, true)?),
            },
            rotary: device
                .rotary_table(c.head_dim, c.rope_theta, dir.positions)
                .map_err(|e| {
                    Error::model(
                        &dir.root,
                        format!("the rotary table for {} positions: {e}", dir.positions),
                    )
                })?,
            layers: (0..c.num_hidden_layers)
                .map(|i| Layer::load(&w, device, c, contrastors, i))
                .collect::<Result<_>>()?,
            config: c.clone(),
            head: Head::load(dir, device)?,
            positions: dir.positions,
        })
    }
}

impl<D: Device> Encoder<D> for NomicBert<D> {
    fn layout(&self) -> Layout {
        let c = &self.config;
        pre_norm_layout(
            c.hidden_size,
            c.attention(),
            c.intermediate_size,
            self.positions,
        )
    }

    fn vocab_size(&self) -> usize {
        self.config.vocab_size
    }

    fn head(&self) -> &Head<D> {
        &self.head
    }

    fn forward<O: Ops<Device = D>>(&self, ops: &O, batch: &Batch, acts: &[O::Mat], out: O::Mat) {
        let a = PreNormActs::of(acts, batch.tokens());
        ops.embed(batch, &self.embeddings, a.hidden);
        for layer in &self.layers {
            layer.forward(ops, batch, &self.rotary, &a);
        }
        self.head.forward(ops, batch, a.hidden, &acts[6..], out);
    }
}
