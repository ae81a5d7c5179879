//! The dispatch loop: waits until the backend is free, cuts the next batch from the queues at that moment (so it
//! holds everything that arrived meanwhile), submits it, and hands its answering to a task of its own.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use super::state::{Entry, Next, Settings};
use super::{BatchStats, Embedded, Error, Shared, StageTimes};
use crate::backend::{Handle, Output};
use crate::batch::Batch;

/// One permit: the backend is free. The batch running holds it until it is computed (overlap) or answered.
pub(super) async fn run(shared: Arc<Shared>) {
    let free = Arc::new(Semaphore::new(1));
    loop {
        let Ok(permit) = free.clone().acquire_owned().await else {
            return;
        };
        let Some((entries, settings)) = next_batch(&shared).await else {
            return;
        };
        let mut batch = Batch::new();
        for e in &entries {
            batch.push_pair(&e.ids, e.readout, e.type1_from);
        }
        shared
            .in_flight_tokens
            .fetch_add(batch.tokens(), Ordering::Relaxed);
        let submitted = Instant::now();
        let handle = shared.backend.submit(batch);
        tokio::spawn(answer(
            shared.clone(),
            handle,
            entries,
            submitted,
            permit,
            settings,
        ));
    }
}

/// Waits until a batch is due and takes it off the queues; `None` once closed and drained.
async fn next_batch(shared: &Shared) -> Option<(Vec<Entry>, Settings)> {
    loop {
        let (next, shrank) = shared.lock().next(Instant::now());
        if shrank {
            shared.room.notify_waiters();
        }
        match next {
            Next::Batch(entries, settings) => return Some((entries, settings)),
            Next::Done => return None,
            Next::Wait(Some(deadline)) => {
                tokio::select! {
                    _ = shared.wake.notified() => {}
                    _ = tokio::time::sleep_until(deadline) => {}
                }
            }
            Next::Wait(None) => shared.wake.notified().await,
        }
    }
}

/// Awaits one batch, hands each sequence's caller its row of the shared result, and reports the batch. The
/// backend is free for the next batch once this one is computed (overlap), or once every caller has released its
/// row, its answer written out (no overlap).
async fn answer(
    shared: Arc<Shared>,
    handle: Handle,
    entries: Vec<Entry>,
    submitted: Instant,
    permit: OwnedSemaphorePermit,
    settings: Settings,
) {
    let tokens: usize = entries.iter().map(|e| e.ids.len()).sum();
    let result = handle.await;
    // Making a plan is a one-off: the throughput estimate is of the forward passes that follow it.
    let capture = result
        .as_ref()
        .ok()
        .and_then(|o| o.forward.as_ref()?.capture_time);
    let compute = result.as_ref().map_or(submitted.elapsed(), |o| {
        o.compute.saturating_sub(capture.unwrap_or_default())
    });
    shared
        .lock()
        .computed(tokens, compute, capture, Instant::now());
    // Counted before any caller is answered, so a caller that reads the load after its answer sees its batch.
    shared.in_flight_tokens.fetch_sub(tokens, Ordering::Relaxed);
    shared.batches.fetch_add(1, Ordering::Relaxed);
    let permit = if settings.overlap {
        drop(permit);
        None
    } else {
        Some(permit)
    };
    let mut released = None;
    match result {
        Ok(Output {
            mut embeddings,
            queued,
            compute,
            forward: plan,
        }) => {
            if !settings.overlap {
                released = Some(embeddings.on_release());
            }
            let seqs = embeddings.len();
            (shared.observer)(&BatchStats {
                seqs,
                tokens,
                fill: tokens as f64 / settings.budget.max_tokens as f64,
                backend_queue: queued,
                forward: compute,
                plan,
            });
            for (entry, row) in entries.into_iter().zip(embeddings.into_rows()) {
                let times = StageTimes {
                    queue: submitted - entry.admitted + queued,
                    inference: compute,
                };
                // A caller gone since the batch was cut simply misses its answer.
                let _ = entry.reply.send(Ok(Embedded {
                    embedding: row,
                    times,
                }));
            }
        }
        Err(e) => {
            let e = Arc::new(e);
            for entry in entries {
                let _ = entry.reply.send(Err(Error::Batch(e.clone())));
            }
        }
    }
    if let Some(released) = released {
        // An error here means the buffer was dropped without the signal: released all the same.
        let _ = released.await;
    }
    drop(permit);
}
