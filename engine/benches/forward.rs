//! Forward-pass throughput on all-MiniLM-L6-v2 at three shapes (one short query, a mid batch, a bulk batch), and the
//! f32 GEMM rate (`gemm_f32`, reported as elements/s = FLOP/s) at the model's weight shapes, for our packed kernel
//! and for the `gemm` crate it replaced. The best GEMM rate is the roofline: a forward figure's fraction of it is
//! FLOPs per token (printed) × tokens/s ÷ peak FLOP/s.
//!
//! `cargo bench -p engine --bench forward`; `EW_THREADS` sets the thread count (default: all cores).

use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use engine::backend::cpu::kernels;
use engine::backend::cpu::packed::{self, Epilogue, PackedB};
use engine::{Batch, Engine, EngineConfig};
use gemm::Parallelism;

fn threads() -> usize {
    std::env::var("EW_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// FLOPs of one forward pass: the six GEMMs per layer plus attention's two, per sequence.
fn forward_flops(h: usize, f: usize, layers: usize, lens: &[usize]) -> f64 {
    let t: usize = lens.iter().sum();
    let linear = 2.0 * t as f64 * (4 * h * h + 2 * h * f) as f64;
    let attention: f64 = lens.iter().map(|&l| 4.0 * (l * l * h) as f64).sum();
    layers as f64 * (linear + attention)
}

fn gemm_peak(c: &mut Criterion) {
    let threads = EngineConfig {
        threads: threads(),
        ..Default::default()
    }
    .resolved_threads();
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("pool");
    let mut g = c.benchmark_group("gemm_f32");
    g.measurement_time(Duration::from_secs(3));
    // The model's weight shapes (out × in), at a bulk-batch row count and at one 12-token query.
    for m in [4096, 12] {
        for (n, k) in [(1152, 384), (384, 384), (1536, 384), (384, 1536)] {
            let x: Vec<f32> = (0..m * k).map(|i| (i % 7) as f32 * 0.1).collect();
            let w: Vec<f32> = (0..n * k).map(|i| (i % 5) as f32 * 0.1).collect();
            let b = vec![0.0f32; n];
            let mut out = vec![0.0f32; m * n];
            let packed = PackedB::pack(&w, n, k);
            g.throughput(Throughput::Elements((2 * m * n * k) as u64));
            let shape = format!("{m}x{k}x{n}");
            g.bench_function(BenchmarkId::new("packed", &shape), |bench| {
                bench.iter(|| {
                    pool.install(|| {
                        packed::matmul(&x, m, &packed, &b, Epilogue::Bias, &mut out, threads)
                    })
                })
            });
            g.bench_function(BenchmarkId::new("gemm_crate", &shape), |bench| {
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

fn forward(c: &mut Criterion) {
    let dir = engine::model::fetch::default_model_dir().expect("default model");
    let engine = Engine::load(
        dir,
        EngineConfig {
            threads: threads(),
            ..Default::default()
        },
    )
    .expect("load");
    let vocab = engine.backend().info().vocab_size as u32;
    let mut g = c.benchmark_group("forward_minilm");
    g.measurement_time(Duration::from_secs(8));
    g.sample_size(10);
    for (seqs, len) in [(1usize, 12usize), (32, 128), (256, 150)] {
        // Deterministic ids; the forward pass costs the same for any ids of a given shape.
        let seq: Vec<u32> = (0..len as u32)
            .map(|i| 1000 + (i * 7919) % (vocab - 1000))
            .collect();
        let batch = Batch::from_sequences(std::iter::repeat_n(seq.as_slice(), seqs));
        let flops = forward_flops(384, 1536, 6, &vec![len; seqs]);
        println!(
            "shape {seqs}x{len}: {:.1} MFLOP per token",
            flops / (seqs * len) as f64 / 1e6
        );
        g.throughput(Throughput::Elements((seqs * len) as u64));
        g.bench_function(format!("{seqs}x{len}"), |bench| {
            bench.iter(|| {
                engine
                    .backend()
                    .submit(batch.clone())
                    .wait()
                    .expect("forward")
            })
        });
    }
    // One search query end to end in-process: tokenize, submit, wait for the pooled, normalised vector.
    let query = "how to reset a forgotten wifi router password";
    assert_eq!(engine.tokenize(query).expect("tokenize").len(), 12);
    g.throughput(Throughput::Elements(12));
    g.bench_function("query_12_tokens_embed", |bench| {
        bench.iter(|| engine.embed(&[query]).expect("embed"))
    });
    g.finish();
}

criterion_group!(benches, gemm_peak, forward);
criterion_main!(benches);
