//! The x86-64 kernels of our GEMM: register tiles for AVX-512, AVX2 and AVX512-BF16, and the bf16 packing and
//! rounding helpers. Only `gemm` calls them, after it has checked the ISA and the lengths.

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
    // SAFETY: the caller upholds this function's contract (see its `# Safety`, or the caller's for a
    // kernel: features detected, pointers covering the tile).
    unsafe {
        if out.bias.is_null() {
            (_mm512_setzero_ps(), _mm512_setzero_ps())
        } else {
            (
                _mm512_maskz_loadu_ps(m.0, out.bias),
                _mm512_maskz_loadu_ps(m.1, out.bias.add(16)),
            )
        }
    }
}

/// Stores row `r` of a 32-column tile, adding the residual.
#[target_feature(enable = "avx512f")]
unsafe fn store512(out: &Out, m: (__mmask16, __mmask16), r: usize, mut lo: __m512, mut hi: __m512) {
    // SAFETY: the caller upholds this function's contract (see its `# Safety`, or the caller's for a
    // kernel: features detected, pointers covering the tile).
    unsafe {
        if !out.residual.is_null() {
            let res = out.residual.add(r * out.ldr);
            lo = _mm512_add_ps(lo, _mm512_maskz_loadu_ps(m.0, res));
            hi = _mm512_add_ps(hi, _mm512_maskz_loadu_ps(m.1, res.add(16)));
        }
        let o = out.ptr.add(r * out.ld);
        _mm512_mask_storeu_ps(o, m.0, lo);
        _mm512_mask_storeu_ps(o.add(16), m.1, hi);
    }
}

/// Asks for the panel's bytes four kilobytes ahead of the ones being read: a query's tile streams weights that a
/// single pass never reuses, faster than the hardware prefetcher fetches them on its own.
#[inline(always)]
unsafe fn prefetch(at: *const u8) {
    // SAFETY: the caller upholds this function's contract (see its `# Safety`, or the caller's for a
    // kernel: features detected, pointers covering the tile).
    unsafe {
        const AHEAD: usize = 4096;
        _mm_prefetch::<_MM_HINT_T0>(at.wrapping_add(AHEAD) as *const i8);
        _mm_prefetch::<_MM_HINT_T0>(at.wrapping_add(AHEAD + 64) as *const i8);
    }
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
    // SAFETY: the caller upholds this function's contract (see its `# Safety`, or the caller's for a
    // kernel: features detected, pointers covering the tile).
    unsafe { by_rows!(rows, avx512, a, lda, b, k, out) }
}

#[target_feature(enable = "avx512f")]
unsafe fn avx512<const R: usize>(a: *const f32, lda: usize, b: *const f32, k: usize, out: &Out) {
    // SAFETY: the caller upholds this function's contract (see its `# Safety`, or the caller's for a
    // kernel: features detected, pointers covering the tile).
    unsafe {
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
    // SAFETY: the caller upholds this function's contract (see its `# Safety`, or the caller's for a
    // kernel: features detected, pointers covering the tile).
    unsafe { by_rows!(rows, bf16, a, lda, b, kp, out) }
}

#[target_feature(enable = "avx512f,avx512bf16")]
unsafe fn bf16<const R: usize>(a: *const u16, lda: usize, b: *const u16, kp: usize, out: &Out) {
    // SAFETY: the caller upholds this function's contract (see its `# Safety`, or the caller's for a
    // kernel: features detected, pointers covering the tile).
    unsafe {
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
    // SAFETY: the caller upholds this function's contract (see its `# Safety`, or the caller's for a
    // kernel: features detected, pointers covering the tile).
    unsafe { by_rows!(rows, avx2, a, lda, b, k, out) }
}

#[target_feature(enable = "avx2,fma")]
unsafe fn avx2<const R: usize>(a: *const f32, lda: usize, b: *const f32, k: usize, out: &Out) {
    // SAFETY: the caller upholds this function's contract (see its `# Safety`, or the caller's for a
    // kernel: features detected, pointers covering the tile).
    unsafe {
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
}

/// `dst[j][i] = src[i][j]` for a 16 × 16 block (rows `lds` and `ldd` floats apart), in three rounds of
/// shuffles: 32-bit pairs, 64-bit pairs, then 128-bit lanes.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn transpose16(src: *const f32, lds: usize, dst: *mut f32, ldd: usize) {
    // SAFETY: the caller upholds this function's contract (see its `# Safety`, or the caller's for a
    // kernel: features detected, pointers covering the tile).
    unsafe {
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
}

#[target_feature(enable = "avx512f,avx512bw")]
pub(super) unsafe fn interleave_bf16(
    first: *const u16,
    second: Option<*const u16>,
    cols: usize,
    dst: &mut [u16],
) {
    // SAFETY: the caller upholds this function's contract (see its `# Safety`, or the caller's for a
    // kernel: features detected, pointers covering the tile).
    unsafe {
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
}

/// Rounds a row of activations to bf16 (nearest even), zero-padding `dst` past the row.
pub(super) unsafe fn to_bf16(src: &[f32], dst: &mut [u16]) {
    // SAFETY: the caller upholds this function's contract (see its `# Safety`, or the caller's for a
    // kernel: features detected, pointers covering the tile).
    unsafe {
        debug_assert!(dst.len() >= src.len());
        to_bf16_avx512(src, dst)
    }
}

#[target_feature(enable = "avx512f,avx512bf16")]
unsafe fn to_bf16_avx512(src: &[f32], dst: &mut [u16]) {
    // SAFETY: the caller upholds this function's contract (see its `# Safety`, or the caller's for a
    // kernel: features detected, pointers covering the tile).
    unsafe {
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
