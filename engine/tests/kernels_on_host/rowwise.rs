//! The row-wise kernels (norms, element-wise, pooling, quantisation, embedding) against f64 references.

use engine::backend::ops::PositionIds;
use rand::{Rng, SeedableRng};

use super::{bf16_bits, build, execute, Output};

/// Bucket rows, batch rows, columns and row stride of the row-wise cases: rows past the batch, a stride wider than
/// the columns, and more columns than one 256-thread block covers.
const ROWS: usize = 12;
const TOKENS: usize = 9;
const COLS: usize = 384;
const LD: usize = COLS + 5;
/// Rotary's heads: 3 per row (and 12 of a quarter of it, for the per-head norm).
const GROUP: usize = 128;
const EPS: f32 = 1e-6;
/// The batch's sequences for pooling (TOKENS tokens in all), and each one's readout code as the CUDA backend
/// uploads it: -1 reads out every token (`Readout::Tokens`), k ≥ 0 pools from the k-th token on (`Readout::Pooled`
/// with `skip`: past the end of the first, which pools its one token; none of the third's; one of the last's).
const LENS: [usize; 4] = [1, 3, 2, 3];
const READOUTS: [i32; 4] = [4, -1, 0, 1];

fn token_readout(s: usize) -> bool {
    READOUTS[s] < 0
}

struct RowInputs {
    x: Vec<f32>,
    y: Vec<f32>,
    a: Vec<f32>,
    b: Vec<f32>,
    /// Each row's position (rotary), and the rotary table: 8 positions of GROUP values (cos half, sin half).
    pos: Vec<usize>,
    table: Vec<f32>,
    offsets: Vec<usize>,
    out_offsets: Vec<usize>,
}

/// Builds `file`'s row-wise driver and runs it on seeded inputs; `None` without a C++ compiler.
fn run_rowwise(file: &str, define: &str) -> Option<(RowInputs, Output)> {
    let name = file.trim_end_matches(".cu");
    let binary = build(
        file,
        "rowwise_driver.cpp",
        &format!("rowwise_{name}"),
        define,
    )?;
    let mut rng = rand::rngs::StdRng::seed_from_u64(17);
    let mut matrix = || -> Vec<f32> { (0..ROWS * LD).map(|_| rng.gen_range(-3.0..3.0)).collect() };
    let (x, y) = (matrix(), matrix());
    let a: Vec<f32> = (0..COLS).map(|_| rng.gen_range(0.5..1.5)).collect();
    let b: Vec<f32> = (0..COLS).map(|_| rng.gen_range(-0.5..0.5)).collect();
    let pos: Vec<usize> = (0..ROWS).map(|r| (r * 5 + 3) % 8).collect();
    let table: Vec<f32> = (0..8 * GROUP).map(|_| rng.gen_range(-1.0..1.0)).collect();
    let cumulative = |sizes: Vec<usize>| -> Vec<usize> {
        std::iter::once(0)
            .chain(sizes.into_iter().scan(0, |at, n| {
                *at += n;
                Some(*at)
            }))
            .collect()
    };
    let offsets = cumulative(LENS.to_vec());
    let out_offsets = cumulative(
        LENS.iter()
            .enumerate()
            .map(|(s, &n)| if token_readout(s) { n } else { 1 })
            .collect(),
    );
    assert_eq!(offsets[LENS.len()], TOKENS);
    let mut input = Vec::new();
    let ints = [ROWS, TOKENS, COLS, LD, GROUP, LENS.len()]
        .into_iter()
        .chain(pos.iter().copied())
        .chain(offsets.iter().copied())
        .chain(out_offsets.iter().copied())
        .map(|v| v as i32)
        .chain(READOUTS);
    for v in ints {
        input.extend_from_slice(&v.to_le_bytes());
    }
    input.extend_from_slice(&EPS.to_le_bytes());
    for v in x.iter().chain(&y).chain(&a).chain(&b).chain(&table) {
        input.extend_from_slice(&v.to_le_bytes());
    }
    let out = Output(execute(&binary, "rowwise", &input));
    let inputs = RowInputs {
        x,
        y,
        a,
        b,
        pos,
        table,
        offsets,
        out_offsets,
    };
    Some((inputs, out))
}

/// Checks `got` (rows × LD) against `want(row, col)` on the batch's rows and first `cols` columns, and that every
/// other element is `untouched(index)`; and that `shadow` (rows × cols) is `got`'s bf16 rounding on the batch's
/// rows and unwritten past them.
fn check_rows(
    what: &str,
    got: &[f32],
    shadow: &[u16],
    cols: usize,
    want: impl Fn(usize, usize) -> f64,
    untouched: impl Fn(usize) -> f32,
) {
    for r in 0..ROWS {
        for c in 0..LD {
            let (i, v) = (r * LD + c, got[r * LD + c]);
            if r < TOKENS && c < cols {
                let w = want(r, c);
                assert!(
                    (v as f64 - w).abs() <= 1e-5 * (1.0 + w.abs()),
                    "{what}: row {r}, column {c}: {v} against {w}"
                );
                assert_eq!(
                    shadow[r * cols + c],
                    bf16_bits(v),
                    "{what}: shadow at {r}, {c}"
                );
            } else {
                assert!(
                    v.to_bits() == untouched(i).to_bits(),
                    "{what}: wrote row {r}, column {c}, outside the batch or its columns"
                );
                if c < cols {
                    assert_eq!(
                        shadow[r * cols + c],
                        0xffff,
                        "{what}: shadow past the batch at {r}, {c}"
                    );
                }
            }
        }
    }
}

#[test]
fn emulated_cuda_norms_match_f64_and_write_their_shadow() {
    let Some((inp, mut out)) = run_rowwise("norm.cu", "EW_PROGRAM_NORM") else {
        return;
    };
    let ln_out = out.f32s(ROWS * LD);
    let ln_out_shadow = out.bf16s(ROWS * COLS);
    let ln = out.f32s(ROWS * LD);
    let ln_shadow = out.bf16s(ROWS * COLS);
    let rms = out.f32s(ROWS * LD);
    let rms_shadow = out.bf16s(ROWS * COLS);
    let rms_added = out.f32s(ROWS * LD);
    let rms_added_shadow = out.bf16s(ROWS * COLS);
    let x = |r: usize, c: usize| inp.x[r * LD + c] as f64;
    let x_plus_y = |r: usize, c: usize| x(r, c) + inp.y[r * LD + c] as f64;
    // The LayerNorm of the rows `v` gives, with gamma a and beta b, as rows of COLS.
    let layer_norm_of = |v: &dyn Fn(usize, usize) -> f64| -> Vec<f64> {
        let mut want = Vec::with_capacity(ROWS * COLS);
        for r in 0..ROWS {
            let mean = (0..COLS).map(|c| v(r, c)).sum::<f64>() / COLS as f64;
            let var = (0..COLS).map(|c| (v(r, c) - mean).powi(2)).sum::<f64>() / COLS as f64;
            let inv = 1.0 / (var + EPS as f64).sqrt();
            want.extend(
                (0..COLS).map(|c| (v(r, c) - mean) * inv * inp.a[c] as f64 + inp.b[c] as f64),
            );
        }
        want
    };
    let (with_residual, plain) = (layer_norm_of(&x_plus_y), layer_norm_of(&x));
    check_rows(
        "layer_norm of x plus a residual into another matrix",
        &ln_out,
        &ln_out_shadow,
        COLS,
        |r, c| with_residual[r * COLS + c],
        |_| f32::NAN,
    );
    check_rows(
        "layer_norm in place",
        &ln,
        &ln_shadow,
        COLS,
        |r, c| plain[r * COLS + c],
        |i| inp.x[i],
    );
    // rms_norm ran on the LayerNorm's output, over whole rows with weight a.
    let l = |r: usize, c: usize| ln[r * LD + c] as f64;
    let rms_of = |r: usize, c: usize| {
        let ms = (0..COLS).map(|k| l(r, k).powi(2)).sum::<f64>() / COLS as f64;
        l(r, c) / (ms + EPS as f64).sqrt() * inp.a[c] as f64
    };
    check_rows("rms_norm", &rms, &rms_shadow, COLS, rms_of, |_| f32::NAN);
    check_rows(
        "rms_norm accumulating",
        &rms_added,
        &rms_added_shadow,
        COLS,
        |r, c| inp.y[r * LD + c] as f64 + rms_of(r, c),
        |i| inp.y[i],
    );
}

/// erf to 1.5e-7 (Abramowitz and Stegun 7.1.26): Rust's std has none.
fn erf(x: f64) -> f64 {
    let t = 1.0 / (1.0 + 0.327_591_1 * x.abs());
    let poly = t
        * (0.254_829_592
            + t * (-0.284_496_736
                + t * (1.421_413_741 + t * (-1.453_152_027 + t * 1.061_405_429))));
    (1.0 - poly * (-x * x).exp()).copysign(x)
}

#[test]
fn emulated_cuda_elementwise_kernels_match_f64_and_write_their_shadow() {
    let Some((inp, mut out)) = run_rowwise("elementwise.cu", "EW_PROGRAM_ELEMENTWISE") else {
        return;
    };
    let f = COLS / 2;
    let act = out.f32s(ROWS * LD);
    let act_shadow = out.bf16s(ROWS * COLS);
    let tanh = out.f32s(ROWS * LD);
    let tanh_shadow = out.bf16s(ROWS * COLS);
    let relu = out.f32s(ROWS * LD);
    let relu_shadow = out.bf16s(ROWS * COLS);
    let act_gelu_tanh = out.f32s(ROWS * LD);
    let act_gelu_tanh_shadow = out.bf16s(ROWS * COLS);
    let splade = out.f32s(ROWS * LD);
    let splade_shadow = out.bf16s(ROWS * COLS);
    let splade_twice = out.f32s(ROWS * LD);
    let splade_twice_shadow = out.bf16s(ROWS * COLS);
    let silu = out.f32s(ROWS * LD);
    let silu_shadow = out.bf16s(ROWS * f);
    let gelu_gate = out.f32s(ROWS * LD);
    let gelu_shadow = out.bf16s(ROWS * f);
    let gelu_tanh_gate = out.f32s(ROWS * LD);
    let gelu_tanh_shadow = out.bf16s(ROWS * f);
    let rounded = out.bf16s(ROWS * COLS);
    let x = |r: usize, c: usize| inp.x[r * LD + c] as f64;
    let silu_of = |g: f64| g / (1.0 + (-g).exp());
    let gelu_of = |g: f64| 0.5 * g * (1.0 + erf(g / 2f64.sqrt()));
    let gelu_tanh_of = |g: f64| {
        0.5 * g * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (g + 0.044715 * g.powi(3))).tanh())
    };
    check_rows(
        "bias_act (GELU, residual)",
        &act,
        &act_shadow,
        COLS,
        |r, c| gelu_of(inp.y[r * LD + c] as f64 + inp.a[c] as f64) + x(r, c),
        |i| inp.y[i],
    );
    check_rows(
        "bias_act (tanh)",
        &tanh,
        &tanh_shadow,
        COLS,
        |r, c| (inp.y[r * LD + c] as f64 + inp.a[c] as f64).tanh(),
        |i| inp.y[i],
    );
    check_rows(
        "bias_act (ReLU)",
        &relu,
        &relu_shadow,
        COLS,
        |r, c| (inp.y[r * LD + c] as f64 + inp.a[c] as f64).max(0.0),
        |i| inp.y[i],
    );
    check_rows(
        "bias_act (GELU's tanh approximation)",
        &act_gelu_tanh,
        &act_gelu_tanh_shadow,
        COLS,
        |r, c| gelu_tanh_of(inp.y[r * LD + c] as f64 + inp.a[c] as f64),
        |i| inp.y[i],
    );
    check_rows(
        "bias_act (SPLADE's log(1 + ReLU))",
        &splade,
        &splade_shadow,
        COLS,
        |r, c| {
            (inp.y[r * LD + c] as f64 + inp.a[c] as f64)
                .max(0.0)
                .ln_1p()
        },
        |i| inp.y[i],
    );
    check_rows(
        "bias_act (SPLADE's log(1 + log(1 + ReLU)))",
        &splade_twice,
        &splade_twice_shadow,
        COLS,
        |r, c| {
            (inp.y[r * LD + c] as f64 + inp.a[c] as f64)
                .max(0.0)
                .ln_1p()
                .ln_1p()
        },
        |i| inp.y[i],
    );
    check_rows(
        "glu (SiLU)",
        &silu,
        &silu_shadow,
        f,
        |r, c| silu_of(x(r, c)) * x(r, f + c),
        |_| f32::NAN,
    );
    check_rows(
        "glu (GELU)",
        &gelu_gate,
        &gelu_shadow,
        f,
        |r, c| gelu_of(x(r, c)) * x(r, f + c),
        |_| f32::NAN,
    );
    check_rows(
        "glu (GELU, tanh)",
        &gelu_tanh_gate,
        &gelu_tanh_shadow,
        f,
        |r, c| gelu_tanh_of(x(r, c)) * x(r, f + c),
        |_| f32::NAN,
    );
    // to_bf16 rounds the batch's rows and zeroes the bucket's rows past them.
    for r in 0..ROWS {
        for c in 0..COLS {
            let want = if r < TOKENS {
                bf16_bits(inp.x[r * LD + c])
            } else {
                0
            };
            assert_eq!(rounded[r * COLS + c], want, "to_bf16 at {r}, {c}");
        }
    }
    // The bf16 operand-slot kernels, on x rounded to bf16 in rows of 2 LD (0xffff past LD): in f32 between the
    // roundings, so within a bf16 rounding (2⁻⁸ relative) of f64 on the rounded inputs; nothing else written.
    let ld2 = 2 * LD;
    let xb: Vec<u16> = (0..ROWS * ld2)
        .map(|i| {
            let (r, c) = (i / ld2, i % ld2);
            if c < LD {
                bf16_bits(inp.x[r * LD + c])
            } else {
                0xffff
            }
        })
        .collect();
    let from = |b: u16| f32::from_bits((b as u32) << 16) as f64;
    let check_bf16 = |what: &str,
                      got: &[u16],
                      cols: usize,
                      untouched: &[u16],
                      want: &dyn Fn(usize, usize) -> f64| {
        for r in 0..ROWS {
            for c in 0..ld2 {
                let i = r * ld2 + c;
                if r < TOKENS && c < cols {
                    let (v, w) = (from(got[i]), want(r, c));
                    assert!(
                        (v - w).abs() <= w.abs() / 256.0 + 1e-6,
                        "{what} at {r}, {c}: {v} against {w}"
                    );
                } else {
                    assert_eq!(got[i], untouched[i], "{what} wrote {r}, {c}");
                }
            }
        }
    };
    let xr = |r: usize, c: usize| from(xb[r * ld2 + c]);
    check_bf16(
        "bias_act_bf16 (GELU)",
        &out.bf16s(ROWS * ld2),
        COLS,
        &xb,
        &|r, c| gelu_of(xr(r, c) + inp.a[c] as f64),
    );
    let fresh = vec![0xffffu16; ROWS * ld2];
    check_bf16(
        "glu_bf16 (SiLU)",
        &out.bf16s(ROWS * ld2),
        f,
        &fresh,
        &|r, c| silu_of(xr(r, c)) * xr(r, f + c),
    );
    check_bf16(
        "glu_bf16 (GELU)",
        &out.bf16s(ROWS * ld2),
        f,
        &fresh,
        &|r, c| gelu_of(xr(r, c)) * xr(r, f + c),
    );
    check_bf16(
        "glu_bf16 (GELU, tanh)",
        &out.bf16s(ROWS * ld2),
        f,
        &fresh,
        &|r, c| gelu_tanh_of(xr(r, c)) * xr(r, f + c),
    );
    check_rotary(&inp, "rotary", &out.f32s(ROWS * LD), &inp.x, GROUP, None);
    for head_dim in [GROUP, GROUP / 4] {
        let what = format!("rotary after per-head RMSNorm, heads of {head_dim}");
        let got = out.f32s(ROWS * LD);
        check_rotary(&inp, &what, &got, &act, head_dim, Some(&inp.a));
    }
}

/// Checks `got` against rotary (rotate-half, heads of `head_dim`, the table read as rows of `head_dim` by each
/// token's position) of `x`, each head first RMS-normalised with `norm` (one weight per column) where given; and
/// that nothing past the batch's rows or the columns was written.
fn check_rotary(
    inp: &RowInputs,
    what: &str,
    got: &[f32],
    x: &[f32],
    head_dim: usize,
    norm: Option<&[f32]>,
) {
    let half = head_dim / 2;
    for r in 0..ROWS {
        for c in 0..LD {
            let v = got[r * LD + c] as f64;
            if r >= TOKENS || c >= COLS {
                assert_eq!(
                    got[r * LD + c].to_bits(),
                    x[r * LD + c].to_bits(),
                    "{what} wrote {r}, {c}"
                );
                continue;
            }
            let (head, i) = (c / head_dim * head_dim, c % head_dim);
            let inv = norm.map_or(1.0, |_| {
                let ms = (head..head + head_dim)
                    .map(|k| (x[r * LD + k] as f64).powi(2))
                    .sum::<f64>()
                    / head_dim as f64;
                1.0 / (ms + EPS as f64).sqrt()
            });
            let h = |k: usize| {
                x[r * LD + head + k] as f64 * inv * norm.map_or(1.0, |w| w[head + k] as f64)
            };
            let t = |k: usize| inp.table[inp.pos[r] * head_dim + k] as f64;
            let want = if i < half {
                h(i) * t(i) - h(half + i) * t(half + i)
            } else {
                let i = i - half;
                h(half + i) * t(i) + h(i) * t(half + i)
            };
            assert!(
                (v - want).abs() <= 1e-5 * (1.0 + want.abs()),
                "{what} at {r}, {c}: {v} against {want}"
            );
        }
    }
}

#[test]
fn emulated_cuda_pooling_and_normalize_match_f64() {
    let Some((inp, mut out)) = run_rowwise("pool.cu", "EW_PROGRAM_POOL") else {
        return;
    };
    let rows_out = inp.out_offsets[LENS.len()];
    let x = |t: usize, c: usize| inp.x[t * LD + c] as f64;
    // Each mode's pooled rows: a Tokens sequence's rows are its tokens' copies, another's one row.
    let mut mean = Vec::new();
    for mode in 0..6 {
        let got = out.f32s(rows_out * LD);
        for (s, w) in inp.offsets.windows(2).enumerate() {
            let o = inp.out_offsets[s];
            let rows: Vec<Vec<f64>> = if token_readout(s) {
                (w[0]..w[1])
                    .map(|t| (0..COLS).map(|c| x(t, c)).collect())
                    .collect()
            } else {
                // The pooled tokens: after the skipped ones, the last at least.
                let start = w[0] + (READOUTS[s] as usize).min(w[1] - w[0] - 1);
                let n = (w[1] - start) as f64;
                let sum = |c: usize| (start..w[1]).map(|t| x(t, c)).sum::<f64>();
                let row = (0..COLS).map(|c| match mode {
                    0 => sum(c) / n,
                    1 => x(start, c),
                    2 => x(w[1] - 1, c),
                    3 => (start..w[1])
                        .map(|t| x(t, c))
                        .fold(f64::NEG_INFINITY, f64::max),
                    4 => sum(c) / n.sqrt(),
                    _ => {
                        // Weights: positions in the whole sequence, 1 for its first token.
                        let weight = |t: usize| (t - w[0] + 1) as f64;
                        let weights: f64 = (start..w[1]).map(weight).sum();
                        (start..w[1]).map(|t| weight(t) * x(t, c)).sum::<f64>() / weights
                    }
                });
                vec![row.collect()]
            };
            for (k, row) in rows.iter().enumerate() {
                for (c, want) in row.iter().enumerate() {
                    let v = got[(o + k) * LD + c] as f64;
                    assert!(
                        (v - want).abs() <= 1e-5,
                        "pool mode {mode}, sequence {s}, row {k}, column {c}: {v} against {want}"
                    );
                }
                assert!(
                    got[(o + k) * LD + COLS..(o + k + 1) * LD]
                        .iter()
                        .all(|v| v.is_nan()),
                    "pool wrote past its columns"
                );
            }
        }
        if mode == 0 {
            mean = got;
        }
    }
    // Normalize: pooled rows to unit length with their norms kept; Tokens rows left alone, their norm -1.
    let normalized = out.f32s(rows_out * LD);
    let norms = out.f32s(LENS.len());
    for (s, &got_norm) in norms.iter().enumerate() {
        let (o, end) = (inp.out_offsets[s], inp.out_offsets[s + 1]);
        if token_readout(s) {
            assert_eq!(got_norm, -1.0);
            let bits = |m: &[f32]| {
                m[o * LD..end * LD]
                    .iter()
                    .map(|v| v.to_bits())
                    .collect::<Vec<_>>()
            };
            assert!(
                bits(&normalized) == bits(&mean),
                "normalize changed the Tokens rows of sequence {s}"
            );
            continue;
        }
        let row = &mean[o * LD..o * LD + COLS];
        let norm = row.iter().map(|&v| (v as f64).powi(2)).sum::<f64>().sqrt();
        assert!(
            (got_norm as f64 - norm).abs() <= 1e-5 * norm,
            "norm of sequence {s}"
        );
        for (c, &v) in row.iter().enumerate() {
            let want = v as f64 / norm;
            assert!(
                (normalized[o * LD + c] as f64 - want).abs() <= 1e-6,
                "normalized {s}, {c}"
            );
        }
    }
}

#[test]
fn emulated_cuda_int8_quantization_matches_the_gateway_formats() {
    let Some((inp, mut out)) = run_rowwise("quantize.cu", "EW_PROGRAM_QUANTIZE") else {
        return;
    };
    let tanh = out.take(TOKENS * COLS, i8::from_le_bytes);
    let per_row = out.take(TOKENS * COLS, i8::from_le_bytes);
    let scales = out.f32s(TOKENS);
    for r in 0..TOKENS {
        let row = &inp.x[r * LD..r * LD + COLS];
        let scale = row.iter().fold(0.0f32, |m, v| m.max(v.abs())) / 127.0;
        assert_eq!(scales[r], scale, "scale of row {r}");
        for (c, &v) in row.iter().enumerate() {
            // The same f32 arithmetic and the host's tanhf on both sides: equal, not close.
            assert_eq!(
                tanh[r * COLS + c],
                (127.0 * v.tanh()).round_ties_even() as i8,
                "tanh int8 at {r}, {c}"
            );
            assert_eq!(
                per_row[r * COLS + c],
                (v / scale).round_ties_even().clamp(-127.0, 127.0) as i8,
                "per-row int8 at {r}, {c}"
            );
        }
    }
}

#[test]
fn emulated_cuda_embedding_gather_adds_word_position_and_row_then_its_layer_norm() {
    let Some((inp, mut out)) = run_rowwise("embed.cu", "EW_PROGRAM_EMBED") else {
        return;
    };
    // Word rows are y's floats read as a dense table of COLS-wide rows, position rows x's, the row a.
    for full in [true, false] {
        let got = out.f32s(ROWS * LD);
        for t in 0..ROWS {
            for c in 0..LD {
                let v = got[t * LD + c];
                if t >= TOKENS || c >= COLS {
                    assert!(v.is_nan(), "embed wrote {t}, {c}");
                    continue;
                }
                let mut want = inp.y[inp.pos[t] * COLS + c];
                if full {
                    want += inp.x[(inp.pos[t] + 1) % 8 * COLS + c];
                    want += inp.a[c];
                }
                assert_eq!(v, want, "embed (position and row: {full}) at {t}, {c}");
            }
        }
    }
    // With BERT's LayerNorm (gamma a, beta b) over the gathered row, in f64 from the same f32 sums.
    let normed = out.f32s(ROWS * LD);
    let shadow = out.bf16s(ROWS * COLS);
    let gathered = |t: usize, c: usize| {
        (inp.y[inp.pos[t] * COLS + c] + inp.x[(inp.pos[t] + 1) % 8 * COLS + c] + inp.a[c]) as f64
    };
    let stats: Vec<(f64, f64)> = (0..TOKENS)
        .map(|t| {
            let mean = (0..COLS).map(|c| gathered(t, c)).sum::<f64>() / COLS as f64;
            let var = (0..COLS)
                .map(|c| (gathered(t, c) - mean).powi(2))
                .sum::<f64>()
                / COLS as f64;
            (mean, 1.0 / (var + EPS as f64).sqrt())
        })
        .collect();
    check_rows(
        "embed with LayerNorm",
        &normed,
        &shadow,
        COLS,
        |t, c| (gathered(t, c) - stats[t].0) * stats[t].1 * inp.a[c] as f64 + inp.b[c] as f64,
        |_| f32::NAN,
    );
    // RoBERTa's position ids, as the CPU backend numbers them (checked there against transformers): the pad id
    // 0 opens the second sequence (ids 0 5 2), and 5 sits inside it, so each run has a pad row and a skip.
    let ids: Vec<u32> = inp.pos.iter().map(|&p| p as u32).collect();
    for pad in [0, 5] {
        let got = out.f32s(ROWS * LD);
        let rule = PositionIds::AfterPadding { pad };
        let mut skipped = false;
        for t in 0..ROWS {
            let seq = inp.offsets.partition_point(|&o| o <= t).saturating_sub(1);
            for c in 0..LD {
                let v = got[t * LD + c];
                if t >= TOKENS || c >= COLS {
                    assert!(v.is_nan(), "embed after pad {pad} wrote {t}, {c}");
                    continue;
                }
                let sequence = &ids[inp.offsets[seq]..inp.offsets[seq + 1]];
                let at = t - inp.offsets[seq];
                let p = rule.of(sequence, at);
                skipped |= ids[t] != pad && p < pad as usize + 1 + at;
                let want = inp.y[inp.pos[t] * COLS + c] + inp.x[p * COLS + c] + inp.a[c];
                assert_eq!(v, want, "embed after pad {pad} at {t}, {c}");
            }
        }
        assert!(skipped, "pad {pad}: no token's position skips a pad");
    }
    // Pairs: sequence s's tokens from index s % 3 on take token type 1's row (b) in place of a.
    let got = out.f32s(ROWS * LD);
    let (mut type0, mut type1) = (0, 0);
    for t in 0..ROWS {
        let seq = inp.offsets.partition_point(|&o| o <= t).saturating_sub(1);
        for c in 0..LD {
            let v = got[t * LD + c];
            if t >= TOKENS || c >= COLS {
                assert!(v.is_nan(), "embed of pairs wrote {t}, {c}");
                continue;
            }
            let at = t - inp.offsets[seq];
            let is_type1 = at >= seq % 3;
            let row = if is_type1 { inp.b[c] } else { inp.a[c] };
            let want = inp.y[inp.pos[t] * COLS + c] + inp.x[at * COLS + c] + row;
            assert_eq!(v, want, "embed of pairs at {t}, {c}");
            if c == 0 {
                *if is_type1 { &mut type1 } else { &mut type0 } += 1;
            }
        }
    }
    assert!(
        type0 > 0 && type1 > 0,
        "pairs: {type0} tokens of type 0, {type1} of type 1"
    );
}
