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

/// Precision of packed weights.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
#[derive(clap::ValueEnum)]
pub enum Dtype {
    #[default]
    F32,
    /// bf16 weights, activations rounded to bf16 at the GEMM boundary, f32 accumulation (AVX512-BF16 only).
    Bf16,
}

impl std::fmt::Display for Dtype {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        crate::config::fmt_value_enum(self, f)
    }
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
                // Safety: `w` holds n rows of k values, as asserted.
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

/// What is applied to `x · Wᵀ` on its way out, in BERT's order: bias, then GELU or the residual (never both in
/// BERT).
#[derive(Clone, Copy, Default)]
pub struct Epilogue<'a> {
    pub bias: Option<&'a [f32]>,
    pub gelu: bool,
    /// A matrix of the output's shape added at the end (the residual connection).
    pub residual: Option<Mat>,
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
        !(epi.gelu && epi.residual.is_some()),
        "linear: GELU and residual together"
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
            // Safety: (r0, c0) lies within `out` (and the residual, of the same shape).
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
        // Safety: tasks own disjoint (rows × panel columns) blocks of `out`; `x` and the residual are read only;
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
            if epi.gelu {
                // Once per row of the task's block, while it is still in L2: per tile would be a call per 32 values.
                let cols = panels.start * nr..(panels.end * nr).min(n);
                for r in rows {
                    kernels::gelu(&mut out.row_mut(r)[cols.clone()]);
                }
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
    debug_assert!(rows >= 1 && rows <= isa.mr() && out.cols <= isa.nr());
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => x86::tile_avx512(a, lda, rows, b, k, out),
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => x86::tile_avx2(a, lda, rows, b, k, out),
        _ => tile_portable(a, lda, rows, b, k, isa.nr(), out),
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
    x86::tile_bf16(a, lda, rows, b, kp, out)
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
    x86::interleave_bf16(first, second, cols, dst)
}

/// Rounds `src` to bf16 into `dst`, zero-padding past it.
///
/// # Safety
/// [`bf16_supported`]; `dst.len() >= src.len()`.
#[cfg(target_arch = "x86_64")]
pub unsafe fn to_bf16(src: &[f32], dst: &mut [u16]) {
    x86::to_bf16(src, dst)
}

/// Widest tile of any kernel.
const NR_MAX: usize = 32;

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{Out, BF16_NR};
    use std::arch::x86_64::*;

    /// Picks the instantiation for a tile's row count (the accumulators are registers, so R is a constant).
    macro_rules! by_rows {
        ($rows:expr, $f:ident, $($arg:expr),*) => {
            match $rows {
                12 => $f::<12>($($arg),*),
                11 => $f::<11>($($arg),*),
                10 => $f::<10>($($arg),*),
                9 => $f::<9>($($arg),*),
                8 => $f::<8>($($arg),*),
                7 => $f::<7>($($arg),*),
                6 => $f::<6>($($arg),*),
                5 => $f::<5>($($arg),*),
                4 => $f::<4>($($arg),*),
                3 => $f::<3>($($arg),*),
                2 => $f::<2>($($arg),*),
                _ => $f::<1>($($arg),*),
            }
        };
    }

    /// Lane masks of a 32-column tile's two halves for its first `cols` columns.
    fn masks(cols: usize) -> (__mmask16, __mmask16) {
        let bits = |n: usize| {
            if n >= 16 {
                0xFFFF
            } else {
                (1u32 << n) as u16 - 1
            }
        };
        (bits(cols), bits(cols.saturating_sub(16)))
    }

    /// Starts a 32-column tile's accumulators from the bias (or zero).
    #[target_feature(enable = "avx512f")]
    unsafe fn init512(out: &Out, m: (__mmask16, __mmask16)) -> (__m512, __m512) {
        if out.bias.is_null() {
            (_mm512_setzero_ps(), _mm512_setzero_ps())
        } else {
            (
                _mm512_maskz_loadu_ps(m.0, out.bias),
                _mm512_maskz_loadu_ps(m.1, out.bias.add(16)),
            )
        }
    }

    /// Stores row `r` of a 32-column tile, adding the residual.
    #[target_feature(enable = "avx512f")]
    unsafe fn store512(
        out: &Out,
        m: (__mmask16, __mmask16),
        r: usize,
        mut lo: __m512,
        mut hi: __m512,
    ) {
        if !out.residual.is_null() {
            let res = out.residual.add(r * out.ldr);
            lo = _mm512_add_ps(lo, _mm512_maskz_loadu_ps(m.0, res));
            hi = _mm512_add_ps(hi, _mm512_maskz_loadu_ps(m.1, res.add(16)));
        }
        let o = out.ptr.add(r * out.ld);
        _mm512_mask_storeu_ps(o, m.0, lo);
        _mm512_mask_storeu_ps(o.add(16), m.1, hi);
    }

    /// Asks for the panel's bytes four kilobytes ahead of the ones being read: a query's tile streams weights that a
    /// single pass never reuses, faster than the hardware prefetcher fetches them on its own.
    #[inline(always)]
    unsafe fn prefetch(at: *const u8) {
        const AHEAD: usize = 4096;
        _mm_prefetch::<_MM_HINT_T0>(at.wrapping_add(AHEAD) as *const i8);
        _mm_prefetch::<_MM_HINT_T0>(at.wrapping_add(AHEAD + 64) as *const i8);
    }

    /// 12 × 32 f32 tile: per k, two panel loads, twelve broadcasts, 24 FMAs into 24 of the 32 zmm registers.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn tile_avx512(
        a: *const f32,
        lda: usize,
        rows: usize,
        b: *const f32,
        k: usize,
        out: &Out,
    ) {
        by_rows!(rows, avx512, a, lda, b, k, out)
    }

    #[target_feature(enable = "avx512f")]
    unsafe fn avx512<const R: usize>(
        a: *const f32,
        lda: usize,
        b: *const f32,
        k: usize,
        out: &Out,
    ) {
        let m = masks(out.cols);
        let (lo0, hi0) = init512(out, m);
        let (mut lo, mut hi) = ([lo0; R], [hi0; R]);
        for kk in 0..k {
            prefetch(b.add(kk * 32) as *const u8);
            let b0 = _mm512_loadu_ps(b.add(kk * 32));
            let b1 = _mm512_loadu_ps(b.add(kk * 32 + 16));
            for r in 0..R {
                let av = _mm512_set1_ps(*a.add(r * lda + kk));
                lo[r] = _mm512_fmadd_ps(av, b0, lo[r]);
                hi[r] = _mm512_fmadd_ps(av, b1, hi[r]);
            }
        }
        for r in 0..R {
            store512(out, m, r, lo[r], hi[r]);
        }
    }

    /// 12 × 32 bf16 tile: per pair of k, two panel loads, twelve broadcasts of a row's bf16 pair, 24 `vdpbf16ps`
    /// (each two multiply-adds per lane, accumulated in f32).
    #[target_feature(enable = "avx512f,avx512bf16")]
    pub(super) unsafe fn tile_bf16(
        a: *const u16,
        lda: usize,
        rows: usize,
        b: *const u16,
        kp: usize,
        out: &Out,
    ) {
        by_rows!(rows, bf16, a, lda, b, kp, out)
    }

    #[target_feature(enable = "avx512f,avx512bf16")]
    unsafe fn bf16<const R: usize>(a: *const u16, lda: usize, b: *const u16, kp: usize, out: &Out) {
        let m = masks(out.cols);
        let (lo0, hi0) = init512(out, m);
        let (mut lo, mut hi) = ([lo0; R], [hi0; R]);
        for j in 0..kp {
            prefetch(b.add(j * 2 * BF16_NR) as *const u8);
            let b0: __m512bh =
                std::mem::transmute(_mm512_loadu_si512(b.add(j * 2 * BF16_NR) as *const __m512i));
            let b1: __m512bh = std::mem::transmute(_mm512_loadu_si512(
                b.add(j * 2 * BF16_NR + 32) as *const __m512i
            ));
            for r in 0..R {
                let pair = (a.add(r * lda + 2 * j) as *const i32).read_unaligned();
                let av: __m512bh = std::mem::transmute(_mm512_set1_epi32(pair));
                lo[r] = _mm512_dpbf16_ps(lo[r], av, b0);
                hi[r] = _mm512_dpbf16_ps(hi[r], av, b1);
            }
        }
        for r in 0..R {
            store512(out, m, r, lo[r], hi[r]);
        }
    }

    /// 6 × 16 f32 tile: per k, two panel loads, six broadcasts, twelve FMAs.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn tile_avx2(
        a: *const f32,
        lda: usize,
        rows: usize,
        b: *const f32,
        k: usize,
        out: &Out,
    ) {
        by_rows!(rows, avx2, a, lda, b, k, out)
    }

    #[target_feature(enable = "avx2,fma")]
    unsafe fn avx2<const R: usize>(a: *const f32, lda: usize, b: *const f32, k: usize, out: &Out) {
        // Lane i of a half is kept if its column is below `cols`.
        let lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        let cols = out.cols as i32;
        let m0 = _mm256_cmpgt_epi32(_mm256_set1_epi32(cols), lanes);
        let m1 = _mm256_cmpgt_epi32(_mm256_set1_epi32(cols - 8), lanes);
        let (lo0, hi0) = if out.bias.is_null() {
            (_mm256_setzero_ps(), _mm256_setzero_ps())
        } else {
            (
                _mm256_maskload_ps(out.bias, m0),
                _mm256_maskload_ps(out.bias.add(8), m1),
            )
        };
        let (mut lo, mut hi) = ([lo0; R], [hi0; R]);
        for kk in 0..k {
            let b0 = _mm256_loadu_ps(b.add(kk * 16));
            let b1 = _mm256_loadu_ps(b.add(kk * 16 + 8));
            for r in 0..R {
                let av = _mm256_set1_ps(*a.add(r * lda + kk));
                lo[r] = _mm256_fmadd_ps(av, b0, lo[r]);
                hi[r] = _mm256_fmadd_ps(av, b1, hi[r]);
            }
        }
        for r in 0..R {
            let (mut l, mut h) = (lo[r], hi[r]);
            if !out.residual.is_null() {
                let res = out.residual.add(r * out.ldr);
                l = _mm256_add_ps(l, _mm256_maskload_ps(res, m0));
                h = _mm256_add_ps(h, _mm256_maskload_ps(res.add(8), m1));
            }
            let o = out.ptr.add(r * out.ld);
            _mm256_maskstore_ps(o, m0, l);
            _mm256_maskstore_ps(o.add(8), m1, h);
        }
    }

    /// `dst[j][i] = src[i][j]` for a 16 × 16 block (rows `lds` and `ldd` floats apart), in three rounds of
    /// shuffles: 32-bit pairs, 64-bit pairs, then 128-bit lanes.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn transpose16(src: *const f32, lds: usize, dst: *mut f32, ldd: usize) {
        let r: [__m512; 16] = std::array::from_fn(|i| _mm512_loadu_ps(src.add(i * lds)));
        // t[2i], t[2i+1]: in each 128-bit lane, rows 2i and 2i+1 interleaved.
        let mut t = [_mm512_setzero_ps(); 16];
        for i in 0..8 {
            t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
            t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
        }
        // u[4i + m], lane l: column 4l + m of rows 4i..4i+4.
        let mut u = [_mm512_setzero_ps(); 16];
        for i in 0..4 {
            let pd = |v: __m512| _mm512_castps_pd(v);
            let (a, b, c, d) = (
                pd(t[4 * i]),
                pd(t[4 * i + 1]),
                pd(t[4 * i + 2]),
                pd(t[4 * i + 3]),
            );
            u[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
            u[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
            u[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
            u[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
        }
        // Output row 4l + m gathers lane l of u[m], u[4 + m], u[8 + m], u[12 + m].
        for m in 0..4 {
            let v1 = _mm512_shuffle_f32x4::<0x44>(u[m], u[4 + m]);
            let v2 = _mm512_shuffle_f32x4::<0xEE>(u[m], u[4 + m]);
            let w1 = _mm512_shuffle_f32x4::<0x44>(u[8 + m], u[12 + m]);
            let w2 = _mm512_shuffle_f32x4::<0xEE>(u[8 + m], u[12 + m]);
            _mm512_storeu_ps(dst.add(m * ldd), _mm512_shuffle_f32x4::<0x88>(v1, w1));
            _mm512_storeu_ps(dst.add((4 + m) * ldd), _mm512_shuffle_f32x4::<0xDD>(v1, w1));
            _mm512_storeu_ps(dst.add((8 + m) * ldd), _mm512_shuffle_f32x4::<0x88>(v2, w2));
            _mm512_storeu_ps(
                dst.add((12 + m) * ldd),
                _mm512_shuffle_f32x4::<0xDD>(v2, w2),
            );
        }
    }

    #[target_feature(enable = "avx512f,avx512bw")]
    pub(super) unsafe fn interleave_bf16(
        first: *const u16,
        second: Option<*const u16>,
        cols: usize,
        dst: &mut [u16],
    ) {
        debug_assert!(cols <= 32 && dst.len() >= 64);
        let mask = if cols >= 32 {
            u32::MAX
        } else {
            (1u32 << cols) - 1
        };
        let a = _mm512_maskz_loadu_epi16(mask, first as *const i16);
        let b = second.map_or(_mm512_setzero_si512(), |s| {
            _mm512_maskz_loadu_epi16(mask, s as *const i16)
        });
        // Index i < 32 picks a[i], 32 + i picks b[i]: (a0 b0 a1 b1 ...) then (a16 b16 ...).
        let lo = _mm512_set_epi16(
            47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8, 39, 7, 38, 6, 37, 5, 36,
            4, 35, 3, 34, 2, 33, 1, 32, 0,
        );
        let hi = _mm512_add_epi16(lo, _mm512_set1_epi16(16));
        _mm512_storeu_si512(
            dst.as_mut_ptr() as *mut __m512i,
            _mm512_permutex2var_epi16(a, lo, b),
        );
        _mm512_storeu_si512(
            dst.as_mut_ptr().add(32) as *mut __m512i,
            _mm512_permutex2var_epi16(a, hi, b),
        );
    }

    /// Rounds a row of activations to bf16 (nearest even), zero-padding `dst` past the row.
    pub(super) unsafe fn to_bf16(src: &[f32], dst: &mut [u16]) {
        debug_assert!(dst.len() >= src.len());
        to_bf16_avx512(src, dst)
    }

    #[target_feature(enable = "avx512f,avx512bf16")]
    unsafe fn to_bf16_avx512(src: &[f32], dst: &mut [u16]) {
        let chunks = src.len() / 32;
        for i in 0..chunks {
            let lo = _mm512_loadu_ps(src.as_ptr().add(32 * i));
            let hi = _mm512_loadu_ps(src.as_ptr().add(32 * i + 16));
            let v: __m512i = std::mem::transmute(_mm512_cvtne2ps_pbh(hi, lo));
            _mm512_storeu_si512(dst.as_mut_ptr().add(32 * i) as *mut __m512i, v);
        }
        for i in 32 * chunks..src.len() {
            dst[i] = half::bf16::from_f32(src[i]).to_bits();
        }
        dst[src.len()..].fill(0);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::super::par::Eager;
    use super::*;
    use rand::{Rng, SeedableRng};

    /// `act(x · wᵀ + bias) + residual` in f64: the reference every GEMM test compares against.
    pub(crate) fn reference(
        x: &[f32],
        m: usize,
        k: usize,
        w: &[f32],
        bias: &[f32],
        gelu: bool,
        residual: &[f32],
    ) -> Vec<f32> {
        let n = bias.len();
        let mut out = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                let mut s = bias[j] as f64;
                for l in 0..k {
                    s += x[i * k + l] as f64 * w[j * k + l] as f64;
                }
                if gelu {
                    s = 0.5
                        * s
                        * (1.0 + super::super::kernels::tests::erf64(s / std::f64::consts::SQRT_2));
                }
                if !residual.is_empty() {
                    s += residual[i * n + j] as f64;
                }
                out[i * n + j] = s as f32;
            }
        }
        out
    }

    fn random(rng: &mut impl Rng, len: usize) -> Vec<f32> {
        (0..len).map(|_| rng.gen_range(-1.0..1.0)).collect()
    }

    /// The f32 kernels this CPU can run.
    fn isas() -> Vec<Isa> {
        let mut v = vec![Isa::Portable];
        #[cfg(target_arch = "x86_64")]
        {
            if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
                v.push(Isa::Avx2);
            }
            if std::is_x86_feature_detected!("avx512f") {
                v.push(Isa::Avx512);
            }
        }
        v
    }

    fn run_linear(
        x: &[f32],
        m: usize,
        w: &PackedB,
        bias: &[f32],
        gelu: bool,
        residual: &mut [f32],
        threads: usize,
    ) -> Vec<f32> {
        let (n, k) = (w.n(), w.k());
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .expect("pool");
        let scratch = Scratch::new(threads, w.scratch_floats());
        let mut x = x.to_vec();
        let mut out = vec![f32::NAN; m * n];
        let epi = Epilogue {
            bias: Some(bias),
            gelu,
            residual: (!residual.is_empty()).then(|| Mat::new(residual, m, n)),
        };
        let (xm, om) = (Mat::new(&mut x, m, k), Mat::new(&mut out, m, n));
        pool.install(|| linear(&Eager { threads }, xm, w, epi, om, &scratch));
        out
    }

    /// Every shape the model uses, odd sizes, and M = 1, for every epilogue, on 1 and 2 threads.
    fn check_against_reference(dtype: Dtype, isa: Isa, tolerance: f32) {
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        for &(m, k, n) in &[
            (1, 7, 5),
            (1, 384, 1152),
            (12, 384, 384),
            (5, 300, 33),
            (13, 513, 17),
            (150, 384, 1536),
            (7, 1536, 384),
            (97, 31, 65),
        ] {
            let x = random(&mut rng, m * k);
            let w = random(&mut rng, n * k);
            let b = random(&mut rng, n);
            let packed = PackedB::pack_for(&w, n, k, dtype, isa);
            // bf16 rounds both operands; the reference sees the same rounding, so only accumulation differs.
            let round = |v: &[f32]| -> Vec<f32> {
                match dtype {
                    Dtype::F32 => v.to_vec(),
                    Dtype::Bf16 => v
                        .iter()
                        .map(|&f| half::bf16::from_f32(f).to_f32())
                        .collect(),
                }
            };
            let (xr, wr) = (round(&x), round(&w));
            for (gelu, with_residual) in [(false, false), (true, false), (false, true)] {
                let mut residual = if with_residual {
                    random(&mut rng, m * n)
                } else {
                    Vec::new()
                };
                let expect = reference(&xr, m, k, &wr, &b, gelu, &residual);
                for threads in [1, 2] {
                    let got = run_linear(&x, m, &packed, &b, gelu, &mut residual, threads);
                    for (i, (a, e)) in got.iter().zip(&expect).enumerate() {
                        assert!(
                            (a - e).abs() <= tolerance * (1.0 + e.abs()),
                            "{dtype} {isa:?} {m}x{k}x{n} gelu={gelu} residual={with_residual} \
                             threads={threads} [{i}]: {a} vs {e}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn f32_linear_matches_the_reference_on_odd_shapes_with_every_kernel() {
        for isa in isas() {
            check_against_reference(Dtype::F32, isa, 2e-4);
        }
    }

    #[test]
    fn bf16_linear_matches_the_rounded_reference_on_odd_shapes() {
        if !bf16_supported() {
            eprintln!("skipped: this CPU has no AVX512-BF16");
            return;
        }
        check_against_reference(Dtype::Bf16, Isa::Avx512, 2e-4);
    }

    /// Each SIMD tile against the portable one, every row count and a ragged column edge, bias and residual on.
    #[test]
    fn simd_tiles_equal_the_portable_tile() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(4);
        let k = 45;
        for isa in isas() {
            let (mr, nr) = (isa.mr(), isa.nr());
            let a = random(&mut rng, mr * k);
            let b = random(&mut rng, nr * k);
            let bias = random(&mut rng, nr);
            let res = random(&mut rng, mr * nr);
            for rows in 1..=mr {
                for cols in [nr, nr - 3, 1] {
                    let (mut simd, mut plain) = (vec![0.0f32; mr * nr], vec![0.0f32; mr * nr]);
                    let out = |buf: &mut Vec<f32>| Out {
                        ptr: buf.as_mut_ptr(),
                        ld: nr,
                        cols,
                        bias: bias.as_ptr(),
                        residual: res.as_ptr(),
                        ldr: nr,
                    };
                    unsafe {
                        tile_f32(isa, a.as_ptr(), k, rows, b.as_ptr(), k, &out(&mut simd));
                        tile_portable(a.as_ptr(), k, rows, b.as_ptr(), k, nr, &out(&mut plain));
                    }
                    for (i, (s, p)) in simd.iter().zip(&plain).enumerate() {
                        assert!(
                            (s - p).abs() < 1e-5,
                            "{isa:?} rows={rows} cols={cols} [{i}]: {s} vs {p}"
                        );
                    }
                }
            }
        }
    }

    /// Large enough for the 16 × 16 register transposes and their ragged edges.
    #[test]
    fn pack_rows_transposes_whole_blocks_and_edges() {
        let (n, k, ld, nr) = (45, 37, 40, 32);
        let src: Vec<f32> = (0..n * ld).map(|i| i as f32).collect();
        let mut dst = vec![f32::NAN; 2 * nr * k];
        unsafe { pack_rows(src.as_ptr(), ld, n, k, nr, &mut dst) };
        for p in 0..2 {
            for kk in 0..k {
                for c in 0..nr {
                    let row = p * nr + c;
                    let want = if row < n { src[row * ld + kk] } else { 0.0 };
                    assert_eq!(dst[(p * k + kk) * nr + c], want, "panel {p} k {kk} col {c}");
                }
            }
        }
    }

    #[test]
    fn packers_lay_out_panels() {
        // 3 × 5 source, row stride 6: W[n][k] = 10n + k.
        let src: Vec<f32> = (0..3 * 6).map(|i| ((i / 6) * 10 + i % 6) as f32).collect();
        let mut dst = vec![f32::NAN; 2 * 4 * 5];
        unsafe { pack_rows(src.as_ptr(), 6, 3, 5, 2, &mut dst) };
        // Panel 0: k-major, columns n = 0, 1; panel 1: column n = 2, then zero padding.
        assert_eq!(&dst[..4], &[0.0, 10.0, 1.0, 11.0]);
        assert_eq!(&dst[10..14], &[20.0, 0.0, 21.0, 0.0]);
        let mut dst = vec![f32::NAN; 2 * 2 * 3];
        unsafe { pack_cols(src.as_ptr(), 6, 3, 3, 2, &mut dst) };
        // B[k][n] = src[k][n]: panel 0 rows (0,1), (10,11), (20,21); panel 1 rows (2,0), (12,0), (22,0).
        assert_eq!(&dst[..6], &[0.0, 1.0, 10.0, 11.0, 20.0, 21.0]);
        assert_eq!(&dst[6..], &[2.0, 0.0, 12.0, 0.0, 22.0, 0.0]);
    }
}
