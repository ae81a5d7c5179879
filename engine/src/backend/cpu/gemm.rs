//! Our GEMM: `out = epilogue(x · Wᵀ)` for the model's linear layers (weights packed once at load, in f32 or
//! bf16) and for the small products inside attention (operands packed per sequence and head).
//!
//! Why not a library: the `gemm` crate repacks the weights on every call, has no bf16 path on AVX512-BF16, and
//! cannot apply bias, GELU or a residual while the tile is still in registers; at this model's shapes it reaches
//! well under half of this machine's peak (the forward bench shows both side by side). Weights that never change
//! are packed once, and the thread split follows the batch shape (rows for bulk batches, columns for a query).
//!
//! Shape of the kernel: K is at most a few thousand here, so a register tile of `MR` rows × `NR` columns
//! accumulates over the whole K at once (no K blocking, no read-modify-write of the output), then the epilogue
//! runs on the finished tile. A task owns a block of rows and a group of `NR`-column panels; each panel (K × NR)
//! stays in L1/L2 while the block's row tiles stream past it.

use super::kernels;
use super::par::{Mat, Par, Scratch};
use crate::backend::ops::Activation;
use crate::dtype::Dtype;

/// The instruction set the kernels run on, detected once per process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Isa {
    /// AVX-512F: 12 × 32 f32 tiles in 24 zmm accumulators.
    Avx512,
    /// AVX2 + FMA: 6 × 16 tiles in 12 ymm accumulators.
    Avx2,
    /// Plain Rust, left to the compiler's vectoriser.
    Portable,
}

impl Isa {
    pub fn detect() -> Isa {
        static ISA: std::sync::OnceLock<Isa> = std::sync::OnceLock::new();
        *ISA.get_or_init(|| {
            #[cfg(target_arch = "x86_64")]
            {
                if std::is_x86_feature_detected!("avx512f") {
                    return Isa::Avx512;
                }
                if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
                    return Isa::Avx2;
                }
            }
            Isa::Portable
        })
    }

    /// Rows of one register tile.
    pub fn mr(self) -> usize {
        match self {
            Isa::Avx512 => 12,
            Isa::Avx2 | Isa::Portable => 6,
        }
    }

    /// Columns of one register tile, and of one packed panel.
    pub fn nr(self) -> usize {
        match self {
            Isa::Avx512 => 32,
            Isa::Avx2 | Isa::Portable => 16,
        }
    }
}

/// Whether this CPU has the `vdpbf16ps` dot product the bf16 kernel is built on (and the 16-bit shuffles that
/// pack its operands).
pub fn bf16_supported() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("avx512f")
            && std::is_x86_feature_detected!("avx512bw")
            && std::is_x86_feature_detected!("avx512bf16")
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Where a register tile goes and what is added on the way: `out[r][c] = bias[c] + Σ_k a[r][k]·b[k][c] +
/// residual[r][c]` for the tile's rows and its first `cols` columns. The accumulators start from the bias, and the
/// residual is added as the tile leaves the registers, so the output is written once.
#[derive(Clone, Copy)]
pub struct Out {
    pub ptr: *mut f32,
    pub ld: usize,
    pub cols: usize,
    /// `cols` values, or null for none.
    pub bias: *const f32,
    /// A matrix of the output's shape (`ldr` apart), or null for none.
    pub residual: *const f32,
    pub ldr: usize,
}

impl Out {
    /// A plain store of the tile into `m` at `(r0, c0)`.
    ///
    /// # Safety
    /// The block lies within `m`.
    pub unsafe fn plain(m: Mat, r0: usize, c0: usize, cols: usize) -> Out {
        // SAFETY: the caller upholds this function's contract (see its `# Safety`, or the caller's for a
        // kernel: features detected, pointers covering the tile).
        unsafe {
            Out {
                ptr: m.at(r0, c0),
                ld: m.ld,
                cols,
                bias: std::ptr::null(),
                residual: std::ptr::null(),
                ldr: 0,
            }
        }
    }
}

/// A weight matrix `W` (`[n, k]`, PyTorch's layout) packed into `ceil(n / NR)` column panels for one kernel.
pub struct PackedB {
    data: Panels,
    n: usize,
    k: usize,
    isa: Isa,
}

enum Panels {
    /// Panel `p` holds, for each `k`, the `NR` values `W[NR·p + c][k]` (zero past `n`).
    F32(Vec<f32>),
    /// Panel `p` holds, for each pair `(2j, 2j + 1)` of `k`, 32 columns × the pair, bf16, in the order
    /// `vdpbf16ps` reads: columns 0..16 then 16..32, each as `(W[c][2j], W[c][2j + 1])`; K is padded to even.
    Bf16(Vec<u16>),
}

/// The bf16 kernel's tile: 12 rows × 32 columns.
const BF16_MR: usize = 12;
const BF16_NR: usize = 32;

impl PackedB {
    /// Packs `w` (`[n, k]`) for `dtype` and this CPU's kernels; bf16 needs [`bf16_supported`].
    pub fn pack(w: &[f32], n: usize, k: usize, dtype: Dtype) -> Self {
        Self::pack_for(w, n, k, dtype, Isa::detect())
    }

    fn pack_for(w: &[f32], n: usize, k: usize, dtype: Dtype, isa: Isa) -> Self {
        assert_eq!(w.len(), n * k, "weight shape");
        match dtype {
            Dtype::F32 => {
                let mut data = vec![0.0; n.div_ceil(isa.nr()) * isa.nr() * k];
                // SAFETY: `w` holds n rows of k values, as asserted.
                unsafe { pack_rows(w.as_ptr(), k, n, k, isa.nr(), &mut data) };
                PackedB {
                    data: Panels::F32(data),
                    n,
                    k,
                    isa,
                }
            }
            Dtype::Bf16 => {
                assert!(bf16_supported(), "bf16 weights need AVX512-BF16");
                let kp = k.div_ceil(2);
                let panels = n.div_ceil(BF16_NR);
                let mut data = vec![0u16; panels * kp * 2 * BF16_NR];
                for c in 0..n {
                    let (p, col) = (c / BF16_NR, c % BF16_NR);
                    for kk in 0..k {
                        let at = (p * kp + kk / 2) * 2 * BF16_NR
                            + (col / 16) * 32
                            + (col % 16) * 2
                            + kk % 2;
                        data[at] = half::bf16::from_f32(w[c * k + kk]).to_bits();
                    }
                }
                PackedB {
                    data: Panels::Bf16(data),
                    n,
                    k,
                    isa: Isa::Avx512,
                }
            }
        }
    }

    pub fn n(&self) -> usize {
        self.n
    }

    pub fn k(&self) -> usize {
        self.k
    }

    pub fn dtype(&self) -> Dtype {
        match self.data {
            Panels::F32(_) => Dtype::F32,
            Panels::Bf16(_) => Dtype::Bf16,
        }
    }

    /// Rows and columns of one register tile.
    fn tile(&self) -> (usize, usize) {
        match self.data {
            Panels::F32(_) => (self.isa.mr(), self.isa.nr()),
            Panels::Bf16(_) => (BF16_MR, BF16_NR),
        }
    }

    /// Scratch floats one task needs: a bf16 copy of its block of rows.
    pub fn scratch_floats(&self) -> usize {
        match self.data {
            Panels::F32(_) => 0,
            Panels::Bf16(_) => block_rows(self.k, 2, BF16_MR) * self.k.div_ceil(2),
        }
    }
}

/// Packs `src` (`[n, k]` rows with stride `ld`) into `NR`-column panels: panel `p`, row `kk`, column `c` holds
/// `src[(NR·p + c)·ld + kk]`, zero past `n`. This is `Wᵀ` for a weight, or `Kᵀ` for attention's keys.
///
/// # Safety
/// `src` covers `n` rows of `k` values at stride `ld`.
pub unsafe fn pack_rows(
    src: *const f32,
    ld: usize,
    n: usize,
    k: usize,
    nr: usize,
    dst: &mut [f32],
) {
    // SAFETY: the caller upholds this function's contract (see its `# Safety`, or the caller's for a
    // kernel: features detected, pointers covering the tile).
    unsafe {
        let panels = n.div_ceil(nr);
        assert!(
            dst.len() >= panels * nr * k,
            "pack_rows: destination too small"
        );
        #[cfg(target_arch = "x86_64")]
        let fast = Isa::detect() == Isa::Avx512;
        for p in 0..panels {
            let panel = &mut dst[p * nr * k..(p + 1) * nr * k];
            let cols = nr.min(n - p * nr);
            let src = src.add(p * nr * ld);
            // Whole 16 × 16 blocks in registers (attention packs its keys this way for every head of every
            // sequence); the ragged edges one value at a time.
            let (mut c_done, mut k_done) = (0, 0);
            #[cfg(target_arch = "x86_64")]
            if fast {
                (c_done, k_done) = (cols / 16 * 16, k / 16 * 16);
                for c0 in (0..c_done).step_by(16) {
                    for k0 in (0..k_done).step_by(16) {
                        x86::transpose16(
                            src.add(c0 * ld + k0),
                            ld,
                            panel.as_mut_ptr().add(k0 * nr + c0),
                            nr,
                        );
                    }
                }
            }
            for c in 0..cols {
                let row = std::slice::from_raw_parts(src.add(c * ld), k);
                let from = if c < c_done { k_done } else { 0 };
                for (kk, &v) in row.iter().enumerate().skip(from) {
                    panel[kk * nr + c] = v;
                }
            }
            for kk in 0..k {
                panel[kk * nr + cols..(kk + 1) * nr].fill(0.0);
            }
        }
    }
}

/// Packs `src` (`[k, n]` rows with stride `ld`, already `B`'s orientation) into `NR`-column panels. This is
/// attention's values.
///
/// # Safety
/// `src` covers `k` rows of `n` values at stride `ld`.
pub unsafe fn pack_cols(
    src: *const f32,
    ld: usize,
    k: usize,
    n: usize,
    nr: usize,
    dst: &mut [f32],
) {
    // SAFETY: the caller upholds this function's contract (see its `# Safety`, or the caller's for a
    // kernel: features detected, pointers covering the tile).
    unsafe {
        let panels = n.div_ceil(nr);
        assert!(
            dst.len() >= panels * nr * k,
            "pack_cols: destination too small"
        );
        for p in 0..panels {
            let cols = nr.min(n - p * nr);
            for kk in 0..k {
                let at = (p * k + kk) * nr;
                let row = std::slice::from_raw_parts(src.add(kk * ld + p * nr), cols);
                dst[at..at + cols].copy_from_slice(row);
                dst[at + cols..at + nr].fill(0.0);
            }
        }
    }
}

/// What is applied to `x · Wᵀ` on its way out, in BERT's order: bias, then an activation or the residual (never
/// both in the architectures).
#[derive(Clone, Copy, Default)]
pub struct Epilogue<'a> {
    pub bias: Option<&'a [f32]>,
    pub act: Activation,
    /// A matrix of the output's shape added at the end (the residual connection).
    pub residual: Option<Mat<'a>>,
}

/// Rows per task block: enough row tiles to reuse each weight panel, few enough that the block's rows of `x`
/// (`k` values of `bytes` each) stay in L2.
fn block_rows(k: usize, bytes: usize, mr: usize) -> usize {
    const A_BLOCK_BYTES: usize = 384 << 10;
    (A_BLOCK_BYTES / (k * bytes)).clamp(mr, 8 * mr) / mr * mr
}

/// `out[m × n] = epilogue(x[m × k] · Wᵀ)`, split into tasks over `par`.
pub fn linear(par: &dyn Par, x: Mat, w: &PackedB, epi: Epilogue, out: Mat, scratch: &Scratch) {
    let (m, n, k) = (x.rows, w.n, w.k);
    assert!(
        x.cols == k && out.rows >= m && out.cols == n,
        "linear: x {}×{}, W {n}×{k}, out {}×{}",
        x.rows,
        x.cols,
        out.rows,
        out.cols
    );
    assert!(epi.bias.is_none_or(|b| b.len() == n), "linear: bias length");
    assert!(
        epi.act == Activation::None || epi.residual.is_none(),
        "linear: an activation and a residual together"
    );
    if let Some(r) = epi.residual {
        assert!(r.rows >= m && r.cols == n, "linear: residual shape");
    }
    let (mr, nr) = w.tile();
    let panels = n.div_ceil(nr);
    let tiles = m.div_ceil(mr);
    let bytes = if w.dtype() == Dtype::Bf16 { 2 } else { 4 };
    let max_tiles = block_rows(k, bytes, mr) / mr;
    let threads = par.threads();
    // At least two tasks per thread, so the split balances. Every row block streams all of its columns' weights
    // and every column group all of its rows' activations: while the weights are the larger operand (a query,
    // a few sequences), the extra tasks come from columns, else from rows.
    let want = 2 * threads;
    let fewest = tiles.div_ceil(max_tiles);
    let blocks = if m < n {
        fewest
    } else {
        fewest.max(want.min(tiles))
    };
    let tiles_per_block = tiles.div_ceil(blocks.max(1));
    let blocks = tiles.div_ceil(tiles_per_block.max(1));
    let groups = if blocks >= want {
        1
    } else {
        want.div_ceil(blocks.max(1)).min(panels)
    };
    let per_group = panels.div_ceil(groups);
    let groups = panels.div_ceil(per_group);
    let run = if groups > 1 {
        Par::run_pinned
    } else {
        Par::run
    };
    run(par, blocks * groups, &|task, worker| {
        let (block, group) = (task / groups, task % groups);
        let rows = block * tiles_per_block * mr..((block + 1) * tiles_per_block * mr).min(m);
        let panels = group * per_group..((group + 1) * per_group).min(panels);
        let out_tile = |r0: usize, p: usize| {
            let c0 = p * nr;
            // SAFETY: (r0, c0) lies within `out` (and the residual, of the same shape).
            unsafe {
                Out {
                    ptr: out.at(r0, c0),
                    ld: out.ld,
                    cols: nr.min(n - c0),
                    bias: epi.bias.map_or(std::ptr::null(), |b| b.as_ptr().add(c0)),
                    residual: epi
                        .residual
                        .map_or(std::ptr::null(), |r| r.at(r0, c0) as *const f32),
                    ldr: epi.residual.map_or(0, |r| r.ld),
                }
            }
        };
        // SAFETY: tasks own disjoint (rows × panel columns) blocks of `out`; `x` and the residual are read only;
        // the worker's slab is its own.
        unsafe {
            match &w.data {
                Panels::F32(data) => {
                    for p in panels.clone() {
                        let b = data.as_ptr().add(p * nr * k);
                        for r0 in rows.clone().step_by(mr) {
                            let rows_here = mr.min(rows.end - r0);
                            tile_f32(w.isa, x.at(r0, 0), x.ld, rows_here, b, k, &out_tile(r0, p));
                        }
                    }
                }
                Panels::Bf16(data) => {
                    #[cfg(target_arch = "x86_64")]
                    {
                        let kp = k.div_ceil(2);
                        let slab = scratch.slab(worker);
                        let a = std::slice::from_raw_parts_mut(
                            slab.as_mut_ptr() as *mut u16,
                            slab.len() * 2,
                        );
                        for (i, r) in rows.clone().enumerate() {
                            x86::to_bf16(x.row(r), &mut a[i * 2 * kp..(i + 1) * 2 * kp]);
                        }
                        for p in panels.clone() {
                            let b = data.as_ptr().add(p * kp * 2 * BF16_NR);
                            for r0 in rows.clone().step_by(mr) {
                                let rows_here = mr.min(rows.end - r0);
                                let a = a.as_ptr().add((r0 - rows.start) * 2 * kp);
                                x86::tile_bf16(a, 2 * kp, rows_here, b, kp, &out_tile(r0, p));
                            }
                        }
                    }
                    #[cfg(not(target_arch = "x86_64"))]
                    {
                        let _ = (data, scratch, worker);
                        unreachable!("bf16 weights are only packed where AVX512-BF16 exists");
                    }
                }
            }
            // Once per row of the task's block, while it is still in L2: per tile would be a call per 32 values.
            let cols = panels.start * nr..(panels.end * nr).min(n);
            let rows_of = |act: fn(&mut [f32])| {
                for r in rows.clone() {
                    act(&mut out.row_mut(r)[cols.clone()]);
                }
            };
            match epi.act {
                Activation::None => {}
                Activation::Gelu => rows_of(kernels::gelu),
                Activation::GeluTanh => rows_of(kernels::gelu_tanh),
                Activation::Tanh => rows_of(kernels::tanh),
                Activation::Relu => rows_of(kernels::relu),
                Activation::Log1pRelu => rows_of(kernels::log1p_relu),
                Activation::Log1pLog1pRelu => rows_of(kernels::log1p_log1p_relu),
            }
        }
    });
}

/// One register tile of `rows` rows over all `k`, from a packed panel `b` of `k × isa.nr()`, into `out`.
///
/// # Safety
/// `a` covers `rows` rows of `k` values at stride `lda`; `b` one packed panel; `out` (and its bias and residual)
/// `rows × out.cols` values, `out.cols <= isa.nr()`.
pub unsafe fn tile_f32(
    isa: Isa,
    a: *const f32,
    lda: usize,
    rows: usize,
    b: *const f32,
    k: usize,
    out: &Out,
) {
    // SAFETY: the caller upholds this function's contract (see its `# Safety`, or the caller's for a
    // kernel: features detected, pointers covering the tile).
    unsafe {
        debug_assert!(rows >= 1 && rows <= isa.mr() && out.cols <= isa.nr());
        match isa {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => x86::tile_avx512(a, lda, rows, b, k, out),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => x86::tile_avx2(a, lda, rows, b, k, out),
            _ => tile_portable(a, lda, rows, b, k, isa.nr(), out),
        }
    }
}

/// The tile in plain Rust: the reference the SIMD tiles are tested against, and the kernel on other CPUs.
unsafe fn tile_portable(
    a: *const f32,
    lda: usize,
    rows: usize,
    b: *const f32,
    k: usize,
    nr: usize,
    out: &Out,
) {
    // SAFETY: the caller upholds this function's contract (see its `# Safety`, or the caller's for a
    // kernel: features detected, pointers covering the tile).
    unsafe {
        let mut acc = [0.0f32; NR_MAX];
        for r in 0..rows {
            let acc = &mut acc[..out.cols];
            for (c, v) in acc.iter_mut().enumerate() {
                *v = if out.bias.is_null() {
                    0.0
                } else {
                    *out.bias.add(c)
                };
            }
            for kk in 0..k {
                let av = *a.add(r * lda + kk);
                for (c, v) in acc.iter_mut().enumerate() {
                    *v = av.mul_add(*b.add(kk * nr + c), *v);
                }
            }
            for (c, &v) in acc.iter().enumerate() {
                let res = if out.residual.is_null() {
                    0.0
                } else {
                    *out.residual.add(r * out.ldr + c)
                };
                *out.ptr.add(r * out.ld + c) = v + res;
            }
        }
    }
}

/// The bf16 tile's rows and columns.
pub const BF16_TILE: (usize, usize) = (BF16_MR, BF16_NR);

/// One bf16 register tile over `kp` pairs of k: `a` holds `rows` rows of bf16 pairs (`lda` u16 apart), `b` one
/// panel in the pair layout of [`PackedB`]'s bf16 weights.
///
/// # Safety
/// [`bf16_supported`]; the pointers cover what they describe; `out` as for [`tile_f32`], with 32 columns.
#[cfg(target_arch = "x86_64")]
pub unsafe fn tile_bf16(
    a: *const u16,
    lda: usize,
    rows: usize,
    b: *const u16,
    kp: usize,
    out: &Out,
) {
    // SAFETY: the caller upholds this function's contract (see its `# Safety`, or the caller's for a
    // kernel: features detected, pointers covering the tile).
    unsafe { x86::tile_bf16(a, lda, rows, b, kp, out) }
}

/// One panel row of attention's values: `dst[2c], dst[2c + 1] = first[c], second[c]` for `c < cols`, zero
/// past `cols` and where there is no second row.
///
/// # Safety
/// [`bf16_supported`]; `first` (and `second`) cover `cols <= 32` values; `dst` holds 64.
#[cfg(target_arch = "x86_64")]
pub unsafe fn interleave_bf16(
    first: *const u16,
    second: Option<*const u16>,
    cols: usize,
    dst: &mut [u16],
) {
    // SAFETY: the caller upholds this function's contract (see its `# Safety`, or the caller's for a
    // kernel: features detected, pointers covering the tile).
    unsafe { x86::interleave_bf16(first, second, cols, dst) }
}

/// Rounds `src` to bf16 into `dst`, zero-padding past it.
///
/// # Safety
/// [`bf16_supported`]; `dst.len() >= src.len()`.
#[cfg(target_arch = "x86_64")]
pub unsafe fn to_bf16(src: &[f32], dst: &mut [u16]) {
    // SAFETY: the caller upholds this function's contract (see its `# Safety`, or the caller's for a
    // kernel: features detected, pointers covering the tile).
    unsafe { x86::to_bf16(src, dst) }
}

/// Widest tile of any kernel.
const NR_MAX: usize = 32;

#[cfg(target_arch = "x86_64")]
mod x86;

#[cfg(test)]
pub(crate) mod tests;
