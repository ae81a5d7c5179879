//! The dispatch loop against a backend the test resolves by hand, so overlap, max-wait and abandonment are
//! observed exactly.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::*;
use crate::backend::{BackendInfo, BufferPool, Handle, Output, Resolver};
use crate::batch::Batch;

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
            token_states: true,
            multi_vector: false,
            dtype: crate::Dtype::F32,
            dtype_note: None,
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

    /// Each pending batch's sequences, by their first ids.
    fn pending_firsts(&self) -> Vec<Vec<u32>> {
        let pending = self.pending.lock().unwrap();
        pending
            .iter()
            .map(|(b, _)| b.seqs().map(|s| s[0]).collect())
            .collect()
    }

    /// Resolves the oldest pending batch.
    fn resolve_one(&self) {
        let (batch, resolver) = self.pending.lock().unwrap().remove(0);
        let mut emb = self.pool.take(&batch, DIM);
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
        // Batches fill their token budget: the tests of the online cap set it.
        online_batch_share: 0.0,
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

/// Submits `lens` as one online request each.
fn online(scheduler: &Scheduler, first_ids: impl IntoIterator<Item = (u32, usize)>) -> Vec<Ticket> {
    first_ids
        .into_iter()
        .map(|(id, len)| {
            scheduler
                .submit(vec![vec![id; len]], Priority::Online)
                .unwrap()
        })
        .collect()
}

#[tokio::test]
async fn overlap_cuts_the_next_batch_once_the_last_is_computed() {
    let (backend, scheduler) = start(true);
    let mut tickets = online(&scheduler, [(1, 4), (2, 4), (3, 4)]).into_iter();
    settle().await;
    assert_eq!(
        backend.submitted(),
        vec![1],
        "one batch on the backend at a time"
    );
    backend.resolve_one();
    settle().await;
    // The first answer is still held by its caller: the next batch went all the same.
    let held = tickets.next().unwrap().wait().await.unwrap();
    assert_eq!(backend.submitted(), vec![1, 1]);
    drop(held);
    for t in tickets {
        settle().await;
        backend.resolve_one();
        assert!(t.wait().await.is_ok());
    }
}

#[tokio::test]
async fn without_overlap_the_next_batch_waits_until_the_last_is_answered() {
    let (backend, scheduler) = start(false);
    let mut tickets = online(&scheduler, [(1, 4), (2, 4)]).into_iter();
    settle().await;
    backend.resolve_one();
    let held = tickets.next().unwrap().wait().await.unwrap();
    settle().await;
    assert_eq!(
        backend.submitted(),
        vec![1],
        "its caller still holds the answer"
    );
    drop(held);
    settle().await;
    assert_eq!(backend.submitted(), vec![1, 1]);
    backend.resolve_one();
    assert_eq!(
        tickets.next().unwrap().wait().await.unwrap()[0].embedding[0],
        2.0
    );
}

/// Regression: without overlap, a submission larger than one batch hung. Its caller held the rows of the first
/// batch while it waited for the second, and the second was never cut because the first was not released
/// (`bench embed --overlap false` on 300 passages stopped after its first batch). Rows kept across a wait are
/// settled into buffers of their own now.
#[tokio::test]
async fn regression_without_overlap_a_submission_larger_than_one_batch_hung() {
    let (backend, scheduler) = start(false);
    let ticket = scheduler
        .submit(vec![vec![1; 4], vec![2; 4], vec![3; 4]], Priority::Batch)
        .unwrap();
    let answers = tokio::spawn(ticket.wait());
    for _ in 0..3 {
        settle().await;
        backend.resolve_one();
    }
    let rows = tokio::time::timeout(Duration::from_secs(5), answers)
        .await
        .expect("every batch of the submission was cut")
        .unwrap()
        .unwrap();
    let firsts: Vec<f32> = rows.iter().map(|e| e.embedding[0]).collect();
    assert_eq!(firsts, [1.0, 2.0, 3.0]);
    assert_eq!(backend.submitted(), vec![1, 1, 1]);
}

/// Regression: with overlap on, the dispatch loop took its permit before cutting, so batch N+1 was cut at the
/// first arrival after N was submitted and parked behind it; the queries arriving during N's forward waited for
/// N+2. The batch is now cut when the backend is free, with everything that arrived meanwhile.
#[tokio::test]
async fn regression_overlap_cut_the_next_batch_at_the_first_arrival() {
    let (backend, scheduler) = start(true);
    let first = online(&scheduler, [(1, 1)]);
    settle().await;
    let during = online(&scheduler, [(2, 1), (3, 1), (4, 1)]);
    settle().await;
    assert_eq!(
        backend.submitted(),
        vec![1],
        "nothing is cut while the backend is busy"
    );
    backend.resolve_one();
    settle().await;
    assert_eq!(
        backend.submitted(),
        vec![1, 3],
        "the three arrivals went together"
    );
    backend.resolve_one();
    for t in first.into_iter().chain(during) {
        assert!(t.wait().await.is_ok());
    }
}

#[tokio::test]
async fn online_work_is_cut_ahead_of_batch_work_queued_before_it() {
    let (backend, scheduler) = start(true);
    let running = online(&scheduler, [(1, 4)]);
    settle().await;
    let bulk = scheduler
        .submit(vec![vec![50; 2], vec![51; 2]], Priority::Batch)
        .unwrap();
    let query = online(&scheduler, [(7, 2)]);
    settle().await;
    backend.resolve_one();
    settle().await;
    // Budget 4, a quarter held for batch work: the query and one passage.
    assert_eq!(backend.pending_firsts(), vec![vec![7, 50]]);
    for _ in 0..2 {
        backend.resolve_one();
        settle().await;
    }
    for t in running.into_iter().chain(query).chain([bulk]) {
        assert!(t.wait().await.is_ok());
    }
}

#[tokio::test]
async fn full_queue_refuses_at_once_and_admitted_work_completes() {
    let (backend, scheduler) = start(true);
    // 3 × 4 tokens fill the 12-token queue bound (the first batch leaves the queue when dispatched).
    let mut admitted: Vec<Ticket> = (1..=3)
        .map(|i| {
            scheduler
                .submit(vec![vec![i; 4]], Priority::Online)
                .unwrap()
        })
        .collect();
    settle().await;
    admitted.push(
        scheduler
            .submit(vec![vec![4; 4]], Priority::Online)
            .unwrap(),
    );
    let refused = scheduler
        .submit(vec![vec![9; 4]], Priority::Online)
        .unwrap_err();
    assert!(matches!(refused, Error::Overloaded { .. }), "{refused:?}");
    let too_many = scheduler
        .submit(vec![vec![9]; 7], Priority::Online)
        .unwrap_err();
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
    let (backend, scheduler) = start(true);
    let first = scheduler
        .submit(vec![vec![1; 4]], Priority::Online)
        .unwrap();
    let gone = scheduler
        .submit(vec![vec![2; 4]], Priority::Online)
        .unwrap();
    let kept = scheduler
        .submit(vec![vec![3; 4]], Priority::Online)
        .unwrap();
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
    let load = scheduler.load();
    assert_eq!((load.queued_seqs, load.classes[0].abandoned), (0, 1));
}

#[tokio::test(start_paused = true)]
async fn partial_batch_waits_max_wait() {
    let backend = Arc::new(Manual::default());
    let config = EngineConfig {
        max_wait_ms: 10,
        ..config(true)
    };
    let scheduler = Scheduler::start(backend.clone(), &config, |_| {});
    let small = scheduler
        .submit(vec![vec![5; 1]], Priority::Online)
        .unwrap();
    settle().await;
    tokio::time::advance(Duration::from_millis(9)).await;
    settle().await;
    assert!(backend.submitted().is_empty(), "held for company");
    let company = scheduler
        .submit(vec![vec![6; 1]], Priority::Online)
        .unwrap();
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
    let queued = scheduler
        .submit(vec![vec![7; 2], vec![8; 2]], Priority::Online)
        .unwrap();
    scheduler.close();
    assert!(matches!(
        scheduler.submit(vec![vec![1]], Priority::Online),
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
    let t = scheduler
        .submit(vec![vec![1], vec![2]], Priority::Online)
        .unwrap();
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
    let t = scheduler
        .submit(vec![vec![1], vec![2]], Priority::Online)
        .unwrap();
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
        .embed_all(seqs, crate::Readout::POOLED, |e| {
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
        .embed_all(seqs, crate::Readout::POOLED, |e| {
            got.push(e.embedding[0]);
            Ok(())
        })
        .await;
    resolver.abort();
    assert_eq!(result, Err(Failed::Input(3)));
    assert_eq!(got, vec![1.0, 2.0]);
}

fn overload_config(online_deadline_ms: u64) -> EngineConfig {
    EngineConfig {
        online_deadline_ms,
        ..config(true)
    }
}

/// Runs one 4-token batch through, so the scheduler has measured its throughput: 1 ms per 4 tokens.
async fn measured(backend: &Manual, scheduler: &Scheduler) {
    let t = online(scheduler, [(1, 4)]);
    settle().await;
    backend.resolve_one();
    for t in t {
        t.wait().await.unwrap();
    }
    settle().await;
}

#[tokio::test(start_paused = true)]
async fn work_that_would_miss_its_deadline_is_refused_at_once_with_a_retry_after() {
    let backend = Arc::new(Manual::default());
    let scheduler = Scheduler::start(backend.clone(), &overload_config(3), |_| {});
    measured(&backend, &scheduler).await;
    // Running: 1 ms. Queued behind it: the first is done at 2 ms, the second at 3 ms, the third would be at 4.
    let admitted = online(&scheduler, [(2, 4), (3, 4), (4, 4)]);
    settle().await;
    let refused = scheduler
        .submit(vec![vec![5; 4]], Priority::Online)
        .unwrap_err();
    let Error::Overloaded {
        reason: Refusal::Late {
            estimated,
            deadline,
        },
        retry_after,
        ..
    } = refused
    else {
        panic!("{refused:?}");
    };
    assert_eq!((estimated, deadline), (ms(4), ms(3)));
    assert_eq!(retry_after, ms(3), "the queue ahead drains in 3 ms");
    // Batch work has its own, longer deadline.
    let bulk = scheduler.submit(vec![vec![6; 4]], Priority::Batch).unwrap();
    assert_eq!(scheduler.load().classes[0].refused, 1);
    for _ in 0..4 {
        backend.resolve_one();
        settle().await;
    }
    for t in admitted.into_iter().chain([bulk]) {
        assert!(t.wait().await.is_ok());
    }
    // Drained: the same request is admitted now.
    assert!(scheduler.submit(vec![vec![5; 4]], Priority::Online).is_ok());
}

#[tokio::test(start_paused = true)]
async fn work_too_large_for_its_deadline_on_an_idle_engine_is_still_admitted() {
    let backend = Arc::new(Manual::default());
    let scheduler = Scheduler::start(backend.clone(), &overload_config(3), |_| {});
    measured(&backend, &scheduler).await;
    // 16 tokens take 4 ms alone: past the deadline even on an idle engine, so it is admitted when idle.
    let big = scheduler
        .submit(vec![vec![9; 4]; 4], Priority::Online)
        .unwrap();
    for _ in 0..4 {
        settle().await;
        backend.resolve_one();
    }
    assert_eq!(big.wait().await.unwrap().len(), 4);
}

#[tokio::test(start_paused = true)]
async fn queued_work_past_its_deadline_is_answered_expired_and_never_computed() {
    let backend = Arc::new(Manual::default());
    let scheduler = Scheduler::start(backend.clone(), &overload_config(3), |_| {});
    measured(&backend, &scheduler).await;
    // Done at 1, 2 and 3 ms by the estimate: all admitted.
    let tickets = online(&scheduler, [(1, 4), (2, 4), (3, 4)]);
    settle().await;
    tokio::time::advance(ms(5)).await;
    backend.resolve_one();
    settle().await;
    // The measuring batch and the first: the late ones never reached the backend.
    assert_eq!(backend.submitted(), vec![1, 1]);
    let mut answers = tickets.into_iter();
    assert!(answers.next().unwrap().wait().await.is_ok());
    for t in answers {
        let e = t.wait().await.unwrap_err();
        assert!(matches!(e, Error::Expired { .. }), "{e:?}");
        assert!(e.retry_after().is_some());
    }
    let load = scheduler.load();
    assert_eq!((load.classes[0].expired, load.queued_seqs), (2, 0));
}

/// Regression: one request of 400 passages on a fresh server was admitted (no estimate yet), cut over several
/// batches, and its later sequences expired at the 100 ms online deadline: the whole request failed. Work that
/// could not meet its deadline on an idle engine, or was admitted without an estimate, is not held to it.
#[tokio::test(start_paused = true)]
async fn regression_a_request_too_large_for_its_deadline_expired_mid_way() {
    let backend = Arc::new(Manual::default());
    let scheduler = Scheduler::start(backend.clone(), &overload_config(3), |_| {});
    // Unmeasured: three batches' worth, admitted.
    let big = scheduler
        .submit(vec![vec![1; 4], vec![2; 4], vec![3; 4]], Priority::Online)
        .unwrap();
    for _ in 0..3 {
        settle().await;
        tokio::time::advance(ms(5)).await;
        backend.resolve_one();
    }
    assert_eq!(big.wait().await.unwrap().len(), 3);
    assert_eq!(scheduler.load().classes[0].expired, 0);
}

#[tokio::test]
async fn reconfigure_changes_the_batches_cut_from_then_on() {
    let (backend, scheduler) = start(true);
    let mut tickets = online(&scheduler, [(1, 1)]);
    settle().await;
    tickets.extend(online(&scheduler, (2..8).map(|i| (i, 1))));
    let smaller = EngineConfig {
        max_batch_tokens: 2,
        ..config(true)
    };
    scheduler.reconfigure(&smaller).unwrap();
    backend.resolve_one();
    settle().await;
    assert_eq!(backend.submitted(), vec![1, 2]);
    scheduler
        .reconfigure(&EngineConfig {
            max_batch_tokens: 8,
            ..smaller.clone()
        })
        .unwrap();
    backend.resolve_one();
    settle().await;
    assert_eq!(backend.submitted(), vec![1, 2, 4]);
    backend.resolve_one();
    for t in tickets {
        assert!(t.wait().await.is_ok());
    }
    let bad = EngineConfig {
        max_batch_tokens: 0,
        ..smaller
    };
    assert!(
        scheduler.reconfigure(&bad).is_err(),
        "an invalid setting is refused"
    );
}

#[test]
fn a_priority_reads_from_its_name() {
    assert_eq!("Batch".parse::<Priority>(), Ok(Priority::Batch));
    assert_eq!(" online".parse::<Priority>(), Ok(Priority::Online));
    assert!("urgent".parse::<Priority>().unwrap_err().contains("online"));
}

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

/// Regression: admission checked only the newcomer's own deadline, but work admitted later joins the same batch
/// and makes it longer: under overload the queries admitted first were answered well past their deadline.
#[tokio::test(start_paused = true)]
async fn regression_later_work_pushed_a_batch_past_its_heads_deadline() {
    let backend = Arc::new(Manual::default());
    let config = EngineConfig {
        max_batch_tokens: 16,
        max_queue_tokens: 100,
        ..overload_config(4)
    };
    let scheduler = Scheduler::start(backend.clone(), &config, |_| {});
    measured(&backend, &scheduler).await; // 0.25 ms per token
    let running = online(&scheduler, [(1, 4)]);
    settle().await;
    let head = online(&scheduler, [(2, 2)]); // due at 4 ms
    tokio::time::advance(ms(1)).await;
    let second = online(&scheduler, [(3, 8)]); // the batch of 10 tokens: done at 3.5 ms
                                               // 14 tokens would be done at 4.5 ms: within this one's own deadline (5 ms), past the head's (4 ms).
    let refused = scheduler.submit(vec![vec![4; 4]], Priority::Online);
    assert!(
        matches!(
            refused,
            Err(Error::Overloaded {
                reason: Refusal::Late { .. },
                ..
            })
        ),
        "{refused:?}"
    );
    for _ in 0..2 {
        backend.resolve_one();
        settle().await;
    }
    for t in running.into_iter().chain(head).chain(second) {
        assert!(t.wait().await.is_ok());
    }
}

/// While queries arrive, a re-index's batches are cut to what computes in `online_batch_share` of the online
/// deadline; once they stop, batch work fills the whole budget again.
#[tokio::test(start_paused = true)]
async fn batch_work_is_cut_short_while_online_work_is_active() {
    let backend = Arc::new(Manual::default());
    let config = EngineConfig {
        max_batch_tokens: 16,
        max_queue_tokens: 100,
        online_batch_share: 0.25, // of 4 ms: 1 ms, 4 tokens at the measured 0.25 ms per token
        ..overload_config(4)
    };
    let scheduler = Scheduler::start(backend.clone(), &config, |_| {});
    measured(&backend, &scheduler).await;
    let bulk = scheduler
        .submit((50..56).map(|i| vec![i; 4]).collect(), Priority::Batch)
        .unwrap();
    settle().await;
    backend.resolve_one();
    settle().await;
    assert_eq!(
        backend.submitted(),
        vec![1, 1, 1],
        "one 4-token passage a batch"
    );
    tokio::time::advance(Duration::from_millis(1100)).await;
    backend.resolve_one();
    settle().await;
    assert_eq!(
        backend.submitted(),
        vec![1, 1, 1, 4],
        "no query for a second: the whole budget"
    );
    backend.resolve_one();
    assert_eq!(bulk.wait().await.unwrap().len(), 6);
}

/// Admission keeps a margin of the recent lateness: answers computed 4 ms after admission predicted leave 6 ms of
/// a 10 ms deadline, and work estimated at 7 ms is refused where an on-time engine admits it.
#[tokio::test(start_paused = true)]
async fn admission_keeps_the_measured_lateness_before_the_deadline() {
    let admits_after = |late: Duration| async move {
        let backend = Arc::new(Manual::default());
        let config = EngineConfig {
            max_queue_tokens: 100,
            max_queue_requests: 100,
            ..overload_config(10)
        };
        let scheduler = Scheduler::start(backend.clone(), &config, |_| {});
        measured(&backend, &scheduler).await; // 1 ms per 4-token batch
        let t = online(&scheduler, [(1, 4)]); // predicted done in 1 ms
        settle().await;
        tokio::time::advance(Duration::from_millis(1) + late).await;
        backend.resolve_one();
        for t in t {
            t.wait().await.unwrap();
        }
        settle().await;
        // Seven 4-token batches: 7 ms.
        scheduler
            .submit((0..7).map(|i| vec![i; 4]).collect(), Priority::Online)
            .is_ok()
    };
    assert!(admits_after(Duration::ZERO).await);
    assert!(!admits_after(Duration::from_millis(4)).await);
}

/// Regression: at 3x overload over HTTP a margin learned from late answers refused everything, and with nothing
/// admitted no answer came to lower it: admission stayed shut (0 answered of 10,178). The margin is capped at
/// half the deadline and lapses a second after the last answer.
#[tokio::test(start_paused = true)]
async fn regression_a_learned_margin_shut_admission_for_good() {
    let backend = Arc::new(Manual::default());
    let config = EngineConfig {
        max_queue_tokens: 100,
        max_queue_requests: 100,
        ..overload_config(10)
    };
    let scheduler = Scheduler::start(backend.clone(), &config, |_| {});
    measured(&backend, &scheduler).await; // 1 ms per 4-token batch
    let t = online(&scheduler, [(1, 4)]);
    settle().await;
    tokio::time::advance(ms(21)).await; // 20 ms late: the margin is capped at 5 ms
    backend.resolve_one();
    for t in t {
        t.wait().await.unwrap();
    }
    settle().await;
    let six = || (0..6).map(|i| vec![i; 4]).collect::<Vec<_>>(); // 6 ms: over 10 - 5
    assert!(scheduler.submit(six(), Priority::Online).is_err());
    let four = (0..4).map(|i| vec![i; 4]).collect(); // 4 ms: within 10 - 5 (not shut by a 20 ms margin)
    let admitted = scheduler.submit(four, Priority::Online).unwrap();
    for _ in 0..4 {
        settle().await;
        backend.resolve_one();
    }
    admitted.wait().await.unwrap();
    settle().await;
    tokio::time::advance(Duration::from_millis(1100)).await;
    assert!(
        scheduler.submit(six(), Priority::Online).is_ok(),
        "a second without answers: the margin lapsed"
    );
}
