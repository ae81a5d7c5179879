//! Targets: what a step's requests are sent to. The engine in-process (the gateway's own path — validation,
//! templating, tokenization, replica choice, scheduler — minus HTTP), the engine behind `bench serve`'s HTTP
//! server on loopback, a gateway here in front of replica processes over gRPC (`processes`), or any OpenAI- or
//! TEI-compatible URL.

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use anyhow::{Context, Result};
use bytes::Bytes;
use engine::gateway::{Gateway, GatewayConfig, Inputs, MetricsSnapshot, Options, PRIORITY_HEADER};
use engine::EngineConfig;
use engine::Priority;
use http::StatusCode;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use serde::{Deserialize, Serialize};

use crate::workload::Request;

mod processes;

pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// A request's answer, as far as the target tells.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Reply {
    /// Tokens the target counted (OpenAI's `usage`, our gateway's own count).
    pub tokens: Option<u32>,
    /// Time the request waited in the target's queue (its `x-queue-time` header, or the scheduler's own figure).
    pub queue: Option<Duration>,
    /// Its batch's forward pass (`x-inference-time`, or the scheduler's figure).
    pub inference: Option<Duration>,
}

/// Why a request got no embeddings.
#[derive(Clone, Debug, PartialEq)]
pub enum Failure {
    /// Turned away for load (429, 503): backpressure, not a fault; with the server's `Retry-After`, if it said.
    Refused {
        message: String,
        retry_after: Option<Duration>,
    },
    Error(String),
    /// Answered, but with another number of embeddings than inputs: more is a piece answered twice.
    Rows {
        got: usize,
        want: usize,
    },
}

/// Counters of the target's batches, read before and after a step's measured window.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Telemetry {
    pub batches: f64,
    pub batch_tokens: f64,
    /// Sum over batches of tokens / token budget.
    pub fill: f64,
    /// Forward passes that replayed a captured plan, and all forward passes that reported how they ran.
    pub replays: f64,
    pub forwards: f64,
    /// Pieces the gateway sent again after a replica failed them.
    pub resent_pieces: f64,
}

impl From<MetricsSnapshot> for Telemetry {
    fn from(s: MetricsSnapshot) -> Telemetry {
        Telemetry {
            batches: s.batches as f64,
            batch_tokens: s.batch_tokens,
            fill: s.batch_fill,
            replays: s.replay_forwards as f64,
            forwards: (s.eager_forwards + s.capture_forwards + s.replay_forwards) as f64,
            resent_pieces: s.resent_pieces as f64,
        }
    }
}

impl Telemetry {
    /// Reads our gateway's Prometheus text (`/metrics`); `None` when it lacks the batch histograms.
    pub fn parse_prometheus(text: &str) -> Option<Telemetry> {
        let value = |name: &str| {
            text.lines().find_map(|l| {
                l.strip_prefix(name)?
                    .strip_prefix(' ')?
                    .trim()
                    .parse::<f64>()
                    .ok()
            })
        };
        let forwards = |run: &str| value(&format!("embed_forwards_total{{run=\"{run}\"}}"));
        Some(Telemetry {
            batches: value("embed_batch_tokens_count")?,
            batch_tokens: value("embed_batch_tokens_sum")?,
            fill: value("embed_batch_fill_sum")?,
            replays: forwards("replay").unwrap_or(0.0),
            forwards: ["eager", "capture", "replay"]
                .iter()
                .filter_map(|r| forwards(r))
                .sum(),
            resent_pieces: value("embed_replica_resent_pieces_total").unwrap_or(0.0),
        })
    }
}

/// Where requests go.
pub trait Target: Send + Sync {
    fn embed(&self, request: Request, priority: Priority) -> BoxFuture<Result<Reply, Failure>>;
    /// Batch counters, when the target exposes ours.
    fn telemetry(&self) -> BoxFuture<Option<Telemetry>>;
    /// Resolves once work left from an earlier step is gone, so steps do not bleed into each other.
    fn settle(&self) -> BoxFuture<()>;
    /// Kills one of the target's replica processes (a fault step), saying which.
    fn kill_replica(&self) -> anyhow::Result<String> {
        anyhow::bail!("this target has no replica processes to kill (the `processes` target has)")
    }
    /// Starts again what `kill_replica` killed and resolves once it serves.
    fn restore(&self) -> BoxFuture<anyhow::Result<()>> {
        Box::pin(async { Ok(()) })
    }
}

/// Which kind of target, as named on the command line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TargetKind {
    /// The engine in this process, through the gateway's `embed` (no HTTP).
    InProcess,
    /// The engine behind our HTTP server on a loopback port, restarted per knob combination, spoken to in `api`.
    Serve { api: Api },
    /// A gateway in this process in front of `replicas` replica processes of this binary over gRPC on
    /// loopback, restarted per knob combination.
    Processes,
    /// An external server; knobs cannot be set.
    Url { url: String, api: Api },
}

/// The wire format of an HTTP target.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Api {
    /// `POST /v1/embeddings` with `{"input": [...]}`.
    Openai,
    /// `POST /embed` with `{"inputs": [...]}`.
    Tei,
    /// `POST /embed_sparse` with `{"inputs": [...]}`: a sparse (SPLADE) model's weights per vocabulary entry,
    /// TEI's route for those.
    #[value(name = "tei-sparse")]
    #[serde(rename = "tei-sparse")]
    TeiSparse,
    /// `POST /embed_multi` with `{"inputs": [...]}`: a multi-vector (ColBERT) model's vectors per token, ours.
    #[value(name = "tei-multi")]
    #[serde(rename = "tei-multi")]
    TeiMulti,
}

impl Api {
    /// The API's own spelling.
    pub fn name(self) -> &'static str {
        match self {
            Api::Openai => "OpenAI",
            Api::Tei => "TEI",
            Api::TeiSparse => "TEI sparse",
            Api::TeiMulti => "TEI multi-vector",
        }
    }
}

impl TargetKind {
    pub fn parse(spec: &str, api: Api) -> Result<TargetKind> {
        match spec {
            "in-process" | "inprocess" => Ok(TargetKind::InProcess),
            "serve" => Ok(TargetKind::Serve { api }),
            "processes" => Ok(TargetKind::Processes),
            url if url.starts_with("http://") => Ok(TargetKind::Url {
                url: url.trim_end_matches('/').to_owned(),
                api,
            }),
            url if url.starts_with("https://") => {
                anyhow::bail!(
                    "`{url}`: only plain http:// is supported (the harness has no TLS client)"
                )
            }
            other => anyhow::bail!(
                "unknown target `{other}`: expected in-process, serve, processes, or an http:// URL"
            ),
        }
    }

    pub fn describe(&self) -> String {
        match self {
            TargetKind::InProcess => "in-process (gateway path, no HTTP)".into(),
            TargetKind::Serve { api: Api::Openai } => "bench serve over HTTP on loopback".into(),
            TargetKind::Serve { api } => {
                format!("bench serve over HTTP on loopback ({} API)", api.name())
            }
            TargetKind::Processes => {
                "a gateway in this process, replica processes over gRPC on loopback".into()
            }
            TargetKind::Url { url, api } => format!("{url} ({} API)", api.name()),
        }
    }
}

/// Whether a TCP connection to `url`'s host and port opens within a few seconds: an unreachable target is told
/// before a run, not found out from a run of connection errors.
pub async fn reachable(url: &str) -> Result<(), String> {
    let uri: http::Uri = url
        .parse()
        .map_err(|e| format!("`{url}` is not a URL: {e}"))?;
    let host = uri.host().ok_or_else(|| format!("`{url}` has no host"))?;
    let port = uri.port_u16().unwrap_or(80);
    let connect = tokio::net::TcpStream::connect((host, port));
    match tokio::time::timeout(Duration::from_secs(5), connect).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(format!("connecting to {host}:{port}: {e}")),
        Err(_) => Err(format!("connecting to {host}:{port}: no answer in 5 s")),
    }
}

/// Settings of a target the harness starts itself.
pub struct EngineSetup<'a> {
    pub model_dir: &'a Path,
    pub config: EngineConfig,
    /// Where the engines' start-up lines go.
    pub say: &'a dyn Fn(String),
}

/// Starts the target (a fresh engine for the in-process and serve kinds). Call within a tokio runtime.
pub fn start(
    kind: &TargetKind,
    setup: Option<EngineSetup>,
    model_name: &str,
) -> Result<Arc<dyn Target>> {
    let gateway_config = || GatewayConfig {
        model_name: model_name.to_owned(),
        // Passages over the model's limit are cut, as TEI's `truncate: true` does; refusing them is not the point.
        auto_truncate: true,
        ..GatewayConfig::default()
    };
    let gateway = |setup: Option<EngineSetup>| -> Result<Gateway> {
        let s = setup.context("this target needs a model")?;
        let engines = crate::engines::load_replicas(s.model_dir, s.config, s.say)?;
        Gateway::new(engines, gateway_config()).context("starting the gateway")
    };
    Ok(match kind {
        TargetKind::InProcess => Arc::new(InProcess::new(gateway(setup)?)),
        TargetKind::Serve { api } => {
            let server = LocalServer::start(gateway(setup)?)?;
            let url = format!("http://{}", server.addr);
            Arc::new(Http::new(url, *api, model_name, Some(server)))
        }
        TargetKind::Processes => Arc::new(processes::Processes::start(
            setup.context("this target needs a model")?,
            gateway_config(),
        )?),
        TargetKind::Url { url, api } => Arc::new(Http::new(url.clone(), *api, model_name, None)),
    })
}

/// The engine through [`Gateway::embed`]: the path of an HTTP request minus parsing and serialization. The
/// gateway can be swapped for a new one while requests run: each request holds the gateway it started on, so the
/// old one answers everything it admitted.
pub struct InProcess {
    gateway: RwLock<Gateway>,
}

impl InProcess {
    pub fn new(gateway: Gateway) -> InProcess {
        InProcess {
            gateway: RwLock::new(gateway),
        }
    }

    /// The gateway new requests go to.
    pub fn gateway(&self) -> Gateway {
        self.gateway
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Sends new requests to `next` from now on; returns the old gateway, which still answers what it admitted.
    pub fn swap(&self, next: Gateway) -> Gateway {
        std::mem::replace(
            &mut *self.gateway.write().unwrap_or_else(PoisonError::into_inner),
            next,
        )
    }
}

impl Target for InProcess {
    fn embed(&self, request: Request, priority: Priority) -> BoxFuture<Result<Reply, Failure>> {
        let gateway = self.gateway();
        Box::pin(async move {
            let want = request.texts.len();
            let texts: Vec<String> = request.texts.iter().map(|t| t.to_string()).collect();
            let prompt_name = request.prompt_name.as_deref();
            // A multi-vector model answers a vector per token, for the task its prompt names.
            let readout = gateway
                .front()
                .multi_vector()
                .map_or(engine::Readout::POOLED, |mv| {
                    mv.readout(engine::multi_vector::Task::named(prompt_name))
                });
            let options = Options {
                truncate: true,
                priority,
                prompt_name: prompt_name.map(str::to_owned),
                readout,
                ..Options::default()
            };
            // A query against passages, ranked as `/rerank` ranks them.
            if let Some(q) = &request.query {
                return match gateway.relevance(q, texts, options, false).await {
                    Ok((r, _, _)) if r.len() != want => Err(Failure::Rows { got: r.len(), want }),
                    Ok((_, tokens, times)) => Ok(Reply {
                        tokens: Some(tokens as u32),
                        queue: Some(times.queue),
                        inference: Some(times.inference),
                    }),
                    Err(e) => Err(failure(e.status, e.message, e.retry_after)),
                };
            }
            match gateway.embed(Inputs::Texts(texts), options).await {
                Ok(e) if e.vectors.len() != want => Err(Failure::Rows {
                    got: e.vectors.len(),
                    want,
                }),
                Ok(e) => Ok(Reply {
                    tokens: Some(e.tokens as u32),
                    queue: Some(e.times.queue),
                    inference: Some(e.times.inference),
                }),
                Err(e) => Err(failure(e.status, e.message, e.retry_after)),
            }
        })
    }

    fn telemetry(&self) -> BoxFuture<Option<Telemetry>> {
        let telemetry = Telemetry::from(self.gateway().metrics().snapshot());
        Box::pin(async move { Some(telemetry) })
    }

    fn settle(&self) -> BoxFuture<()> {
        Box::pin(drained(self.gateway()))
    }
}

fn failure(status: StatusCode, message: String, retry_after: Option<Duration>) -> Failure {
    match status {
        StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE => Failure::Refused {
            message,
            retry_after,
        },
        _ => Failure::Error(format!("{status}: {message}")),
    }
}

/// Waits (at most 30 s) until the gateway has had everything it sent answered (a killed replica's pieces are
/// re-sent or refused; the load it last reported does not count).
pub async fn drained(gateway: Gateway) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while tokio::time::Instant::now() < deadline && gateway.outstanding_tokens() > 0 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// An HTTP server: ours on loopback (which the harness can see drain), or an external one.
pub struct Http {
    client: Client<HttpConnector, Full<Bytes>>,
    url: String,
    api: Api,
    model_name: String,
    server: Option<LocalServer>,
}

impl Http {
    fn new(base: String, api: Api, model_name: &str, server: Option<LocalServer>) -> Http {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .build(connector);
        Http {
            client,
            url: base,
            api,
            model_name: model_name.to_owned(),
            server,
        }
    }
}

#[derive(Deserialize)]
struct OpenAiReply {
    data: Vec<serde::de::IgnoredAny>,
    usage: Option<Usage>,
}

#[derive(Deserialize)]
struct Usage {
    prompt_tokens: u32,
}

/// Cohere's rerank answer (`/v1/rerank`; Jina's, vLLM's and ours).
#[derive(Deserialize)]
struct CohereReply {
    results: Vec<serde::de::IgnoredAny>,
    usage: Option<CohereUsage>,
}

#[derive(Deserialize)]
struct CohereUsage {
    total_tokens: u32,
}

impl Target for Http {
    fn embed(&self, request: Request, priority: Priority) -> BoxFuture<Result<Reply, Failure>> {
        let (client, api) = (self.client.clone(), self.api);
        let texts: Vec<&str> = request.texts.iter().map(|t| &**t).collect();
        let rerank = request.query.is_some();
        let (path, mut body) = match (api, &request.query) {
            // Base64 keeps the response small, as the official client asks for it.
            (Api::Openai, None) => (
                "/v1/embeddings",
                serde_json::json!({ "input": texts, "model": self.model_name, "encoding_format": "base64" }),
            ),
            (Api::Tei, None) => (
                "/embed",
                serde_json::json!({ "inputs": texts, "truncate": true }),
            ),
            (Api::TeiSparse, None) => (
                "/embed_sparse",
                serde_json::json!({ "inputs": texts, "truncate": true }),
            ),
            (Api::TeiMulti, None) => (
                "/embed_multi",
                serde_json::json!({ "inputs": texts, "truncate": true }),
            ),
            // OpenAI has no reranking: Cohere's route is the one such servers share.
            (Api::Openai, Some(query)) => (
                "/v1/rerank",
                serde_json::json!({ "query": &**query, "documents": texts, "model": self.model_name }),
            ),
            (Api::Tei | Api::TeiSparse | Api::TeiMulti, Some(query)) => (
                "/rerank",
                serde_json::json!({ "query": &**query, "texts": texts, "truncate": true }),
            ),
        };
        if let (Some(name), Some(fields)) = (&request.prompt_name, body.as_object_mut()) {
            fields.insert("prompt_name".into(), serde_json::json!(&**name));
        }
        let uri = format!("{}{path}", self.url);
        let n = request.texts.len();
        Box::pin(async move {
            let request = http::Request::post(uri)
                .header(http::header::CONTENT_TYPE, "application/json")
                .header(PRIORITY_HEADER, priority.name())
                .body(Full::new(Bytes::from(body.to_string())))
                .map_err(|e| Failure::Error(e.to_string()))?;
            let response = client
                .request(request)
                .await
                .map_err(|e| Failure::Error(format!("request failed: {e}")))?;
            let status = response.status();
            let header_ms = |name: &str| {
                response
                    .headers()
                    .get(name)?
                    .to_str()
                    .ok()?
                    .parse::<f64>()
                    .ok()
            };
            let header_time = |name: &str| header_ms(name).and_then(millis);
            let (queue, inference) = (header_time("x-queue-time"), header_time("x-inference-time"));
            let header_tokens = header_ms("x-compute-tokens").map(|t| t as u32);
            // Retry-After in seconds (the HTTP-date form is not used by embedding servers).
            let retry_after = response
                .headers()
                .get(http::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok()?.trim().parse::<u64>().ok())
                .map(Duration::from_secs);
            let body = response
                .into_body()
                .collect()
                .await
                .map_err(|e| Failure::Error(format!("reading the response: {e}")))?
                .to_bytes();
            if !status.is_success() {
                let text = String::from_utf8_lossy(&body[..body.len().min(300)]).into_owned();
                return Err(failure(status, text, retry_after));
            }
            let (got, tokens) = match (api, rerank) {
                (Api::Openai, true) => {
                    let r: CohereReply = serde_json::from_slice(&body).map_err(|e| {
                        Failure::Error(format!("not a Cohere rerank response: {e}"))
                    })?;
                    (
                        r.results.len(),
                        r.usage.map(|u| u.total_tokens).or(header_tokens),
                    )
                }
                (Api::Tei | Api::TeiSparse | Api::TeiMulti, true) => {
                    let r: Vec<serde::de::IgnoredAny> = serde_json::from_slice(&body)
                        .map_err(|e| Failure::Error(format!("not a TEI /rerank response: {e}")))?;
                    (r.len(), header_tokens)
                }
                (Api::Openai, false) => {
                    let r: OpenAiReply = serde_json::from_slice(&body).map_err(|e| {
                        Failure::Error(format!("not an OpenAI embeddings response: {e}"))
                    })?;
                    (
                        r.data.len(),
                        r.usage.map(|u| u.prompt_tokens).or(header_tokens),
                    )
                }
                (Api::Tei | Api::TeiSparse | Api::TeiMulti, false) => {
                    let r: Vec<serde::de::IgnoredAny> = serde_json::from_slice(&body)
                        .map_err(|e| Failure::Error(format!("not a TEI {path} response: {e}")))?;
                    (r.len(), header_tokens)
                }
            };
            if got != n {
                return Err(Failure::Rows { got, want: n });
            }
            Ok(Reply {
                tokens,
                queue,
                inference,
            })
        })
    }

    fn telemetry(&self) -> BoxFuture<Option<Telemetry>> {
        let client = self.client.clone();
        let uri = format!("{}/metrics", self.url);
        Box::pin(async move {
            let response = client.get(uri.parse().ok()?).await.ok()?;
            if !response.status().is_success() {
                return None;
            }
            let body = response.into_body().collect().await.ok()?.to_bytes();
            Telemetry::parse_prometheus(&String::from_utf8_lossy(&body))
        })
    }

    fn settle(&self) -> BoxFuture<()> {
        match &self.server {
            Some(server) => Box::pin(drained(server.gateway.clone())),
            // An external server's queue is not visible: give it a moment.
            None => Box::pin(tokio::time::sleep(Duration::from_millis(500))),
        }
    }
}

/// Our HTTP server on a loopback port, on a runtime of its own (so its work does not share the generator's
/// threads), stopped when dropped.
pub struct LocalServer {
    addr: std::net::SocketAddr,
    gateway: Gateway,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl LocalServer {
    /// `gateway` was started on the caller's runtime; its schedulers keep running there, and this server's
    /// runtime only parses, serializes and routes.
    fn start(gateway: Gateway) -> Result<LocalServer> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .context("starting the server's runtime")?;
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind(("127.0.0.1", 0)))
            .context("binding a loopback port")?;
        let addr = listener.local_addr()?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let serving = gateway.clone();
        let thread = std::thread::Builder::new()
            .name("bench-serve".into())
            .spawn(move || {
                let served = runtime.block_on(serving.serve(listener, async {
                    let _ = stopped.await;
                }));
                if let Err(e) = served {
                    eprintln!("the loopback server stopped: {e}");
                }
            })
            .context("starting the server thread")?;
        Ok(LocalServer {
            addr,
            gateway,
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

impl Drop for LocalServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A server's figure in milliseconds as a Duration; `None` when it is no time (negative, NaN, inf, or past what a
/// Duration holds): an external server's bad header is ignored, not a panic.
fn millis(ms: f64) -> Option<Duration> {
    Duration::try_from_secs_f64(ms / 1e3).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timing_headers_of_inf_or_1e300_ms_are_ignored() {
        assert_eq!(millis(2.5), Some(Duration::from_micros(2500)));
        assert_eq!(millis(0.0), Some(Duration::ZERO));
        for bad in [f64::INFINITY, 1e300, f64::NAN, -1.0] {
            assert_eq!(millis(bad), None, "{bad}");
        }
    }

    /// The text our `/metrics` renders parses back to the in-process snapshot: the HTTP and in-process targets
    /// read the same figures.
    #[test]
    fn reads_our_metrics() {
        use engine::plan::{ForwardStats, Run};
        use engine::scheduler::BatchStats;
        let metrics = engine::gateway::Metrics::default();
        for (tokens, run) in [
            (300, Run::Eager),
            (500, Run::Capture),
            (200, Run::Replay),
            (200, Run::Replay),
        ] {
            metrics.record_batch(&BatchStats {
                seqs: 2,
                tokens,
                fill: tokens as f64 / 1000.0,
                backend_queue: Duration::ZERO,
                forward: Duration::from_millis(3),
                plan: Some(ForwardStats {
                    run,
                    bucket: None,
                    padding_tokens: 0,
                    capture_time: None,
                    cache: Default::default(),
                }),
            });
        }
        let t = Telemetry::parse_prometheus(&metrics.render(&[])).unwrap();
        assert_eq!((t.batches, t.batch_tokens, t.fill), (4.0, 1200.0, 1.2));
        assert_eq!((t.replays, t.forwards), (2.0, 4.0));
        assert_eq!(t, Telemetry::from(metrics.snapshot()));
        assert_eq!(Telemetry::parse_prometheus("up 1\n"), None);
    }

    #[test]
    fn api_names_are_spelled_as_their_owners_spell_them() {
        let url = "http://127.0.0.1:8080".to_owned();
        for (api, name) in [
            (Api::Openai, "OpenAI API"),
            (Api::Tei, "TEI API"),
            (Api::TeiSparse, "TEI sparse API"),
            (Api::TeiMulti, "TEI multi-vector API"),
        ] {
            let kind = TargetKind::Url {
                url: url.clone(),
                api,
            };
            assert_eq!(kind.describe(), format!("{url} ({name})"));
        }
    }

    #[test]
    fn target_names() {
        assert_eq!(
            TargetKind::parse("in-process", Api::Openai).unwrap(),
            TargetKind::InProcess
        );
        assert!(matches!(
            TargetKind::parse("http://127.0.0.1:8080/", Api::Tei).unwrap(),
            TargetKind::Url { url, api: Api::Tei } if url == "http://127.0.0.1:8080"
        ));
        assert!(TargetKind::parse("https://x", Api::Tei).is_err());
        assert!(TargetKind::parse("gpu", Api::Tei)
            .unwrap_err()
            .to_string()
            .contains("unknown target"));
    }
}
