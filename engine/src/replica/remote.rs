//! A replica across the network: a client of the replica protocol, its health checked in the background.
//!
//! The replica is up once it has answered `Info` with the gateway's model and `Load` without draining; it is
//! taken out at once when a call to it fails at the transport (connection refused or reset), or after
//! `down_after` health checks in a row fail or time out (a stalled process), and put back when one passes. A
//! piece waiting on a replica that is taken out comes back [`Failure::Lost`], to be sent elsewhere.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::watch;
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Status, Streaming};

use super::proto::{self, replica_client::ReplicaClient, submit_reply::Reply};
use super::Failure;
use crate::scheduler::{self, ClassLoad, Embedded, Load, Priority, Refusal, StageTimes, Work};
use crate::{Embeddings, Readout};

/// How the gateway watches and retries its remote replicas.
#[derive(Clone, Debug, serde::Serialize)]
pub struct RemoteConfig {
    /// Time between health checks (`Load` calls) of each replica.
    pub health_interval: Duration,
    /// A health check not answered in this time failed.
    pub health_timeout: Duration,
    /// Failed health checks in a row that take a replica out.
    pub down_after: u32,
    /// Time to open a connection to a replica.
    pub connect_timeout: Duration,
    /// Time between resolutions of the replicas' names (a headless Service's DNS name lists its pods).
    pub resolve_interval: Duration,
    /// Pieces that may be sent again, per request answered, over time (gRPC's retry throttling: a failing fleet
    /// cannot turn each request into many).
    pub retry_ratio: f64,
    /// Re-sends allowed at once before the ratio limits them.
    pub retry_burst: f64,
}

impl Default for RemoteConfig {
    fn default() -> Self {
        RemoteConfig {
            health_interval: Duration::from_millis(500),
            health_timeout: Duration::from_millis(1000),
            down_after: 2,
            connect_timeout: Duration::from_millis(1000),
            resolve_interval: Duration::from_secs(5),
            retry_ratio: 0.2,
            retry_burst: 100.0,
        }
    }
}

/// What a replica must serve to be taken: the gateway's model, by its shape and how it pools
/// ([`crate::ModelInfo::pooling_name`]; `--pooling` on one side only changes that, not the shape).
#[derive(Clone, Debug)]
pub struct Expect {
    pub dim: usize,
    pub vocab_size: usize,
    pub pooling: String,
}

/// One remote replica; its health check stops when it is dropped.
pub struct Remote {
    shared: Arc<Shared>,
    health: tokio::task::JoinHandle<()>,
}

struct Shared {
    addr: SocketAddr,
    client: ReplicaClient<Channel>,
    /// Tokens sent to it by this gateway and not yet answered.
    outstanding: AtomicUsize,
    up: watch::Sender<bool>,
    load: Mutex<Load>,
}

impl Drop for Remote {
    fn drop(&mut self) {
        self.health.abort();
    }
}

impl Remote {
    /// A client of the replica at `addr` (connected lazily, reconnected after failures) and its health check,
    /// started on the current tokio runtime. It is down until the first check passes.
    pub fn new(addr: SocketAddr, config: &RemoteConfig, expect: Expect) -> Remote {
        let endpoint = Endpoint::from_shared(format!("http://{addr}"))
            .expect("a socket address is a valid URI authority")
            .connect_timeout(config.connect_timeout)
            .tcp_nodelay(true);
        // Token states of a long batch are large; the replica is ours, so its answers are not bounded here.
        let client = ReplicaClient::new(endpoint.connect_lazy())
            .max_decoding_message_size(usize::MAX)
            .max_encoding_message_size(usize::MAX);
        let shared = Arc::new(Shared {
            addr,
            client,
            outstanding: AtomicUsize::new(0),
            up: watch::Sender::new(false),
            load: Mutex::new(Load::default()),
        });
        let health = tokio::spawn(check_health(shared.clone(), config.clone(), expect));
        Remote { shared, health }
    }

    pub fn addr(&self) -> SocketAddr {
        self.shared.addr
    }

    pub fn is_up(&self) -> bool {
        *self.shared.up.borrow()
    }

    pub fn outstanding_tokens(&self) -> usize {
        self.shared.outstanding.load(Ordering::Relaxed)
    }

    pub fn load(&self) -> Load {
        *self
            .shared
            .load
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Sends the piece; resolves once the replica has admitted it (or refused it, or failed).
    pub async fn submit(
        &self,
        id: &str,
        seqs: Vec<Vec<u32>>,
        work: Work,
        admitted: bool,
    ) -> Result<Pending, Failure> {
        let tokens = seqs.iter().map(Vec::len).sum();
        let request = proto::SubmitRequest {
            piece_id: id.to_owned(),
            sequences: seqs
                .into_iter()
                .map(|ids| proto::Sequence { ids })
                .collect(),
            priority: match work.priority {
                Priority::Online => proto::Priority::Online,
                Priority::Batch => proto::Priority::Batch,
            } as i32,
            readout: match work.readout {
                Readout::Pooled { .. } => proto::Readout::Pooled,
                Readout::Tokens => proto::Readout::Tokens,
                Readout::Vectors { .. } => proto::Readout::Vectors,
            } as i32,
            skip: match work.readout {
                Readout::Pooled { skip } => skip,
                Readout::Tokens | Readout::Vectors { .. } => 0,
            },
            expansion: match work.readout {
                Readout::Vectors { expansion } => expansion,
                Readout::Pooled { .. } | Readout::Tokens => None,
            },
            admitted_elsewhere: admitted,
            type1_from: work.type1_from,
        };
        let mut pending = Pending {
            shared: self.shared.clone(),
            tokens,
            priority: work.priority,
            down: self.shared.up.subscribe(),
            // The ids are kept (a copy of the request, small beside its answer) to send them elsewhere if this
            // replica fails.
            request: request.clone(),
            stream: None,
        };
        self.shared.outstanding.fetch_add(tokens, Ordering::Relaxed);
        if !self.is_up() {
            return Err(pending.lost("it is down"));
        }
        let mut client = self.shared.client.clone();
        let call = client.submit(request);
        let response = tokio::select! {
            response = call => Some(response),
            _ = taken_out(&mut pending.down) => None,
        };
        match response {
            Some(Ok(response)) => pending.stream = Some(response.into_inner()),
            Some(Err(status)) => return Err(pending.failed(status)),
            None => return Err(pending.lost("it was taken out")),
        }
        match pending.next().await? {
            Reply::Admitted(_) => Ok(pending),
            Reply::Refused(refused) => Err(pending.refused(refused)),
            Reply::Answer(_) => Err(pending.lost("it answered before admitting")),
        }
    }
}

/// A piece a remote replica admitted. Dropping it cancels the call, which abandons the piece there.
pub struct Pending {
    shared: Arc<Shared>,
    tokens: usize,
    priority: Priority,
    down: watch::Receiver<bool>,
    request: proto::SubmitRequest,
    stream: Option<Streaming<proto::SubmitReply>>,
}

impl Drop for Pending {
    fn drop(&mut self) {
        self.shared
            .outstanding
            .fetch_sub(self.tokens, Ordering::Relaxed);
    }
}

impl Pending {
    /// One answer per sequence, in order.
    pub async fn wait(mut self) -> Result<Vec<Embedded>, Failure> {
        match self.next().await? {
            Reply::Answer(answer) => self.decode(answer),
            Reply::Refused(refused) => Err(self.refused(refused)),
            Reply::Admitted(_) => Err(self.lost("it admitted the piece twice")),
        }
    }

    /// The next reply, or why none comes: the stream failed or ended, or the replica was taken out.
    async fn next(&mut self) -> Result<Reply, Failure> {
        let Some(stream) = self.stream.as_mut() else {
            return Err(self.lost("no call is open"));
        };
        let message = tokio::select! {
            message = stream.message() => Some(message),
            _ = taken_out(&mut self.down) => None,
        };
        match message {
            Some(Ok(Some(proto::SubmitReply { reply: Some(reply) }))) => Ok(reply),
            Some(Ok(Some(_))) => Err(self.lost("it sent an empty reply")),
            Some(Ok(None)) => Err(self.lost("the call ended without an answer")),
            Some(Err(status)) => Err(self.failed(status)),
            None => Err(self.lost("it was taken out")),
        }
    }

    fn decode(&self, answer: proto::Answer) -> Result<Vec<Embedded>, Failure> {
        let n = self.request.sequences.len();
        let counts: Vec<usize> = answer.vectors.iter().map(|&c| c as usize).collect();
        let norms = answer
            .norms
            .iter()
            .map(|&v| (!v.is_nan()).then_some(v))
            .collect();
        let data = answer
            .data
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        // No model's rows are of width 0 (such an answer would pass as empty rows).
        let embeddings =
            (counts.len() == n && answer.dim > 0 && answer.data.len().is_multiple_of(4))
                .then(|| Embeddings::from_parts(data, answer.dim as usize, &counts, norms))
                .flatten()
                .ok_or_else(|| self.lost("its answer does not match the piece"))?;
        let times = StageTimes {
            queue: Duration::from_micros(answer.queue_us),
            inference: Duration::from_micros(answer.inference_us),
        };
        Ok(embeddings
            .into_rows()
            .map(|embedding| Embedded { embedding, times })
            .collect())
    }

    fn refused(&self, refused: proto::Refused) -> Failure {
        let retry_after = Duration::from_millis(refused.retry_after_ms.into());
        Failure::Refused(match refused.kind() {
            proto::refused::Kind::Expired => scheduler::Error::Expired {
                priority: self.priority,
                deadline: Duration::from_millis(refused.deadline_ms.into()),
                retry_after,
            },
            proto::refused::Kind::Overloaded => scheduler::Error::Overloaded {
                priority: self.priority,
                reason: Refusal::Remote(refused.message),
                retry_after,
            },
        })
    }

    /// A failed call: the replica's own error is its answer; a failure to reach it loses the piece.
    fn failed(&self, status: Status) -> Failure {
        match status.code() {
            // Transport failures (refused, reset, a stream cut), a replica shutting down, a call cancelled under
            // it: the piece was not computed, or its answer cannot come.
            Code::Unavailable | Code::Unknown | Code::Cancelled | Code::Aborted => {
                self.lost(&format!("the call failed: {}", status.message()))
            }
            _ => Failure::Refused(scheduler::Error::Batch(Arc::new(crate::Error::Replica {
                addr: self.shared.addr.to_string(),
                message: format!("{:?}: {}", status.code(), status.message()),
            }))),
        }
    }

    /// The piece is lost on this replica: it is taken out (its health check puts it back), and the sequences
    /// are given back to go elsewhere.
    fn lost(&self, reason: &str) -> Failure {
        self.shared.up.send_replace(false);
        Failure::Lost {
            reason: format!("replica {}: {reason}", self.shared.addr),
            seqs: self
                .request
                .sequences
                .iter()
                .map(|s| s.ids.clone())
                .collect(),
        }
    }
}

/// Resolves once the replica is taken out.
async fn taken_out(down: &mut watch::Receiver<bool>) {
    // An error means the replica's state is gone with it: out as well.
    let _ = down.wait_for(|up| !*up).await;
}

/// Checks the replica until it is dropped: first that it serves the gateway's model, then its load.
async fn check_health(shared: Arc<Shared>, config: RemoteConfig, expect: Expect) {
    let mut client = shared.client.clone();
    let mut ticks = tokio::time::interval(config.health_interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut model_checked = false;
    let mut failures = 0u32;
    loop {
        ticks.tick().await;
        if !model_checked {
            match tokio::time::timeout(config.health_timeout, client.info(proto::InfoRequest {}))
                .await
            {
                Ok(Ok(info)) => {
                    let info = info.into_inner();
                    // A replica of an older build says nothing of its pooling.
                    let pools_alike = info.pooling.is_empty() || info.pooling == expect.pooling;
                    if info.dim as usize != expect.dim
                        || info.vocab_size as usize != expect.vocab_size
                        || !pools_alike
                    {
                        eprintln!(
                            "replica {}: serves a model of dimension {} and {} tokens pooled by {}, not the \
                             gateway's {} and {} pooled by {}; it is not used",
                            shared.addr,
                            info.dim,
                            info.vocab_size,
                            info.pooling,
                            expect.dim,
                            expect.vocab_size,
                            expect.pooling
                        );
                        return;
                    }
                    model_checked = true;
                }
                _ => continue,
            }
        }
        let checked =
            tokio::time::timeout(config.health_timeout, client.load(proto::LoadRequest {})).await;
        match checked {
            Ok(Ok(reply)) if !reply.get_ref().draining => {
                failures = 0;
                *shared.load.lock().unwrap_or_else(PoisonError::into_inner) =
                    load_of(reply.get_ref());
                shared
                    .up
                    .send_if_modified(|up| !std::mem::replace(up, true));
            }
            _ => {
                failures += 1;
                if failures >= config.down_after {
                    shared
                        .up
                        .send_if_modified(|up| std::mem::replace(up, false));
                }
            }
        }
    }
}

fn load_of(reply: &proto::LoadReply) -> Load {
    let mut classes = [ClassLoad::default(); 2];
    for (class, c) in classes.iter_mut().zip(&reply.classes) {
        *class = ClassLoad {
            queued_seqs: c.queued_seqs as usize,
            queued_tokens: c.queued_tokens as usize,
            admitted: c.admitted,
            refused: c.refused,
            expired: c.expired,
            abandoned: c.abandoned,
        };
    }
    Load {
        queued_seqs: reply.queued_seqs as usize,
        queued_tokens: reply.queued_tokens as usize,
        in_flight_tokens: reply.in_flight_tokens as usize,
        batches: reply.batches,
        classes,
    }
}
