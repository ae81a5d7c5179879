//! all-MiniLM-L6-v2 through the engine's public API (any backend; the CPU's here):
//!
//! - `forward`: tokens/s of the whole forward pass at one 12-token query, 32 × 128 and a bulk 256 × 150, in f32
//!   and bf16, replaying plans (the default). Roofline fraction = MFLOP per token (printed) × tokens/s ÷ the peak
//!   that `cargo bench -p engine --bench cpu_kernels -- peak` measures.
//! - `capture`: latency of the forward pass run eager (`capture = off`) and replayed, at 1×8 up to 256×150.
//! - `query`: one 12-token query end to end in-process: tokenize, submit, wait.
//!
//! `cargo bench -p engine --bench forward [-- group]`; `EW_THREADS` sets the thread count (default: all cores).

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use engine::{Batch, CaptureMode, Dtype, Engine, EngineConfig};

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

/// f32, and bf16 where the backend runs it (it falls back to f32 elsewhere, and says so in its info).
fn dtypes() -> Vec<Dtype> {
    let mut d = vec![Dtype::F32];
    if minilm(Dtype::Bf16, CaptureMode::Off).backend().info().dtype == Dtype::Bf16 {
        d.push(Dtype::Bf16);
    } else {
        eprintln!("SKIPPED: bf16 (the backend runs f32 on this machine)");
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

criterion_group!(benches, forward, capture, query);
criterion_main!(benches);
