//! The CPU backend's kernels alone (its own benchmark, so it names the backend's internals; every other file
//! outside `engine/src/backend/cpu/` reaches the engine through its public, device-independent API):
//!
//! - `peak`: the machine's arithmetic ceiling on all threads: independent FMAs (f32) and `vdpbf16ps` (bf16) on
//!   registers, no memory. Criterion's "elem/s" is FLOP/s here and below.
//! - `gemm`: GFLOP/s of each of all-MiniLM-L6-v2's weight shapes, at a bulk row count and at one 12-token query,
//!   for our f32 and bf16 kernels and for the `gemm` crate, to set against `peak`.
//!
//! `cargo bench -p engine --bench cpu_kernels [-- group]`; `EW_THREADS` sets the thread count (default: all cores).

use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use engine::backend::cpu::gemm::{self, bf16_supported, Epilogue, PackedB};
use engine::backend::cpu::kernels;
use engine::backend::cpu::par::{Eager, Mat, Scratch};
use engine::{Dtype, EngineConfig};
// The `gemm` crate, our baseline (`gemm` alone names our module here).
use ::gemm::Parallelism;

fn threads() -> usize {
    EngineConfig {
        threads: std::env::var("EW_THREADS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0),
        ..Default::default()
    }
    .resolved_threads()
}

fn dtypes() -> Vec<Dtype> {
    let mut d = vec![Dtype::F32];
    if bf16_supported() {
        d.push(Dtype::Bf16);
    }
    d
}

/// FLOPs that `spin` performs per call and thread: 12 accumulator chains (enough to cover the FMA latency)
/// × `STEPS` iterations × 16 lanes × 2 (multiply and add; `vdpbf16ps` does two of each per lane).
const STEPS: usize = 1_000_000;

#[cfg(target_arch = "x86_64")]
mod spin {
    use std::arch::x86_64::*;

    /// # Safety
    /// The CPU has AVX-512F.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn fma(seed: f32) -> f32 {
        let mut acc: [__m512; 12] = std::array::from_fn(|i| _mm512_set1_ps(seed + i as f32));
        let (b, c) = (_mm512_set1_ps(0.999_9), _mm512_set1_ps(1e-4));
        for _ in 0..super::STEPS {
            for a in acc.iter_mut() {
                *a = _mm512_fmadd_ps(*a, b, c);
            }
        }
        acc.iter().map(|&a| _mm512_reduce_add_ps(a)).sum()
    }

    /// # Safety
    /// The CPU has AVX-512F and AVX512-BF16.
    #[target_feature(enable = "avx512f,avx512bf16")]
    pub unsafe fn dpbf16(seed: f32) -> f32 {
        let mut acc: [__m512; 12] = std::array::from_fn(|i| _mm512_set1_ps(seed + i as f32));
        // SAFETY: a vector of 32 bf16 ones has the same 512 bits as 32 u16 0x3f80.
        let b: __m512bh = unsafe { std::mem::transmute(_mm512_set1_epi16(0x3f80)) };
        for _ in 0..super::STEPS {
            for a in acc.iter_mut() {
                *a = _mm512_dpbf16_ps(*a, b, b);
            }
        }
        acc.iter().map(|&a| _mm512_reduce_add_ps(a)).sum()
    }
}

fn peak(c: &mut Criterion) {
    #[cfg(target_arch = "x86_64")]
    {
        if !std::is_x86_feature_detected!("avx512f") {
            return;
        }
        let threads = threads();
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .expect("pool");
        let mut g = c.benchmark_group("peak");
        g.measurement_time(Duration::from_secs(3));
        let flops = (threads * 12 * STEPS * 16 * 2) as u64;
        g.throughput(Throughput::Elements(flops));
        g.bench_function("f32_fma", |b| {
            // SAFETY: AVX-512F was detected above.
            b.iter(|| pool.broadcast(|ctx| unsafe { spin::fma(ctx.index() as f32) }))
        });
        if bf16_supported() {
            g.throughput(Throughput::Elements(2 * flops));
            g.bench_function("bf16_dot", |b| {
                // SAFETY: AVX512-BF16 was detected above.
                b.iter(|| pool.broadcast(|ctx| unsafe { spin::dpbf16(ctx.index() as f32) }))
            });
        }
        g.finish();
    }
}

fn gemm_rates(c: &mut Criterion) {
    let threads = threads();
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("pool");
    let mut g = c.benchmark_group("gemm");
    g.measurement_time(Duration::from_secs(3));
    g.warm_up_time(Duration::from_secs(1));
    // The model's weight shapes (out × in), at a bulk-batch row count and at one 12-token query.
    for m in [2048, 12] {
        for (n, k) in [(1152, 384), (384, 384), (1536, 384), (384, 1536)] {
            let mut x: Vec<f32> = (0..m * k).map(|i| (i % 7) as f32 * 0.1).collect();
            let w: Vec<f32> = (0..n * k).map(|i| (i % 5) as f32 * 0.1).collect();
            let b = vec![0.0f32; n];
            let mut out = vec![0.0f32; m * n];
            g.throughput(Throughput::Elements((2 * m * n * k) as u64));
            let shape = format!("{m}x{k}x{n}");
            for dtype in dtypes() {
                let packed = PackedB::pack(&w, n, k, dtype);
                let scratch = Scratch::new(threads, packed.scratch_floats());
                let (xm, om) = (Mat::new(&mut x, m, k), Mat::new(&mut out, m, n));
                let epi = Epilogue {
                    bias: Some(&b),
                    ..Default::default()
                };
                let par = Eager { pool: &pool };
                g.bench_function(BenchmarkId::new(format!("ours_{dtype}"), &shape), |bench| {
                    bench.iter(|| gemm::linear(&par, xm, &packed, epi, om, &scratch))
                });
            }
            g.bench_function(BenchmarkId::new("gemm_crate_f32", &shape), |bench| {
                bench.iter(|| {
                    pool.install(|| {
                        kernels::linear(&x, m, k, &w, &b, &mut out, Parallelism::Rayon(threads))
                    })
                })
            });
        }
    }
    g.finish();
}

criterion_group!(benches, peak, gemm_rates);
criterion_main!(benches);
