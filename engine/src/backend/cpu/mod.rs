//! The CPU backend: one compute thread owns the model and a rayon pool of `threads` workers; batches queue on a
//! channel and run one at a time, each using every worker, so the machine is never oversubscribed.

pub mod kernels;
pub mod packed;

use std::sync::mpsc;
use std::sync::Arc;
use std::time::Instant;

use super::{Backend, BackendInfo, BufferPool, Handle, Output, Resolver};
use crate::batch::Batch;
use crate::error::{Error, Result};
use crate::model::bert::{Bert, Workspace};

struct Job {
    batch: Batch,
    submitted: Instant,
    resolver: Resolver,
}

pub struct CpuBackend {
    tx: mpsc::Sender<Job>,
    info: BackendInfo,
    pool: Arc<BufferPool>,
}

impl CpuBackend {
    pub fn new(model: Bert, threads: usize) -> Result<Self> {
        let threads = threads.max(1);
        let info = BackendInfo {
            name: "cpu",
            threads,
            dim: model.dim(),
            vocab_size: model.config.vocab_size,
            max_positions: model.config.max_position_embeddings,
        };
        let workers = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("engine-cpu-{i}"))
            .build()
            .map_err(|e| Error::Config {
                name: "threads",
                message: format!("cannot start {threads} compute threads: {e}"),
            })?;
        let (tx, rx) = mpsc::channel::<Job>();
        let pool = Arc::new(BufferPool::default());
        let results = pool.clone();
        std::thread::Builder::new()
            .name("engine-cpu".into())
            .spawn(move || {
                let mut ws = Workspace::default();
                // Runs until every sender (the backend) is dropped.
                for job in rx {
                    let start = Instant::now();
                    let mut emb = results.take(job.batch.len(), model.dim());
                    workers.install(|| model.forward(&job.batch, &mut ws, threads, emb.data_mut()));
                    job.resolver.resolve(Ok(Output {
                        embeddings: emb,
                        queued: start - job.submitted,
                        compute: start.elapsed(),
                    }));
                }
            })
            .map_err(|e| Error::Config {
                name: "threads",
                message: format!("cannot start the compute thread: {e}"),
            })?;
        Ok(CpuBackend { tx, info, pool })
    }
}

impl Backend for CpuBackend {
    fn submit(&self, batch: Batch) -> Handle {
        if let Err(e) = batch.validate(self.info.vocab_size, self.info.max_positions) {
            return Handle::ready(Err(e));
        }
        if batch.is_empty() {
            return Handle::ready(Ok(Output {
                embeddings: self.pool.take(0, self.info.dim),
                queued: Default::default(),
                compute: Default::default(),
            }));
        }
        let (resolver, handle) = Handle::new();
        let job = Job {
            batch,
            submitted: Instant::now(),
            resolver,
        };
        if let Err(mpsc::SendError(job)) = self.tx.send(job) {
            job.resolver.resolve(Err(Error::Stopped));
        }
        handle
    }

    fn info(&self) -> BackendInfo {
        self.info.clone()
    }
}
