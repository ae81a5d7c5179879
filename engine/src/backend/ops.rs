//! The op set an architecture is written against, once, whatever the device.
//!
//! Like candle's models over `Tensor` or llama.cpp's over ggml, `model/` writes each architecture top to bottom as
//! calls to [`Ops`]; a backend implements the op set on its device. Two halves:
//!
//! - [`Device`]: load time. It turns host weights into the device's own form: a [`Device::Linear`] (prepacked for
//!   its GEMM, bias included) and a [`Device::Param`] (norm weights, embedding tables, rotary tables).
//! - [`Ops`]: run time, one forward pass. Every op reads and writes [`Matrix`] views of activation memory that
//!   the backend owns and carves by the architecture's [`Layout`]; the architecture never allocates.
//!
//! A backend may call an architecture's forward from several threads at once (the CPU backend's plans run it on
//! every thread of a team): the ops split their work among the callers, so the architecture code stays a plain
//! sequence of operations.

use std::ops::Range;

use crate::batch::Batch;
use crate::error::Result;
use crate::model::Pooling;
use crate::model::Tensor;

/// What an architecture's linear layer applies on the way out of its GEMM, after the bias.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Activation {
    #[default]
    None,
    /// Exact (erf) GELU, BERT's `hidden_act = "gelu"`.
    Gelu,
    /// GELU's tanh approximation, ALBERT's `hidden_act = "gelu_new"` (transformers' `gelu_pytorch_tanh` too).
    GeluTanh,
    /// tanh, sentence-transformers' Dense default (LaBSE's, distiluse's).
    Tanh,
    /// `max(x, 0)`, T5's feed-forward (`feed_forward_proj = "relu"`).
    Relu,
    /// `log(1 + max(x, 0))`, SPLADE's term weight (sentence-transformers' SpladePooling, `relu`): monotone, so a
    /// max over tokens after it is the max before it, transformed.
    Log1pRelu,
    /// `log(1 + log(1 + max(x, 0)))`, SpladePooling's `log1p_relu` (opensearch-neural-sparse's models).
    Log1pLog1pRelu,
}

/// The activation of a gated linear unit's gate ([`Ops::glu`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Glu {
    /// SwiGLU (Qwen3's MLP): `silu(g) = g / (1 + e⁻ᵍ)`.
    Silu,
    /// GeGLU with the exact (erf) GELU (ModernBERT's MLP).
    Gelu,
    /// GeGLU with GELU's tanh approximation (Gemma's `gelu_pytorch_tanh`).
    GeluTanh,
}

/// The attention of one layer: query heads, key/value heads (fewer for grouped-query attention), head width,
/// whether a token sees only the tokens before it (decoders) or the whole sequence (encoders), how far it sees,
/// and what is done to a score `q·k` before its softmax: `cap · tanh(scale · q·k / cap)` with a soft cap, else
/// `scale · q·k`, then any relative position bias added.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AttentionShape {
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub causal: bool,
    /// A sliding window (ModernBERT's local layers): a token sees only the tokens at most this many positions
    /// from it, on either side (before it only, when causal). `None`: the whole sequence.
    pub window: Option<usize>,
    /// The scores' scale: `1/√head_dim` ([`AttentionShape::new`]) but for Gemma's `query_pre_attn_scalar^-½`
    /// and T5's 1 (T5 folds it into its initialisation).
    pub scale: f32,
    /// Gemma 2's `attn_logit_softcapping`: scaled scores squashed into `(−cap, cap)`. Positive and finite where
    /// set ([`AttentionShape::check_softcap`]).
    pub softcap: Option<f32>,
    /// DeBERTa's disentangled attention: each score also takes its relative position's terms, from the layer's
    /// [`PositionProjections`] (the attention's bias, [`ScoreBias::Disentangled`]).
    pub disentangled: Option<Disentangled>,
}

// Neither `scale` nor `softcap` is ever NaN (configs make them from checked numbers), so equality is an
// equivalence.
impl Eq for AttentionShape {}

impl AttentionShape {
    /// Full bidirectional attention of `heads` query heads over `kv_heads` key/value heads `head_dim` wide, its
    /// scores scaled by `1/√head_dim` and not capped: what the other fields' defaults are.
    pub fn new(heads: usize, kv_heads: usize, head_dim: usize) -> Self {
        AttentionShape {
            heads,
            kv_heads,
            head_dim,
            causal: false,
            window: None,
            scale: 1.0 / (head_dim as f32).sqrt(),
            softcap: None,
            disentangled: None,
        }
    }

    /// Panics on a soft cap that is not positive and finite: the backends' kernels would divide by it (a config
    /// reader refuses such a cap; this is what each `attention` checks before launching).
    pub fn check_softcap(&self) {
        assert!(
            self.softcap.is_none_or(|c| c > 0.0 && c.is_finite()),
            "attention: soft cap {:?} is not positive and finite",
            self.softcap
        );
    }

    /// Columns of the fused `[Q | K | V]` projection this attention reads.
    pub fn qkv_width(&self) -> usize {
        (self.heads + 2 * self.kv_heads) * self.head_dim
    }

    /// The keys query `q` of a sequence sees, of the sequence's first `keys` tokens (all of them, but for a query's
    /// unattended expansion: [`crate::Batch::keys`]). Both ends ascend with `q`; never empty where `q < keys` (a
    /// token sees itself), nor past it without a window or where `q` is within the window of key `keys − 1`.
    pub fn keys(&self, q: usize, keys: usize) -> Range<usize> {
        let end = if self.causal { (q + 1).min(keys) } else { keys };
        match self.window {
            Some(w) => {
                let end = end.min(q.saturating_add(w).saturating_add(1));
                q.saturating_sub(w).min(end)..end
            }
            None => 0..end,
        }
    }
}

/// DeBERTa's disentangled attention (transformers' `DisentangledSelfAttention`, DeBERTa v2 and v3): the score of
/// query `i` against key `j` also takes `q_i · Kᵣ` (content to position, `c2p`) and `k_j · Qᵣ` (position to
/// content, `p2c`), where `r` is [`Disentangled::row`] of their relative position `i − j` and `Kᵣ`, `Qᵣ` rows of
/// the layer's key and query projections of the relative position embeddings ([`PositionProjections`]); every
/// term is scaled as one ([`AttentionShape::scale`]: `1/√(head_dim · (1 + terms))`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Disentangled {
    /// `att_span`: the projections have `2·span` rows, relative position 0 at row `span`.
    pub span: usize,
    /// `position_buckets` and `max_relative_positions`, where relative positions are log-bucketed
    /// (`position_buckets > 0`: DeBERTa v3's 256 and 512).
    pub buckets: Option<(usize, usize)>,
    /// Whether the scores take the content-to-position term (`"c2p"` in `pos_att_type`).
    pub c2p: bool,
    /// Whether the scores take the position-to-content term (`"p2c"`).
    pub p2c: bool,
}

impl Disentangled {
    /// The row of the position projections that query `i` and key `j` read, for `delta = i − j`: its bucket
    /// (transformers' `make_log_bucket_position`, in f32 as torch computes it) offset by the span and clamped to
    /// the table. The same row serves both terms (`p2c` reads `−bucket(j − i)`, and buckets are odd functions).
    pub fn row(&self, delta: i64) -> usize {
        let bucket = match self.buckets {
            Some((size, max_position)) => {
                let mid = (size / 2) as i64;
                let abs = delta.abs();
                if abs <= mid {
                    delta
                } else {
                    let base = ((max_position as f64 - 1.0) / mid as f64) as f32;
                    let log = ((abs as f32 / mid as f32).ln() / base.ln() * (mid - 1) as f32)
                        .ceil()
                        + mid as f32;
                    log as i64 * delta.signum()
                }
            }
            None => delta,
        };
        let span = self.span as i64;
        (bucket + span).clamp(0, 2 * span - 1) as usize
    }
}

/// One activation matrix of a forward pass: `width` floats per token, at `offset` floats per token into memory
/// region `region`. Matrices of one region that are live at the same time must not overlap; matrices that are
/// never live together may (the architecture reuses memory by liveness).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot {
    pub region: usize,
    pub offset: usize,
    pub width: usize,
    /// Only [`Ops::linear`] (as its input, or as an output with no residual) and [`Ops::glu`] touch this
    /// matrix: a backend may hold it in its GEMMs' operand precision instead of f32, within the slot's own memory
    /// (the CUDA backend's bf16 feed-forward intermediate, [`crate::config::GpuIntermediate`]).
    pub operand: bool,
}

impl Slot {
    pub const fn new(region: usize, offset: usize, width: usize, operand: bool) -> Self {
        Slot {
            region,
            offset,
            width,
            operand,
        }
    }
}

/// The activation memory an architecture needs, declared once; the backend allocates it (an arena per plan on
/// the CPU, device buffers on a GPU) and hands the forward pass one [`Matrix`] per slot, in the same order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    pub slots: Vec<Slot>,
    /// The attention every layer runs (backends size their attention scratch by it); none for a network without
    /// attention (a static embedding).
    pub attention: Option<AttentionShape>,
    /// The longest sequence the model takes.
    pub max_positions: usize,
}

impl Layout {
    /// Floats per token of each region: the furthest any of its slots reaches.
    pub fn region_widths(&self) -> Vec<usize> {
        let regions = self.slots.iter().map(|s| s.region + 1).max().unwrap_or(0);
        let mut widths = vec![0; regions];
        for s in &self.slots {
            widths[s.region] = widths[s.region].max(s.offset + s.width);
        }
        widths
    }
}

/// A view of a row-major activation matrix in a backend's memory. Views are cheap copies; making one never
/// touches memory, and ops check that what they are given fits.
pub trait Matrix: Copy + Send + Sync {
    fn rows(&self) -> usize;
    fn cols(&self) -> usize;
    /// Columns `range` of the same rows (same row stride).
    fn columns(self, range: Range<usize>) -> Self;
    /// The first `rows` rows.
    fn top(self, rows: usize) -> Self;
}

/// Checks a linear layer's weights against its shape (`weight` `[out, inp]`, `bias` `[out]`): what every
/// [`Device::linear`] does before packing.
pub fn check_linear(weight: &[f32], bias: Option<&[f32]>, out: usize, inp: usize) -> Result<()> {
    if out.checked_mul(inp) != Some(weight.len()) || bias.is_some_and(|b| b.len() != out) {
        return Err(crate::error::Error::Device(format!(
            "a {out}×{inp} linear layer got {} weights and {:?} biases",
            weight.len(),
            bias.map(<[f32]>::len)
        )));
    }
    Ok(())
}

/// Load time: weights in the device's own form.
pub trait Device: Send + Sync + 'static {
    /// A linear layer `y = x · Wᵀ + b`, prepacked for the device's GEMM.
    type Linear: Send + Sync;
    /// A parameter kept as it is: norm weights, embedding and rotary tables.
    type Param: Send + Sync;

    /// `weight` is `[out, inp]` (PyTorch's layout), `bias` `[out]` or absent.
    fn linear(
        &self,
        weight: &[f32],
        bias: Option<&[f32]>,
        out: usize,
        inp: usize,
    ) -> Result<Self::Linear>;
    fn param(&self, t: Tensor) -> Result<Self::Param>;
    /// DeBERTa's position projections ([`PositionProjections`]) as the device keeps them; a device whose attention
    /// does not take them refuses here, at load.
    fn position_projection(&self, t: Tensor) -> Result<Self::Param> {
        self.param(t)
    }
    /// Rotary embedding's cos/sin table for positions `0..positions` and heads twice as wide as `frequencies`
    /// (rotate-half layout, as Hugging Face's `apply_rotary_pos_emb`): at position `p`, `cos(p·f)` then `sin(p·f)`
    /// for each frequency, both times `attention_factor` (1, or YaRN's).
    fn rotary_table(
        &self,
        frequencies: &[f64],
        attention_factor: f64,
        positions: usize,
    ) -> Result<Self::Param> {
        let head_dim = 2 * frequencies.len();
        // Fallible: the length comes from a model's config, and an absurd one must be an error, not an abort.
        let mut table = Vec::new();
        positions
            .checked_mul(head_dim)
            .and_then(|n| table.try_reserve_exact(n).ok())
            .ok_or_else(|| {
                crate::error::Error::Device(format!(
                    "cannot allocate {positions} x {head_dim} floats"
                ))
            })?;
        for p in 0..positions {
            let angles = frequencies.iter().map(|f| p as f64 * f);
            table.extend(angles.clone().map(|a| (a.cos() * attention_factor) as f32));
            table.extend(angles.map(|a| (a.sin() * attention_factor) as f32));
        }
        self.param(Tensor::from_vec(table))
    }
}

/// Which row of the position table a token reads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PositionIds {
    /// Its index in its sequence (BERT).
    #[default]
    Index,
    /// RoBERTa's (transformers' `create_position_ids_from_input_ids`): `pad + 1` plus the number of tokens before
    /// it in its sequence that are not `pad`; a `pad` token reads row `pad`. A `pad` id inside a text (its tokenizer
    /// may make one of `"<pad>"`) so neither advances the count nor reads a position of its own.
    AfterPadding { pad: u32 },
}

impl PositionIds {
    /// The row token `i` of sequence `seq` reads.
    pub fn of(self, seq: &[u32], i: usize) -> usize {
        match self {
            PositionIds::Index => i,
            PositionIds::AfterPadding { pad } if seq[i] == pad => pad as usize,
            PositionIds::AfterPadding { pad } => {
                let pads = seq[..i].iter().filter(|&&id| id == pad).count();
                pad as usize + 1 + i - pads
            }
        }
    }

    /// Rows a position table needs for sequences of up to `len` tokens.
    pub fn rows_for(self, len: usize) -> usize {
        match self {
            PositionIds::Index => len,
            PositionIds::AfterPadding { pad } => pad as usize + 1 + len,
        }
    }
}

/// Token embeddings: a word table, absolute positions (BERT's, RoBERTa's) or none (rotary models), a row added
/// to every token (BERT's token type 0) or none, and a LayerNorm each token's row then takes (BERT's) or none.
pub struct Embedding<D: Device> {
    pub word: D::Param,
    pub position: Option<D::Param>,
    /// Which row of `position` each token reads.
    pub position_ids: PositionIds,
    /// Token type 0's row (BERT's `token_type_embeddings[0]`), added to every token's.
    pub row: Option<D::Param>,
    /// Token type 1's row, added in place of `row` to a pair's tokens from [`Batch::type1_from`] on; `None` for
    /// a model with one token type (every token reads `row`).
    pub type1_row: Option<D::Param>,
    pub dim: usize,
    pub norm: Option<LayerNormWeights<D>>,
}

/// A bias every attention score takes by its head and the distance from its query to its key (MPNet's relative
/// position bias): head `h`'s score of query `i` against key `j` of a sequence adds
/// `table[h · (2·reach − 1) + (j − i) + reach − 1]`; sequences are at most `reach` tokens.
pub struct RelativeBias<D: Device> {
    pub table: D::Param,
    pub reach: usize,
}

impl<D: Device> RelativeBias<D> {
    /// Floats per head in the table.
    pub fn row_len(&self) -> usize {
        2 * self.reach - 1
    }
}

/// A layer's projections of DeBERTa's relative position embeddings ([`Disentangled`]): `2·span` rows of
/// `heads · head_dim`, the key projection's (for `c2p`) and the query projection's (for `p2c`), biases included.
pub struct PositionProjections<D: Device> {
    pub key: Option<D::Param>,
    pub query: Option<D::Param>,
}

/// What an attention's scores take besides `q·k` ([`Ops::attention`]).
pub enum ScoreBias<'a, D: Device> {
    /// A bias by head and distance (MPNet's, T5's, JinaBERT's ALiBi).
    Relative(&'a RelativeBias<D>),
    /// DeBERTa's position terms ([`AttentionShape::disentangled`] says how they are read).
    Disentangled(&'a PositionProjections<D>),
}

impl<D: Device> Clone for ScoreBias<'_, D> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<D: Device> Copy for ScoreBias<'_, D> {}

/// A LayerNorm's weights, one per column, and its eps: `(x − mean) / √(var + eps) · weight + bias` over a row.
pub struct LayerNormWeights<D: Device> {
    pub weight: D::Param,
    pub bias: D::Param,
    pub eps: f32,
}

/// Run time: the operations of one forward pass over a ragged [`Batch`] (sequences concatenated, no padding).
/// `x`, `out` and friends are views of the backend's activation memory with one row per token (or per sequence,
/// for pooled outputs).
pub trait Ops {
    type Device: Device;
    type Mat: Matrix;

    /// `out[t] = word[id_t] + position[pos_t] + row` (`type1_row` for a pair's tokens of type 1), where `pos_t` is the embedding's [`PositionIds`] of the
    /// token in its own sequence, then the embedding's LayerNorm of the row if it has one (in the same op: one pass
    /// over the rows).
    fn embed(&self, batch: &Batch, e: &Embedding<Self::Device>, out: Self::Mat);
    /// `out = act(x · Wᵀ + b) + residual`.
    fn linear(
        &self,
        x: Self::Mat,
        w: &<Self::Device as Device>::Linear,
        act: Activation,
        residual: Option<Self::Mat>,
        out: Self::Mat,
    );
    /// LayerNorm of every row of `x` into `out` (`x` itself for in place); with `residual`, of `x + residual`
    /// (the residual of a block whose output is itself normed: JinaBERT's qk-post-norm layer).
    fn layer_norm(
        &self,
        x: Self::Mat,
        residual: Option<Self::Mat>,
        out: Self::Mat,
        norm: &LayerNormWeights<Self::Device>,
    );
    /// RMSNorm of every row of `x`, scaled by `weight` (one value per column), into `out` (`x` itself for in
    /// place); with `accumulate`, added to `out` instead (`x` another matrix): Gemma's norm of a block's output
    /// before its residual.
    fn rms_norm(
        &self,
        x: Self::Mat,
        out: Self::Mat,
        weight: &<Self::Device as Device>::Param,
        eps: f32,
        accumulate: bool,
    );
    /// Rotary embedding in place on every `head_dim`-wide head of `x`, at each token's position in its sequence.
    /// With `norm` (weights one per column of `x`, and eps), each head first takes its own RMSNorm, as Qwen3's
    /// per-head q/k norms: one op, so a backend passes over the heads once.
    fn rotary(
        &self,
        batch: &Batch,
        x: Self::Mat,
        table: &<Self::Device as Device>::Param,
        head_dim: usize,
        norm: Option<(&<Self::Device as Device>::Param, f32)>,
    );
    /// A gated feed-forward's gate: `out = act(x[:, ..f]) · x[:, f..]` for `x` of `2f` columns.
    fn glu(&self, x: Self::Mat, act: Glu, out: Self::Mat);
    /// `ctx = softmax(S + bias) V` per sequence and head, `S` being `Q Kᵀ` scaled and capped as `shape` says
    /// ([`AttentionShape::scale`], [`AttentionShape::softcap`]), from the fused `[Q | K | V]` projection; query
    /// head `h` reads key/value head `h / (heads / kv_heads)`; `bias`, when given, by head and distance, or
    /// DeBERTa's position terms (where `shape` is [`AttentionShape::disentangled`], and only then).
    fn attention(
        &self,
        batch: &Batch,
        qkv: Self::Mat,
        shape: AttentionShape,
        bias: Option<ScoreBias<'_, Self::Device>>,
        ctx: Self::Mat,
    );
    /// Each sequence's rows of `out` ([`Batch::out_offsets`]): one, its tokens' mean, its first token or its last
    /// token; or, for a sequence whose [`crate::Readout`] is `Tokens`, a copy of every token's row of `x`.
    fn pool(&self, batch: &Batch, x: Self::Mat, pooling: Pooling, out: Self::Mat);
}

/// An architecture written over the op set: its activation [`Layout`] and its forward pass.
pub trait Architecture<D: Device>: Send + Sync {
    fn layout(&self) -> Layout;
    /// Embedding dimension of the pooled output.
    fn dim(&self) -> usize;
    /// Token ids the embedding table holds (a batch's ids are checked against it before a forward).
    fn vocab_size(&self) -> usize;
    /// Whether the model ends in sentence-transformers' Normalize module. The forward writes the embedding rows;
    /// the backend normalizes them (the CPU as it hands them over, the GPU in its pooling kernel where
    /// [`Architecture::pools_last`], else on the host), keeping each row's norm, so a client can have the vector
    /// before Normalize back (TEI's `normalize: false`).
    fn normalizes(&self) -> bool;
    /// A sparse model's top-k (sentence-transformers' `max_active_dims`): the backend keeps each pooled row's this
    /// many largest entries as it hands the rows over, after Normalize, and zeroes the rest.
    fn max_active_dims(&self) -> Option<usize>;
    /// Whether the pooled rows are the embedding (no sentence-transformers Dense module after pooling): only then
    /// may a backend normalize them as it pools (the GPU's pooling kernel); otherwise it normalizes the output.
    fn pools_last(&self) -> bool;
    /// Whether it is a multi-vector model: its answer a vector per token ([`crate::Readout::Vectors`]), which it
    /// gives for nothing else.
    fn multi_vector(&self) -> bool;
    /// Runs `batch` and writes each sequence's answer (its pooled embedding, or its token states when its readout
    /// asks) into its rows of `out` ([`Batch::out_offsets`]). `acts` holds one view per
    /// slot of [`Architecture::layout`], each with at least `batch.tokens()` rows. The batch has passed
    /// [`Batch::validate`].
    fn forward<O: Ops<Device = D>>(&self, ops: &O, batch: &Batch, acts: &[O::Mat], out: O::Mat);
}
