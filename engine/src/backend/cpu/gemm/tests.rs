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
    act: Activation,
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
            match act {
                Activation::None => {}
                Activation::Gelu => {
                    s = 0.5
                        * s
                        * (1.0 + super::super::kernels::tests::erf64(s / std::f64::consts::SQRT_2))
                }
                Activation::GeluTanh => {
                    let c = (2.0 / std::f64::consts::PI).sqrt();
                    s = 0.5 * s * (1.0 + (c * (s + 0.044715 * s.powi(3))).tanh())
                }
                Activation::Tanh => s = s.tanh(),
                Activation::Relu => s = s.max(0.0),
                Activation::Log1pRelu => s = s.max(0.0).ln_1p(),
                Activation::Log1pLog1pRelu => s = s.max(0.0).ln_1p().ln_1p(),
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
    act: Activation,
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
        act,
        residual: (!residual.is_empty()).then(|| Mat::new(residual, m, n)),
    };
    let (xm, om) = (Mat::new(&mut x, m, k), Mat::new(&mut out, m, n));
    linear(&Eager { pool: &pool }, xm, w, epi, om, &scratch);
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
        for (act, with_residual) in [
            (Activation::None, false),
            (Activation::Gelu, false),
            (Activation::Tanh, false),
            (Activation::Relu, false),
            (Activation::GeluTanh, false),
            (Activation::Log1pRelu, false),
            (Activation::Log1pLog1pRelu, false),
            (Activation::None, true),
        ] {
            let mut residual = if with_residual {
                random(&mut rng, m * n)
            } else {
                Vec::new()
            };
            let expect = reference(&xr, m, k, &wr, &b, act, &residual);
            for threads in [1, 2] {
                let got = run_linear(&x, m, &packed, &b, act, &mut residual, threads);
                for (i, (a, e)) in got.iter().zip(&expect).enumerate() {
                    assert!(
                        (a - e).abs() <= tolerance * (1.0 + e.abs()),
                        "{dtype} {isa:?} {m}x{k}x{n} {act:?} residual={with_residual} \
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
                // SAFETY: `a` holds mr rows of k, `b` one k × nr panel, the outputs mr × nr; `isa` was detected.
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
    // SAFETY: `src` holds n rows of ld ≥ k values.
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
    // SAFETY: `src` holds 3 rows of 6 ≥ 5 values.
    unsafe { pack_rows(src.as_ptr(), 6, 3, 5, 2, &mut dst) };
    // Panel 0: k-major, columns n = 0, 1; panel 1: column n = 2, then zero padding.
    assert_eq!(&dst[..4], &[0.0, 10.0, 1.0, 11.0]);
    assert_eq!(&dst[10..14], &[20.0, 0.0, 21.0, 0.0]);
    let mut dst = vec![f32::NAN; 2 * 2 * 3];
    // SAFETY: `src` holds 3 rows of 6 ≥ 3 values.
    unsafe { pack_cols(src.as_ptr(), 6, 3, 3, 2, &mut dst) };
    // B[k][n] = src[k][n]: panel 0 rows (0,1), (10,11), (20,21); panel 1 rows (2,0), (12,0), (22,0).
    assert_eq!(&dst[..6], &[0.0, 1.0, 10.0, 11.0, 20.0, 21.0]);
    assert_eq!(&dst[6..], &[2.0, 0.0, 12.0, 0.0, 22.0, 0.0]);
}
