//! The dispatch loop against a backend the test resolves by hand, so overlap, max-wait and abandonment are
//! observed exactly.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::*;
use crate::backend::{BackendInfo, BufferPool, Resolver};

/// Holds every submitted batch until the test resolves it; row `i` is filled with sequence `i`'s first id.
#[derive(Default)]
struct Manual {
    pending: Mutex<Vec<(Batch, Resolver)>>,
    submitted: Mutex<Vec<usize>>,
    pool: Arc<BufferPool>,
}

const DIM: usize = 2;

impl Backend for Manual {
    fn submit(&self, batch: Batch) -> Handle {
        let (resolver, handle) = Handle::new();
        self.submitted.lock().unwrap().push(batch.len());
        self.pending.lock().unwrap().push((batch, resolver));
        handle
    }

    fn info(&self) -> BackendInfo {
        BackendInfo {
            name: "manual",
            device: "a test double".into(),
            threads: 1,
            dim: DIM,
            vocab_size: 100,
            max_positions: 100,
            dtype: crate::Dtype::F32,
            capture: crate::CaptureMode::Off,
            startup_capture: None,
            startup_plans: 0,
        }
    }
}

impl Manual {
    fn submitted(&self) -> Vec<usize> {
        self.submitted.lock().unwrap().clone()
    }

    /// Resolves the oldest pending batch.
    fn resolve_one(&self) {
        let (batch, resolver) = self.pending.lock().unwrap().remove(0);
        let mut emb = self.pool.take(batch.len(), DIM);
        for (row, seq) in emb.data_mut().chunks_exact_mut(DIM).zip(batch.seqs()) {
            row.fill(seq[0] as f32);
        }
        resolver.resolve(Ok(Output {
            embeddings: emb,
            queued: Duration::ZERO,
            compute: Duration::from_millis(1),
            forward: None,
        }));
    }
}

fn config(overlap: bool) -> EngineConfig {
    EngineConfig {
        max_batch_tokens: 4,
        max_queue_tokens: 12,
        max_queue_requests: 6,
        overlap,
        ..Default::default()
    }
}

async fn settle() {
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
}

fn start(overlap: bool) -> (Arc<Manual>, Scheduler) {
    let backend = Arc::new(Manual::default());
    let scheduler = Scheduler::start(backend.clone(), &config(overlap), |_| {});
    (backend, scheduler)
}

/// Three requests of a full budget each: overlap submits the second batch before the first is answered.
async fn in_flight_before_first_answer(overlap: bool) -> (usize, Vec<f32>) {
    let (backend, scheduler) = start(overlap);
    let tickets: Vec<Ticket> = (1..=3)
        .map(|i| scheduler.submit(vec![vec![i; 4]]).unwrap())
        .collect();
    settle().await;
    let before = backend.submitted().len();
    for _ in 0..3 {
        settle().await;
        backend.resolve_one();
    }
    let mut firsts = Vec::new();
    for t in tickets {
        firsts.push(t.wait().await.unwrap()[0].embedding[0]);
    }
    (before, firsts)
}

#[tokio::test]
async fn overlap_keeps_two_batches_in_flight() {
    let (in_flight, answers) = in_flight_before_first_answer(true).await;
    assert_eq!(in_flight, 2);
    assert_eq!(answers, vec![1.0, 2.0, 3.0]);
}

#[tokio::test]
async fn without_overlap_each_batch_waits_for_the_previous_answer() {
    let (in_flight, answers) = in_flight_before_first_answer(false).await;
    assert_eq!(in_flight, 1);
    assert_eq!(answers, vec![1.0, 2.0, 3.0]);
}

#[tokio::test]
async fn full_queue_refuses_at_once_and_admitted_work_completes() {
    let (backend, scheduler) = start(false);
    // 3 × 4 tokens fill the 12-token queue bound (the first batch leaves the queue when dispatched).
    let mut admitted: Vec<Ticket> = (1..=3)
        .map(|i| scheduler.submit(vec![vec![i; 4]]).unwrap())
        .collect();
    settle().await;
    admitted.push(scheduler.submit(vec![vec![4; 4]]).unwrap());
    let refused = scheduler.submit(vec![vec![9; 4]]).unwrap_err();
    assert!(matches!(refused, Error::Overloaded { .. }), "{refused:?}");
    let too_many = scheduler.submit(vec![vec![9]; 7]).unwrap_err();
    assert!(matches!(too_many, Error::Overloaded { .. }));
    for _ in 0..4 {
        settle().await;
        backend.resolve_one();
    }
    for (i, t) in admitted.into_iter().enumerate() {
        assert_eq!(t.wait().await.unwrap()[0].embedding[0], (i + 1) as f32);
    }
}

#[tokio::test]
async fn abandoned_work_never_reaches_the_backend() {
    let (backend, scheduler) = start(false);
    let first = scheduler.submit(vec![vec![1; 4]]).unwrap();
    let gone = scheduler.submit(vec![vec![2; 4]]).unwrap();
    let kept = scheduler.submit(vec![vec![3; 4]]).unwrap();
    settle().await;
    drop(gone);
    backend.resolve_one();
    settle().await;
    backend.resolve_one();
    assert_eq!(first.wait().await.unwrap()[0].embedding[0], 1.0);
    assert_eq!(kept.wait().await.unwrap()[0].embedding[0], 3.0);
    assert_eq!(
        backend.submitted(),
        vec![1, 1],
        "the abandoned request was skipped"
    );
    assert_eq!(scheduler.load().queued_seqs, 0);
}

#[tokio::test(start_paused = true)]
async fn partial_batch_waits_max_wait() {
    let backend = Arc::new(Manual::default());
    let config = EngineConfig {
        max_wait_ms: 10,
        ..config(true)
    };
    let scheduler = Scheduler::start(backend.clone(), &config, |_| {});
    let small = scheduler.submit(vec![vec![5; 1]]).unwrap();
    settle().await;
    tokio::time::advance(Duration::from_millis(9)).await;
    settle().await;
    assert!(backend.submitted().is_empty(), "held for company");
    let company = scheduler.submit(vec![vec![6; 1]]).unwrap();
    tokio::time::advance(Duration::from_millis(1)).await;
    settle().await;
    assert_eq!(backend.submitted(), vec![2], "both went in one batch");
    backend.resolve_one();
    assert_eq!(small.wait().await.unwrap()[0].embedding[0], 5.0);
    assert_eq!(company.wait().await.unwrap()[0].embedding[0], 6.0);
}

#[tokio::test]
async fn closing_refuses_new_work_and_finishes_queued() {
    let (backend, scheduler) = start(false);
    let queued = scheduler.submit(vec![vec![7; 2], vec![8; 2]]).unwrap();
    scheduler.close();
    assert!(matches!(
        scheduler.submit(vec![vec![1]]),
        Err(Error::ShuttingDown)
    ));
    settle().await;
    backend.resolve_one();
    let out = queued.wait().await.unwrap();
    assert_eq!((out[0].embedding[0], out[1].embedding[0]), (7.0, 8.0));
}

#[tokio::test]
async fn a_failed_batch_answers_every_sequence_with_the_error() {
    let (backend, scheduler) = start(false);
    let t = scheduler.submit(vec![vec![1], vec![2]]).unwrap();
    settle().await;
    let (_, resolver) = backend.pending.lock().unwrap().remove(0);
    resolver.resolve(Err(crate::Error::Batch("boom".into())));
    assert!(matches!(t.wait().await, Err(Error::Batch(_))));
}

/// Regression: each answer was copied out of the batch's result into a fresh vector; it is now a row of the
/// pooled buffer itself, shared by the batch's answers.
#[tokio::test]
async fn answers_are_rows_of_the_pooled_buffer_not_copies() {
    let (backend, scheduler) = start(false);
    let t = scheduler.submit(vec![vec![1], vec![2]]).unwrap();
    settle().await;
    backend.resolve_one();
    let out = t.wait().await.unwrap();
    let (a, b) = (out[0].embedding.as_ptr(), out[1].embedding.as_ptr());
    assert_eq!(a.wrapping_add(DIM), b, "row 1 follows row 0 in one buffer");
    assert_eq!((out[0].embedding[0], out[1].embedding[0]), (1.0, 2.0));
}

/// A task resolving each batch soon after it is submitted, as a backend would; abort it when done.
fn resolve_as_submitted(backend: &Arc<Manual>) -> tokio::task::JoinHandle<()> {
    let backend = backend.clone();
    tokio::spawn(async move {
        loop {
            settle().await;
            if !backend.pending.lock().unwrap().is_empty() {
                backend.resolve_one();
            }
        }
    })
}

/// Regression: a corpus larger than the queue's bounds was either refused as overloaded or batched by a second,
/// hand-rolled loop; `embed_all` feeds the scheduler as its queue drains, and answers in input order.
#[tokio::test]
async fn embed_all_feeds_more_than_the_queue_holds_in_order() {
    let (backend, scheduler) = start(true);
    let resolver = resolve_as_submitted(&backend);
    let n = 200u32;
    let seqs = (1..=n).map(|i| Ok::<_, Error>(vec![i; 1 + i as usize % 3]));
    let mut got = Vec::new();
    scheduler
        .embed_all(seqs, |e| {
            got.push(e.embedding[0]);
            Ok(())
        })
        .await
        .unwrap();
    resolver.abort();
    assert_eq!(got, (1..=n).map(|i| i as f32).collect::<Vec<_>>());
    let batches = backend.submitted();
    assert_eq!(batches.iter().sum::<usize>(), n as usize);
    assert!(batches.iter().all(|&seqs| seqs <= 4), "{batches:?}");
}

#[tokio::test]
async fn embed_all_stops_at_the_first_bad_input_after_answering_the_ones_before() {
    let (backend, scheduler) = start(false);
    let resolver = resolve_as_submitted(&backend);
    /// A caller's own error type, as `bench embed` has (a line that is not JSON).
    #[derive(Debug, PartialEq)]
    enum Failed {
        Input(usize),
        Scheduler,
    }
    impl From<Error> for Failed {
        fn from(_: Error) -> Self {
            Failed::Scheduler
        }
    }
    let seqs = [Ok(vec![1]), Ok(vec![2]), Err(Failed::Input(3)), Ok(vec![4])];
    let mut got = Vec::new();
    let result = scheduler
        .embed_all(seqs, |e| {
            got.push(e.embedding[0]);
            Ok(())
        })
        .await;
    resolver.abort();
    assert_eq!(result, Err(Failed::Input(3)));
    assert_eq!(got, vec![1.0, 2.0]);
}
