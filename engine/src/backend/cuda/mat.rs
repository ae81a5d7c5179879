//! Views of device memory as the op set's matrices, and the record of which one the GEMM scratch holds rounded.

use std::cell::Cell;

use crate::backend::ops::Matrix;

/// A view of an activation matrix in device memory: its first element's address, its shape and row stride (in
/// elements), and whether its elements are bf16 (an operand slot under `--gpu-intermediate bf16`) or f32.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CudaMat {
    pub ptr: u64,
    pub rows: usize,
    pub cols: usize,
    pub ld: usize,
    pub bf16: bool,
}

impl CudaMat {
    /// Bytes per element.
    pub fn elem(&self) -> usize {
        if self.bf16 {
            size_of::<u16>()
        } else {
            size_of::<f32>()
        }
    }

    /// The same memory as a bf16 matrix of the same shape that lives in the first half of each row's bytes (the
    /// row stride doubled, in elements): it stays inside the f32 view's own bytes, so what the layout keeps apart
    /// in f32 stays apart.
    pub fn as_bf16(self) -> Self {
        assert!(!self.bf16, "as_bf16: already bf16");
        CudaMat {
            ld: 2 * self.ld,
            bf16: true,
            ..self
        }
    }
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
            ptr: self.ptr + (range.start * self.elem()) as u64,
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
    let end = |m: CudaMat| m.ptr + ((m.rows.saturating_sub(1) * m.ld + m.cols) * m.elem()) as u64;
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
            bf16: false,
        }
    }

    /// Every byte of each row of an operand slot's bf16 view lies in that row's bytes of the slot's f32 view, so
    /// slots the layout keeps apart in f32 (Qwen3's gate/up and SwiGLU output, side by side in one region) stay
    /// apart in bf16, and a column view moves by bf16 elements.
    #[test]
    fn a_bf16_view_stays_inside_its_f32_view_row_by_row() {
        let region = 1 << 20;
        let ld = 3 * 512;
        let gate_up = mat(region, 8, 1024, ld);
        let act = mat(region + 1024 * 4, 8, 512, ld);
        let (g, a) = (gate_up.as_bf16(), act.as_bf16());
        for r in 0..8 {
            let row = |m: CudaMat| {
                let start = m.ptr + (r * m.ld * m.elem()) as u64;
                start..start + (m.cols * m.elem()) as u64
            };
            for (bf, f) in [(g, gate_up), (a, act)] {
                let (b, f) = (row(bf), row(f));
                assert!(f.start <= b.start && b.end <= f.end, "row {r}");
            }
            let (rg, ra) = (row(g), row(a));
            assert!(rg.end <= ra.start, "row {r}: gate/up and act meet");
        }
        assert_eq!(g.columns(512..1024).ptr, g.ptr + 512 * 2);
        assert_eq!(g.columns(512..1024).ld, 2 * ld);
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
