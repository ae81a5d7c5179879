//! The CUDA backend (feature `cuda`). CI builds it (cudarc loads the driver, NVRTC and cuBLASLt at run time, so no
//! CUDA is needed to build), compiles every kernel through NVRTC for sm_80 and sm_90 and unit-tests its host-side
//! logic, and runs kernels on the CPU under a host emulation of CUDA (`engine/tests/kernels_on_host/`); on a GPU
//! it is checked by `scripts/gpu_check.sh` (last run on an H200: `results/20261204-gpu-check-h200*`, cosine ≥
//! 0.99996 against transformers fp32 for three model shapes).
//!
//! - `nvrtc`: the kernels of `kernels/*.cu`, compiled for the device's architecture, cached on disk.
//! - `inputs`: a batch's inputs in one device buffer, uploaded by one copy from page-locked staging.
//! - `device`: the GPU (context, compute stream, kernels, cuBLASLt) and the weights' upload.
//! - `mat`: views of device memory as matrices, and which one the GEMM scratch holds in bf16.
//! - `ops`: the op set on the GPU (weights in bf16 for cuBLASLt, activations in f32), `gemm`: cuBLASLt.
//! - `pinned`: the pool of page-locked host buffers results are copied into.
//! - this file: the backend. One compute thread owns the context, the model and the plan cache; it uploads a
//!   batch's inputs, runs the forward on the compute stream (eager, or a CUDA graph captured for the batch's
//!   bucket and replayed), records an event, and has the copy stream copy the pooled rows into a pinned buffer
//!   after it. It does not wait: a completion thread blocks on each copy's event (a blocking-sync event, so it
//!   sleeps instead of spinning a core), then fills the result and resolves the handle. The compute thread is
//!   free for the next batch at once; its forward waits (on the GPU, not the host) only for the previous copy
//!   out of the same memory.

pub mod device;
pub mod gemm;
pub mod inputs;
pub mod mat;
pub mod nvrtc;
pub mod ops;
pub mod pinned;

use std::sync::{mpsc, Arc, Mutex};
use std::time::Instant;

use cudarc::driver::{
    sys, CudaEvent, CudaGraph, CudaSlice, CudaStream, DevicePtr, PinnedHostSlice,
};

use super::ops::{Architecture, Layout};
use super::{Backend, BackendInfo, BufferPool, Job, Output, Threaded};
use crate::batch::Batch;
use crate::config::{EngineConfig, GpuIntermediate};
use crate::error::{Error, Result};
use crate::model::{Model, ModelDir};
use crate::plan::{Action, Bucket, CaptureMode, ForwardStats, Ladder, PlanCache, Run};
use device::{driver, Cuda};
use inputs::{Extent, InputLayout, Staging};
use mat::CudaMat;
use ops::{CudaPass, PassInputs};
use pinned::{Capacity, Pool};

/// Loads the model in `dir` onto GPU `config.device` and starts the backend. Everything CUDA lives on the compute
/// thread (a CUDA graph may not move between threads); start-up errors come back from it.
pub fn start(dir: &ModelDir, config: &EngineConfig) -> Result<Arc<dyn Backend>> {
    let (ready_tx, ready_rx) = mpsc::sync_channel(1);
    let (tx, rx) = mpsc::channel::<Job>();
    let results = Arc::new(BufferPool::default());
    let (dir, config, pool) = (dir.clone(), config.clone(), results.clone());
    std::thread::Builder::new()
        .name("engine-cuda".into())
        .spawn(move || match Compute::new(&dir, &config) {
            Ok((mut compute, info)) => {
                let _ = ready_tx.send(Ok(info));
                compute.serve(rx, pool);
            }
            Err(e) => {
                let _ = ready_tx.send(Err(e));
            }
        })
        .map_err(|e| Error::Spawn {
            what: "the CUDA compute thread".into(),
            message: e.to_string(),
        })?;
    let info = ready_rx.recv().map_err(|_| Error::Stopped)??;
    Ok(Arc::new(Threaded {
        tx,
        info,
        pool: results,
    }))
}

/// Device bytes of the buffers of `e`: the layout's regions, the bf16 GEMM input, the pooled output (a row per
/// token at most) and the inputs. What the plan cache charges a graph.
fn plan_bytes(region_floats: usize, dim: usize, gemm_scratch: usize, e: Extent) -> usize {
    let f = size_of::<f32>();
    e.tokens * (region_floats + dim) * f
        + e.tokens * gemm_scratch * size_of::<u16>()
        + e.tokens * 2 * f
        + InputLayout::new(e).len * size_of::<i32>()
}

/// The device memory of one forward: activations, GEMM scratch, output, and the batch's inputs.
struct Buffers {
    extent: Extent,
    regions: Vec<CudaSlice<f32>>,
    widths: Vec<usize>,
    bf16: CudaSlice<u16>,
    out: CudaSlice<f32>,
    norms: CudaSlice<f32>,
    /// The batch's inputs, as `input_layout` places them.
    inputs: CudaSlice<i32>,
    input_layout: InputLayout,
}

impl Buffers {
    fn new(device: &Cuda, layout: &Layout, dim: usize, e: Extent) -> Result<Self> {
        let s = &device.stream;
        let widths = layout.region_widths();
        let zeros = |n: usize| s.alloc_zeros::<f32>(n.max(1)).map_err(driver("alloc"));
        let input_layout = InputLayout::new(e);
        Ok(Buffers {
            extent: e,
            regions: widths
                .iter()
                .map(|w| zeros(e.tokens * w))
                .collect::<Result<_>>()?,
            widths,
            bf16: s
                .alloc_zeros::<u16>((e.tokens * device.gemm_scratch()).max(1))
                .map_err(driver("alloc"))?,
            out: zeros(e.tokens * dim)?,
            norms: zeros(e.seqs)?,
            inputs: s
                .alloc_zeros::<i32>(input_layout.len)
                .map_err(driver("alloc"))?,
            input_layout,
        })
    }

    /// The pass's inputs; `normalizes`: whether pooling normalises the rows into `norms`.
    fn inputs(&self, s: &CudaStream, normalizes: bool) -> PassInputs {
        let base = self.inputs.device_ptr(s).0;
        let l = &self.input_layout;
        let p = |at: usize| base + (at * size_of::<i32>()) as u64;
        PassInputs {
            ids: p(l.ids),
            tok_pos: p(l.tok_pos),
            offsets: p(l.offsets),
            out_offsets: p(l.out_offsets),
            readouts: p(l.readouts),
            type1_from: p(l.type1_from),
            keys: p(l.keys),
            tiles: p(l.tiles),
            meta: p(0),
            tokens: self.extent.tokens,
            seqs: self.extent.seqs,
            max_tiles: self.extent.tiles(),
            bf16: self.bf16.device_ptr(s).0,
            norms: if normalizes {
                self.norms.device_ptr(s).0
            } else {
                0
            },
        }
    }

    /// One view per slot of the layout, `tokens` rows each (operand slots in bf16 when `intermediate` says so),
    /// and the output matrix.
    fn views(
        &self,
        s: &CudaStream,
        layout: &Layout,
        dim: usize,
        intermediate: GpuIntermediate,
    ) -> (Vec<CudaMat>, CudaMat) {
        let acts = layout
            .slots
            .iter()
            .map(|slot| {
                let m = CudaMat {
                    ptr: self.regions[slot.region].device_ptr(s).0
                        + (slot.offset * size_of::<f32>()) as u64,
                    rows: self.extent.tokens,
                    cols: slot.width,
                    ld: self.widths[slot.region],
                    bf16: false,
                };
                if slot.operand && intermediate == GpuIntermediate::Bf16 {
                    m.as_bf16()
                } else {
                    m
                }
            })
            .collect();
        let out = CudaMat {
            ptr: self.out.device_ptr(s).0,
            rows: self.extent.tokens,
            cols: dim,
            ld: dim,
            bf16: false,
        };
        (acts, out)
    }
}

/// A plan: a bucket's buffers and the forward captured on them as a CUDA graph.
struct Plan {
    buffers: Buffers,
    graph: CudaGraph,
}

/// A page-locked host buffer for results.
struct Pinned(PinnedHostSlice<f32>);

impl Capacity for Pinned {
    fn capacity(&self) -> usize {
        self.0.len()
    }
}

struct Compute {
    device: Cuda,
    model: Model<Cuda>,
    layout: Layout,
    dim: usize,
    ladder: Ladder,
    cache: PlanCache<Plan>,
    copy_stream: Arc<CudaStream>,
    pinned: Arc<Mutex<Pool<Pinned>>>,
    staging: Staging,
    /// The last eager run's buffers, for the next eager run of the same extent (a bucket the plan cache does not
    /// hold, or every batch with capture off): its allocations and zeroing are a dozen driver calls and launches.
    eager: Option<Buffers>,
}

impl Compute {
    fn new(dir: &ModelDir, config: &EngineConfig) -> Result<(Compute, BackendInfo)> {
        let device = Cuda::new(config.device, config.gpu_attention, config.gpu_intermediate)?;
        let model = Model::load(dir, &device)?;
        let layout = model.layout();
        if let Some(attention) = layout.attention {
            device.prepare_attention(attention.head_dim)?;
        }
        let copy_stream = device.ctx.new_stream().map_err(driver("copy stream"))?;
        let mut compute = Compute {
            dim: model.dim(),
            ladder: config.ladder(),
            cache: PlanCache::new(config.capture, config.plan_cache_mib << 20),
            copy_stream,
            pinned: Default::default(),
            staging: Staging::default(),
            eager: None,
            layout,
            model,
            device,
        };
        let startup = (config.capture == CaptureMode::Startup).then(|| {
            let start = Instant::now();
            // Smallest first and without evicting, as the CPU backend (see DESIGN.md).
            let mut buckets: Vec<Bucket> = compute
                .ladder
                .tokens
                .iter()
                .flat_map(|&tokens| {
                    let seqs = compute
                        .ladder
                        .seqs
                        .iter()
                        .copied()
                        .filter(move |&s| s <= tokens);
                    seqs.map(move |seqs| Bucket { seqs, tokens })
                })
                .collect();
            buckets.sort_by_key(|b| (b.tokens, b.seqs));
            for b in buckets {
                if compute.capture(b, false).is_err() {
                    break;
                }
            }
            start.elapsed()
        });
        let info = BackendInfo {
            name: "cuda",
            device: compute.device.describe(),
            threads: 1,
            dim: compute.dim,
            vocab_size: compute.model.vocab_size(),
            max_positions: compute.layout.max_positions,
            token_states: compute.model.pools_last(),
            multi_vector: compute.model.multi_vector(),
            dtype: crate::dtype::Dtype::Bf16,
            dtype_note: (config.dtype != crate::dtype::Dtype::Bf16)
                .then_some("the CUDA backend's GEMMs run in bf16"),
            capture: config.capture,
            startup_capture: startup,
            startup_plans: compute.cache.stats().plans,
        };
        Ok((compute, info))
    }

    fn extent(&self, bucket: Option<Bucket>, batch: &Batch) -> Extent {
        let (tokens, seqs) = bucket.map_or((batch.tokens(), batch.len()), |b| (b.tokens, b.seqs));
        Extent { tokens, seqs }
    }

    /// A batch of `seqs` one-token sequences: the stand-in a capture at start-up records the forward with (a
    /// graph records launches, not data; the real inputs are uploaded before each replay).
    fn placeholder(seqs: usize) -> Batch {
        let mut b = Batch::new();
        for _ in 0..seqs {
            b.push(&[0]);
        }
        b
    }

    /// Enqueues the whole forward (and Normalize, which pooling applies as it writes the rows when they are the
    /// embedding; after Dense modules the completion thread applies it) on the compute stream, on `buffers`.
    fn forward(&self, buffers: &Buffers, batch: &Batch) -> Result<()> {
        let s = &self.device.stream;
        let normalizes = self.model.normalizes() && self.model.pools_last();
        let pass = CudaPass::new(&self.device, buffers.inputs(s, normalizes));
        let (acts, out) = buffers.views(s, &self.layout, self.dim, self.device.intermediate);
        self.model.forward(&pass, batch, &acts, out);
        pass.finish()
    }

    /// Captures the graph of `bucket` and caches it (evicting, unless `evict` is false and it does not fit).
    fn capture(&mut self, bucket: Bucket, evict: bool) -> Result<()> {
        let extent = self.extent(Some(bucket), &Batch::new());
        let bytes = plan_bytes(
            self.layout.region_widths().iter().sum(),
            self.dim,
            self.device.gemm_scratch(),
            extent,
        );
        // Asked before anything is allocated, run or captured: a refused plan would cost all three.
        if !self.cache.admits(bucket, bytes) {
            return Err(Error::Device(
                "the plan is larger than the plan cache".into(),
            ));
        }
        if !evict && !self.cache.has_room(bytes) {
            return Err(Error::Device("the plan cache is full".into()));
        }
        // Eager runs are now rarer (the bucket gets a plan): the kept eager buffers go, freed on the compute stream
        // before the capture begins, never inside it.
        self.eager = None;
        let buffers = Buffers::new(&self.device, &self.layout, self.dim, extent)?;
        let placeholder = Self::placeholder(bucket.seqs);
        let s = self.device.stream.clone();
        self.staging.upload(
            &self.device.ctx,
            &s,
            &buffers.input_layout,
            &placeholder,
            &buffers.inputs,
        )?;
        // One eager run first, on the same buffers: it picks (and caches) cuBLASLt's algorithm for every GEMM and
        // loads any kernel lazily, neither of which may happen inside the capture.
        self.forward(&buffers, &placeholder)?;
        s.begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .map_err(driver("begin capture"))?;
        let recorded = self.forward(&buffers, &placeholder);
        let graph = s
            .end_capture(sys::CUgraphInstantiate_flags(0))
            .map_err(driver("end capture"))?;
        recorded?;
        let graph = graph.ok_or_else(|| Error::Device("the capture recorded nothing".into()))?;
        self.cache
            .insert(bucket, Plan { buffers, graph }, bytes)
            .map_err(|_| Error::Device("the plan is larger than the plan cache".into()))
    }

    /// Runs one batch (eager, capture or replay) up to the copy out, which it leaves in flight.
    fn run(&mut self, batch: &Batch) -> Result<InFlight> {
        let started = Instant::now();
        let s = self.device.stream.clone();
        let bucket = self.ladder.bucket(batch.len(), batch.tokens());
        let mut capture_time = None;
        let mut action = self.cache.action(bucket);
        if let (Action::Capture, Some(b)) = (&action, bucket) {
            let t = Instant::now();
            if self.capture(b, true).is_err() {
                action = Action::Eager;
            }
            capture_time = Some(t.elapsed());
        }
        // Where the forward leaves the pooled rows and their norms.
        let (run, keep, out, norms) = match (action, bucket.and_then(|b| self.cache.replay(b))) {
            (Action::Replay | Action::Capture, Some(plan)) => {
                let b = &plan.buffers;
                self.staging
                    .upload(&self.device.ctx, &s, &b.input_layout, batch, &b.inputs)?;
                plan.graph.launch().map_err(driver("graph launch"))?;
                let run = if capture_time.is_some() {
                    Run::Capture
                } else {
                    Run::Replay
                };
                let (out, norms) = (
                    plan.buffers.out.device_ptr(&s).0,
                    plan.buffers.norms.device_ptr(&s).0,
                );
                (run, None, out, norms)
            }
            _ => {
                // Eager on buffers of the batch's bucket (or its own size past the ladder): the same launches a
                // graph of that bucket records, so a replay gives bitwise what eager gives. Rows past the batch
                // may hold an earlier batch's values, as a plan's do between replays: nothing reads them.
                let extent = self.extent(bucket, batch);
                // Kept buffers of another extent are dropped before the new ones are allocated: one working set
                // at a time, which is what the memory pool then keeps.
                let kept = self.eager.take().filter(|b| b.extent == extent);
                let buffers = match kept {
                    Some(b) => b,
                    None => Buffers::new(&self.device, &self.layout, self.dim, extent)?,
                };
                self.staging.upload(
                    &self.device.ctx,
                    &s,
                    &buffers.input_layout,
                    batch,
                    &buffers.inputs,
                )?;
                self.forward(&buffers, batch)?;
                let (out, norms) = (buffers.out.device_ptr(&s).0, buffers.norms.device_ptr(&s).0);
                (Run::Eager, Some(buffers), out, norms)
            }
        };
        let computed = s.record_event(None).map_err(driver("event"))?;
        let rows = batch.out_rows() * self.dim;
        let mut host =
            self.pinned
                .lock()
                .map_err(|_| Error::Stopped)?
                .take(rows + batch.len(), |n| {
                    // SAFETY: page-locked host memory of `n` floats, written by the copy below before anything reads it.
                    unsafe { self.device.ctx.alloc_pinned_with_flags::<f32>(n, 0) }
                        .map(Pinned)
                        .map_err(driver("pinned alloc"))
                })?;
        let c = &self.copy_stream;
        c.wait(&computed).map_err(driver("copy wait"))?;
        let dst = host.0.as_mut_slice().map_err(driver("pinned"))?;
        let (emb, rest) = dst.split_at_mut(rows);
        // SAFETY: `out` holds at least `rows` floats and `norms` one per sequence (the buffers are sized by the
        // bucket the batch fits, or by the batch); the copy stream waits for the forward that writes them, and
        // the buffers are written or freed only by compute-stream work ordered after the copy's event (below).
        // The pinned destination is not read before the event either.
        unsafe {
            cudarc::driver::result::memcpy_dtoh_async(emb, out, c.cu_stream())
                .and_then(|()| {
                    cudarc::driver::result::memcpy_dtoh_async(
                        &mut rest[..batch.len()],
                        norms,
                        c.cu_stream(),
                    )
                })
                .map_err(driver("copy out"))?;
        }
        let copied = c
            .record_event(Some(sys::CUevent_flags::CU_EVENT_BLOCKING_SYNC))
            .map_err(driver("event"))?;
        // The next forward writes the same output memory: the compute stream waits (on the GPU) for this copy.
        s.wait(&copied).map_err(driver("wait for the copy"))?;
        // Eager buffers stay with the compute thread, kept for the next eager run: their next use (or their free:
        // a CudaSlice frees on its compute stream) is ordered after the wait above, so after the copy out of them.
        // Freed from the completion thread instead, the free could land on the compute stream while this thread
        // captures a graph on it, inside the capture.
        if keep.is_some() {
            self.eager = keep;
        }
        Ok(InFlight {
            started,
            copied,
            host,
            forward: ForwardStats {
                run,
                bucket,
                padding_tokens: bucket.map_or(0, |b| b.tokens - batch.tokens()),
                capture_time,
                cache: self.cache.stats(),
            },
        })
    }

    /// The compute loop, and the completion thread it feeds. Runs until the backend is dropped.
    fn serve(&mut self, rx: mpsc::Receiver<Job>, results: Arc<BufferPool>) {
        let (done_tx, done_rx) = mpsc::channel::<(Job, InFlight)>();
        let pinned = self.pinned.clone();
        let dim = self.dim;
        let normalize = match (self.model.normalizes(), self.model.pools_last()) {
            (false, _) => Normalize::No,
            (true, true) => Normalize::InPooling,
            (true, false) => Normalize::OnHost,
        };
        let max_active_dims = self.model.max_active_dims();
        let completion = std::thread::Builder::new()
            .name("engine-cuda-done".into())
            .spawn(move || {
                for (job, f) in done_rx {
                    complete(job, f, dim, normalize, max_active_dims, &results, &pinned);
                }
            });
        if let Err(e) = completion {
            for job in rx {
                job.resolver.resolve(Err(Error::Spawn {
                    what: "the CUDA completion thread".into(),
                    message: e.to_string(),
                }));
            }
            return;
        }
        for job in rx {
            match self.run(&job.batch) {
                Ok(f) => {
                    if let Err(mpsc::SendError((job, _))) = done_tx.send((job, f)) {
                        job.resolver.resolve(Err(Error::Stopped));
                    }
                }
                Err(e) => job.resolver.resolve(Err(e)),
            }
        }
    }
}

/// A batch whose results are being copied out.
struct InFlight {
    started: Instant,
    copied: CudaEvent,
    host: Pinned,
    forward: ForwardStats,
}

/// Waits (sleeping) for a batch's copy out, fills its result from the pinned buffer and resolves its handle.
/// Where sentence-transformers' Normalize runs: not at all, in the pooling kernel (which writes each row's norm
/// beside the rows), or on the host once the rows are back (after Dense modules, which pooling precedes).
#[derive(Clone, Copy)]
enum Normalize {
    No,
    InPooling,
    OnHost,
}

/// Normalizes as `normalize` says, then keeps a sparse model's `max_active_dims` largest entries per row.
fn complete(
    job: Job,
    f: InFlight,
    dim: usize,
    normalize: Normalize,
    max_active_dims: Option<usize>,
    results: &Arc<BufferPool>,
    pinned: &Mutex<Pool<Pinned>>,
) {
    let InFlight {
        started,
        copied,
        host,
        forward,
    } = f;
    let result = copied
        .synchronize()
        .map_err(driver("copy out"))
        .and_then(|()| {
            let h = host.0.as_slice().map_err(driver("pinned"))?;
            let mut emb = results.take(&job.batch, dim);
            let rows = job.batch.out_rows() * dim;
            emb.data_mut().copy_from_slice(&h[..rows]);
            match normalize {
                Normalize::No => {}
                Normalize::InPooling => {
                    // -1 marks a Tokens sequence, which Normalize leaves alone.
                    let norms = &h[rows..rows + job.batch.len()];
                    emb.set_norms(norms.iter().map(|&n| (n >= 0.0).then_some(n)).collect());
                }
                Normalize::OnHost => emb.normalize(&job.batch),
            }
            if let Some(k) = max_active_dims {
                emb.keep_largest(&job.batch, k);
            }
            Ok(emb)
        });
    if let Ok(mut p) = pinned.lock() {
        p.put(host);
    }
    job.resolver.resolve(result.map(|embeddings| Output {
        embeddings,
        queued: started - job.submitted,
        compute: started.elapsed(),
        forward: Some(forward),
    }));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_is_charged_for_every_buffer_it_holds_and_grows_with_its_bucket() {
        let e = |tokens, seqs| Extent { tokens, seqs };
        // MiniLM-like: 384 + 1152 + 1536 floats per token of regions, 384-dim output, GEMM inputs up to 1536.
        let small = plan_bytes(3072, 384, 1536, e(16, 1));
        let f = 4;
        // meta, offsets, out_offsets, readouts, type1_from, keys, tiles, ids, positions.
        let inputs = 3 + 2 + 2 + 1 + 1 + 1 + 2 * (1 + 1) + 16 + 16;
        let want = 16 * (3072 + 384) * f + 16 * 1536 * 2 + 16 * 2 * f + inputs * f;
        assert_eq!(small, want);
        assert!(plan_bytes(3072, 384, 1536, e(32, 1)) > small);
        assert!(plan_bytes(3072, 384, 1536, e(16, 4)) > small);
    }
}
