//! The element-wise and row-wise kernels of the forward pass (GEMM epilogue, softmax, LayerNorm, L2 norm), and the
//! `gemm` crate baseline that our GEMM is measured against. Ours because they need vectorised, branch-free
//! `exp` and `erf` that no crate offers in a form the compiler inlines into these loops.

use gemm::Parallelism;

/// Compiles `$body` three times, with AVX-512, with AVX2+FMA and without, and picks at run time: the loops below
/// are written so LLVM vectorises them, and this lets it use 16- or 8-wide registers without building the whole
/// crate for one CPU.
macro_rules! simd_fn {
    ($(#[$meta:meta])* $vis:vis fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $body:block) => {
        $(#[$meta])*
        $vis fn $name($($arg: $ty),*) {
            #[inline(always)]
            fn body($($arg: $ty),*) $body
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f,avx2,fma")]
                unsafe fn avx512($($arg: $ty),*) {
                    body($($arg),*)
                }
                #[target_feature(enable = "avx2,fma")]
                unsafe fn avx2($($arg: $ty),*) {
                    body($($arg),*)
                }
                if std::is_x86_feature_detected!("avx512f") {
                    // SAFETY: the feature was detected on this CPU just now.
                    return unsafe { avx512($($arg),*) };
                }
                if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
                    // SAFETY: the features were detected on this CPU just now.
                    return unsafe { avx2($($arg),*) };
                }
            }
            body($($arg),*)
        }
    };
}

/// `out[m×n] = x[m×k] · wᵀ + bias` through the `gemm` crate, with `w` stored as PyTorch does, `[n × k]`
/// row-major. The model uses [`super::gemm`] instead; this is the library baseline the forward bench measures it
/// against.
pub fn linear(
    x: &[f32],
    m: usize,
    k: usize,
    w: &[f32],
    bias: &[f32],
    out: &mut [f32],
    par: Parallelism,
) {
    let n = bias.len();
    assert!(
        x.len() == m * k && w.len() == n * k && out.len() == m * n,
        "linear: x {} for {m}×{k}, w {} for {n}×{k}, out {} for {m}×{n}",
        x.len(),
        w.len(),
        out.len()
    );
    for row in out.chunks_exact_mut(n) {
        row.copy_from_slice(bias);
    }
    // SAFETY: the slices' lengths match the shapes and strides given (checked above).
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            out.as_mut_ptr(),
            1,
            n as isize,
            true,
            x.as_ptr(),
            1,
            k as isize,
            w.as_ptr(),
            k as isize,
            1,
            1.0,
            1.0,
            false,
            false,
            false,
            par,
        );
    }
}

simd_fn! {
    /// Exact (erf) GELU in place, as BERT's `hidden_act = "gelu"`.
    pub fn gelu(x: &mut [f32]) {
        for v in x.iter_mut() {
            let u = *v;
            *v = 0.5 * u * (1.0 + erf(u * std::f32::consts::FRAC_1_SQRT_2));
        }
    }
}

simd_fn! {
    /// GELU's tanh approximation in place, as ALBERT's `hidden_act = "gelu_new"`.
    pub fn gelu_tanh(x: &mut [f32]) {
        for v in x.iter_mut() {
            *v = gelu_tanh_of(*v);
        }
    }
}

/// GELU's tanh approximation (`gelu_new`, `gelu_pytorch_tanh`): `½ x (1 + tanh(√(2/π) (x + 0.044715 x³)))`, as
/// `x σ(2√(2/π) (x + 0.044715 x³))` (½(1 + tanh(z/2)) is the logistic function of z), which vectorises where
/// libm's tanh would not.
#[inline(always)]
fn gelu_tanh_of(x: f32) -> f32 {
    const C2: f32 = 1.595_769_2; // 2√(2/π)
    x * sigmoid(C2 * (x + 0.044715 * x * x * x))
}

/// The logistic function `1 / (1 + e^-z)`, branch-free: e^-|z| stays in [`exp_neg`]'s range, and the sign picks
/// the matching form.
#[inline(always)]
fn sigmoid(z: f32) -> f32 {
    let e = exp_neg(-z.abs());
    if z >= 0.0 {
        1.0 / (1.0 + e)
    } else {
        e / (1.0 + e)
    }
}

simd_fn! {
    /// Gemma 2's score soft cap in place: `cap · tanh(v · inner)`, `inner` being the score scale over the cap.
    pub fn soft_cap(x: &mut [f32], inner: f32, cap: f32) {
        for v in x.iter_mut() {
            *v = cap * tanh_of(*v * inner);
        }
    }
}

/// tanh as an odd rational function on [-7.9, 7.9] (the form XLA and Eigen use for f32, whose coefficients these
/// are; a few ulp), branch-free so that it vectorises: soft-capped scores go through it once per score, where
/// 2σ(2x) − 1 would lose tanh's relative precision near 0.
#[inline(always)]
fn tanh_of(x: f32) -> f32 {
    let x = x.clamp(-7.905_311, 7.905_311);
    let x2 = x * x;
    let mut p = -2.760_768_5e-16_f32;
    p = p * x2 + 2.000_188e-13;
    p = p * x2 + -8.604_672e-11;
    p = p * x2 + 5.122_297e-8;
    p = p * x2 + 1.485_722_4e-5;
    p = p * x2 + 6.372_619_3e-4;
    p = p * x2 + 4.893_524_6e-3;
    let mut q = 1.198_258_4e-6_f32;
    q = q * x2 + 1.185_347_1e-4;
    q = q * x2 + 2.268_434_6e-3;
    q = q * x2 + 4.893_525e-3;
    x * p / q
}

/// tanh in place (sentence-transformers' Dense default): only on pooled rows, so the standard library's.
pub fn tanh(x: &mut [f32]) {
    for v in x.iter_mut() {
        *v = v.tanh();
    }
}

/// ReLU in place (T5's feed-forward); the loop vectorises as it stands.
pub fn relu(x: &mut [f32]) {
    for v in x.iter_mut() {
        *v = v.max(0.0);
    }
}

/// SPLADE's `log(1 + max(x, 0))` in place. A trained model's logits are mostly negative: those skip the logarithm.
pub fn log1p_relu(x: &mut [f32]) {
    for v in x.iter_mut() {
        *v = if *v > 0.0 { v.ln_1p() } else { 0.0 };
    }
}

/// SpladePooling's `log1p_relu`: `log(1 + log(1 + max(x, 0)))` in place.
pub fn log1p_log1p_relu(x: &mut [f32]) {
    for v in x.iter_mut() {
        *v = if *v > 0.0 { v.ln_1p().ln_1p() } else { 0.0 };
    }
}

/// erf as a rational approximation on [-4, 4] (the form XLA and Eigen use for f32: max error a few ulp), branch-free
/// so that it vectorises.
#[inline(always)]
pub fn erf(x: f32) -> f32 {
    let x = x.clamp(-4.0, 4.0);
    let x2 = x * x;
    let mut p = -2.726_142_3e-10_f32;
    p = p * x2 + 2.770_681_4e-8;
    p = p * x2 + -2.101_024e-6;
    p = p * x2 + -5.692_506_4e-5;
    p = p * x2 + -7.349_906_3e-4;
    p = p * x2 + -2.9546e-3;
    p = p * x2 + -1.609_603_3e-2;
    let mut q = -1.456_607_2e-5_f32;
    q = q * x2 + -2.133_740_6e-4;
    q = q * x2 + -1.682_827e-3;
    q = q * x2 + -7.373_329_2e-3;
    q = q * x2 + -1.426_474e-2;
    x * p / q
}

/// e^x for x ≤ 0 (softmax inputs after subtracting the max), via 2^n · p(r) with a degree-6 polynomial;
/// relative error about 2e-7, branch-free so that it vectorises.
#[inline(always)]
pub fn exp_neg(x: f32) -> f32 {
    // Adding 1.5·2²³ rounds to an integer in the mantissa's low bits: both n and its bits come without a float to
    // integer conversion, which Rust saturates with scalar branches that would stop the loop vectorising.
    const ROUND: f32 = 12_582_912.0;
    let x = x.max(-87.0);
    let t = x * std::f32::consts::LOG2_E + ROUND;
    let n = t - ROUND;
    // Cody-Waite: ln 2 split in two so that r = x - n ln 2 keeps its low bits.
    let r = x - n * 0.693_145_75 - n * 1.428_606_8e-6;
    let mut p = 1.0 / 720.0_f32;
    p = p * r + 1.0 / 120.0;
    p = p * r + 1.0 / 24.0;
    p = p * r + 1.0 / 6.0;
    p = p * r + 0.5;
    p = p * r + 1.0;
    p = p * r + 1.0;
    let two_n = (t.to_bits().wrapping_sub(ROUND.to_bits()).wrapping_add(127)) << 23;
    p * f32::from_bits(two_n)
}

/// Sum of a slice in 16 independent lanes, so the reduction vectorises without reassociation by the compiler.
#[inline(always)]
fn sum_lanes(x: &[f32], f: impl Fn(f32) -> f32) -> f32 {
    let mut acc = [0.0f32; 16];
    let chunks = x.chunks_exact(16);
    let tail = chunks.remainder();
    for c in chunks {
        for i in 0..16 {
            acc[i] += f(c[i]);
        }
    }
    acc.iter().sum::<f32>() + tail.iter().map(|&v| f(v)).sum::<f32>()
}

/// Max of a slice in 16 independent lanes: a fold over `f32::max` does not vectorise (its NaN rules), lanes
/// compared with `>` do.
#[inline(always)]
fn max_lanes(x: &[f32]) -> f32 {
    let mut acc = [f32::NEG_INFINITY; 16];
    let chunks = x.chunks_exact(16);
    let tail = chunks.remainder();
    for c in chunks {
        for i in 0..16 {
            acc[i] = if c[i] > acc[i] { c[i] } else { acc[i] };
        }
    }
    acc.iter()
        .chain(tail)
        .fold(f32::NEG_INFINITY, |m, &v| if v > m { v } else { m })
}

simd_fn! {
    /// Row-wise softmax of `scale · x`, in place.
    pub fn softmax_rows(x: &mut [f32], cols: usize, scale: f32) {
        for row in x.chunks_exact_mut(cols) {
            let max = max_lanes(row);
            for v in row.iter_mut() {
                *v = exp_neg((*v - max) * scale);
            }
            let inv = 1.0 / sum_lanes(row, |v| v);
            for v in row.iter_mut() {
                *v *= inv;
            }
        }
    }
}

simd_fn! {
    /// LayerNorm of one row, in place.
    pub fn layer_norm(row: &mut [f32], gamma: &[f32], beta: &[f32], eps: f32) {
        let h = row.len() as f32;
        let mean = sum_lanes(row, |v| v) / h;
        let var = sum_lanes(row, |v| (v - mean) * (v - mean)) / h;
        let inv = 1.0 / (var + eps).sqrt();
        for ((v, &g), &b) in row.iter_mut().zip(gamma).zip(beta) {
            *v = (*v - mean) * inv * g + b;
        }
    }
}

simd_fn! {
    /// Scales `x` to unit L2 norm (left as is when it is all zeros), writing the norm it had into `norm`.
    pub fn l2_normalize(x: &mut [f32], norm: &mut f32) {
        *norm = sum_lanes(x, |v| v * v).sqrt();
        // sentence-transformers' Normalize clamps the norm at 1e-12 (torch.nn.functional.normalize).
        let inv = 1.0 / norm.max(1e-12);
        for v in x.iter_mut() {
            *v *= inv;
        }
    }
}

simd_fn! {
    /// RMSNorm of one row (or head), in place: `x · weight / √(mean(x²) + eps)`.
    pub fn rms_norm(row: &mut [f32], weight: &[f32], eps: f32) {
        let inv = 1.0 / (sum_lanes(row, |v| v * v) / row.len() as f32 + eps).sqrt();
        for (v, &g) in row.iter_mut().zip(weight) {
            *v = *v * inv * g;
        }
    }
}

simd_fn! {
    /// `out += rmsnorm(x) · weight` for one row.
    pub fn rms_norm_add(x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
        let inv = 1.0 / (sum_lanes(x, |v| v * v) / x.len() as f32 + eps).sqrt();
        for ((o, &v), &g) in out.iter_mut().zip(x).zip(weight) {
            *o += v * inv * g;
        }
    }
}

simd_fn! {
    /// SwiGLU's gate of one row: `out = silu(gate) · up`, `silu(g) = g / (1 + e^-g)`.
    pub fn silu_gate(gate: &[f32], up: &[f32], out: &mut [f32]) {
        for ((o, &g), &u) in out.iter_mut().zip(gate).zip(up) {
            *o = g * sigmoid(g) * u;
        }
    }
}

simd_fn! {
    /// GeGLU's gate of one row: `out = gelu(gate) · up`, with the exact (erf) GELU.
    pub fn gelu_gate(gate: &[f32], up: &[f32], out: &mut [f32]) {
        for ((o, &g), &u) in out.iter_mut().zip(gate).zip(up) {
            *o = 0.5 * g * (1.0 + erf(g * std::f32::consts::FRAC_1_SQRT_2)) * u;
        }
    }
}

simd_fn! {
    /// GeGLU's gate of one row with GELU's tanh approximation (`gelu_pytorch_tanh`):
    /// `out = ½ g (1 + tanh(√(2/π) (g + 0.044715 g³))) · up`.
    pub fn gelu_tanh_gate(gate: &[f32], up: &[f32], out: &mut [f32]) {
        for ((o, &g), &u) in out.iter_mut().zip(gate).zip(up) {
            *o = gelu_tanh_of(g) * u;
        }
    }
}

simd_fn! {
    /// Rotary embedding of one head, in place, in the rotate-half layout: `(x₁, x₂) ← (x₁·cos − x₂·sin,
    /// x₂·cos + x₁·sin)` for the head's two halves.
    pub fn rotary(head: &mut [f32], cos: &[f32], sin: &[f32]) {
        let (x1, x2) = head.split_at_mut(cos.len());
        for (((a, b), &c), &s) in x1.iter_mut().zip(x2.iter_mut()).zip(cos).zip(sin) {
            let (u, v) = (*a, *b);
            *a = u * c - v * s;
            *b = v * c + u * s;
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::super::gemm::tests::reference;
    use super::*;
    use rand::{Rng, SeedableRng};

    #[test]
    fn gemm_crate_baseline_matches_the_reference() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        for &(m, k, n) in &[(1, 7, 5), (3, 33, 17), (13, 64, 96), (1, 384, 1152)] {
            let x: Vec<f32> = (0..m * k).map(|_| rng.gen_range(-1.0..1.0)).collect();
            let w: Vec<f32> = (0..n * k).map(|_| rng.gen_range(-1.0..1.0)).collect();
            let b: Vec<f32> = (0..n).map(|_| rng.gen_range(-1.0..1.0)).collect();
            let mut out = vec![0.0; m * n];
            linear(&x, m, k, &w, &b, &mut out, Parallelism::Rayon(2));
            for (a, e) in out.iter().zip(reference(
                &x,
                m,
                k,
                &w,
                &b,
                crate::backend::ops::Activation::None,
                &[],
            )) {
                assert!((a - e).abs() < 1e-4, "{m}x{k}x{n}: {a} vs {e}");
            }
        }
    }

    #[test]
    fn erf_and_exp_are_accurate() {
        for i in -5000..=5000 {
            let x = i as f32 / 1000.0;
            let e = erf64(x as f64);
            assert!((erf(x) as f64 - e).abs() < 5e-7, "erf({x})");
        }
        for i in 0..=8000 {
            let x = -(i as f32) / 100.0;
            let e = (x as f64).exp();
            assert!(((exp_neg(x) as f64 - e) / e).abs() < 1e-6, "exp({x})");
        }
    }

    /// The rational tanh within a few ulp of f64's, relative near 0 (where a soft cap of 50 multiplies any
    /// absolute error) and absolute where it saturates; odd; and the soft cap over a slice is `cap·tanh(v·inner)`.
    #[test]
    fn tanh_is_accurate_and_soft_cap_applies_it() {
        for i in -12_000..=12_000 {
            let x = i as f32 / 1000.0;
            let e = (x as f64).tanh();
            let err = (tanh_of(x) as f64 - e).abs();
            assert!(
                err <= 4e-7 * e.abs().max(1e-3),
                "tanh({x}): {} vs {e}",
                tanh_of(x)
            );
            assert_eq!(tanh_of(-x), -tanh_of(x));
        }
        assert!((tanh_of(1e-30) / 1e-30 - 1.0).abs() < 1e-6);
        let mut x: Vec<f32> = (0..37).map(|i| i as f32 * 7.0 - 120.0).collect();
        let want: Vec<f64> = x
            .iter()
            .map(|&v| 50.0 * (v as f64 * 0.125 / 50.0).tanh())
            .collect();
        soft_cap(&mut x, 0.125 / 50.0, 50.0);
        for (a, e) in x.iter().zip(want) {
            assert!((*a as f64 - e).abs() < 5e-6, "{a} vs {e}");
        }
    }

    /// erf in f64 by its Taylor series (|x| ≤ 3) or continued fraction, for checking the f32 approximation.
    pub(crate) fn erf64(x: f64) -> f64 {
        if x.abs() > 3.0 {
            // erfc(x) ~ e^{-x²}/(x√π) · (1 - 1/(2x²) + ...) is below 1e-5 here; the f32 result is ±1 ± 2e-5.
            let t =
                (-x * x).exp() / (x.abs() * std::f64::consts::PI.sqrt()) * (1.0 - 0.5 / (x * x));
            return x.signum() * (1.0 - t);
        }
        let mut sum = 0.0;
        let mut term = x;
        let mut n = 0.0;
        while term.abs() > 1e-17 {
            sum += term / (2.0 * n + 1.0);
            n += 1.0;
            term *= -x * x / n;
        }
        sum * 2.0 / std::f64::consts::PI.sqrt()
    }

    #[test]
    fn rms_norm_gates_and_rotary_match_definitions() {
        let mut x: Vec<f32> = (0..8).map(|i| (i as f32 * 0.71).cos() * 3.0).collect();
        let w: Vec<f32> = (0..8).map(|i| 0.5 + i as f32 * 0.1).collect();
        let ms = x.iter().map(|v| (*v as f64).powi(2)).sum::<f64>() / 8.0;
        let expect: Vec<f64> = x
            .iter()
            .zip(&w)
            .map(|(&v, &g)| v as f64 / (ms + 1e-6).sqrt() * g as f64)
            .collect();
        rms_norm(&mut x, &w, 1e-6);
        for (a, e) in x.iter().zip(&expect) {
            assert!((*a as f64 - e).abs() < 1e-5, "rms_norm: {a} vs {e}");
        }
        let gate = [-30.0f32, -2.5, -0.1, 0.0, 0.3, 4.0, 50.0];
        let up = [1.0f32, 2.0, -3.0, 4.0, 0.5, -1.0, 2.0];
        let mut out = [0.0f32; 7];
        silu_gate(&gate, &up, &mut out);
        for i in 0..7 {
            let g = gate[i] as f64;
            let e = g / (1.0 + (-g).exp()) * up[i] as f64;
            assert!(
                (out[i] as f64 - e).abs() < 1e-5 * (1.0 + e.abs()),
                "silu_gate({g}): {} vs {e}",
                out[i]
            );
        }
        gelu_gate(&gate, &up, &mut out);
        for i in 0..7 {
            let g = gate[i] as f64;
            let e = 0.5 * g * (1.0 + erf64(g / std::f64::consts::SQRT_2)) * up[i] as f64;
            assert!(
                (out[i] as f64 - e).abs() < 1e-5 * (1.0 + e.abs()),
                "gelu_gate({g}): {} vs {e}",
                out[i]
            );
        }
        gelu_tanh_gate(&gate, &up, &mut out);
        for i in 0..7 {
            let g = gate[i] as f64;
            let inner = (2.0 / std::f64::consts::PI).sqrt() * (g + 0.044715 * g.powi(3));
            let e = 0.5 * g * (1.0 + inner.tanh()) * up[i] as f64;
            assert!(
                (out[i] as f64 - e).abs() < 1e-5 * (1.0 + e.abs()),
                "gelu_tanh_gate({g}): {} vs {e}",
                out[i]
            );
        }
        let mut head = [1.0f32, 2.0, 3.0, 4.0];
        let (c, s) = ([0.5f32, 1.0], [0.25f32, 0.0]);
        rotary(&mut head, &c, &s);
        assert_eq!(
            head,
            [1.0 * 0.5 - 3.0 * 0.25, 2.0, 3.0 * 0.5 + 1.0 * 0.25, 4.0]
        );
    }

    #[test]
    fn layer_norm_and_softmax_match_definitions() {
        let mut x: Vec<f32> = (0..40).map(|i| (i as f32 * 0.37).sin()).collect();
        let g = vec![1.5f32; 20];
        let b = vec![0.25f32; 20];
        let mut expect = x.clone();
        for row in expect.chunks_mut(20) {
            let mean: f32 = row.iter().sum::<f32>() / 20.0;
            let var: f32 = row.iter().map(|v| (v - mean).powi(2)).sum::<f32>() / 20.0;
            for v in row.iter_mut() {
                *v = (*v - mean) / (var + 1e-12).sqrt() * 1.5 + 0.25;
            }
        }
        for row in x.chunks_mut(20) {
            layer_norm(row, &g, &b, 1e-12);
        }
        for (a, e) in x.iter().zip(&expect) {
            assert!((a - e).abs() < 1e-5);
        }
        let mut s = vec![1.0f32, 2.0, 3.0, -1.0, 0.0, 10.0];
        softmax_rows(&mut s, 3, 0.5);
        let e: Vec<f64> = [0.5f64, 1.0, 1.5].iter().map(|v| v.exp()).collect();
        let z: f64 = e.iter().sum();
        for (a, b) in s[..3].iter().zip(&e) {
            assert!((*a as f64 - b / z).abs() < 1e-6);
        }
        assert!((s[3..].iter().sum::<f32>() - 1.0).abs() < 1e-6);
    }
}
