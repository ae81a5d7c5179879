//! all-MiniLM-L6-v2 on the CPU backend:
//!
//! - `peak`: the machine's arithmetic ceiling on all threads: independent FMAs (f32) and `vdpbf16ps` (bf16) on
//!   registers, no memory. Criterion's "elem/s" is FLOP/s here and below.
//! - `gemm`: GFLOP/s of each of the model's weight shapes, at a bulk row count and at one 12-token query, for our
//!   f32 and bf16 kernels and for the `gemm` crate, to set against `peak`.
//! - `forward`: tokens/s of the whole forward pass at one 12-token query, 32 × 128 and a bulk 256 × 150, in f32
//!   and bf16, replaying plans (the default). Roofline fraction = MFLOP per token (printed) × tokens/s ÷ peak.
//! - `capture`: latency of the forward pass run eager (`capture = off`) and replayed, at 1×8 up to 256×150.
//! - `query`: one 12-token query end to end in-process: tokenize, submit, wait.
//!
//! `cargo bench -p engine --bench forward [-- group]`; `EW_THREADS` sets the thread count (default: all cores).

use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use engine::backend::cpu::gemm::{self, bf16_supported, Epilogue, PackedB};
use engine::backend::cpu::kernels;
use engine::backend::cpu::par::{Eager, Mat, Scratch};
use engine::{Batch, CaptureMode, Dtype, Engine, EngineConfig};
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

/// FLOPs of one forward pass: the six GEMMs per layer plus attention's two, per sequence.
fn forward_flops(h: usize, f: usize, layers: usize, lens: &[usize]) -> f64 {
    let t: usize = lens.iter().sum();
    let linear = 2.0 * t as f64 * (4 * h * h + 2 * h * f) as f64;
    let attention: f64 = lens.iter().map(|&l| 4.0 * (l * l * h) as f64).sum();
    layers as f64 * (linear + attention)
}

/// FLOPs that `spin` performs per call and thread: 12 accumulator chains (enough to cover the FMA latency)
/// × `STEPS` iterations × 16 lanes × 2 (multiply and add; `vdpbf16ps` does two of each per lane).
const STEPS: usize = 1_000_000;

#[cfg(target_arch = "x86_64")]
mod spin {
    use std::arch::x86_64::*;

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

    #[target_feature(enable = "avx512f,avx512bf16")]
    pub unsafe fn dpbf16(seed: f32) -> f32 {
        let mut acc: [__m512; 12] = std::array::from_fn(|i| _mm512_set1_ps(seed + i as f32));
        let b: __m512bh = std::mem::transmute(_mm512_set1_epi16(0x3f80));
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
        // Safety: each kernel runs only where its features were detected.
        g.bench_function("f32_fma", |b| {
            b.iter(|| pool.broadcast(|ctx| unsafe { spin::fma(ctx.index() as f32) }))
        });
        if bf16_supported() {
            g.throughput(Throughput::Elements(2 * flops));
            g.bench_function("bf16_dot", |b| {
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
                let par = Eager { threads };
                g.bench_function(BenchmarkId::new(format!("ours_{dtype}"), &shape), |bench| {
                    bench.iter(|| {
                        pool.install(|| gemm::linear(&par, xm, &packed, epi, om, &scratch))
                    })
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

fn minilm(dtype: Dtype, capture: CaptureMode) -> Engine {
    let dir = engine::model::fetch::default_model_dir().expect("default model");
    let config = EngineConfig {
        threads: threads(),
        dtype,
        capture,
        // The bulk shape (256 × 150) is a batch of its own: give it a bucket rather than the eager fallback.
        max_batch_tokens: 256 * 150,
        ..Default::default()
    };
    Engine::load(dir, config).expect("load")
}

/// `seqs` sequences of `len` deterministic ids; the forward pass costs the same for any ids of a given shape.
fn batch(engine: &Engine, seqs: usize, len: usize) -> Batch {
    let vocab = engine.backend().info().vocab_size as u32;
    let seq: Vec<u32> = (0..len as u32)
        .map(|i| 1000 + (i * 7919) % (vocab - 1000))
        .collect();
    Batch::from_sequences(std::iter::repeat_n(seq.as_slice(), seqs))
}

fn run(engine: &Engine, b: &Batch) {
    engine.backend().submit(b.clone()).wait().expect("forward");
}

fn forward(c: &mut Criterion) {
    let mut g = c.benchmark_group("forward");
    g.measurement_time(Duration::from_secs(6));
    g.sample_size(10);
    for dtype in dtypes() {
        let engine = minilm(dtype, CaptureMode::Lazy);
        for (seqs, len) in [(1usize, 12usize), (32, 128), (256, 150)] {
            let b = batch(&engine, seqs, len);
            let flops = forward_flops(384, 1536, 6, &vec![len; seqs]);
            println!(
                "shape {seqs}x{len}: {:.2} MFLOP per token",
                flops / (seqs * len) as f64 / 1e6
            );
            g.throughput(Throughput::Elements((seqs * len) as u64));
            g.bench_function(format!("{dtype}/{seqs}x{len}"), |bench| {
                bench.iter(|| run(&engine, &b))
            });
        }
    }
    g.finish();
}

fn capture(c: &mut Criterion) {
    let mut g = c.benchmark_group("capture");
    g.measurement_time(Duration::from_secs(4));
    g.sample_size(20);
    let eager = minilm(Dtype::F32, CaptureMode::Off);
    let plans = minilm(Dtype::F32, CaptureMode::Lazy);
    for (seqs, len) in [(1usize, 8usize), (1, 32), (4, 32), (32, 128), (256, 150)] {
        let b = batch(&eager, seqs, len);
        g.throughput(Throughput::Elements((seqs * len) as u64));
        g.bench_function(format!("eager/{seqs}x{len}"), |bench| {
            bench.iter(|| run(&eager, &b))
        });
        g.bench_function(format!("replay/{seqs}x{len}"), |bench| {
            bench.iter(|| run(&plans, &b))
        });
    }
    g.finish();
}

fn query(c: &mut Criterion) {
    let mut g = c.benchmark_group("query");
    g.measurement_time(Duration::from_secs(5));
    let text = "how to reset a forgotten wifi router password";
    for dtype in dtypes() {
        let engine = minilm(dtype, CaptureMode::Lazy);
        assert_eq!(engine.tokenize(text).expect("tokenize").len(), 12);
        g.throughput(Throughput::Elements(12));
        g.bench_function(format!("{dtype}/12_tokens_embed"), |bench| {
            bench.iter(|| engine.embed(&[text]).expect("embed"))
        });
    }
    g.finish();
}

criterion_group!(benches, peak, gemm_rates, forward, capture, query);
criterion_main!(benches);
