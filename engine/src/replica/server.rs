//! The replica protocol's server: `bench serve --role replica` serves it beside the HTTP API of a gateway over its
//! own in-process replica (so `/health`, `/metrics` and `/info` are there for probes and scrapes), on one port.

use std::time::Duration;

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use super::proto::{self, replica_server::ReplicaServer, submit_reply::Reply};
use super::Failure;
use crate::gateway::Gateway;
use crate::scheduler::{self, Embedded, Priority, Work};
use crate::Readout;

/// The gRPC service as axum routes, to serve beside `gateway.router()`. The gateway must hold in-process
/// replicas; the service hands each piece to the least loaded of them.
pub fn grpc_routes(gateway: Gateway) -> axum::Router {
    let server = ReplicaServer::new(Service { gateway })
        .max_decoding_message_size(usize::MAX)
        .max_encoding_message_size(usize::MAX);
    axum::Router::new().route_service("/embedding.v1.Replica/{*method}", server)
}

struct Service {
    gateway: Gateway,
}

type Replies = ReceiverStream<Result<proto::SubmitReply, Status>>;

#[tonic::async_trait]
impl proto::replica_server::Replica for Service {
    type SubmitStream = Replies;

    async fn submit(
        &self,
        request: Request<proto::SubmitRequest>,
    ) -> Result<Response<Replies>, Status> {
        if self.gateway.is_draining() {
            return Err(Status::unavailable("the replica is shutting down"));
        }
        let request = request.into_inner();
        let work = Work {
            priority: match request.priority() {
                proto::Priority::Online => Priority::Online,
                proto::Priority::Batch => Priority::Batch,
            },
            readout: match request.readout() {
                proto::Readout::Pooled => Readout::Pooled { skip: request.skip },
                proto::Readout::Tokens => Readout::Tokens,
                proto::Readout::Vectors => Readout::Vectors {
                    expansion: request.expansion,
                },
            },
            type1_from: request.type1_from,
        };
        let seqs = self.checked(request.sequences, request.type1_from)?;
        let replica = self
            .gateway
            .replicas()
            .choose(&[])
            .ok_or_else(|| Status::unavailable("no engine"))?;
        let (tx, rx) = mpsc::channel(2);
        let pending = match replica
            .submit(&request.piece_id, seqs, work, request.admitted_elsewhere)
            .await
        {
            Ok(pending) => pending,
            Err(failure) => {
                // The channel has room for this one reply.
                let _ = tx.try_send(reply_of(failure));
                return Ok(Response::new(ReceiverStream::new(rx)));
            }
        };
        let _ = tx.try_send(Ok(proto::SubmitReply {
            reply: Some(Reply::Admitted(proto::Admitted {})),
        }));
        tokio::spawn(async move {
            // A gateway that hangs up (its client went, or it sent the piece elsewhere) abandons the piece here.
            let answer = tokio::select! {
                answer = pending.wait() => answer,
                _ = tx.closed() => return,
            };
            let _ = tx
                .send(match answer {
                    Ok(rows) => Ok(proto::SubmitReply {
                        reply: Some(Reply::Answer(answer_of(&rows))),
                    }),
                    Err(failure) => reply_of(failure),
                })
                .await;
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn load(
        &self,
        _: Request<proto::LoadRequest>,
    ) -> Result<Response<proto::LoadReply>, Status> {
        let mut reply = proto::LoadReply {
            draining: self.gateway.is_draining(),
            classes: vec![proto::ClassLoad::default(); 2],
            ..Default::default()
        };
        for load in self.gateway.loads() {
            reply.queued_seqs += load.queued_seqs as u64;
            reply.queued_tokens += load.queued_tokens as u64;
            reply.in_flight_tokens += load.in_flight_tokens as u64;
            reply.batches += load.batches;
            for (sum, c) in reply.classes.iter_mut().zip(load.classes) {
                sum.queued_seqs += c.queued_seqs as u64;
                sum.queued_tokens += c.queued_tokens as u64;
                sum.admitted += c.admitted;
                sum.refused += c.refused;
                sum.expired += c.expired;
                sum.abandoned += c.abandoned;
            }
        }
        Ok(Response::new(reply))
    }

    async fn info(
        &self,
        _: Request<proto::InfoRequest>,
    ) -> Result<Response<proto::InfoReply>, Status> {
        let front = self.gateway.front();
        let info = front.info();
        Ok(Response::new(proto::InfoReply {
            model_name: self.gateway.config().model_name.clone(),
            dim: info.dim as u32,
            vocab_size: front.vocab_size() as u32,
            max_seq_length: info.max_seq_length as u32,
            normalize: info.normalize,
            max_batch_tokens: front.config().max_batch_tokens as u32,
            pooling: info.pooling_name(),
        }))
    }
}

impl Service {
    /// The sequences, if they are a model input: none empty, every id in the vocabulary, none over the limit, the
    /// tokens of type 1 (a pair's second text) starting within each. A gateway checks the same before it sends;
    /// this replica checks what reaches it from the network (a bad piece would fail the batch it shares).
    fn checked(
        &self,
        sequences: Vec<proto::Sequence>,
        type1_from: Option<u32>,
    ) -> Result<Vec<Vec<u32>>, Status> {
        let front = self.gateway.front();
        let (vocab, max_len) = (front.vocab_size(), front.info().max_seq_length);
        if sequences.is_empty() {
            return Err(Status::invalid_argument("no sequences"));
        }
        sequences
            .into_iter()
            .enumerate()
            .map(|(i, s)| {
                if s.ids.is_empty() || s.ids.len() > max_len {
                    Err(Status::invalid_argument(format!(
                        "sequence {i} has {} tokens; 1 to {max_len} are allowed",
                        s.ids.len()
                    )))
                } else if type1_from.is_some_and(|from| from as usize > s.ids.len()) {
                    Err(Status::invalid_argument(format!(
                        "sequence {i} has {} tokens, and its tokens of type 1 cannot start past them",
                        s.ids.len()
                    )))
                } else if let Some(id) = s.ids.iter().find(|&&id| id as usize >= vocab) {
                    Err(Status::invalid_argument(format!(
                        "sequence {i}: token id {id} is not below the vocabulary size {vocab}"
                    )))
                } else {
                    Ok(s.ids)
                }
            })
            .collect()
    }
}

/// The rows as little-endian float32, with each one's vector count and norm.
fn answer_of(rows: &[Embedded]) -> proto::Answer {
    let dim = rows.first().map_or(0, |r| r.embedding.dim());
    let floats: usize = rows.iter().map(|r| r.embedding.len()).sum();
    let mut data = Vec::with_capacity(floats * 4);
    let mut times = scheduler::StageTimes::default();
    for r in rows {
        data.extend(r.embedding.iter().flat_map(|v| v.to_le_bytes()));
        times = times.max(r.times);
    }
    proto::Answer {
        dim: dim as u32,
        data,
        vectors: rows
            .iter()
            .map(|r| (r.embedding.len() / dim.max(1)) as u32)
            .collect(),
        norms: rows
            .iter()
            .map(|r| r.embedding.norm().unwrap_or(f32::NAN))
            .collect(),
        queue_us: times.queue.as_micros() as u64,
        inference_us: times.inference.as_micros() as u64,
    }
}

/// A local replica's failure as the protocol says it: refusals as replies, the rest as a status.
fn reply_of(failure: Failure) -> Result<proto::SubmitReply, Status> {
    let refused =
        |kind: proto::refused::Kind, message: String, retry: Duration, deadline: Duration| {
            Ok(proto::SubmitReply {
                reply: Some(Reply::Refused(proto::Refused {
                    kind: kind as i32,
                    message,
                    retry_after_ms: retry.as_millis().min(u32::MAX as u128) as u32,
                    deadline_ms: deadline.as_millis().min(u32::MAX as u128) as u32,
                })),
            })
        };
    match failure {
        Failure::Refused(scheduler::Error::Overloaded {
            reason,
            retry_after,
            ..
        }) => refused(
            proto::refused::Kind::Overloaded,
            reason.to_string(),
            retry_after,
            Default::default(),
        ),
        Failure::Refused(scheduler::Error::Expired {
            priority,
            deadline,
            retry_after,
        }) => {
            let message = scheduler::Error::Expired {
                priority,
                deadline,
                retry_after,
            };
            refused(
                proto::refused::Kind::Expired,
                message.to_string(),
                retry_after,
                deadline,
            )
        }
        Failure::Refused(scheduler::Error::ShuttingDown) => {
            Err(Status::unavailable("the replica is shutting down"))
        }
        Failure::Refused(scheduler::Error::Batch(e)) => Err(Status::internal(e.to_string())),
        Failure::Lost { reason, .. } => Err(Status::unavailable(reason)),
    }
}
