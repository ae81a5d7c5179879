//! The op set ([`crate::backend::ops`]) on the CPU: [`Cpu`] packs weights at load, [`CpuPass`] runs one forward
//! pass's operations on our kernels, each split into tasks through [`Par`] (eager fork/join, or a plan's team).

use std::sync::atomic::{AtomicUsize, Ordering};

use super::attention;
use super::gemm::{self, Epilogue, Isa, PackedB};
use super::kernels;
use super::par::{Mat, Par, Scratch};
use crate::backend::ops::{
    Activation, AttentionShape, Device, Embedding, Glu, LayerNormWeights, Matrix, Ops, ScoreBias,
};
use crate::batch::{Batch, Readout};
use crate::dtype::Dtype;
use crate::error::Result;
use crate::model::{Pooling, Tensor};

/// Rows per task of the row-wise operations: enough to amortise a task, few enough to balance.
const ROWS_PER_TASK: usize = 16;

/// Runs `f(row)` for every row in `0..rows`, in tasks of [`ROWS_PER_TASK`] rows.
fn for_rows(par: &dyn Par, rows: usize, f: &(dyn Fn(usize) + Sync)) {
    par.run(rows.div_ceil(ROWS_PER_TASK), &|task, _| {
        (task * ROWS_PER_TASK..((task + 1) * ROWS_PER_TASK).min(rows)).for_each(f)
    });
}

/// A row-wise norm of `x` (weights `weight`, one per column) into `out` (`x` itself for in place): each row of
/// `out` takes `x`'s row, plus `residual`'s where given, then `norm` in place.
fn norm_rows<F: Fn(&mut [f32]) + Sync>(
    par: &dyn Par,
    op: &str,
    x: Mat,
    residual: Option<Mat>,
    out: Mat,
    weight: &[f32],
    norm: F,
) {
    assert!(
        weight.len() == x.cols && out.rows >= x.rows && out.cols == x.cols,
        "{op}: {} weights over {} columns, output {}",
        weight.len(),
        x.cols,
        out.cols
    );
    let in_place = x.ptr() == out.ptr();
    let Some(res) = residual else {
        if in_place {
            // SAFETY: each task owns its rows.
            return for_rows(par, x.rows, &|r| norm(unsafe { out.row_mut(r) }));
        }
        return for_rows(par, x.rows, &|r| {
            // SAFETY: each task owns its rows of `out`; `x` is another matrix, read only.
            let dst = unsafe { out.row_mut(r) };
            // SAFETY: as above.
            dst.copy_from_slice(unsafe { x.row(r) });
            norm(dst);
        });
    };
    assert!(
        res.rows >= x.rows && res.cols == x.cols && res.ptr() != out.ptr(),
        "{op}: a residual of x's shape, other than the output"
    );
    for_rows(par, x.rows, &|r| {
        // SAFETY: each task owns its rows of `out`; the residual is another matrix, read only.
        let (added, dst) = unsafe { (res.row(r), out.row_mut(r)) };
        if !in_place {
            // SAFETY: `x` is another matrix, read only.
            dst.copy_from_slice(unsafe { x.row(r) });
        }
        for (d, a) in dst.iter_mut().zip(added) {
            *d += a;
        }
        norm(dst);
    });
}

/// The CPU device: packs linear layers for this CPU's kernels in `dtype`, and remembers the scratch the largest
/// of them needs.
pub struct Cpu {
    dtype: Dtype,
    linear_scratch: AtomicUsize,
}

impl Cpu {
    /// bf16 needs AVX512-BF16 ([`gemm::bf16_supported`]); elsewhere the f32 kernels run.
    pub fn new(dtype: Dtype) -> Self {
        let dtype = match dtype {
            Dtype::Bf16 if !gemm::bf16_supported() => Dtype::F32,
            d => d,
        };
        Cpu {
            dtype,
            linear_scratch: AtomicUsize::new(0),
        }
    }

    /// The precision the linear layers run in.
    pub fn dtype(&self) -> Dtype {
        self.dtype
    }

    /// Scratch floats per thread that any linear layer packed so far needs.
    pub fn linear_scratch(&self) -> usize {
        self.linear_scratch.load(Ordering::Relaxed)
    }

    /// Whether attention runs on the bf16 tiles: with bf16 weights, when heads split into bf16 pairs evenly.
    pub fn bf16_attention(&self, shape: AttentionShape) -> bool {
        self.dtype == Dtype::Bf16 && shape.head_dim.is_multiple_of(2)
    }

    /// Scratch floats per thread for a forward pass of sequences up to `max_len` tokens (attention's, where the
    /// network has any).
    pub fn scratch_floats(&self, shape: Option<AttentionShape>, max_len: usize) -> usize {
        let attn = shape.map_or(0, |shape| {
            attention::scratch_floats(Isa::detect(), max_len, shape, self.bf16_attention(shape))
        });
        attn.max(self.linear_scratch())
    }
}

/// A linear layer packed for our GEMM, with its bias.
pub struct CpuLinear {
    weight: PackedB,
    bias: Option<Vec<f32>>,
}

impl Device for Cpu {
    type Linear = CpuLinear;
    type Param = Tensor;

    fn linear(
        &self,
        weight: &[f32],
        bias: Option<&[f32]>,
        out: usize,
        inp: usize,
    ) -> Result<CpuLinear> {
        crate::backend::ops::check_linear(weight, bias, out, inp)?;
        let weight = PackedB::pack(weight, out, inp, self.dtype);
        self.linear_scratch
            .fetch_max(weight.scratch_floats(), Ordering::Relaxed);
        Ok(CpuLinear {
            weight,
            bias: bias.map(<[f32]>::to_vec),
        })
    }

    fn param(&self, t: Tensor) -> Result<Tensor> {
        Ok(t)
    }
}

impl<'a> Matrix for Mat<'a> {
    fn rows(&self) -> usize {
        self.rows
    }

    fn cols(&self) -> usize {
        self.cols
    }

    fn columns(self, range: std::ops::Range<usize>) -> Self {
        Mat::columns(self, range)
    }

    fn top(self, rows: usize) -> Self {
        Mat::top(self, rows)
    }
}

/// One forward pass's view of the CPU: how its operations spread over threads, each thread's scratch, and (for
/// bf16 attention) where the fused projection is rounded to bf16.
pub struct CpuPass<'a> {
    pub par: &'a dyn Par,
    pub scratch: &'a Scratch,
    pub qkv16: Option<Mat<'a, u16>>,
}

impl<'a> Ops for CpuPass<'a> {
    type Device = Cpu;
    type Mat = Mat<'a>;

    fn embed(&self, batch: &Batch, e: &Embedding<Cpu>, out: Mat<'a>) {
        let h = e.dim;
        assert!(
            out.rows >= batch.tokens() && out.cols == h,
            "embed: output shape"
        );
        assert!(
            e.norm
                .as_ref()
                .is_none_or(|n| n.weight.data().len() == h && n.bias.data().len() == h),
            "embed: norm weight shape"
        );
        let word = e.word.data();
        let position = e.position.as_ref().map(Tensor::data);
        let row = e.row.as_ref().map(|r| &r.data()[..h]);
        let type1_row = e.type1_row.as_ref().map(|r| &r.data()[..h]);
        let offsets = batch.offsets();
        for_rows(self.par, batch.tokens(), &|t| {
            // Token t's position in its own sequence (the ragged layout restarts them), as the embedding numbers them.
            let seq = offsets.partition_point(|&o| o <= t) - 1;
            let p = e.position_ids.of(
                &batch.ids()[offsets[seq]..offsets[seq + 1]],
                t - offsets[seq],
            );
            let id = batch.ids()[t] as usize;
            // SAFETY: each task owns its rows.
            let dst = unsafe { out.row_mut(t) };
            dst.copy_from_slice(&word[id * h..(id + 1) * h]);
            if let Some(pos) = position {
                dst.iter_mut()
                    .zip(&pos[p * h..(p + 1) * h])
                    .for_each(|(d, v)| *d += v);
            }
            let type1 = batch
                .type1_from(seq)
                .is_some_and(|from| t - offsets[seq] >= from as usize);
            if let Some(r) = if type1 { type1_row.or(row) } else { row } {
                dst.iter_mut().zip(r).for_each(|(d, v)| *d += v);
            }
            if let Some(n) = &e.norm {
                kernels::layer_norm(dst, n.weight.data(), n.bias.data(), n.eps);
            }
        });
    }

    fn linear(
        &self,
        x: Mat<'a>,
        w: &CpuLinear,
        act: Activation,
        residual: Option<Mat<'a>>,
        out: Mat<'a>,
    ) {
        let epi = Epilogue {
            bias: w.bias.as_deref(),
            act,
            residual,
        };
        gemm::linear(self.par, x, &w.weight, epi, out, self.scratch);
    }

    fn layer_norm(
        &self,
        x: Mat<'a>,
        residual: Option<Mat<'a>>,
        out: Mat<'a>,
        norm: &LayerNormWeights<Cpu>,
    ) {
        let (g, b) = (norm.weight.data(), norm.bias.data());
        assert!(b.len() == x.cols, "layer_norm: bias shape");
        norm_rows(self.par, "layer_norm", x, residual, out, g, |row| {
            kernels::layer_norm(row, g, b, norm.eps)
        });
    }

    fn rms_norm(&self, x: Mat<'a>, out: Mat<'a>, weight: &Tensor, eps: f32, accumulate: bool) {
        let g = weight.data();
        if !accumulate {
            return norm_rows(self.par, "rms_norm", x, None, out, g, |row| {
                kernels::rms_norm(row, g, eps)
            });
        }
        assert!(
            g.len() == x.cols && out.rows >= x.rows && out.cols == x.cols && x.ptr() != out.ptr(),
            "rms_norm: accumulating needs another matrix of x's shape"
        );
        for_rows(self.par, x.rows, &|r| {
            // SAFETY: each task owns its rows of `out`; `x` is another matrix, read only.
            let (src, dst) = unsafe { (x.row(r), out.row_mut(r)) };
            kernels::rms_norm_add(src, g, eps, dst);
        });
    }

    fn rotary(
        &self,
        batch: &Batch,
        x: Mat<'a>,
        table: &Tensor,
        head_dim: usize,
        norm: Option<(&Tensor, f32)>,
    ) {
        let table = table.data();
        assert!(
            head_dim > 0 && head_dim.is_multiple_of(2) && x.cols.is_multiple_of(head_dim),
            "rotary: heads of {head_dim} over {} columns",
            x.cols
        );
        assert!(
            batch.max_len() * head_dim <= table.len() && x.rows >= batch.tokens(),
            "rotary: table or rows too short for the batch"
        );
        assert!(
            norm.is_none_or(|(w, _)| w.data().len() == x.cols),
            "rotary: norm weights for another width"
        );
        let half = head_dim / 2;
        let offsets = batch.offsets();
        for_rows(self.par, batch.tokens(), &|t| {
            let seq = offsets.partition_point(|&o| o <= t) - 1;
            let p = t - offsets[seq];
            let (cos, sin) = table[p * head_dim..(p + 1) * head_dim].split_at(half);
            // SAFETY: each task owns its rows.
            for (i, head) in unsafe { x.row_mut(t) }
                .chunks_exact_mut(head_dim)
                .enumerate()
            {
                if let Some((w, eps)) = norm {
                    kernels::rms_norm(head, &w.data()[i * head_dim..(i + 1) * head_dim], eps);
                }
                kernels::rotary(head, cos, sin);
            }
        });
    }

    fn glu(&self, x: Mat<'a>, act: Glu, out: Mat<'a>) {
        let f = out.cols;
        assert!(x.cols == 2 * f && out.rows >= x.rows, "glu: shapes");
        let gate = match act {
            Glu::Silu => kernels::silu_gate,
            Glu::Gelu => kernels::gelu_gate,
            Glu::GeluTanh => kernels::gelu_tanh_gate,
        };
        for_rows(self.par, x.rows, &|r| {
            // SAFETY: each task owns its rows of `out`; `x` is read only.
            let (row, dst) = unsafe { (x.row(r), out.row_mut(r)) };
            gate(&row[..f], &row[f..], dst);
        });
    }

    fn attention(
        &self,
        batch: &Batch,
        qkv: Mat<'a>,
        shape: AttentionShape,
        bias: Option<ScoreBias<'_, Cpu>>,
        ctx: Mat<'a>,
    ) {
        let qkv16 = self.qkv16.map(|m| m.top(qkv.rows));
        let bias = bias.map(|b| match b {
            ScoreBias::Relative(b) => attention::Bias::Relative(attention::Relative {
                table: b.table.data(),
                reach: b.reach,
            }),
            ScoreBias::Disentangled(p) => attention::Bias::Disentangled {
                key: p.key.as_ref().map(|t| t.data()),
                query: p.query.as_ref().map(|t| t.data()),
            },
        });
        attention::attention(
            self.par,
            batch.offsets(),
            batch.keys(),
            qkv,
            qkv16,
            shape,
            bias,
            ctx,
            self.scratch,
        );
    }

    fn pool(&self, batch: &Batch, x: Mat<'a>, pooling: Pooling, out: Mat<'a>) {
        let (offsets, rows) = (batch.offsets(), batch.out_offsets());
        assert!(
            x.rows >= batch.tokens() && out.rows >= batch.out_rows() && out.cols == x.cols,
            "pool: shapes"
        );
        for_rows(self.par, batch.len(), &|s| {
            let (first, end) = (offsets[s], offsets[s + 1]);
            // SAFETY: the hidden states are read only during this operation.
            let token = |t: usize| unsafe { x.row(t) };
            let skip = match batch.readout(s) {
                Readout::Pooled { skip } => skip as usize,
                Readout::Tokens | Readout::Vectors { .. } => {
                    for (r, t) in (rows[s]..rows[s + 1]).zip(first..end) {
                        // SAFETY: each task owns its sequence's output rows.
                        unsafe { out.row_mut(r) }.copy_from_slice(token(t));
                    }
                    return;
                }
            };
            // The pooled tokens: from `start` (after a left-out prompt; the last token at least) to the end.
            let start = first + skip.min((end - first).saturating_sub(1));
            // SAFETY: each task owns its output rows.
            let row = unsafe { out.row_mut(rows[s]) };
            // A (weighted) sum over the tokens, then one scale: 1 / n, 1 / √n, or 1 over the weights' total.
            let weighted_sum = |row: &mut [f32], weight: &dyn Fn(usize) -> f32| {
                row.fill(0.0);
                for t in start..end {
                    let w = weight(t - first);
                    row.iter_mut().zip(token(t)).for_each(|(o, v)| *o += w * v);
                }
            };
            let n = (end - start) as f32;
            let scale = match pooling {
                Pooling::Cls => {
                    row.copy_from_slice(token(start));
                    1.0
                }
                Pooling::LastToken => {
                    row.copy_from_slice(token(end - 1));
                    1.0
                }
                Pooling::Max => {
                    row.copy_from_slice(token(start));
                    for t in start + 1..end {
                        row.iter_mut()
                            .zip(token(t))
                            .for_each(|(o, &v)| *o = o.max(v));
                    }
                    1.0
                }
                Pooling::Mean | Pooling::MeanSqrtLen => {
                    weighted_sum(row, &|_| 1.0);
                    if pooling == Pooling::Mean {
                        1.0 / n
                    } else {
                        1.0 / n.sqrt()
                    }
                }
                Pooling::WeightedMean => {
                    // Each token weighs its position in the sequence, 1 for the first (a left-out prompt's tokens
                    // keep theirs, as sentence-transformers): k + 1..=m, whose sum is (m - k)(m + k + 1) / 2 (a
                    // product: no cancellation when k is near m).
                    weighted_sum(row, &|i| (i + 1) as f32);
                    let (k, m) = ((start - first) as f32, (end - first) as f32);
                    2.0 / ((m - k) * (m + k + 1.0))
                }
            };
            if scale != 1.0 {
                row.iter_mut().for_each(|o| *o *= scale);
            }
        });
    }
}
