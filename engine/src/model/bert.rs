//! BERT encoder over the backend op set ([`crate::backend::ops`]), for any device.
//!
//! Mirrors Hugging Face transformers' `modeling_bert.py` (BertEmbeddings, BertSelfAttention, BertSelfOutput,
//! BertIntermediate, BertOutput, BertLayer) block for block, and sentence-transformers' Pooling and Normalize
//! modules after it. The same network runs RoBERTa and XLM-RoBERTa (`modeling_roberta.py`: positions after the
//! padding id), MPNet (`modeling_mpnet.py`: those positions, no token types, other tensor names, and
//! MPNetEncoder's relative position bias on every layer's attention scores) and DistilBERT
//! (`modeling_distilbert.py`: no token types, other tensor names), ALBERT (`modeling_albert.py`: AlbertEmbeddings
//! narrower than the layers and AlbertTransformer's `embedding_hidden_mapping_in` to their width, AlbertLayer's
//! names, layers sharing one set of weights per AlbertLayerGroup) and ELECTRA (`modeling_electra.py`: BERT's layers
//! behind ALBERT-style narrower embeddings and ElectraModel's `embeddings_project`): [`BertFamily`]. And JinaBERT
//! (jina-embeddings-v2, Jina's `jina-bert-implementation`): BERT without a position table, symmetric ALiBi biases
//! on the attention scores, and a GeGLU feed-forward (`mlp.gated_layers` without bias, the GELU of its first half
//! times its second, `mlp.wo`, `mlp.layernorm`); and Jina's `jina-bert-v2-qk-post-norm` (jina-embeddings-v2-base-code,
//! -de, -es, -zh): LayerNorms on the projected Q and K, the attention block's output added to the layer's input and
//! normed once more (`layer_norm_1`) before the GeGLU (`mlp.up_gated_layer`, the GELU of its second half times its
//! first, `mlp.down_layer`, `layer_norm_2`): `QkPostNorm`. And DeBERTa v2 and v3 (`modeling_deberta_v2.py`:
//! DisentangledSelfAttention's `query_proj`, `key_proj`, `value_proj`; each score also takes the query against
//! its key's relative position and the key against the query's, through each layer's projections of the encoder's
//! relative embeddings, `super::disentangled`; v3 without a position table or token types, v2's narrower
//! embeddings projected by `embed_proj` before their LayerNorm). Differences, all exact in real arithmetic: sequences are
//! concatenated without padding, so
//! attention runs per sequence and needs no mask; Q, K and V are one fused projection; the residual of each
//! block is added in its output projection's epilogue, before the LayerNorm.

use super::{
    disentangled::{position_projections, relative_embeddings},
    layer_norm,
    relative::{alibi_bias, relative_bias},
    stacked_linear, BertConfig, BertFamily, Encoder, EncoderLayout, ModelConfig, ModelDir, Weights,
};
use crate::backend::ops::{
    Activation, AttentionShape, Device, Embedding, Glu, LayerNormWeights, Matrix, Ops,
    PositionProjections, RelativeBias, ScoreBias, Slot,
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
        let names: Vec<_> = prefixes.iter().map(|p| (p.to_string(), out_dim)).collect();
        Ok(Linear {
            inner: stacked_linear(w, d, &names, in_dim, true)?,
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

/// BertEmbeddings: word + absolute position (none with ALiBi, nor in DeBERTa v3) + token type (always type 0 for
/// single sentences; MPNet has none), then LayerNorm, as one op; then ALBERT's and ELECTRA's projection to the
/// layers' width (DebertaV2Embeddings: the projection, then the LayerNorm).
pub struct Embeddings<D: Device> {
    table: Embedding<D>,
    /// AlbertTransformer's `embedding_hidden_mapping_in`, ElectraModel's `embeddings_project`, DeBERTa's
    /// `embed_proj` (where the widths differ).
    projection: Option<Linear<D>>,
    /// DeBERTa's LayerNorm, which comes after its projection (ALBERT's and ELECTRA's come before theirs).
    projected_norm: Option<LayerNormWeights<D>>,
}

impl<D: Device> Embeddings<D> {
    pub fn load(w: &Weights, d: &D, c: &BertConfig) -> Result<Self> {
        // The embeddings' own width, and the layers'.
        let (h, hidden) = (c.embedding_size(), c.hidden_size);
        // The projection's tensors, and whether it has a bias (DeBERTa's `embed_proj` has none).
        let projection = match c.family() {
            BertFamily::Albert => Some(("encoder.embedding_hidden_mapping_in", true)),
            BertFamily::Electra if h != hidden => Some(("embeddings_project", true)),
            BertFamily::Deberta if h != hidden => Some(("embeddings.embed_proj", false)),
            _ => None,
        };
        let types = match c.family() {
            BertFamily::Mpnet | BertFamily::DistilBert => 0,
            BertFamily::Bert
            | BertFamily::Roberta
            | BertFamily::Albert
            | BertFamily::Electra
            | BertFamily::Deberta => c.type_vocab_size,
        };
        let (row, type1_row) = super::token_type_rows(w, d, types, h)?;
        let norm_after = c.family() == BertFamily::Deberta && projection.is_some();
        let norm = |width| layer_norm(w, d, "embeddings.LayerNorm", width, c.norm_eps(), true);
        Ok(Embeddings {
            table: Embedding {
                word: d.param(w.get("embeddings.word_embeddings.weight", &[c.vocab_size, h])?)?,
                position: if c.position_table() {
                    Some(d.param(w.get(
                        "embeddings.position_embeddings.weight",
                        &[c.max_position_embeddings, h],
                    )?)?)
                } else {
                    None
                },
                position_ids: c.position_ids(),
                row,
                type1_row,
                dim: h,
                norm: (!norm_after).then(|| norm(h)).transpose()?,
            },
            projected_norm: norm_after.then(|| norm(hidden)).transpose()?,
            projection: projection
                .map(|(name, bias)| -> Result<_> {
                    let inner = stacked_linear(w, d, &[(name.into(), hidden)], h, bias)?;
                    Ok(Linear { inner })
                })
                .transpose()?,
        })
    }

    /// Into `x`, through `narrow` (the embeddings' own width, [`Bert::layout`]'s slot) where they are projected.
    fn forward<O: Ops<Device = D>>(
        &self,
        ops: &O,
        batch: &Batch,
        narrow: Option<O::Mat>,
        x: O::Mat,
    ) {
        match &self.projection {
            Some(p) => {
                let narrow = narrow.expect("a projected embedding's layout has its slot");
                ops.embed(batch, &self.table, narrow);
                p.forward(ops, narrow, Activation::None, None, x);
                if let Some(norm) = &self.projected_norm {
                    ops.layer_norm(x, None, x, norm);
                }
            }
            None => ops.embed(batch, &self.table, x),
        }
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
    /// JinaBERT's gated projection (GELU's input and the values it gates), beside `inter`.
    gate_up: Option<M>,
    /// ALBERT's and ELECTRA's embeddings before their projection, in the memory of QKV (not yet live).
    narrow: Option<M>,
}

/// The feed-forward block: BertIntermediate + BertOutput (AlbertLayer's `ffn`, `ffn_output`) with the config's
/// GELU, or JinaBERT's GeGLU (`gated_layers`, `wo`), whose GELU Jina's code fixes as the exact one.
enum FeedForward<D: Device> {
    Bert {
        intermediate: Linear<D>,
        output: Linear<D>,
        act: Activation,
    },
    Geglu {
        gated: D::Linear,
        wo: Linear<D>,
    },
}

/// What Jina's `jina-bert-v2-qk-post-norm` layer adds to JinaBERT's (its `JinaBertSelfAttention` and
/// `JinaBertLayer`): a LayerNorm on the projected Q and one on K, each over all heads together, and `layer_norm_1`
/// on the attention block's output plus the layer's input.
struct QkPostNorm<D: Device> {
    q: LayerNormWeights<D>,
    k: LayerNormWeights<D>,
    attention_residual: LayerNormWeights<D>,
}

/// One BertLayer: self-attention (BertSelfAttention + BertSelfOutput), then the feed-forward block
/// (BertIntermediate + BertOutput), each closed by residual + LayerNorm (post-norm, as BERT).
pub struct Layer<D: Device> {
    qkv: Linear<D>,
    /// DeBERTa's projections of the relative position embeddings, which its attention scores read.
    positions: Option<PositionProjections<D>>,
    qk_post_norm: Option<QkPostNorm<D>>,
    attn_out: Linear<D>,
    attn_norm: LayerNormWeights<D>,
    feed_forward: FeedForward<D>,
    out_norm: LayerNormWeights<D>,
    attention: AttentionShape,
}

impl<D: Device> Layer<D> {
    /// The layer whose tensors start `block` (`encoder.layer.3`); `qk_post_norm`: the checkpoint is Jina's
    /// `jina-bert-v2-qk-post-norm` (`QkPostNorm`); `relative`: DeBERTa's relative position embeddings.
    pub fn load(
        w: &Weights,
        d: &D,
        c: &BertConfig,
        block: &str,
        (qk_post_norm, relative): (bool, Option<&[f32]>),
    ) -> Result<Self> {
        let (h, f) = (c.hidden_size, c.intermediate_size);
        let n = LayerNames::of(c, block, qk_post_norm);
        let eps = c.norm_eps();
        let feed_forward = if qk_post_norm {
            // `up_gated_layer`'s first half is the values, its second the gate: swapped, for the gate op's order.
            let t = w.get(&format!("{}.weight", n.intermediate), &[2 * f, h])?;
            let (up, gate) = t.data().split_at(f * h);
            FeedForward::Geglu {
                gated: d.linear(&[gate, up].concat(), None, 2 * f, h)?,
                wo: Linear::load(w, d, &n.output, h, f)?,
            }
        } else if c.gated_feed_forward() {
            FeedForward::Geglu {
                gated: stacked_linear(w, d, &[(n.intermediate, 2 * f)], h, false)?,
                wo: Linear::load(w, d, &n.output, h, f)?,
            }
        } else {
            FeedForward::Bert {
                intermediate: Linear::load(w, d, &n.intermediate, f, h)?,
                output: Linear::load(w, d, &n.output, h, f)?,
                act: c.activation(),
            }
        };
        let qk_post_norm = match &n.qk_post_norm {
            Some([q, k, residual]) => Some(QkPostNorm {
                q: layer_norm(w, d, q, h, eps, true)?,
                k: layer_norm(w, d, k, h, eps, true)?,
                attention_residual: layer_norm(w, d, residual, h, eps, true)?,
            }),
            None => None,
        };
        let positions = match (&c.deberta, relative) {
            (Some(deberta), Some(table)) => {
                Some(position_projections(w, d, deberta, block, table, h)?)
            }
            _ => None,
        };
        Ok(Layer {
            qkv: Linear::load_stacked(w, d, &n.qkv.each_ref().map(String::as_str), h, h)?,
            positions,
            qk_post_norm,
            attn_out: Linear::load(w, d, &n.attn_out, h, h)?,
            attn_norm: layer_norm(w, d, &n.attn_norm, h, eps, true)?,
            feed_forward,
            out_norm: layer_norm(w, d, &n.out_norm, h, eps, true)?,
            attention: c.attention(),
        })
    }

    /// The layer's input is in `a.hidden` and its output lands there; `bias` is MPNet's relative position bias
    /// or JinaBERT's ALiBi (DeBERTa's layers read their own position projections).
    fn forward<O: Ops<Device = D>>(
        &self,
        ops: &O,
        batch: &Batch,
        bias: Option<&RelativeBias<D>>,
        a: &Acts<O::Mat>,
    ) {
        self.qkv
            .forward(ops, a.hidden, Activation::None, None, a.qkv);
        if let Some(p) = &self.qk_post_norm {
            let h = self.attention.heads * self.attention.head_dim;
            let (q, k) = (a.qkv.columns(0..h), a.qkv.columns(h..2 * h));
            ops.layer_norm(q, None, q, &p.q);
            ops.layer_norm(k, None, k, &p.k);
        }
        let bias = match &self.positions {
            Some(p) => Some(ScoreBias::Disentangled(p)),
            None => bias.map(ScoreBias::Relative),
        };
        ops.attention(batch, a.qkv, self.attention, bias, a.ctx);
        self.attn_out
            .forward(ops, a.ctx, Activation::None, Some(a.hidden), a.tmp);
        ops.layer_norm(a.tmp, None, a.tmp, &self.attn_norm);
        if let Some(p) = &self.qk_post_norm {
            ops.layer_norm(a.tmp, Some(a.hidden), a.tmp, &p.attention_residual);
        }
        let output = match &self.feed_forward {
            FeedForward::Bert {
                intermediate,
                output,
                act,
            } => {
                intermediate.forward(ops, a.tmp, *act, None, a.inter);
                output
            }
            FeedForward::Geglu { gated, wo } => {
                let gate_up = a.gate_up.expect("the GeGLU layout has a gate slot");
                ops.linear(a.tmp, gated, Activation::None, None, gate_up);
                ops.glu(gate_up, Glu::Gelu, a.inter);
                wo
            }
        };
        output.forward(ops, a.inter, Activation::None, Some(a.tmp), a.hidden);
        ops.layer_norm(a.hidden, None, a.hidden, &self.out_norm);
    }
}

/// The tensors of the layer at `block` in each family's checkpoints.
struct LayerNames {
    qkv: [String; 3],
    /// Jina's qk-post-norm LayerNorms: on Q, on K, and on the attention block's output plus the layer's input.
    qk_post_norm: Option<[String; 3]>,
    attn_out: String,
    attn_norm: String,
    intermediate: String,
    output: String,
    out_norm: String,
}

impl LayerNames {
    fn of(c: &BertConfig, block: &str, qk_post_norm: bool) -> Self {
        // Q, K, V, the attention's output projection and LayerNorm, the feed-forward's two projections and its
        // LayerNorm.
        let mut names = match c.family() {
            // BertSelfAttention + BertSelfOutput, BertIntermediate + BertOutput.
            BertFamily::Bert | BertFamily::Roberta | BertFamily::Electra => [
                "attention.self.query",
                "attention.self.key",
                "attention.self.value",
                "attention.output.dense",
                "attention.output.LayerNorm",
                "intermediate.dense",
                "output.dense",
                "output.LayerNorm",
            ],
            // DisentangledSelfAttention's projections, then BERT's names.
            BertFamily::Deberta => [
                "attention.self.query_proj",
                "attention.self.key_proj",
                "attention.self.value_proj",
                "attention.output.dense",
                "attention.output.LayerNorm",
                "intermediate.dense",
                "output.dense",
                "output.LayerNorm",
            ],
            // MPNetAttention's `attn` (q, k, v, o) and LayerNorm; BERT's feed-forward.
            BertFamily::Mpnet => [
                "attention.attn.q",
                "attention.attn.k",
                "attention.attn.v",
                "attention.attn.o",
                "attention.LayerNorm",
                "intermediate.dense",
                "output.dense",
                "output.LayerNorm",
            ],
            // DistilBERT's TransformerBlock: MultiHeadSelfAttention, sa_layer_norm, FFN, output_layer_norm.
            BertFamily::DistilBert => [
                "attention.q_lin",
                "attention.k_lin",
                "attention.v_lin",
                "attention.out_lin",
                "sa_layer_norm",
                "ffn.lin1",
                "ffn.lin2",
                "output_layer_norm",
            ],
            // AlbertAttention (its own dense and LayerNorm), AlbertLayer's `ffn`, `ffn_output` and norm.
            BertFamily::Albert => [
                "attention.query",
                "attention.key",
                "attention.value",
                "attention.dense",
                "attention.LayerNorm",
                "ffn",
                "ffn_output",
                "full_layer_layer_norm",
            ],
        };
        if qk_post_norm {
            names[5..].copy_from_slice(&["mlp.up_gated_layer", "mlp.down_layer", "layer_norm_2"]);
        } else if c.gated_feed_forward() {
            // JinaBERT's GLUMLP after BERT's attention.
            names[5..].copy_from_slice(&["mlp.gated_layers", "mlp.wo", "mlp.layernorm"]);
        }
        let name = |n: &str| format!("{block}.{n}");
        let [q, k, v, attn_out, attn_norm, intermediate, output, out_norm] = names.map(name);
        LayerNames {
            qkv: [q, k, v],
            qk_post_norm: qk_post_norm.then(|| {
                [
                    "attention.self.layer_norm_q",
                    "attention.self.layer_norm_k",
                    "layer_norm_1",
                ]
                .map(name)
            }),
            attn_out,
            attn_norm,
            intermediate,
            output,
            out_norm,
        }
    }
}

/// BERT as an embedding model's network: embeddings and encoder layers (the head is [`super::Model`]'s).
pub struct Bert<D: Device> {
    pub config: BertConfig,
    embeddings: Embeddings<D>,
    /// Each set of layer weights once: one per layer, or ALBERT's groups' (each run by several layers).
    layers: Vec<Layer<D>>,
    /// The layers in the order they run, as indices into `layers`.
    order: Vec<usize>,
    /// MPNet's relative position bias or JinaBERT's ALiBi, shared by every layer.
    bias: Option<RelativeBias<D>>,
}

impl<D: Device> Bert<D> {
    /// Loads the weights and hands them to `device` in its own form.
    pub fn load(dir: &ModelDir, device: &D) -> Result<Self> {
        let ModelConfig::Bert(c) = &dir.config else {
            return Err(Error::model(&dir.root, "not a BERT model directory"));
        };
        let w = Weights::open(&dir.weights_path, "embeddings.word_embeddings.weight")?;
        // jina-embeddings-v2's code, German, Spanish and Chinese models run another JinaBERT (Jina's
        // `jina-bert-v2-qk-post-norm`), told apart by its tensors (its config.json is JinaBERT's).
        let qk_post_norm = w.has("encoder.layer.0.attention.self.layer_norm_q.weight");
        if qk_post_norm && !(c.alibi() && c.gated_feed_forward()) {
            return Err(Error::model(
                w.path(),
                "JinaBERT's qk-post-norm layers are supported with ALiBi and the GeGLU feed-forward \
                 (position_embedding_type \"alibi\", feed_forward_type \"geglu\"), as Jina's checkpoints have them",
            ));
        }
        // Loaded one set at a time, so a config naming more layers than the checkpoint has fails at the first
        // missing one.
        let relative = relative_embeddings(&w, c)?;
        let layers = (0..c.layer_sets())
            .map(|k| {
                let options = (qk_post_norm, relative.as_deref());
                Layer::load(&w, device, c, &layer_block(c, k), options)
            })
            .collect::<Result<_>>()?;
        Ok(Bert {
            embeddings: Embeddings::load(&w, device, c)?,
            layers,
            order: c.layer_order(),
            bias: match c.family() {
                BertFamily::Bert if c.alibi() => Some(alibi_bias(
                    device,
                    c.num_attention_heads,
                    dir.positions.max(1),
                )?),
                BertFamily::Mpnet => Some(relative_bias(
                    &w,
                    device,
                    "encoder.relative_attention_bias.weight",
                    (c.relative_attention_num_buckets, c.num_attention_heads),
                    // MPNet's attention calls the bucket function with its defaults, whatever the config says.
                    (32, 128),
                    dir.positions.max(1),
                )?),
                BertFamily::Bert
                | BertFamily::Roberta
                | BertFamily::DistilBert
                | BertFamily::Albert
                | BertFamily::Electra
                | BertFamily::Deberta => None,
            },
            config: c.clone(),
        })
    }
}

/// Where set `k` of the layer weights ([`BertConfig::layer_sets`]) starts among the tensors: `encoder.layer.{k}`
/// (`transformer.layer.{k}`: DistilBERT's), or ALBERT's group `k / inner_group_num`'s layer `k % inner_group_num`.
fn layer_block(c: &BertConfig, k: usize) -> String {
    match c.family() {
        BertFamily::Albert => {
            let inner = c.inner_group_num;
            format!(
                "encoder.albert_layer_groups.{}.albert_layers.{}",
                k / inner,
                k % inner
            )
        }
        BertFamily::DistilBert => format!("transformer.layer.{k}"),
        _ => format!("encoder.layer.{k}"),
    }
}

impl<D: Device> Encoder<D> for Bert<D> {
    /// Hidden states and the block's intermediate each in a region of their own; QKV and the attention context
    /// share a third with the feed-forward activations, which are only live once both are dead (JinaBERT's
    /// gated projection beside them), and with ALBERT's and ELECTRA's embeddings before their projection, dead
    /// before the first layer.
    fn layout(&self) -> EncoderLayout {
        let (h, f) = (self.config.hidden_size, self.config.intermediate_size);
        let slot = Slot::new;
        let mut slots = vec![
            slot(0, 0, h, false),
            slot(1, 0, h, false),
            slot(2, 0, 3 * h, false),
            slot(2, 3 * h, h, false),
            // The GELU's (or the gate's) output, read only by the output projection.
            slot(2, 0, f, true),
        ];
        if self.config.gated_feed_forward() {
            // Written by the gated projection, read only by the gate (of the gate's output's precision).
            slots.push(slot(2, f, 2 * f, true));
        }
        if self.embeddings.projection.is_some() {
            slots.push(slot(2, 0, self.config.embedding_size(), false));
        }
        EncoderLayout {
            slots,
            attention: Some(self.config.attention()),
        }
    }

    // Never inlined: `bench gate counts` collects instructions inside this function (one call per pass).
    #[inline(never)]
    fn forward<O: Ops<Device = D>>(&self, ops: &O, batch: &Batch, acts: &[O::Mat]) -> O::Mat {
        let t = batch.tokens();
        let Some([hidden, tmp, qkv, ctx, inter]) = acts.first_chunk() else {
            panic!("BERT's layout has five slots, got {}", acts.len());
        };
        // The network's optional slots after its five, in the layout's order (the head's slots follow them).
        let gated = self.config.gated_feed_forward();
        let optional =
            |present: bool, at: usize| present.then(|| acts.get(at).map(|m| m.top(t))).flatten();
        let a = Acts {
            hidden: hidden.top(t),
            tmp: tmp.top(t),
            qkv: qkv.top(t),
            ctx: ctx.top(t),
            inter: inter.top(t),
            gate_up: optional(gated, 5),
            narrow: optional(self.embeddings.projection.is_some(), 5 + usize::from(gated)),
        };
        self.embeddings.forward(ops, batch, a.narrow, a.hidden);
        for &i in &self.order {
            self.layers[i].forward(ops, batch, self.bias.as_ref(), &a);
        }
        a.hidden
    }
}
