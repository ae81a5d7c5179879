//! The op set ([`crate::backend::ops`]) on the GPU: [`Cuda`] uploads weights at load (linear layers in bf16, the
//! rest in f32), [`CudaPass`] enqueues one forward pass's kernels and GEMMs on the compute stream.
//!
//! Activations are f32 in device memory, as on the CPU (but for the operand slots under `--gpu-intermediate bf16`,
//! bf16 views that only GEMMs and SwiGLU's gate touch, read by a GEMM as they are); a GEMM reads an f32 input
//! rounded into a dense bf16 scratch, as the CPU's bf16 GEMM rounds its input. The kernels that produce GEMM inputs
//! (the norms, the embedding's LayerNorm, the GELU epilogue, SwiGLU's gate, attention) write that rounding as they
//! write their output (the scratch is then their output's *shadow*), so a GEMM straight after its producer reads it
//! as is; any other input is rounded by `to_bf16` first. Every kernel reads the batch's real size from device memory
//! (`meta`), so the same launches, captured in a CUDA graph for a bucket, serve any batch that fits it.

use std::cell::RefCell;

use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, LaunchConfig, PushKernelArg};

use super::device::{Cuda, CudaLinear, CudaParam};
use super::gemm::Gemm;
use super::mat::{CudaMat, Shadow};
use crate::backend::ops::{
    Activation, AttentionShape, Embedding, Glu, LayerNormWeights, Ops, PositionIds, ScoreBias,
};
use crate::batch::Batch;
use crate::config::GpuAttention;
use crate::error::{Error, Result};
use crate::model::Pooling;

/// The widest head the attention kernels' narrow entry points take (`HEAD_DIM_NARROW` in kernels/attention.cu,
/// defined from this): every BERT-like and most decoder models; wider heads run the `_wide` entry points.
pub const HEAD_DIM_NARROW: usize = 128;
/// The widest head the attention kernels take (`HEAD_DIM_MAX`, defined from this), in steps of a warp:
/// EmbeddingGemma's 256.
pub const HEAD_DIM_MAX: usize = 256;
/// What a block's dynamic shared memory may be without opting in (`cuFuncSetAttribute`).
pub const DEFAULT_SMEM_BYTES: usize = 48 << 10;
/// Query rows per attention block (`QUERIES` in kernels/attention.cu, defined from this).
const ATTENTION_QUERIES: usize = super::inputs::QUERY_TILE;
/// Keys per shared-memory tile of the attention kernel (`KEYS`, defined from this; a warp's lanes score one each).
pub(super) const ATTENTION_KEYS: usize = 32;
/// Warps of an attention block, each owning query rows (`WARPS`, defined from this).
pub(super) const ATTENTION_WARPS: usize = 4;
/// Keys per warp tile of the tensor-core attention kernel (`MMA_KEYS` in kernels/attention_mma.cu).
pub(super) const MMA_KEYS: usize = 16;
/// Warps of a tensor-core attention block, splitting the keys (`MMA_WARPS`).
pub(super) const MMA_WARPS: usize = 4;
/// bf16 elements of padding per staged row in the tensor-core kernel (`MMA_PAD`): 8 moves each row 4 banks on,
/// so a fragment's 8 x 4 reads hit 32 banks.
pub(super) const MMA_PAD: usize = 8;

/// The device addresses of one batch's inputs (uploaded before the pass), and the bucket the launches are
/// sized for: the kernels read the real sizes from `meta`.
#[derive(Clone, Copy, Debug)]
pub struct PassInputs {
    pub ids: u64,
    pub tok_pos: u64,
    pub offsets: u64,
    pub out_offsets: u64,
    pub readouts: u64,
    pub type1_from: u64,
    /// Each sequence's attended prefix ([`Batch::keys`]).
    pub keys: u64,
    /// The attention's query tiles ({sequence, first row} pairs).
    pub tiles: u64,
    pub meta: u64,
    /// Rows, sequences and attention tiles the launches cover (the bucket's, or the batch's when eager past the
    /// ladder).
    pub tokens: usize,
    pub seqs: usize,
    pub max_tiles: usize,
    /// Dense bf16 GEMM input, `tokens × gemm_scratch` values.
    pub bf16: u64,
    /// Where `pool` writes each pooled row's norm as it normalises the row (sentence-transformers' Normalize; -1
    /// for a Tokens sequence), `seqs` floats; 0 for a model without Normalize.
    pub norms: u64,
}

/// One forward pass's view of the GPU. Ops cannot return errors (the architecture is a plain sequence of
/// operations); the first launch error is kept and the backend reports it after the pass.
pub struct CudaPass<'a> {
    pub device: &'a Cuda,
    pub inputs: PassInputs,
    error: RefCell<Option<Error>>,
    /// Which view's bf16 rounding the GEMM scratch holds.
    shadow: Shadow,
}

/// The ops other than `linear` and `glu` read and write f32: an architecture gives operand slots (bf16 under
/// `--gpu-intermediate bf16`, [`crate::backend::ops::Slot::operand`]) to those two alone.
fn f32_views(op: &str, views: &[CudaMat]) {
    assert!(
        views.iter().all(|v| !v.bf16),
        "{op}: given an operand slot (bf16), which only linear and glu take"
    );
}

fn blocks(n: usize, per: usize) -> u32 {
    n.div_ceil(per).max(1) as u32
}

fn cfg(grid: (u32, u32, u32), block: u32, smem: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: grid,
        block_dim: (block, 1, 1),
        shared_mem_bytes: smem as u32,
    }
}

/// Columns each thread block of the element-wise kernels covers.
const COLS_PER_BLOCK: usize = 256;

/// The grid of an element-wise kernel over `rows` × `cols`: a row per x-block (a bucket's rows may pass the
/// 65,535 a grid's y allows), the columns in y-blocks.
fn elementwise(rows: usize, cols: usize) -> LaunchConfig {
    cfg(
        (rows as u32, blocks(cols, COLS_PER_BLOCK), 1),
        COLS_PER_BLOCK as u32,
        0,
    )
}
/// Threads of the row-wise kernels (one block per row).
const ROW_THREADS: u32 = 256;
/// Warps of a rotary block, one per head.
const ROTARY_WARPS: usize = 4;

/// Kernel arguments, pushed in order: device addresses and 32-bit scalars.
#[derive(Clone, Copy)]
enum Arg {
    Ptr(u64),
    I32(i32),
    F32(f32),
}

impl<'a> CudaPass<'a> {
    pub fn new(device: &'a Cuda, inputs: PassInputs) -> Self {
        CudaPass {
            device,
            inputs,
            error: RefCell::new(None),
            shadow: Shadow::default(),
        }
    }

    /// The first error of the pass, if any.
    pub fn finish(self) -> Result<()> {
        self.error.into_inner().map_or(Ok(()), Err)
    }

    fn fail(&self, e: Error) {
        self.error.borrow_mut().get_or_insert(e);
    }

    fn launch(&self, name: &str, config: LaunchConfig, args: &[Arg]) {
        self.shadow.launched();
        if self.error.borrow().is_some() {
            return;
        }
        let stream = &self.device.stream;
        let f = self.device.function(name);
        let mut b = stream.launch_builder(f);
        for a in args {
            match a {
                Arg::Ptr(p) => b.arg(p),
                Arg::I32(v) => b.arg(v),
                Arg::F32(v) => b.arg(v),
            };
        }
        // SAFETY: each kernel's parameters are, in order, the ones `args` gives (the call sites below follow the
        // signatures in kernels/*.cu); the addresses are live device memory of the shapes passed beside them (the
        // ops check their views' shapes), and every kernel bounds its threads by those shapes and by `meta`. A
        // shadow pointer (the GEMM scratch, `tokens × gemm_scratch` bf16) is passed only for a view of at most
        // `gemm_scratch` columns (`launch_producing`), and its kernel writes rows below `meta`'s tokens (at most the
        // pass's `tokens`) at that view's column count as the row stride.
        if let Err(e) = unsafe { b.launch(config) } {
            self.fail(Error::Device(format!("launch {name}: {e:?}")));
        }
    }

    fn i(v: usize) -> Arg {
        Arg::I32(v as i32)
    }

    /// Launches a kernel that produces `out`, a possible GEMM input, with `args` and then its shadow argument:
    /// the scratch, where `out` fits it (the scratch then holds `out`'s rounding), else null.
    fn launch_producing(&self, name: &str, config: LaunchConfig, args: &[Arg], out: CudaMat) {
        let fits = out.cols <= self.device.gemm_scratch();
        let shadow = Arg::Ptr(if fits { self.inputs.bf16 } else { 0 });
        self.launch(name, config, &[args, &[shadow]].concat());
        if fits {
            self.shadow.wrote(out);
        }
    }

    /// The bf16 operand of a GEMM reading `x`, and its row stride: `x` itself if it is bf16 (an operand slot);
    /// else the dense scratch, as it is if it holds `x`'s rounding, or after `to_bf16` rounds `x` into it.
    fn operand(&self, x: CudaMat) -> (u64, usize) {
        if x.bf16 {
            return (x.ptr, x.ld);
        }
        if !self.shadow.holds(x) {
            self.to_bf16(x);
            self.shadow.wrote(x);
        }
        (self.inputs.bf16, x.cols)
    }

    /// Rounds `x` into the dense bf16 scratch (bucket rows; the rows past the batch become zeros).
    fn to_bf16(&self, x: CudaMat) {
        let rows = self.inputs.tokens.min(x.rows);
        self.launch(
            "to_bf16",
            elementwise(rows, x.cols),
            &[
                Arg::Ptr(x.ptr),
                Self::i(x.ld),
                Self::i(x.cols),
                Arg::Ptr(self.inputs.meta),
                Arg::Ptr(self.inputs.bf16),
            ],
        );
    }
}

fn ptr<T>(s: &CudaSlice<T>, stream: &CudaStream) -> u64 {
    // Event tracking is off (see `Cuda::new`): the guard records nothing.
    s.device_ptr(stream).0
}

impl<'a> Ops for CudaPass<'a> {
    type Device = Cuda;
    type Mat = CudaMat;

    fn embed(&self, _batch: &Batch, e: &Embedding<Cuda>, out: CudaMat) {
        f32_views("embed", &[out]);
        assert!(
            out.rows >= self.inputs.tokens && out.cols == e.dim,
            "embed: output shape"
        );
        let s = &self.device.stream;
        let opt = |p: Option<&CudaParam>| p.map_or(0, |p| ptr(&p.data, s));
        let norm = e.norm.as_ref();
        assert!(
            norm.is_none_or(|n| n.weight.data.len() == e.dim && n.bias.data.len() == e.dim),
            "embed: norm weight shape"
        );
        let config = cfg((self.inputs.tokens as u32, 1, 1), ROW_THREADS, 0);
        let args = [
            Arg::Ptr(self.inputs.ids),
            Arg::Ptr(self.inputs.tok_pos),
            Arg::Ptr(self.inputs.meta),
            Arg::Ptr(self.inputs.offsets),
            Arg::Ptr(self.inputs.type1_from),
            Arg::Ptr(ptr(&e.word.data, s)),
            Arg::Ptr(opt(e.position.as_ref())),
            Arg::Ptr(opt(e.row.as_ref())),
            Arg::Ptr(opt(e.type1_row.as_ref())),
            Self::i(e.dim),
            Arg::Ptr(out.ptr),
            Self::i(out.ld),
            Arg::I32(match e.position_ids {
                PositionIds::Index => -1,
                // A row of the position table: below the table's length, which is an i32's size.
                PositionIds::AfterPadding { pad } => pad as i32,
            }),
            Arg::Ptr(opt(norm.map(|n| &n.weight))),
            Arg::Ptr(opt(norm.map(|n| &n.bias))),
            Arg::F32(norm.map_or(0.0, |n| n.eps)),
        ];
        if norm.is_some() {
            // Normalised rows are what a GEMM reads next (BERT's first QKV projection).
            self.launch_producing("embed", config, &args, out);
        } else {
            // Raw embeddings are the residual stream; a norm, not a GEMM, reads them next.
            self.launch("embed", config, &[&args[..], &[Arg::Ptr(0)]].concat());
        }
    }

    fn linear(
        &self,
        x: CudaMat,
        w: &CudaLinear,
        act: Activation,
        residual: Option<CudaMat>,
        out: CudaMat,
    ) {
        assert!(
            x.cols == w.inp && out.cols == w.out && residual.is_none_or(|r| r.cols == w.out),
            "linear: {}×{} layer, x has {} columns, out {}",
            w.out,
            w.inp,
            x.cols,
            out.cols
        );
        assert!(
            residual.is_none_or(|r| !r.bf16 && !out.bf16),
            "linear: a residual is f32, into an f32 output"
        );
        let m = self.inputs.tokens.min(x.rows).min(out.rows);
        let s = &self.device.stream;
        let (xb, x_ld) = self.operand(x);
        let bias = w.bias.as_ref().map(|b| ptr(b, s));
        // Activations are our kernel's (GELU exact erf, see gemm.rs; tanh): the GEMM then adds only the bias, and
        // the residual goes after the activation, in the same kernel. A bf16 output takes the bias in that kernel
        // too, in f32. The kernels' `act`: 0 none, 1 GELU, 2 tanh, 3 ReLU, 4 GELU's tanh approximation, 5 and 6
        // SPLADE's log(1 + ReLU) once and twice.
        let act = match act {
            Activation::None => 0,
            Activation::Gelu => 1,
            Activation::Tanh => 2,
            Activation::Relu => 3,
            Activation::GeluTanh => 4,
            Activation::Log1pRelu => 5,
            Activation::Log1pLog1pRelu => 6,
        };
        let activates = act != 0;
        let gemm = Gemm {
            m,
            n: w.out,
            k: w.inp,
            x: xb,
            x_ld,
            w: ptr(&w.weight, s),
            bias: bias.filter(|_| !out.bf16),
            residual: residual.filter(|_| !activates).map(|r| (r.ptr, r.ld)),
            out: (out.ptr, out.ld),
            out_bf16: out.bf16,
        };
        if self.error.borrow().is_none() {
            if let Err(e) = self.device.lt.linear(&gemm) {
                self.fail(e);
            }
        }
        self.shadow.gemm_wrote(out);
        let config = elementwise(m, w.out);
        let y = [
            Arg::Ptr(out.ptr),
            Self::i(out.ld),
            Self::i(w.out),
            Arg::Ptr(self.inputs.meta),
        ];
        if out.bf16 {
            // In place on the GEMM's bf16 output, which the next GEMM reads as it is: no shadow.
            if activates || bias.is_some() {
                let rest = [Arg::Ptr(bias.unwrap_or(0)), Arg::I32(act)];
                self.launch("bias_act_bf16", config, &[&y[..], &rest].concat());
            }
        } else if activates {
            let res = residual.map_or((0, 0), |r| (r.ptr, r.ld));
            let rest = [Arg::Ptr(0), Arg::I32(act), Arg::Ptr(res.0), Self::i(res.1)];
            self.launch_producing("bias_act", config, &[&y[..], &rest].concat(), out);
        }
    }

    fn layer_norm(
        &self,
        x: CudaMat,
        residual: Option<CudaMat>,
        out: CudaMat,
        norm: &LayerNormWeights<Cuda>,
    ) {
        f32_views("layer_norm", &[x, out]);
        assert!(
            norm.weight.data.len() == x.cols
                && norm.bias.data.len() == x.cols
                && out.rows >= x.rows
                && out.cols == x.cols
                && residual.is_none_or(|r| r.rows >= x.rows && r.cols == x.cols),
            "layer_norm: weight, residual or output shape"
        );
        if let Some(r) = residual {
            f32_views("layer_norm's residual", &[r]);
        }
        let res = residual.map_or((0, 0), |r| (r.ptr, r.ld));
        let s = &self.device.stream;
        self.launch_producing(
            "layer_norm",
            cfg(
                (self.inputs.tokens.min(x.rows) as u32, 1, 1),
                ROW_THREADS,
                0,
            ),
            &[
                Arg::Ptr(x.ptr),
                Self::i(x.ld),
                Arg::Ptr(res.0),
                Self::i(res.1),
                Arg::Ptr(out.ptr),
                Self::i(out.ld),
                Self::i(x.cols),
                Arg::Ptr(self.inputs.meta),
                Arg::Ptr(ptr(&norm.weight.data, s)),
                Arg::Ptr(ptr(&norm.bias.data, s)),
                Arg::F32(norm.eps),
            ],
            out,
        );
    }

    fn rms_norm(&self, x: CudaMat, out: CudaMat, weight: &CudaParam, eps: f32, accumulate: bool) {
        f32_views("rms_norm", &[x, out]);
        assert!(
            !accumulate || !super::mat::overlaps(x, out),
            "rms_norm: accumulating needs another matrix"
        );
        assert!(
            weight.data.len() == x.cols && out.rows >= x.rows && out.cols == x.cols,
            "rms_norm: {} weights over {} columns, output {}",
            weight.data.len(),
            x.cols,
            out.cols
        );
        let s = &self.device.stream;
        self.launch_producing(
            "rms_norm",
            cfg(
                (self.inputs.tokens.min(x.rows) as u32, 1, 1),
                ROW_THREADS,
                0,
            ),
            &[
                Arg::Ptr(x.ptr),
                Self::i(x.ld),
                Arg::Ptr(out.ptr),
                Self::i(out.ld),
                Self::i(x.cols),
                Arg::Ptr(self.inputs.meta),
                Arg::Ptr(ptr(&weight.data, s)),
                Arg::F32(eps),
                Arg::I32(accumulate as i32),
            ],
            out,
        );
    }

    fn rotary(
        &self,
        batch: &Batch,
        x: CudaMat,
        table: &CudaParam,
        head_dim: usize,
        norm: Option<(&CudaParam, f32)>,
    ) {
        f32_views("rotary", &[x]);
        assert!(
            head_dim > 0 && head_dim.is_multiple_of(2) && x.cols.is_multiple_of(head_dim),
            "rotary: heads of {head_dim} over {} columns",
            x.cols
        );
        assert!(
            batch.max_len() * head_dim <= table.data.len(),
            "rotary: table too short for the batch"
        );
        assert!(
            norm.is_none_or(|(w, _)| w.data.len() == x.cols),
            "rotary: norm weights for another width"
        );
        let s = &self.device.stream;
        let rows = self.inputs.tokens.min(x.rows) as u32;
        let (weight, eps) = norm.map_or((0, 0.0), |(w, eps)| (ptr(&w.data, s), eps));
        self.launch(
            "rotary",
            cfg(
                (rows, blocks(x.cols / head_dim, ROTARY_WARPS), 1),
                (ROTARY_WARPS * 32) as u32,
                0,
            ),
            &[
                Arg::Ptr(x.ptr),
                Self::i(x.ld),
                Self::i(x.cols),
                Self::i(head_dim),
                Arg::Ptr(self.inputs.tok_pos),
                Arg::Ptr(self.inputs.meta),
                Arg::Ptr(ptr(&table.data, s)),
                Arg::Ptr(weight),
                Arg::F32(eps),
            ],
        );
    }

    fn glu(&self, x: CudaMat, act: Glu, out: CudaMat) {
        let f = out.cols;
        assert!(x.cols == 2 * f && out.rows >= x.rows, "glu: shapes");
        assert!(x.bf16 == out.bf16, "glu: input and output of one precision");
        let config = elementwise(self.inputs.tokens.min(x.rows), f);
        let args = [
            Arg::Ptr(x.ptr),
            Self::i(x.ld),
            Arg::Ptr(out.ptr),
            Self::i(out.ld),
            Self::i(f),
            Arg::Ptr(self.inputs.meta),
            // The kernels' `act`: 0 SiLU, 1 GELU, 2 GELU's tanh approximation.
            Arg::I32(match act {
                Glu::Silu => 0,
                Glu::Gelu => 1,
                Glu::GeluTanh => 2,
            }),
        ];
        if x.bf16 {
            // bf16 out is the down projection's operand as it is.
            self.launch("glu_bf16", config, &args);
        } else {
            self.launch_producing("glu", config, &args, out);
        }
    }

    fn attention(
        &self,
        batch: &Batch,
        qkv: CudaMat,
        shape: AttentionShape,
        bias: Option<ScoreBias<'_, Cuda>>,
        ctx: CudaMat,
    ) {
        let bias = match bias {
            Some(ScoreBias::Relative(b)) => Some(b),
            // Refused at load ([`Cuda::position_projection`]): no DeBERTa layer is built on this device.
            Some(ScoreBias::Disentangled(_)) => unreachable!("DeBERTa's position terms on CUDA"),
            None => None,
        };
        f32_views("attention", &[qkv, ctx]);
        let AttentionShape {
            heads,
            kv_heads,
            head_dim: d,
            causal,
            window,
            scale,
            softcap,
            disentangled,
        } = shape;
        assert!(
            disentangled.is_none(),
            "attention: DeBERTa's disentangled attention on CUDA"
        );
        assert!(
            heads > 0 && kv_heads > 0 && heads.is_multiple_of(kv_heads),
            "attention: {heads} heads over {kv_heads} key/value heads"
        );
        shape.check_softcap();
        assert!(
            qkv.cols == shape.qkv_width() && ctx.cols == heads * d,
            "attention: qkv {} columns, ctx {} for {shape:?}",
            qkv.cols,
            ctx.cols
        );
        assert!(
            bias.is_none_or(|b| b.reach > 0
                && b.reach >= batch.max_len()
                && b.table.data.len() == heads * b.row_len()),
            "attention: the bias table does not cover these heads and lengths"
        );
        let (kernel, threads, smem) = attention_launch(self.device.attention, d);
        let s = &self.device.stream;
        self.launch_producing(
            kernel,
            LaunchConfig {
                grid_dim: (self.inputs.max_tiles.max(1) as u32, heads as u32, 1),
                block_dim: (threads, 1, 1),
                shared_mem_bytes: smem as u32,
            },
            &[
                Arg::Ptr(qkv.ptr),
                Self::i(qkv.ld),
                Arg::Ptr(ctx.ptr),
                Self::i(ctx.ld),
                Arg::Ptr(self.inputs.offsets),
                Arg::Ptr(self.inputs.keys),
                Arg::Ptr(self.inputs.tiles),
                Arg::Ptr(self.inputs.meta),
                Self::i(heads),
                Self::i(kv_heads),
                Self::i(d),
                Arg::I32(causal as i32),
                // -1: no window; a window past i32 is none in practice (sequences are shorter).
                Arg::I32(window.map_or(-1, |w| i32::try_from(w).unwrap_or(i32::MAX))),
                Arg::F32(scale),
                // 0: no cap (a set one is positive, checked above).
                Arg::F32(softcap.unwrap_or(0.0)),
                Arg::Ptr(bias.map_or(0, |b| ptr(&b.table.data, s))),
                Self::i(bias.map_or(0, |b| b.reach)),
            ],
            ctx,
        );
    }

    fn pool(&self, _batch: &Batch, x: CudaMat, pooling: Pooling, out: CudaMat) {
        f32_views("pool", &[x, out]);
        assert!(out.cols == x.cols, "pool: shapes");
        let mode = match pooling {
            Pooling::Mean => 0,
            Pooling::Cls => 1,
            Pooling::LastToken => 2,
            Pooling::Max => 3,
            Pooling::MeanSqrtLen => 4,
            Pooling::WeightedMean => 5,
        };
        self.launch(
            "pool",
            cfg((self.inputs.seqs as u32, 1, 1), ROW_THREADS, 0),
            &[
                Arg::Ptr(x.ptr),
                Self::i(x.ld),
                Arg::Ptr(out.ptr),
                Self::i(out.ld),
                Self::i(x.cols),
                Arg::Ptr(self.inputs.offsets),
                Arg::Ptr(self.inputs.out_offsets),
                Arg::Ptr(self.inputs.readouts),
                Arg::Ptr(self.inputs.meta),
                Arg::I32(mode),
                Arg::Ptr(self.inputs.norms),
            ],
        );
    }
}

/// Dynamic shared memory of one attention block for heads of `d`: a key tile padded by a column, a value tile and
/// the block's query rows (kernels/attention.cu).
pub fn attention_smem_bytes(d: usize) -> usize {
    (ATTENTION_KEYS * (d + 1) + ATTENTION_KEYS * d + ATTENTION_QUERIES * d) * size_of::<f32>()
}

/// Dynamic shared memory of one tensor-core attention block for heads of `d`: per warp, a bf16 key tile and a
/// transposed value tile, each row padded (kernels/attention_mma.cu's `attention_mma_warp_bytes`; the warps'
/// merge reuses it); past [`HEAD_DIM_NARROW`], the tile's Q fragments (d / 16 steps × 32 lanes × 4 registers).
pub fn attention_mma_smem_bytes(d: usize) -> usize {
    let warps = MMA_WARPS * 2 * (MMA_KEYS * (d + MMA_PAD) + d * (MMA_KEYS + MMA_PAD));
    let staged_q = if d > HEAD_DIM_NARROW {
        d / 16 * 32 * 4 * size_of::<u32>()
    } else {
        0
    };
    warps + staged_q
}

/// The attention kernel `attention` picks for heads of `d`: its name, threads per block and dynamic shared memory.
/// Heads up to [`HEAD_DIM_NARROW`] run the narrow entry point, wider ones the `_wide` one.
pub fn attention_launch(attention: GpuAttention, d: usize) -> (&'static str, u32, usize) {
    let wide = d > HEAD_DIM_NARROW;
    match attention {
        GpuAttention::CudaCores => (
            if wide { "attention_wide" } else { "attention" },
            (ATTENTION_WARPS * 32) as u32,
            attention_smem_bytes(d),
        ),
        GpuAttention::TensorCores => (
            if wide {
                "attention_mma_wide"
            } else {
                "attention_mma"
            },
            (MMA_WARPS * 32) as u32,
            attention_mma_smem_bytes(d),
        ),
    }
}

/// Whether the attention kernels take heads of `d`: whole warps, at most [`HEAD_DIM_MAX`].
pub fn head_dim_supported(d: usize) -> bool {
    d > 0 && d.is_multiple_of(32) && d <= HEAD_DIM_MAX
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn narrow_attention_fits_the_default_shared_memory_and_the_wide_one_opts_in() {
        // 48 KiB is what a block gets without opting in: the narrow entry points' widest head fits it, so every
        // BERT-like model runs on any GPU without it.
        for kind in [GpuAttention::CudaCores, GpuAttention::TensorCores] {
            let (name, _, smem) = attention_launch(kind, HEAD_DIM_NARROW);
            assert!(
                !name.ends_with("_wide") && smem <= DEFAULT_SMEM_BYTES,
                "{name}"
            );
            let (name, _, smem) = attention_launch(kind, HEAD_DIM_NARROW + 32);
            assert!(name.ends_with("_wide"), "{name}");
            // What the backend opts in to at 256 stays within what an sm_86/sm_89 block may have (99 KiB; sm_80:
            // 163 KiB, sm_90: 227 KiB).
            let (_, _, widest) = attention_launch(kind, HEAD_DIM_MAX);
            assert!(
                smem > DEFAULT_SMEM_BYTES && widest <= 99 << 10,
                "{name}: {widest}"
            );
        }
        // The tensor-core kernel's merge (16 x d partial outputs, 16 maxima, 16 sums per warp, in f32) reuses
        // each warp's staging slice, so it must fit in it (the wide one's staged Q lies past the slices).
        for d in (32..=HEAD_DIM_MAX).step_by(32) {
            let slices = MMA_WARPS * 2 * (MMA_KEYS * (d + MMA_PAD) + d * (MMA_KEYS + MMA_PAD));
            assert!(4 * (ATTENTION_QUERIES * d + 32) <= slices / MMA_WARPS);
            assert!(attention_mma_smem_bytes(d) >= slices);
        }
        assert!(head_dim_supported(32) && head_dim_supported(128) && head_dim_supported(256));
        assert!(!head_dim_supported(80) && !head_dim_supported(288) && !head_dim_supported(0));
    }
}
