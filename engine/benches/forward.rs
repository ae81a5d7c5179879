//! Forward-pass throughput on all-MiniLM-L6-v2 at three shapes (one short query, a mid batch, a bulk batch), and the
//! f32 GEMM rate at the model's weight shapes of our packed kernel and of the `gemm` crate it replaced, so each forward figure can be read as a fraction of
//! the roofline: FLOPs per token (printed) × tokens/s ÷ peak FLOP/s.
//!
//! `cargo bench -p engine --bench forward`; `EW_THREADS` sets the thread count (default: all cores).

use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use engine::backend::cpu::kernels;
use engine::{Batch, Engine, EngineConfig};

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
    let mut g = c.benchmark_group("gemm_peak_f32");
    g.measurement_time(Duration::from_secs(3));
    // The model's weight shapes (out × in) at a bulk-batch row count.
    for (n, k) in [(1152, 384), (384, 384), (1536, 384), (384, 1536)] {
        let m = 4096;
        let x = vec![0.5f32; m * k];
        let w = vec![0.25f32; n * k];
        let b = vec![0.0f32; n];
        let mut out = vec![0.0f32; m * n];
        g.throughput(Throughput::Elements((2 * m * n * k) as u64));
        g.bench_function(BenchmarkId::new(format!("{m}x{k}x{n}"), threads), |bench| {
            bench.iter(|| {
                pool.install(|| {
                    kernels::linear(
                        &x,
                        m,
                        k,
                        &w,
                        &b,
                        &mut out,
                        gemm::Parallelism::Rayon(threads),
                    )
                })
            })
        });
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
    g.finish();
}

criterion_group!(benches, gemm_peak, forward);
criterion_main!(benches);
