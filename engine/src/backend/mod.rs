//! The backend boundary: `submit(batch)` returns a [`Handle`] at once; the forward pass runs on the backend's own
//! compute resources (threads here; a stream and CUDA graphs for a GPU backend) and the handle resolves exactly
//! once to the batch's pooled embeddings, written into a reusable host buffer.

pub mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod ops;

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::sync::oneshot;

use crate::batch::{Batch, Readout};
use crate::config::EngineConfig;
use crate::error::{Error, Result};

/// Loads the model in `dir` onto the backend `config` names and starts it. bf16 runs where the device can (the
/// CPU needs AVX512-BF16); elsewhere f32 runs, and the backend's info says which.
pub fn start(dir: &crate::model::ModelDir, config: &EngineConfig) -> Result<Arc<dyn Backend>> {
    match config.backend {
        BackendKind::Cpu => {}
        #[cfg(feature = "cuda")]
        BackendKind::Cuda => return cuda::start(dir, config),
        #[cfg(not(feature = "cuda"))]
        BackendKind::Cuda => {
            return Err(Error::Config {
                name: "backend",
                message: "this build has no CUDA backend: build with `--features cuda`".into(),
            })
        }
    }
    let device = cpu::Cpu::new(config.dtype);
    let model = crate::model::Model::load(dir, &device)?;
    Ok(Arc::new(cpu::start(device, model, config)?))
}

/// A batch on its way to a backend's compute thread.
pub(crate) struct Job {
    pub(crate) batch: Batch,
    pub(crate) submitted: std::time::Instant,
    pub(crate) resolver: Resolver,
}

/// A backend whose passes run on a compute thread of its own, fed through a channel (the CPU's and the GPU's):
/// `submit` checks the batch, answers an empty one at once and queues the rest.
pub(crate) struct Threaded {
    pub(crate) tx: std::sync::mpsc::Sender<Job>,
    pub(crate) info: BackendInfo,
    pub(crate) pool: Arc<BufferPool>,
}

impl Backend for Threaded {
    fn submit(&self, batch: Batch) -> Handle {
        if let Err(e) = batch.validate(self.info.vocab_size, self.info.max_positions) {
            return Handle::ready(Err(e));
        }
        let vectors = |i| matches!(batch.readout(i), Readout::Vectors { .. });
        if let Some(i) = (0..batch.len()).find(|&i| vectors(i) != self.info.multi_vector) {
            return Handle::ready(Err(Error::Batch(match self.info.multi_vector {
                true => format!(
                    "sequence {i}: a multi-vector model answers a vector per token, nothing else"
                ),
                false => {
                    format!("sequence {i}: a vector per token is a multi-vector model's answer")
                }
            })));
        }
        if !self.info.token_states && (0..batch.len()).any(|i| batch.readout(i) == Readout::Tokens)
        {
            return Handle::ready(Err(Error::Batch(
                "token states are not served for a model whose embedding is not in their space (Dense modules \
                 after pooling, or several pooling modes)"
                    .into(),
            )));
        }
        if batch.is_empty() {
            return Handle::ready(Ok(Output {
                embeddings: self.pool.take(&batch, self.info.dim),
                queued: std::time::Duration::ZERO,
                compute: std::time::Duration::ZERO,
                forward: None,
            }));
        }
        let (resolver, handle) = Handle::new();
        let job = Job {
            batch,
            submitted: std::time::Instant::now(),
            resolver,
        };
        if let Err(std::sync::mpsc::SendError(job)) = self.tx.send(job) {
            job.resolver.resolve(Err(Error::Stopped));
        }
        handle
    }

    fn info(&self) -> BackendInfo {
        self.info.clone()
    }
}

/// Which backend an engine runs on ([`EngineConfig::backend`]).
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    serde::Serialize,
    serde::Deserialize,
    clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    #[default]
    Cpu,
    /// NVIDIA GPUs through CUDA (feature `cuda`).
    Cuda,
}

/// A model backend. Implementations own their compute resources; callers only submit and await.
pub trait Backend: Send + Sync {
    /// Queues `batch` and returns at once. An invalid batch resolves the handle to an error.
    fn submit(&self, batch: Batch) -> Handle;
    fn info(&self) -> BackendInfo;
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct BackendInfo {
    /// The backend (`cpu` or `cuda`).
    pub name: &'static str,
    /// What it runs on, in words: the CPU's kernels, or the GPU's name, driver and memory.
    pub device: String,
    pub threads: usize,
    /// Embedding dimension.
    pub dim: usize,
    pub vocab_size: usize,
    pub max_positions: usize,
    /// Whether it serves token states ([`crate::Readout::Tokens`]): not for a model with Dense modules after
    /// pooling, whose embedding is not the hidden states' width or space.
    pub token_states: bool,
    /// Whether it is a multi-vector model, which answers [`crate::Readout::Vectors`] and nothing else.
    pub multi_vector: bool,
    /// Precision the weights run in (bf16 falls back to f32 where the device cannot run it).
    pub dtype: crate::dtype::Dtype,
    /// Why `dtype` differs from the configured one, in words (`None`: it runs what was asked).
    pub dtype_note: Option<&'static str>,
    pub capture: crate::plan::CaptureMode,
    /// How long capturing the start-up plans took, under `capture = eager`.
    pub startup_capture: Option<Duration>,
    pub startup_plans: usize,
}

/// What a resolved handle carries.
#[derive(Debug)]
pub struct Output {
    pub embeddings: Embeddings,
    /// From `submit` to the start of this batch's forward pass.
    pub queued: Duration,
    /// The forward pass itself, pooling and copy-out included.
    pub compute: Duration,
    /// How the forward ran (eager, capture or replay) and the plan cache after it; `None` when nothing ran.
    pub forward: Option<crate::plan::ForwardStats>,
}

/// The pending result of one submitted batch: await it, poll it with [`Handle::try_take`], or block with
/// [`Handle::wait`]. Dropping it discards the result; it never cancels a forward pass already running.
#[derive(Debug)]
pub struct Handle {
    rx: oneshot::Receiver<Result<Output>>,
}

/// The sending half a backend keeps for a [`Handle`].
pub(crate) struct Resolver(oneshot::Sender<Result<Output>>);

impl Resolver {
    pub(crate) fn resolve(self, result: Result<Output>) {
        // The caller may have dropped its handle; its result is discarded, as the contract says.
        let _ = self.0.send(result);
    }
}

impl Handle {
    pub(crate) fn new() -> (Resolver, Handle) {
        let (tx, rx) = oneshot::channel();
        (Resolver(tx), Handle { rx })
    }

    /// A handle that is already resolved (e.g. to a validation error).
    pub(crate) fn ready(result: Result<Output>) -> Handle {
        let (r, h) = Handle::new();
        r.resolve(result);
        h
    }

    /// Blocks until the result is there. Not for async code: await the handle instead.
    pub fn wait(self) -> Result<Output> {
        self.rx.blocking_recv().unwrap_or(Err(Error::Stopped))
    }

    /// The result if it has landed, without blocking; `None` while the batch is still running.
    pub fn try_take(&mut self) -> Option<Result<Output>> {
        match self.rx.try_recv() {
            Ok(r) => Some(r),
            Err(oneshot::error::TryRecvError::Empty) => None,
            Err(oneshot::error::TryRecvError::Closed) => Some(Err(Error::Stopped)),
        }
    }
}

impl Future for Handle {
    type Output = Result<Output>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.rx)
            .poll(cx)
            .map(|r| r.unwrap_or(Err(Error::Stopped)))
    }
}

/// The answers of one batch, [`Embeddings::row`] `i` for sequence `i` (its pooled embedding, or its tokens' hidden
/// states one after another, as its [`crate::Readout`] asked), in a buffer that goes back to its backend's pool
/// when dropped, so steady-state serving does not allocate result memory.
pub struct Embeddings {
    data: Vec<f32>,
    dim: usize,
    /// Sequence `i`'s vectors are `offsets[i]..offsets[i + 1]` (the batch's [`Batch::out_offsets`]).
    offsets: Vec<usize>,
    /// Each pooled row's L2 norm before [`Embeddings::normalize`], when the model normalizes; otherwise empty.
    norms: Vec<Option<f32>>,
    pool: Option<Arc<BufferPool>>,
    /// Told when the buffer is released (its last row dropped): the scheduler without overlap waits for it.
    released: Option<oneshot::Sender<()>>,
}

impl std::fmt::Debug for Embeddings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Embeddings")
            .field("len", &self.len())
            .field("dim", &self.dim)
            .finish()
    }
}

impl Embeddings {
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Sequences answered.
    pub fn len(&self) -> usize {
        self.offsets.len().saturating_sub(1)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Sequence `i`'s answer: `dim` floats when pooled, `dim` per token otherwise.
    pub fn row(&self, i: usize) -> &[f32] {
        &self.data[self.offsets[i] * self.dim..self.offsets[i + 1] * self.dim]
    }

    pub fn as_slice(&self) -> &[f32] {
        &self.data
    }

    /// Embeddings computed elsewhere (a remote replica): `counts[i]` vectors of `dim` floats for sequence `i`,
    /// and each sequence's norm before the model's Normalize module (empty when it does not normalize). `None`
    /// when the lengths disagree.
    pub fn from_parts(
        data: Vec<f32>,
        dim: usize,
        counts: &[usize],
        norms: Vec<Option<f32>>,
    ) -> Option<Embeddings> {
        let mut offsets = Vec::with_capacity(counts.len() + 1);
        let mut rows = 0usize;
        offsets.push(rows);
        for &n in counts {
            rows = rows.checked_add(n)?;
            offsets.push(rows);
        }
        let fits = rows.checked_mul(dim) == Some(data.len())
            && (norms.is_empty() || norms.len() == counts.len());
        fits.then_some(Embeddings {
            data,
            dim,
            offsets,
            norms,
            pool: None,
            released: None,
        })
    }

    /// Scales every pooled row to unit length (sentence-transformers' Normalize), keeping the norms they had, so
    /// the pooled vectors can be had back ([`Row::unnormalized`]). Bitwise what normalizing in the forward gave.
    /// Token states are the model's output before its Pooling module, so Normalize never applies to them; a
    /// multi-vector model's vectors are each normalized (their norms not kept: no route serves them
    /// unnormalized).
    pub(crate) fn normalize(&mut self, batch: &Batch) {
        self.norms.clear();
        for i in 0..self.len() {
            let (start, end) = (self.offsets[i] * self.dim, self.offsets[i + 1] * self.dim);
            self.norms.push(match batch.readout(i) {
                crate::Readout::Pooled { .. } => {
                    let mut norm = 0.0;
                    cpu::kernels::l2_normalize(&mut self.data[start..end], &mut norm);
                    Some(norm)
                }
                crate::Readout::Vectors { .. } => {
                    let mut norm = 0.0;
                    for row in self.data[start..end].chunks_exact_mut(self.dim) {
                        cpu::kernels::l2_normalize(row, &mut norm);
                    }
                    None
                }
                crate::Readout::Tokens => None,
            });
        }
    }

    /// Keeps each pooled row's `k` entries of largest magnitude and zeroes the rest (sentence-transformers'
    /// `select_max_active_dims`, a SparseEncoder's `max_active_dims`); of entries tied at the cut, those first
    /// in the row are kept. Token states are left whole.
    pub(crate) fn keep_largest(&mut self, batch: &Batch, k: usize) {
        let mut magnitudes = Vec::new();
        for i in 0..self.len() {
            if let crate::Readout::Tokens | crate::Readout::Vectors { .. } = batch.readout(i) {
                continue;
            }
            let row = &mut self.data[self.offsets[i] * self.dim..self.offsets[i + 1] * self.dim];
            keep_largest(row, k, &mut magnitudes);
        }
    }
}

/// Zeroes all but `row`'s `k` entries of largest magnitude (the first of those tied at the cut), using `scratch`.
/// A row with at most `k` entries that are not 0 is left as it is.
pub(crate) fn keep_largest(row: &mut [f32], k: usize, scratch: &mut Vec<f32>) {
    if k == 0 || row.iter().filter(|v| **v != 0.0).count() <= k {
        return;
    }
    scratch.clear();
    scratch.extend(row.iter().map(|v| v.abs()));
    // The k-th largest magnitude: what is above it stays, and what equals it as long as room is left.
    let (_, &mut cut, _) = scratch.select_nth_unstable_by(k - 1, |a, b| b.total_cmp(a));
    let mut room = k - row
        .iter()
        .filter(|v| v.abs().total_cmp(&cut).is_gt())
        .count();
    for v in row.iter_mut() {
        match v.abs().total_cmp(&cut) {
            std::cmp::Ordering::Greater => {}
            std::cmp::Ordering::Equal if room > 0 => room -= 1,
            _ => *v = 0.0,
        }
    }
}

impl Embeddings {
    /// Each row as a [`Row`] sharing this buffer, which goes back to its pool once the last row is dropped: rows
    /// travel to their callers and into the JSON writer without being copied.
    pub fn into_rows(self) -> impl ExactSizeIterator<Item = Row> {
        let batch = Arc::new(self);
        (0..batch.len()).map(move |index| Row {
            batch: batch.clone(),
            index,
        })
    }
}

/// One sequence's embedding: a row of its batch's pooled [`Embeddings`], shared, not copied. Reads as `&[f32]`
/// and serializes as a JSON array.
#[derive(Clone)]
pub struct Row {
    batch: Arc<Embeddings>,
    index: usize,
}

impl Row {
    pub fn as_slice(&self) -> &[f32] {
        self.batch.row(self.index)
    }

    /// The pooled vector before the model's Normalize module: the row scaled back by the norm it had (equal to
    /// the pooled one to float rounding); the row itself when the model does not normalize.
    pub fn unnormalized(&self) -> std::borrow::Cow<'_, [f32]> {
        match self.batch.norms.get(self.index) {
            Some(&Some(norm)) => self.as_slice().iter().map(|v| v * norm).collect(),
            _ => std::borrow::Cow::Borrowed(self.as_slice()),
        }
    }

    /// Floats per vector.
    pub fn dim(&self) -> usize {
        self.batch.dim
    }

    /// The L2 norm the pooled row had before the model's Normalize module; `None` when it was not normalized.
    pub fn norm(&self) -> Option<f32> {
        self.batch.norms.get(self.index).copied().flatten()
    }

    /// The row's vectors of `dim` floats: one for a pooled sequence, one per token otherwise.
    pub fn vectors(&self) -> std::slice::ChunksExact<'_, f32> {
        self.as_slice().chunks_exact(self.batch.dim.max(1))
    }
}

impl Row {
    /// This row, made safe to keep while its holder awaits later batches. Without overlap the scheduler frees the
    /// backend only once every row of a batch is released, so a caller keeping a row of batch N while it waits for
    /// its rows of batch N+1 would wait forever (a request larger than one batch did). Such a row is copied into
    /// a buffer of its own, which no one waits on; with overlap nothing waits and the row is kept as it is.
    pub fn settled(&self) -> Row {
        if self.batch.released.is_none() {
            return self.clone();
        }
        let data = self.as_slice().to_vec();
        let vectors = data.len() / self.batch.dim.max(1);
        Row {
            batch: Arc::new(Embeddings {
                data,
                dim: self.batch.dim,
                offsets: vec![0, vectors],
                norms: self
                    .batch
                    .norms
                    .get(self.index)
                    .copied()
                    .into_iter()
                    .collect(),
                pool: None,
                released: None,
            }),
            index: 0,
        }
    }
}

impl std::ops::Deref for Row {
    type Target = [f32];
    fn deref(&self) -> &[f32] {
        self.as_slice()
    }
}

impl std::fmt::Debug for Row {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.as_slice().fmt(f)
    }
}

impl serde::Serialize for Row {
    fn serialize<S: serde::Serializer>(
        &self,
        serializer: S,
    ) -> std::result::Result<S::Ok, S::Error> {
        self.as_slice().serialize(serializer)
    }
}

impl Drop for Embeddings {
    fn drop(&mut self) {
        if let Some(tx) = self.released.take() {
            let _ = tx.send(());
        }
        if let Some(pool) = self.pool.take() {
            pool.put(std::mem::take(&mut self.data));
        }
    }
}

/// Result buffers recycled between batches.
#[derive(Default)]
pub(crate) struct BufferPool {
    free: Mutex<Vec<Vec<f32>>>,
}

impl BufferPool {
    /// More than a few batches in flight at once is unusual; beyond that, buffers are simply freed.
    const KEEP: usize = 8;

    /// A buffer for `batch`'s answers, `dim` floats per output row.
    pub(crate) fn take(self: &Arc<Self>, batch: &Batch, dim: usize) -> Embeddings {
        let mut data = self
            .free
            .lock()
            .map(|mut f| f.pop())
            .ok()
            .flatten()
            .unwrap_or_default();
        data.clear();
        data.resize(batch.out_rows() * dim, 0.0);
        Embeddings {
            data,
            dim,
            offsets: batch.out_offsets().to_vec(),
            norms: Vec::new(),
            pool: Some(self.clone()),
            released: None,
        }
    }

    fn put(&self, buf: Vec<f32>) {
        if let Ok(mut free) = self.free.lock() {
            if free.len() < Self::KEEP {
                free.push(buf);
            }
        }
    }
}

impl Embeddings {
    pub(crate) fn data_mut(&mut self) -> &mut [f32] {
        &mut self.data
    }

    /// The norms the pooled rows had before a device normalized them (`None` for a Tokens sequence), as
    /// [`Embeddings::normalize`] keeps them.
    #[cfg(feature = "cuda")]
    pub(crate) fn set_norms(&mut self, norms: Vec<Option<f32>>) {
        self.norms = norms;
    }

    /// Resolves once this buffer is released: dropped, or, after [`Embeddings::into_rows`], its last row dropped
    /// (every caller has written its answer out).
    pub(crate) fn on_release(&mut self) -> oneshot::Receiver<()> {
        let (tx, rx) = oneshot::channel();
        self.released = Some(tx);
        rx
    }
}

/// Scales a host vector (a result row) to unit L2 norm, as sentence-transformers' Normalize does.
pub fn l2_normalize(v: &mut [f32]) {
    cpu::kernels::l2_normalize(v, &mut 0.0);
}

#[cfg(test)]
mod tests {
    use super::keep_largest;

    #[test]
    fn keep_largest_keeps_the_largest_magnitudes_and_the_first_of_a_tie() {
        let mut scratch = Vec::new();
        let mut row = [0.5, -3.0, 0.0, 2.0, 1.0, 2.0, 0.0];
        keep_largest(&mut row, 2, &mut scratch);
        assert_eq!(row, [0.0, -3.0, 0.0, 2.0, 0.0, 0.0, 0.0]);
        let mut row = [0.5, -3.0, 0.0, 2.0];
        keep_largest(&mut row, 3, &mut scratch);
        assert_eq!(
            row,
            [0.5, -3.0, 0.0, 2.0],
            "no more than k active: left as it is"
        );
        keep_largest(&mut row, 1, &mut scratch);
        assert_eq!(row, [0.0, -3.0, 0.0, 0.0]);
    }
}
