//! The CPU backend: one compute thread owns the model, a rayon pool of `threads` workers and the plan cache;
//! batches queue on a channel and run one at a time, each using every worker, so the machine is never
//! oversubscribed.
//!
//! Each batch runs one of three ways ([`crate::plan`]): *eager* (one rayon fork/join per operation, buffers
//! allocated for the call), *capture* (an arena is made for the batch's bucket, pages touched, then replayed), or
//! *replay* (the pool's threads run the whole forward together in one broadcast, meeting at spin barriers, in the
//! bucket's arena).

mod arena;
pub mod attention;
pub mod gemm;
pub mod kernels;
mod ops;
pub mod par;

use std::sync::mpsc;
use std::sync::Arc;
use std::time::Instant;

use super::ops::{Architecture, Layout};
use super::{BackendInfo, BufferPool, Embeddings, Job, Output, Threaded};
use crate::batch::Batch;
use crate::config::EngineConfig;
use crate::error::{Error, Result};
use crate::plan::{Action, Bucket, CaptureMode, ForwardStats, Ladder, PlanCache, Run};
use arena::Arena;
pub use ops::{Cpu, CpuLinear, CpuPass};
use par::{Eager, Mat, Team};

/// A captured plan: the arena of one bucket. The model's weights, packed at load, are shared by every plan.
struct Plan {
    bucket: Bucket,
    arena: Arena,
}

/// What the compute thread owns.
struct Compute<M> {
    device: Cpu,
    model: M,
    layout: Layout,
    workers: rayon::ThreadPool,
    team: Team,
    threads: usize,
    ladder: Ladder,
    cache: PlanCache<Plan>,
}

/// Starts the compute thread for `model`, whose weights `device` packed.
pub(crate) fn start<M: Architecture<Cpu> + 'static>(
    device: Cpu,
    model: M,
    config: &EngineConfig,
) -> Result<Threaded> {
    let threads = config.resolved_threads().max(1);
    let workers = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .thread_name(|i| format!("engine-cpu-{i}"))
        .build()
        .map_err(|e| Error::Spawn {
            what: format!("{threads} compute threads"),
            message: e.to_string(),
        })?;
    let mut compute = Compute {
        team: Team::new(threads),
        threads,
        ladder: config.ladder(),
        cache: PlanCache::new(config.capture, config.plan_cache_mib << 20),
        workers,
        layout: model.layout(),
        model,
        device,
    };
    let startup = (config.capture == CaptureMode::Startup).then(|| {
        let start = Instant::now();
        // Smallest first and without evicting: when the whole ladder outgrows the cache, start-up keeps the
        // small plans, where replay pays, and the big ones are made on first use.
        for tokens in compute.ladder.tokens.clone() {
            let key = compute.plan_key(Bucket { seqs: 1, tokens });
            compute.capture(key, false);
        }
        start.elapsed()
    });
    let dtype = compute.device.dtype();
    let info = BackendInfo {
        name: "cpu",
        device: format!("{:?} kernels", gemm::Isa::detect()).to_lowercase(),
        threads,
        dim: compute.model.dim(),
        vocab_size: compute.model.vocab_size(),
        max_positions: compute.layout.max_positions,
        token_states: compute.model.pools_last(),
        multi_vector: compute.model.multi_vector(),
        dtype,
        dtype_note: (dtype != config.dtype).then_some("this CPU lacks AVX512-BF16"),
        capture: config.capture,
        startup_capture: startup,
        startup_plans: compute.cache.stats().plans,
    };
    let (tx, rx) = mpsc::channel::<Job>();
    let pool = Arc::new(BufferPool::default());
    let results = pool.clone();
    std::thread::Builder::new()
        .name("engine-cpu".into())
        .spawn(move || {
            // Runs until every sender (the backend) is dropped.
            for job in rx {
                let start = Instant::now();
                let mut emb = results.take(&job.batch, compute.model.dim());
                let forward = compute.run(&job.batch, &mut emb);
                if compute.model.normalizes() {
                    emb.normalize(&job.batch);
                }
                if let Some(k) = compute.model.max_active_dims() {
                    emb.keep_largest(&job.batch, k);
                }
                job.resolver.resolve(Ok(Output {
                    embeddings: emb,
                    queued: start - job.submitted,
                    compute: start.elapsed(),
                    forward: Some(forward),
                }));
            }
        })
        .map_err(|e| Error::Spawn {
            what: "the compute thread".into(),
            message: e.to_string(),
        })?;
    Ok(Threaded { tx, info, pool })
}

impl<M: Architecture<Cpu>> Compute<M> {
    /// Runs one batch the way the plan cache says, and reports how.
    fn run(&mut self, batch: &Batch, out: &mut Embeddings) -> ForwardStats {
        let bucket = self.ladder.bucket(batch.len(), batch.tokens());
        let key = bucket.map(|b| self.plan_key(b));
        let mut capture_time = None;
        let run = match (self.cache.action(key), key) {
            (Action::Replay, Some(b)) if self.replay(b, batch, out) => Run::Replay,
            (Action::Capture, Some(b)) => {
                let start = Instant::now();
                let captured = self.capture(b, true);
                capture_time = Some(start.elapsed());
                if captured && self.replay(b, batch, out) {
                    Run::Capture
                } else {
                    self.eager(batch, out);
                    Run::Eager
                }
            }
            _ => {
                self.eager(batch, out);
                Run::Eager
            }
        };
        ForwardStats {
            run,
            bucket,
            padding_tokens: bucket.map_or(0, |b| b.tokens - batch.tokens()),
            capture_time,
            cache: self.cache.stats(),
        }
    }

    /// The plan serving `bucket`. A CPU plan is an arena sized by tokens alone, so every sequence rung of a token
    /// rung shares one (keyed by the top sequence rung, which fits them all) instead of holding a copy each.
    fn plan_key(&self, bucket: Bucket) -> Bucket {
        Bucket {
            seqs: self.ladder.seqs.last().copied().unwrap_or(bucket.seqs),
            tokens: bucket.tokens,
        }
    }

    /// Makes the plan of `bucket` (its arena, every page touched) and caches it; false if the cache refuses it,
    /// or, with `evict` false, if it does not fit beside the plans already cached.
    fn capture(&mut self, bucket: Bucket, evict: bool) -> bool {
        let mut arena = Arena::new(&self.device, &self.layout, bucket.tokens, self.threads);
        let bytes = arena.bytes();
        // Asked before the pages are touched: a plan the cache refuses would touch them for nothing.
        if !self.cache.admits(bucket, bytes) || (!evict && !self.cache.has_room(bytes)) {
            return false;
        }
        arena.prefault();
        self.cache
            .insert(bucket, Plan { bucket, arena }, bytes)
            .is_ok()
    }

    /// One fork/join per operation, in an arena allocated for this call.
    fn eager(&self, batch: &Batch, out: &mut Embeddings) {
        let mut arena = Arena::new(&self.device, &self.layout, batch.tokens(), self.threads);
        let views = arena.views(batch.tokens());
        let out = Mat::new(out.data_mut(), batch.out_rows(), self.model.dim());
        let par = Eager {
            pool: &self.workers,
        };
        // The whole pass runs on a worker, so each operation's fork/join starts from inside the pool.
        self.workers.install(|| {
            let pass = CpuPass {
                par: &par,
                scratch: views.scratch,
                qkv16: views.qkv16,
            };
            self.model.forward(&pass, batch, &views.acts, out)
        });
    }

    /// The whole forward in one broadcast to the team, in the plan's arena. False if no plan fits the batch.
    fn replay(&mut self, bucket: Bucket, batch: &Batch, out: &mut Embeddings) -> bool {
        let Some(plan) = self.cache.replay(bucket) else {
            return false;
        };
        // A plan only ever runs batches that fit its own bucket.
        if !plan.bucket.fits(batch.len(), batch.tokens()) {
            return false;
        }
        let views = plan.arena.views(batch.tokens());
        let out = Mat::new(out.data_mut(), batch.out_rows(), self.model.dim());
        let model = &self.model;
        self.team.broadcast(&self.workers, |member| {
            let pass = CpuPass {
                par: member,
                scratch: views.scratch,
                qkv16: views.qkv16,
            };
            model.forward(&pass, batch, &views.acts, out)
        });
        true
    }
}
