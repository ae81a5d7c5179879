//! Both attention kernels against an f64 reference.

use std::path::Path;

use engine::backend::cuda::inputs::{Extent, InputLayout};
use engine::backend::cuda::ops::attention_launch;
use engine::backend::ops::AttentionShape;
use engine::config::GpuAttention;
use engine::{Batch, Readout};
use rand::{Rng, SeedableRng};

use super::{bf16, bf16_bits, build, execute, Output};

/// The attention kernels, as the backend picks them: kernels/attention.cu (f32 on CUDA cores) and
/// kernels/attention_mma.cu (bf16 MMA tiles).
#[derive(Clone, Copy, Debug, PartialEq)]
struct Kernel(GpuAttention);

impl Kernel {
    fn file(self) -> &'static str {
        match self.0 {
            GpuAttention::CudaCores => "attention.cu",
            GpuAttention::TensorCores => "attention_mma.cu",
        }
    }
    /// The entry point the backend launches for heads of `d` (a narrow and a wide one per file).
    fn function(self, d: usize) -> &'static str {
        attention_launch(self.0, d).0
    }
}

struct Case {
    heads: usize,
    kv_heads: usize,
    d: usize,
    causal: bool,
    /// A sliding window (ModernBERT's local layers).
    window: Option<usize>,
    lens: Vec<usize>,
    /// With a relative position bias (MPNet's) on every score.
    bias: bool,
    /// Scores scaled by 2/√d (not 1/√d) and soft-capped at 1.5, well inside their range (Gemma 2's cap).
    capped: bool,
    /// Trailing tokens of each sequence (all but its first, at most) no token attends to: ColBERT's unattended
    /// query expansion ([`Batch::keys`]).
    unattended: usize,
}

/// Runs `kernel` on `case` under the emulation and checks every output against an f64 reference (of Q, K and V
/// rounded to bf16 for the tensor-core kernel); returns the largest absolute error.
fn check(binary: &Path, kernel: Kernel, case: &Case, seed: u64) -> f64 {
    let Case {
        heads,
        kv_heads,
        d,
        causal,
        window,
        ref lens,
        bias,
        capped,
        unattended,
    } = *case;
    let root = (d as f32).sqrt();
    let shape = AttentionShape {
        causal,
        window,
        scale: if capped { 2.0 / root } else { 1.0 / root },
        softcap: capped.then_some(1.5),
        ..AttentionShape::new(heads, kv_heads, d)
    };
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    // The unattended tail is a run of the expansion token (9) after the other tokens (7).
    let mut batch = Batch::new();
    for &n in lens {
        let tail = unattended.min(n.saturating_sub(1));
        let mut seq = vec![7; n - tail];
        seq.resize(n, 9);
        batch.push_as(&seq, Readout::Vectors { expansion: Some(9) });
    }
    let tokens = batch.tokens();
    // A bucket larger than the batch, as a captured graph's: its grid has blocks past the batch's tiles.
    let extent = Extent {
        tokens: tokens.next_power_of_two().max(16) * 2,
        seqs: lens.len() + 3,
    };
    let layout = InputLayout::new(extent);
    let mut host = vec![0i32; layout.len];
    layout.fill(&batch, &mut host).unwrap();
    let grid_x = extent.tiles();
    let meta = &host[..3];
    let offsets = &host[layout.offsets..layout.offsets + lens.len() + 1];
    let keys = &host[layout.keys..layout.keys + lens.len()];
    let tiles = &host[layout.tiles..layout.tiles + 2 * grid_x];

    // Strided views: qkv and ctx are columns of wider matrices, whose other columns the kernel must not touch.
    let width = (heads + 2 * kv_heads) * d;
    let (ld_qkv, ld_ctx) = (width + 16, heads * d + 32);
    let mut qkv = vec![f32::NAN; tokens * ld_qkv];
    for row in qkv.chunks_mut(ld_qkv) {
        for v in &mut row[..width] {
            *v = rng.gen_range(-2.0..2.0);
        }
    }
    // The bias table covers sequences a little longer than the longest here; none: reach 0.
    let reach = if bias {
        lens.iter().max().unwrap() + 3
    } else {
        0
    };
    let table: Vec<f32> = (0..heads * (2 * reach).saturating_sub(1))
        .map(|_| rng.gen_range(-3.0..3.0))
        .collect();

    let mut input: Vec<u8> = Vec::new();
    // usize::MAX is -1: no window.
    let mut int = |v: usize| input.extend_from_slice(&(v as i32).to_le_bytes());
    let (_, threads, smem) = attention_launch(kernel.0, d);
    for v in [
        heads,
        kv_heads,
        d,
        causal as usize,
        window.map_or(usize::MAX, |w| w),
        threads as usize,
        smem,
        grid_x,
        lens.len(),
        tokens,
        ld_qkv,
        ld_ctx,
    ] {
        int(v);
    }
    for &v in meta.iter().chain(offsets).chain(keys).chain(tiles) {
        input.extend_from_slice(&v.to_le_bytes());
    }
    input.extend_from_slice(&shape.scale.to_le_bytes());
    input.extend_from_slice(&shape.softcap.unwrap_or(0.0).to_le_bytes());
    input.extend_from_slice(&(reach as i32).to_le_bytes());
    for v in table.iter().chain(&qkv) {
        input.extend_from_slice(&v.to_le_bytes());
    }
    let mut out = Output(execute(binary, &format!("{seed}"), &input));
    assert_eq!(out.0.len(), tokens * ld_ctx * 4 + tokens * heads * d * 2);
    let ctx = out.f32s(tokens * ld_ctx);
    let shadow = out.bf16s(tokens * heads * d);
    // The output projection's operand, written beside ctx: exactly what `to_bf16` would make of it.
    for (t, row) in shadow.chunks(heads * d).enumerate() {
        for (c, &bits) in row.iter().enumerate() {
            let want = bf16_bits(ctx[t * ld_ctx + c]);
            assert_eq!(
                bits,
                want,
                "{kernel:?} {}: shadow of token {t}, column {c}",
                describe(case)
            );
        }
    }

    let operand = |x: f32| -> f64 {
        match kernel.0 {
            GpuAttention::CudaCores => x as f64,
            GpuAttention::TensorCores => bf16(x) as f64,
        }
    };
    let mut worst = 0.0f64;
    let mut start = 0;
    for (&len, &kl) in lens.iter().zip(batch.keys()) {
        for h in 0..heads {
            let kv = h / (heads / kv_heads);
            let (qc, kc, vc) = (h * d, heads * d + kv * d, (heads + kv_heads) * d + kv * d);
            for i in 0..len {
                let at = |t: usize, c: usize| operand(qkv[(start + t) * ld_qkv + c]);
                let visible = shape.keys(i, kl);
                let scores: Vec<f64> = visible
                    .clone()
                    .map(|j| {
                        let score = (0..d).map(|e| at(i, qc + e) * at(j, kc + e)).sum::<f64>()
                            * shape.scale as f64;
                        let cap = shape.softcap.map_or(f64::INFINITY, f64::from);
                        let score = if cap.is_finite() {
                            cap * (score / cap).tanh()
                        } else {
                            score
                        };
                        score
                            + if bias {
                                table[h * (2 * reach - 1) + j + reach - 1 - i] as f64
                            } else {
                                0.0
                            }
                    })
                    .collect();
                let top = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let p: Vec<f64> = scores.iter().map(|s| (s - top).exp()).collect();
                let sum: f64 = p.iter().sum();
                for e in 0..d {
                    let want = visible
                        .clone()
                        .zip(&p)
                        .map(|(j, p)| p * at(j, vc + e))
                        .sum::<f64>()
                        / sum;
                    let got = ctx[(start + i) * ld_ctx + qc + e] as f64;
                    assert!(
                        got.is_finite(),
                        "{kernel:?} {case_desc}: row {i} of a {len}-token sequence, head {h}, column {e} not written",
                        case_desc = describe(case)
                    );
                    worst = worst.max((got - want).abs());
                }
            }
        }
        // The columns past the heads belong to the wider matrix.
        for row in ctx[start * ld_ctx..(start + len) * ld_ctx].chunks(ld_ctx) {
            assert!(
                row[heads * d..].iter().all(|v| v.is_nan()),
                "{kernel:?} {}: wrote past its columns",
                describe(case)
            );
        }
        start += len;
    }
    worst
}

fn describe(c: &Case) -> String {
    format!(
        "{} heads / {} kv, d {}, {}{}{}{}, lengths {:?}",
        c.heads,
        c.kv_heads,
        c.d,
        if c.causal { "causal" } else { "bidirectional" },
        c.window.map_or(String::new(), |w| format!(", window {w}")),
        if c.bias { ", relative bias" } else { "" },
        if c.capped { ", soft-capped" } else { "" },
        c.lens
    ) + &match c.unattended {
        0 => String::new(),
        n => format!(", the last {n} tokens unattended"),
    }
}

fn cases() -> Vec<Case> {
    let mut cases = vec![
        // BERT-like: one-token, single-tile, ragged multi-tile sequences.
        Case {
            heads: 4,
            kv_heads: 4,
            d: 32,
            causal: false,
            window: None,
            lens: vec![1, 12, 17, 40, 5],
            bias: false,
            capped: false,
            unattended: 0,
        },
        // Qwen3-like: causal, two query heads per key/value head.
        Case {
            heads: 4,
            kv_heads: 2,
            d: 64,
            causal: true,
            window: None,
            lens: vec![3, 33, 16, 70],
            bias: false,
            capped: false,
            unattended: 0,
        },
        // A head of 96: three warps' columns, six k-steps of Q Kᵀ, twelve n-blocks of P V.
        Case {
            heads: 2,
            kv_heads: 2,
            d: 96,
            causal: false,
            window: None,
            lens: vec![20, 9],
            bias: false,
            capped: false,
            unattended: 0,
        },
        // The widest head, both ways, one key/value head for two query heads; 70 keys span several warps' tiles.
        Case {
            heads: 2,
            kv_heads: 1,
            d: 128,
            causal: false,
            window: None,
            lens: vec![70, 2],
            bias: false,
            capped: false,
            unattended: 0,
        },
        Case {
            heads: 2,
            kv_heads: 1,
            d: 128,
            causal: true,
            window: None,
            lens: vec![2, 70],
            bias: false,
            capped: false,
            unattended: 0,
        },
        // The wide entry points: EmbeddingGemma's heads of 256 (three query heads over one key/value head,
        // bidirectional, a sliding window on its local layers), the wide tensor-core kernel's Q fragments staged in
        // shared memory; and 160, the narrowest head that runs them.
        Case {
            heads: 3,
            kv_heads: 1,
            d: 256,
            causal: false,
            window: None,
            lens: vec![37, 1, 18],
            bias: false,
            capped: false,
            unattended: 0,
        },
        Case {
            heads: 3,
            kv_heads: 1,
            d: 256,
            causal: false,
            window: Some(7),
            lens: vec![37, 1, 18],
            bias: false,
            capped: false,
            unattended: 0,
        },
        Case {
            heads: 2,
            kv_heads: 2,
            d: 160,
            causal: true,
            window: None,
            lens: vec![40, 3],
            bias: false,
            capped: false,
            unattended: 0,
        },
    ];
    // MPNet's relative position bias on the BERT-like case, and with the Qwen3-like causal mask and grouped heads
    // (no model has both today; the op allows it).
    let biased: Vec<Case> = cases[..2]
        .iter()
        .map(|c| Case {
            lens: c.lens.clone(),
            bias: true,
            ..*c
        })
        .collect();
    cases.extend(biased);
    // ColBERT's unattended query expansion: each sequence's last tokens read the others and are read by none;
    // bidirectional, causal with grouped heads, and under a sliding window that still reaches a key from each.
    let expanded: Vec<Case> = [&cases[0], &cases[1]]
        .into_iter()
        .map(|c| Case {
            lens: c.lens.clone(),
            unattended: 6,
            ..*c
        })
        .chain(std::iter::once(Case {
            heads: 4,
            kv_heads: 4,
            d: 64,
            causal: false,
            window: Some(20),
            lens: vec![1, 12, 150, 5, 77],
            bias: false,
            capped: false,
            unattended: 8,
        }))
        .collect();
    cases.extend(expanded);
    // Gemma 2's soft-capped scores: its heads of 256 (the wide entry points), causal, global and sliding-window
    // layers, grouped heads; and a narrow head.
    for (d, window) in [(256, None), (256, Some(7)), (64, None)] {
        cases.push(Case {
            heads: 4,
            kv_heads: 2,
            d,
            causal: true,
            window,
            lens: vec![37, 1, 18],
            bias: false,
            capped: true,
            unattended: 0,
        });
    }
    // ModernBERT's local layers: windows narrower than a key tile and wider than one, over sequences many windows
    // long, and one past every sequence; with a causal mask and grouped heads too (Mistral-style; the op allows
    // it).
    for (window, causal, kv_heads, d) in [
        (4, false, 4, 32),
        (20, false, 4, 64),
        (1000, false, 4, 32),
        // The widest window the host passes (a config's absurd one): no overflow at the tile's end.
        (i32::MAX as usize, false, 4, 32),
        (9, true, 2, 64),
    ] {
        cases.push(Case {
            heads: 4,
            kv_heads,
            d,
            causal,
            window: Some(window),
            lens: vec![1, 12, 150, 5, 77],
            bias: false,
            capped: false,
            unattended: 0,
        });
    }
    cases
}

fn run(kernel: Kernel, tolerance: f64) {
    let mut binaries = std::collections::HashMap::new();
    for (i, case) in cases().iter().enumerate() {
        let function = kernel.function(case.d);
        if !binaries.contains_key(function) {
            let define = format!("KERNEL={function}");
            let Some(binary) = build(kernel.file(), "attention_driver.cpp", function, &define)
            else {
                return;
            };
            binaries.insert(function, binary);
        }
        let worst = check(&binaries[function], kernel, case, i as u64);
        eprintln!("{kernel:?} {}: max |error| {worst:.2e}", describe(case));
        assert!(
            worst <= tolerance,
            "{kernel:?} {}: max |error| {worst:.3e} over {tolerance:.0e}",
            describe(case)
        );
    }
}

/// The f32 kernel, the one measured on an H200: also what shows the emulation itself runs a known-good kernel right.
#[test]
fn emulated_cuda_core_attention_matches_an_f64_reference() {
    run(Kernel(GpuAttention::CudaCores), 1e-5);
}

/// The tensor-core kernel against a reference of the same bf16 operands: what is left is the probabilities'
/// rounding to bf16 (relative 2^-9) and f32 accumulation; a fragment-layout or masking mistake is off by O(0.1).
#[test]
fn emulated_cuda_tensor_core_attention_matches_an_f64_reference_of_its_bf16_operands() {
    run(Kernel(GpuAttention::TensorCores), 1e-2);
}
