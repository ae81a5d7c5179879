//! Capture modes on the tiny random BERT: a replayed plan gives bitwise the output of the eager pass, `lazy` goes
//! eager → capture → replay, every batch runs on the plan of its own bucket, and eviction under a small memory
//! cap never changes a result.

use engine::plan::{Bucket, CaptureMode, ForwardStats, Run};
use engine::{Batch, Engine, EngineConfig};
use rand::{Rng, SeedableRng};

fn tiny(
    capture: CaptureMode,
    tweak: impl FnOnce(&mut EngineConfig),
) -> (tempfile::TempDir, Engine) {
    let dir = tempfile::tempdir().expect("temp dir");
    engine::model::tiny::write_tiny_bert(dir.path(), Default::default()).expect("tiny model");
    let mut config = EngineConfig {
        threads: 2,
        capture,
        ..Default::default()
    };
    tweak(&mut config);
    let engine = Engine::load(dir.path(), config).expect("load");
    (dir, engine)
}

/// Random ids (the tiny vocabulary has 76) for sequences of the given lengths (up to 64 positions).
fn batch(rng: &mut impl Rng, lens: &[usize]) -> Batch {
    let seqs: Vec<Vec<u32>> = lens
        .iter()
        .map(|&l| (0..l).map(|_| rng.gen_range(0..70)).collect())
        .collect();
    Batch::from_sequences(seqs.iter().map(Vec::as_slice))
}

fn run(engine: &Engine, b: &Batch) -> (Vec<f32>, ForwardStats) {
    let out = engine.backend().submit(b.clone()).wait().expect("forward");
    (
        out.embeddings.as_slice().to_vec(),
        out.forward.expect("a forward ran"),
    )
}

/// Shapes across several buckets: one short query, a few sequences, many sequences, one long one.
fn shapes() -> Vec<Vec<usize>> {
    vec![
        vec![3],
        vec![17],
        vec![5, 40],
        vec![1, 2, 3, 4, 5, 6, 7],
        (1..=20).map(|i| 1 + i * 2).collect(),
        vec![48; 9],
    ]
}

#[test]
fn replay_is_bitwise_equal_to_eager_across_buckets() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(11);
    let (_d1, off) = tiny(CaptureMode::Off, |_| {});
    for lens in shapes() {
        // A fresh engine per shape: shapes of one token rung share a plan.
        let (_d2, lazy) = tiny(CaptureMode::Lazy, |_| {});
        let b = batch(&mut rng, &lens);
        let (eager, stats) = run(&off, &b);
        assert_eq!(stats.run, Run::Eager, "capture=off always runs eager");
        for expected in [Run::Eager, Run::Capture, Run::Replay, Run::Replay] {
            let (out, stats) = run(&lazy, &b);
            assert_eq!(stats.run, expected, "lazy sequence for {lens:?}");
            assert!(
                out.iter()
                    .zip(&eager)
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                "{expected:?} differs from eager for {lens:?}"
            );
        }
    }
}

#[test]
fn lazy_mode_goes_eager_then_capture_then_replay() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(12);
    let (_d, engine) = tiny(CaptureMode::Lazy, |_| {});
    let b = batch(&mut rng, &[9, 4]);
    let (_, first) = run(&engine, &b);
    assert_eq!((first.run, first.capture_time), (Run::Eager, None));
    assert_eq!(first.cache.plans, 0);
    let (_, second) = run(&engine, &b);
    assert_eq!(second.run, Run::Capture);
    assert!(second.capture_time.is_some());
    assert_eq!((second.cache.plans, second.cache.captures), (1, 1));
    let (_, third) = run(&engine, &b);
    assert_eq!((third.run, third.capture_time), (Run::Replay, None));
    assert_eq!(third.cache.hits, second.cache.hits + 1);
    // Another batch of the same bucket replays the same plan at once.
    let (_, same_bucket) = run(&engine, &batch(&mut rng, &[3, 2]));
    assert_eq!(same_bucket.run, Run::Replay);
    assert_eq!(same_bucket.bucket, third.bucket);
}

#[test]
fn every_batch_runs_on_the_plan_of_its_own_bucket() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(13);
    let (_d, engine) = tiny(CaptureMode::Lazy, |c| {
        c.token_buckets = vec![8, 32, 128, 512];
        c.seq_buckets = vec![1, 4, 16];
    });
    let ladder = engine.config().ladder();
    for _ in 0..3 {
        for lens in shapes() {
            let b = batch(&mut rng, &lens);
            let (_, stats) = run(&engine, &b);
            let expected = ladder.bucket(b.len(), b.tokens());
            assert_eq!(stats.bucket, expected, "{lens:?}");
            match expected {
                Some(bucket) => {
                    assert!(bucket.fits(b.len(), b.tokens()));
                    assert_eq!(stats.padding_tokens, bucket.tokens - b.tokens());
                }
                // Past the top rung (20 sequences > 16): always eager, never someone else's plan.
                None => assert_eq!(stats.run, Run::Eager, "{lens:?}"),
            }
        }
    }
    // A 3-token query after bigger plans exist still gets the smallest bucket.
    let (_, stats) = run(&engine, &batch(&mut rng, &[3]));
    assert_eq!(stats.bucket, Some(Bucket { seqs: 1, tokens: 8 }));
}

#[test]
fn eviction_under_a_small_cap_keeps_results_right() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(14);
    let tweak = |c: &mut EngineConfig| {
        c.max_batch_tokens = 2048;
        c.token_buckets = vec![64, 256, 512, 1024, 2048];
        c.plan_cache_mib = 1;
    };
    let (_d1, off) = tiny(CaptureMode::Off, tweak);
    let (_d2, capped) = tiny(CaptureMode::Lazy, tweak);
    // Arenas of about 0.2, 0.4 and 0.8 MiB, and one (2048 tokens) over the cap on its own.
    let batches: Vec<Batch> = [vec![40; 5], vec![30; 15], vec![45; 20], vec![48; 40]]
        .iter()
        .map(|lens| batch(&mut rng, lens))
        .collect();
    let mut last = None;
    for round in 0..4 {
        for b in &batches {
            let (expect, _) = run(&off, b);
            let (got, stats) = run(&capped, b);
            assert!(
                got.iter()
                    .zip(&expect)
                    .all(|(a, e)| a.to_bits() == e.to_bits()),
                "round {round}, {} tokens: {:?}",
                b.tokens(),
                stats
            );
            assert!(stats.cache.bytes <= 1 << 20, "{stats:?}");
            last = Some(stats);
        }
    }
    let cache = last.expect("ran").cache;
    assert!(cache.evictions > 0, "{cache:?}");
    assert!(cache.too_large > 0, "{cache:?}");
}

/// Regression (GPU check, session 8: at 32,768 batch tokens, past the plan cache, BGE-large and Qwen3-0.6B ran at
/// 0.68-0.70x of their 16,384 rate): a bucket whose plan is larger than the cache on its own tried to build it
/// again on every batch — on the GPU an extra eager run and a graph capture each time — before running eager.
#[test]
fn a_bucket_too_large_for_the_plan_cache_is_tried_once_then_runs_eager() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(18);
    let (_d, engine) = tiny(CaptureMode::Lazy, |c| {
        c.max_batch_tokens = 2048;
        c.token_buckets = vec![64, 2048];
        c.plan_cache_mib = 1;
    });
    let big = batch(&mut rng, &[48; 40]);
    let tries: Vec<ForwardStats> = (0..4).map(|_| run(&engine, &big).1).collect();
    for stats in &tries {
        assert_eq!(stats.run, Run::Eager, "{stats:?}");
    }
    // Lazy: the first sighting runs eager, the second tries a plan and is refused, later ones do not try.
    let tried: Vec<bool> = tries.iter().map(|s| s.capture_time.is_some()).collect();
    assert_eq!(tried, [false, true, false, false]);
    let cache = tries[3].cache;
    assert_eq!((cache.captures, cache.plans, cache.too_large), (0, 0, 3));
}

#[test]
fn startup_mode_captures_every_bucket_at_start_up() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(15);
    let (_d, engine) = tiny(CaptureMode::Startup, |c| {
        c.token_buckets = vec![16, 64, 256];
        c.seq_buckets = vec![1, 8, 32];
    });
    let info = engine.backend().info();
    assert_eq!(info.startup_plans, engine.config().ladder().tokens.len());
    assert!(info.startup_capture.is_some());
    for lens in [vec![5], vec![20, 20, 20]] {
        let (_, stats) = run(&engine, &batch(&mut rng, &lens));
        assert_eq!(stats.run, Run::Replay, "{lens:?}");
    }
}

#[test]
fn startup_capture_keeps_the_small_buckets_when_the_cache_cannot_hold_the_ladder() {
    // The bug: start-up captured the ladder smallest first and let each big plan evict the small ones before it,
    // so a 1 MiB cache ended up holding the big buckets and every short query captured again on first use.
    let mut rng = rand::rngs::StdRng::seed_from_u64(16);
    let (_d, engine) = tiny(CaptureMode::Startup, |c| {
        c.max_batch_tokens = 2048;
        c.token_buckets = vec![64, 256, 512, 1024, 2048];
        c.seq_buckets = vec![1, 64];
        c.plan_cache_mib = 1;
    });
    let info = engine.backend().info();
    assert!(info.startup_plans >= 3, "{info:?}");
    assert!(info.startup_plans < engine.config().ladder().tokens.len());
    for lens in [vec![5], vec![30, 30]] {
        let (_, stats) = run(&engine, &batch(&mut rng, &lens));
        assert_eq!(stats.run, Run::Replay, "{lens:?}: {stats:?}");
        assert_eq!(stats.cache.evictions, 0, "{stats:?}");
    }
}

#[test]
fn sequence_rungs_share_one_cpu_plan_instead_of_each_holding_an_arena() {
    // The bug: every (sequences, tokens) bucket captured its own arena, though a CPU arena depends on the tokens
    // alone, so the default ladder held up to six copies of each.
    let mut rng = rand::rngs::StdRng::seed_from_u64(17);
    let (_d, off) = tiny(CaptureMode::Off, |_| {});
    let (_d2, engine) = tiny(CaptureMode::Lazy, |c| {
        c.token_buckets = vec![16, 64];
        c.seq_buckets = vec![1, 4, 16];
    });
    let one = batch(&mut rng, &[40]);
    run(&engine, &one);
    let (_, captured) = run(&engine, &one);
    assert_eq!(captured.run, Run::Capture);
    // Ten sequences, the same token rung, another sequence rung: the same plan, replayed, and still right.
    let many = batch(&mut rng, &[5; 10]);
    let (expect, _) = run(&off, &many);
    let (got, stats) = run(&engine, &many);
    assert_eq!(stats.run, Run::Replay, "{stats:?}");
    assert_eq!(
        stats.bucket,
        Some(Bucket {
            seqs: 16,
            tokens: 64
        })
    );
    assert_eq!((stats.cache.plans, stats.cache.captures), (1, 1));
    assert!(got
        .iter()
        .zip(&expect)
        .all(|(a, e)| a.to_bits() == e.to_bits()));
}
