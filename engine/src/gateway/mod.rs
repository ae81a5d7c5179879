//! The HTTP gateway: OpenAI-compatible `POST /v1/embeddings` and `GET /v1/models`, TEI-style `POST /` and
//! `/embed`, `/embed_all`, `/similarity`, `/tokenize`, `/decode`, `GET /health`, `GET /info` and `GET /metrics`
//! in front of replicas: one [`crate::scheduler::Scheduler`] per engine in this process, or remote replicas
//! over gRPC ([`crate::replica`]). Embeddings are written in any [`EncodingFormat`]. A cross-encoder is served
//! on TEI's `/rerank`, `/predict` and `POST /` and Cohere's `/v1/rerank` and `/v2/rerank` instead, its pairs of
//! texts ([`Inputs::Pairs`]) taking the same path.
//!
//! A request is parsed and validated, templated with its prompt, tokenized (inline when small, otherwise off the
//! async threads), split into sub-batches of at most `split_size` inputs spread over the replicas by least
//! outstanding tokens, and reassembled in order, as rows of the engine's pooled results (never copied on the way
//! to the JSON writer). Errors all have one shape (see [`ApiError`]).
//!
//! Input rules: an empty input list, an empty string and an empty token list are refused (400), as OpenAI does;
//! token-id inputs are the model's full input, special tokens included; an input over the model's token limit is
//! refused (OpenAI's routes: 400; TEI's: 422) unless truncation is on (`truncate` in `/embed`, or
//! [`GatewayConfig::auto_truncate`]).

mod error;
mod format;
mod input;
mod metrics;
mod more_routes;
mod multi_vector;
mod requests;
mod routes;
mod scores;
mod serve;
mod sparse;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;

pub use error::{Api, ApiError};
pub use format::{Encoded, EncodingFormat, Precision};
pub use input::{Direction, Inputs, Options, Prepared, Tokenization};
pub use metrics::{Metrics, MetricsSnapshot, Times};
pub use requests::parse_body;
pub use routes::{parse_embed_body, PRIORITY_HEADER};

use crate::replica::{Failure, Local, Pending, Replica, Replicas, RetryBudget};
use crate::scheduler::{Scheduler, StageTimes, Work};
use crate::{Engine, ModelFront, Row};

/// The gateway's own settings; the engine's are in each replica's [`crate::EngineConfig`].
#[derive(Clone, Debug, Serialize)]
pub struct GatewayConfig {
    /// The model name reported in responses and `/info`; a request's `model` must be it, one of
    /// `model_aliases`, or absent.
    pub model_name: String,
    /// Other names a request's `model` may give.
    pub model_aliases: Vec<String>,
    /// When set, every route but `/health` needs `Authorization: Bearer <key>`.
    #[serde(skip)]
    pub api_key: Option<String>,
    /// Most inputs in one request (413 beyond).
    pub max_client_batch: usize,
    /// A request with more inputs than this is split into sub-batches of this size across replicas.
    pub split_size: usize,
    /// Largest request body, in bytes (413 beyond).
    pub max_payload_bytes: usize,
    /// Truncate over-limit inputs when the request does not say (OpenAI's endpoint never says).
    pub auto_truncate: bool,
    /// Prompt from the model's `config_sentence_transformers.json` applied when a request names none (`None`: the
    /// model's own `default_prompt_name`, if set).
    pub default_prompt_name: Option<String>,
    /// After a shutdown signal, how long the server may take to answer what it accepted before it gives up
    /// (and [`Gateway::serve`] fails naming what was left unanswered).
    pub shutdown_deadline_ms: u64,
    /// Longest wait for a request's headers (from the connection's start or its last answer); the connection is
    /// closed past it. Keeps slow or idle clients from holding connections.
    pub header_timeout_ms: u64,
    /// Longest wait for a whole request body once its headers are read (408 beyond).
    pub body_timeout_ms: u64,
    /// Most connections open at once; further ones wait in the listen backlog until one closes.
    pub max_connections: usize,
    /// Largest request head (request line and headers), in bytes; hyper answers 431 beyond. At least 8192.
    pub max_header_bytes: usize,
}

impl Default for GatewayConfig {
    fn default() -> Self {
        GatewayConfig {
            model_name: "all-MiniLM-L6-v2".into(),
            model_aliases: Vec::new(),
            api_key: None,
            // OpenAI's own limit.
            max_client_batch: 2048,
            split_size: 64,
            max_payload_bytes: 4 << 20,
            auto_truncate: false,
            default_prompt_name: None,
            shutdown_deadline_ms: 30_000,
            header_timeout_ms: 10_000,
            body_timeout_ms: 30_000,
            max_connections: 1024,
            max_header_bytes: 16 << 10,
        }
    }
}

/// Requests of at most this many bytes of input are tokenized on the async thread that received them.
const INLINE_TOKENIZATION_BYTES: usize = 4096;

/// The server's shared state; cheap to clone.
#[derive(Clone)]
pub struct Gateway {
    inner: Arc<Inner>,
}

struct Inner {
    config: GatewayConfig,
    front: Arc<ModelFront>,
    replicas: Replicas,
    retries: RetryBudget,
    /// Numbers requests, so each piece has an id that a re-send repeats.
    requests: AtomicU64,
    tokenization: Tokenization,
    metrics: Arc<Metrics>,
    draining: AtomicBool,
    /// Requests that reached the router, and those of them answered (a response produced); the difference is
    /// what is in flight.
    received: AtomicU64,
    answered: AtomicU64,
}

/// A request's embeddings, in input order, with what they cost: rows of the engine's pooled results, shared, so
/// the JSON writer reads them where the forward pass wrote them.
pub struct Embedded {
    pub vectors: Vec<Row>,
    /// A multi-vector model's answers: for each input, whether each token's vector is returned
    /// ([`crate::multi_vector::MultiVector::kept`]); empty otherwise.
    pub kept: Vec<Vec<bool>>,
    pub tokens: usize,
    pub times: Times,
}

impl Gateway {
    /// Starts a scheduler per engine (on the current tokio runtime). The engines are replicas of one model.
    pub fn new(engines: Vec<Engine>, config: GatewayConfig) -> crate::Result<Gateway> {
        let first = engines.first().ok_or(crate::Error::Config {
            name: "replicas",
            message: "at least one engine is needed".into(),
        })?;
        let front = first.front().clone();
        let metrics = Arc::new(Metrics::default());
        let replicas = engines
            .into_iter()
            .map(|engine| {
                let observer = metrics.clone();
                let scheduler =
                    Scheduler::start(engine.backend().clone(), engine.config(), move |stats| {
                        observer.record_batch(stats)
                    });
                Local {
                    engine: Arc::new(engine),
                    scheduler,
                }
            })
            .collect();
        Self::over(
            front,
            Replicas::local(replicas),
            config,
            metrics,
            Default::default(),
        )
    }

    /// A gateway in front of remote replicas (`bench serve --role replica`) at `targets` (`HOST:PORT`; a name
    /// that resolves to many addresses gives a replica each, resolved again as `remote.resolve_interval` says).
    /// It tokenizes with `front` and loads no weights. Starts on the current tokio runtime.
    pub async fn remote(
        front: ModelFront,
        targets: Vec<String>,
        remote: crate::replica::RemoteConfig,
        config: GatewayConfig,
    ) -> crate::Result<Gateway> {
        let expect = crate::replica::Expect {
            dim: front.dim(),
            vocab_size: front.vocab_size(),
            pooling: front.info().pooling_name(),
        };
        let replicas = Replicas::remote(targets, remote.clone(), expect).await?;
        Self::over(
            Arc::new(front),
            replicas,
            config,
            Default::default(),
            remote,
        )
    }

    fn over(
        front: Arc<ModelFront>,
        replicas: Replicas,
        config: GatewayConfig,
        metrics: Arc<Metrics>,
        remote: crate::replica::RemoteConfig,
    ) -> crate::Result<Gateway> {
        for (name, value) in [
            ("max_client_batch", config.max_client_batch),
            ("split_size", config.split_size),
            ("max_payload_bytes", config.max_payload_bytes),
            ("max_connections", config.max_connections),
            ("header_timeout_ms", config.header_timeout_ms as usize),
            ("body_timeout_ms", config.body_timeout_ms as usize),
        ] {
            if value == 0 {
                return Err(crate::Error::Config {
                    name,
                    message: "must be at least 1".into(),
                });
            }
        }
        if config.max_header_bytes < serve::MIN_HEADER_BYTES {
            return Err(crate::Error::Config {
                name: "max_header_bytes",
                message: format!("must be at least {}", serve::MIN_HEADER_BYTES),
            });
        }
        let tokenization = Tokenization::new(&front, config.default_prompt_name.as_deref())?;
        Ok(Gateway {
            inner: Arc::new(Inner {
                config,
                front,
                replicas,
                retries: RetryBudget::new(remote.retry_ratio, remote.retry_burst),
                requests: AtomicU64::new(0),
                tokenization,
                metrics,
                draining: AtomicBool::new(false),
                received: AtomicU64::new(0),
                answered: AtomicU64::new(0),
            }),
        })
    }

    pub fn config(&self) -> &GatewayConfig {
        &self.inner.config
    }

    /// The axum router with every route.
    pub fn router(&self) -> axum::Router {
        routes::router(self.clone())
    }

    /// From now on new requests are answered 503; those in flight go on.
    pub fn begin_shutdown(&self) {
        self.inner.draining.store(true, Ordering::SeqCst);
    }

    pub(crate) fn is_draining(&self) -> bool {
        self.inner.draining.load(Ordering::SeqCst)
    }

    /// Requests that have reached the router so far, and how many of them have been answered.
    pub fn requests(&self) -> RequestCounts {
        RequestCounts {
            received: self.inner.received.load(Ordering::SeqCst),
            answered: self.inner.answered.load(Ordering::SeqCst),
        }
    }

    /// The model's settings, tokenizer and description.
    pub fn front(&self) -> &Arc<ModelFront> {
        &self.inner.front
    }

    pub(crate) fn replicas(&self) -> &Replicas {
        &self.inner.replicas
    }

    /// The backend of the first in-process replica; `None` when the replicas are remote.
    fn local_backend(&self) -> Option<crate::BackendInfo> {
        self.inner
            .replicas
            .snapshot()
            .iter()
            .find_map(|r| match r.as_ref() {
                Replica::Local(local) => Some(local.engine.backend().info().clone()),
                Replica::Remote(_) => None,
            })
    }

    /// Validates, templates and tokenizes `inputs`; returns the ids and the time taken.
    async fn tokenize(
        &self,
        inputs: Inputs,
        options: Options,
    ) -> Result<(Prepared, std::time::Duration), ApiError> {
        self.tokenize_with(inputs, move |t, front, inputs| {
            t.prepare(front, inputs, &options)
        })
        .await
    }

    /// Runs `work` (validating and tokenizing `inputs`) and times it. A small request (a few queries:
    /// microseconds of work) is tokenized right here, since a hop to a blocking thread and back costs more than it
    /// does; a larger one goes off the async threads.
    async fn tokenize_with<R: Send + 'static>(
        &self,
        inputs: Inputs,
        work: impl FnOnce(&Tokenization, &ModelFront, Inputs) -> Result<R, ApiError> + Send + 'static,
    ) -> Result<(R, std::time::Duration), ApiError> {
        if self.is_draining() {
            return Err(ApiError::shutting_down());
        }
        let max = self.inner.config.max_client_batch;
        if inputs.len() > max {
            return Err(ApiError::too_large(
                "too_many_inputs",
                format!(
                    "{} inputs in one request; at most {max} are allowed",
                    inputs.len()
                ),
            ));
        }
        let inputs_bytes = inputs.bytes();
        let gateway = self.clone();
        let work = move || {
            let start = Instant::now();
            let done = work(&gateway.inner.tokenization, &gateway.inner.front, inputs)?;
            Ok((done, start.elapsed()))
        };
        if inputs_bytes <= INLINE_TOKENIZATION_BYTES {
            return work();
        }
        tokio::task::spawn_blocking(work)
            .await
            .map_err(|e| ApiError::internal(format!("tokenization task failed: {e}")))?
    }

    /// Embeds `inputs`: sub-batches of at most `split_size` go to the replica with the fewest outstanding tokens
    /// at the time; the answers are put back in input order. Admission decides on the first sub-batch (refused at
    /// once when its queue is full or it would miss its deadline); the rest of an admitted request then joins the
    /// queues as they drain, so a request larger than a queue's bounds is served, not refused for its own size.
    /// A sub-batch whose replica fails (a remote one: died, stalled, cut off) is sent to another, within the retry
    /// budget; when none is left the request is refused (503). Pairs of texts (a cross-encoder's) are scored the
    /// same way, a sub-batch never spanning pairs whose tokens of type 1 start at different places. A Router
    /// model's lookup route, where `options` names it, is answered without the engine.
    pub async fn embed(&self, inputs: Inputs, mut options: Options) -> Result<Embedded, ApiError> {
        if let Some(route) = self.route(&mut options) {
            return self.look_up(route, inputs, options).await;
        }
        let start = Instant::now();
        let readout = self.inner.tokenization.readout(&inputs, &options)?;
        let priority = options.priority;
        let task = crate::multi_vector::Task::named(options.prompt_name.as_deref());
        let (prepared, tokenization) = self.tokenize(inputs, options).await?;
        let Prepared { seqs, type1_from } = prepared;
        let kept = match (readout, self.front().multi_vector()) {
            (crate::Readout::Vectors { .. }, Some(mv)) => seqs
                .iter()
                .map(|ids| mv.kept(task, ids).collect())
                .collect(),
            _ => Vec::new(),
        };
        let (n, tokens) = (seqs.len(), seqs.iter().map(Vec::len).sum());
        let request = self.inner.requests.fetch_add(1, Ordering::Relaxed);
        let mut pieces = Vec::new();
        let mut seqs = seqs.into_iter();
        let mut done = 0;
        while done < n {
            let rest = type1_from.get(done..).unwrap_or_default();
            let (len, from) = piece(rest, n - done, self.inner.config.split_size);
            let part: Vec<Vec<u32>> = seqs.by_ref().take(len).collect();
            done += len;
            let work = Work {
                priority,
                readout,
                type1_from: from,
            };
            let id = format!("{request}.{}", pieces.len());
            // Admission of a sub-batch updates its replica's load at once, so the next choice sees it. If this
            // future is dropped (the client went away), dropping the pending pieces abandons their work.
            let admitted = !pieces.is_empty();
            let mut tried = Vec::new();
            let pending = self.place(&id, part, work, admitted, &mut tried).await?;
            pieces.push((id, work, pending, tried));
        }
        let mut vectors = Vec::with_capacity(n);
        let mut stages = StageTimes::default();
        for (id, work, mut pending, mut tried) in pieces {
            // The rows held while a later piece is awaited must not hold their batch back (no overlap).
            crate::scheduler::settle_rows(&mut vectors);
            let rows = loop {
                match pending.wait().await {
                    Ok(rows) => break rows,
                    Err(Failure::Refused(e)) => return Err(e.into()),
                    Err(Failure::Lost { reason, seqs }) => {
                        self.spend_retry(&reason)?;
                        pending = self.place(&id, seqs, work, true, &mut tried).await?;
                    }
                }
            };
            for e in rows {
                stages = stages.max(e.times);
                vectors.push(e.embedding);
            }
        }
        self.inner.retries.deposit();
        Ok(Embedded {
            vectors,
            kept,
            tokens,
            times: Times {
                tokenization,
                queue: stages.queue,
                inference: stages.inference,
                total: start.elapsed(),
                tokens: Some(tokens),
            },
        })
    }

    /// Submits a piece to the least loaded replica that is up, moving on to another while replicas fail it.
    /// `tried` gathers the replicas it went to.
    async fn place(
        &self,
        id: &str,
        mut seqs: Vec<Vec<u32>>,
        work: Work,
        admitted: bool,
        tried: &mut Vec<Arc<Replica>>,
    ) -> Result<Pending, ApiError> {
        loop {
            let replica = self
                .inner
                .replicas
                .choose(tried)
                .ok_or_else(ApiError::no_replica)?;
            tried.push(replica.clone());
            match replica.submit(id, seqs, work, admitted).await {
                Ok(pending) => return Ok(pending),
                Err(Failure::Refused(e)) => return Err(e.into()),
                Err(Failure::Lost { reason, seqs: back }) => {
                    self.spend_retry(&reason)?;
                    seqs = back;
                }
            }
        }
    }

    /// Counts a lost piece and takes its re-send from the budget, or refuses the request when it is spent.
    fn spend_retry(&self, reason: &str) -> Result<(), ApiError> {
        self.inner.metrics.record_lost_piece();
        if !self.inner.retries.withdraw() {
            return Err(ApiError::retries_spent(reason));
        }
        self.inner.metrics.record_resent_piece();
        Ok(())
    }

    /// Applies the scheduling settings of `config` to every replica's scheduler at once, from each one's next
    /// batch on; nothing queued or running is dropped (see [`Scheduler::reconfigure`]). Validated before any
    /// replica changes, so a bad setting leaves them all as they were. Engine settings (threads, dtype, capture,
    /// tokenizer, replicas) need a new gateway.
    pub fn reconfigure(&self, config: &crate::EngineConfig) -> crate::Result<()> {
        config.validate()?;
        for r in self.inner.replicas.snapshot().iter() {
            r.reconfigure(config)?;
        }
        Ok(())
    }

    /// Every replica's current load, in replica order (a remote one's as its last health check said).
    pub fn loads(&self) -> Vec<crate::scheduler::Load> {
        self.inner
            .replicas
            .snapshot()
            .iter()
            .map(|r| r.load())
            .collect()
    }

    /// Tokens this gateway has sent its replicas and not had answered. Drained is 0: unlike [`Gateway::loads`], a
    /// remote replica that died does not keep the load it last reported.
    pub fn outstanding_tokens(&self) -> usize {
        self.inner
            .replicas
            .snapshot()
            .iter()
            .map(|r| r.outstanding_tokens())
            .sum()
    }

    /// Each replica's name (`local`, or its address) and whether it takes work now.
    pub fn replica_states(&self) -> Vec<(String, bool)> {
        self.inner
            .replicas
            .snapshot()
            .iter()
            .map(|r| (r.name(), r.is_up()))
            .collect()
    }

    pub fn metrics(&self) -> &Metrics {
        &self.inner.metrics
    }
}

/// The next sub-batch of `left` inputs: at most `split` of them, all with the type-1 boundary of the first (a
/// submission carries one); `type1_from` holds the boundaries from there on, empty for single inputs.
fn piece(type1_from: &[Option<u32>], left: usize, split: usize) -> (usize, Option<u32>) {
    match type1_from.first() {
        Some(&from) => {
            let run = type1_from.iter().take(split).take_while(|&&f| f == from);
            (run.count(), from)
        }
        None => (left.min(split), None),
    }
}

/// Requests seen by a gateway: `received - answered` are in flight (or were dropped by a client that left).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RequestCounts {
    pub received: u64,
    pub answered: u64,
}

/// Resolves on SIGINT (Ctrl-C) or SIGTERM.
pub async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = interrupt => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = interrupt.await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = interrupt.await;
    }
}

#[cfg(test)]
mod tests {
    use super::piece;

    #[test]
    fn a_piece_of_pairs_keeps_one_type1_boundary_and_the_split_size() {
        let from = [Some(5), Some(5), Some(5), Some(7), None, None];
        assert_eq!(piece(&from, 6, 2), (2, Some(5)));
        assert_eq!(piece(&from[2..], 4, 8), (1, Some(5)));
        assert_eq!(piece(&from[3..], 3, 8), (1, Some(7)));
        assert_eq!(piece(&from[4..], 2, 8), (2, None));
        // Single inputs have no boundaries: only the split size cuts them.
        assert_eq!(piece(&[], 10, 4), (4, None));
        assert_eq!(piece(&[], 3, 4), (3, None));
    }
}
