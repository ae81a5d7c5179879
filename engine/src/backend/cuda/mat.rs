//! Views of device memory as the op set's matrices, and the record of which one the GEMM scratch holds rounded.

use std::cell::Cell;

use crate::backend::ops::Matrix;

/// A view of an f32 activation matrix in device memory: its first element's address, its shape and row stride.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CudaMat {
    pub ptr: u64,
    pub rows: usize,
    pub cols: usize,
    pub ld: usize,
}

impl Matrix for CudaMat {
    fn rows(&self) -> usize {
        self.rows
    }

    fn cols(&self) -> usize {
        self.cols
    }

    fn columns(self, range: std::ops::Range<usize>) -> Self {
        assert!(
            range.start <= range.end && range.end <= self.cols,
            "columns out of range"
        );
        CudaMat {
            ptr: self.ptr + (range.start * size_of::<f32>()) as u64,
            cols: range.len(),
            ..self
        }
    }

    /// Checks only: a GPU view keeps its buffer's rows (the bucket's). The launches must cover the bucket and the
    /// kernels stop at the batch's real size (`meta`), so that a graph captured with a placeholder batch serves
    /// every batch of its bucket; shrinking here would size the captured launches by the placeholder.
    fn top(self, rows: usize) -> Self {
        assert!(rows <= self.rows, "top: {rows} of {} rows", self.rows);
        self
    }
}

/// Whether two views' spans of device memory (first element to last) meet.
pub fn overlaps(a: CudaMat, b: CudaMat) -> bool {
    let end =
        |m: CudaMat| m.ptr + ((m.rows.saturating_sub(1) * m.ld + m.cols) * size_of::<f32>()) as u64;
    a.ptr < end(b) && b.ptr < end(a)
}

/// Which view's bf16 rounding the pass's GEMM scratch holds, if any: the kernels that produce GEMM inputs write
/// it beside their output (kernels/common.cuh, `shadow_store`), and `to_bf16` writes it for any other input. A
/// GEMM straight after may read the scratch as it is; anything else in between may have changed either.
#[derive(Debug, Default)]
pub struct Shadow(Cell<Option<CudaMat>>);

impl Shadow {
    /// A kernel was launched: whatever it wrote, the scratch no longer vouches for a view (the launch that
    /// wrote a view's rounding says so after, with [`Shadow::wrote`]).
    pub fn launched(&self) {
        self.0.set(None);
    }

    /// The scratch now holds `m`'s rounding.
    pub fn wrote(&self, m: CudaMat) {
        self.0.set(Some(m));
    }

    /// Whether the scratch holds the rounding of exactly the view `x`.
    pub fn holds(&self, x: CudaMat) -> bool {
        self.0.get() == Some(x)
    }

    /// A GEMM wrote `out`: a view it wrote over is no longer what the scratch holds the rounding of.
    pub fn gemm_wrote(&self, out: CudaMat) {
        if self.0.get().is_some_and(|m| overlaps(m, out)) {
            self.0.set(None);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mat(ptr: u64, rows: usize, cols: usize, ld: usize) -> CudaMat {
        CudaMat {
            ptr,
            rows,
            cols,
            ld,
        }
    }

    #[test]
    fn a_column_view_moves_the_address_and_keeps_the_stride() {
        let k = mat(4096, 10, 96, 96).columns(32..64);
        assert_eq!((k.ptr, k.cols, k.ld, k.rows), (4096 + 32 * 4, 32, 96, 10));
    }

    /// The architectures take `top(batch.tokens())` of every slot; on the GPU that shrank the views to the
    /// placeholder's tokens at capture (and to the batch's in eager runs on bucket buffers), so `embed`'s check
    /// (`out.rows >= bucket tokens`) panicked and the other launches covered too few rows.
    #[test]
    fn top_keeps_the_bucket_rows_so_a_graph_serves_every_batch_of_its_bucket() {
        let m = mat(4096, 64, 96, 96);
        assert_eq!(m.top(3), m);
        assert_eq!(m.columns(32..64).top(1).rows, 64);
    }

    #[test]
    fn views_overlap_where_their_spans_meet() {
        let qkv = mat(0, 8, 96, 96);
        // Column views of one matrix interleave row by row: their spans meet.
        assert!(overlaps(qkv.columns(0..32), qkv.columns(64..96)));
        // The next matrix, right after the last element, does not.
        assert!(!overlaps(qkv, mat(8 * 96 * 4, 8, 96, 96)));
        assert!(overlaps(qkv, mat(8 * 96 * 4 - 4, 1, 1, 1)));
    }

    /// A GEMM reads the scratch as it is only right after the launch that rounded its very input into it.
    #[test]
    fn the_scratch_vouches_for_one_view_until_a_launch_or_a_gemm_over_it() {
        let (x, ctx, other) = (
            mat(0, 8, 64, 64),
            mat(1 << 20, 8, 64, 64),
            mat(1 << 21, 8, 64, 64),
        );
        let shadow = Shadow::default();
        assert!(!shadow.holds(x));
        shadow.launched();
        shadow.wrote(x);
        assert!(shadow.holds(x) && !shadow.holds(x.columns(0..32)) && !shadow.holds(ctx));
        // A GEMM writing elsewhere leaves it (two GEMMs may read one input); one writing over x does not.
        shadow.gemm_wrote(other);
        assert!(shadow.holds(x));
        shadow.gemm_wrote(x.columns(32..64));
        assert!(!shadow.holds(x));
        shadow.wrote(ctx);
        shadow.launched();
        assert!(!shadow.holds(ctx));
    }
}
