//! `bench serve`: the HTTP gateway over one or more engine replicas, in this process (the default role), or split
//! into processes: replicas serving the replica protocol (gRPC) and a gateway in front of them.

use std::io::Write;
use std::path::{Path, PathBuf};

use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use engine::gateway::{Gateway, GatewayConfig};
use engine::replica::RemoteConfig;
use engine::{EngineConfig, ModelFront};

use crate::EngineArgs;

#[derive(Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub engine: EngineArgs,
    #[command(flatten)]
    pub gateway: GatewayArgs,
    /// Address to bind; the default keeps the server on this machine.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port to listen on; 0 picks a free one (the address is printed on start).
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Threads of the async runtime (HTTP, small requests' tokenization, the schedulers' loops); 0: one per four
    /// cores, at least one. The compute has threads of its own (`--threads`); async threads beyond what the HTTP
    /// work needs only wake up on the compute's cores and slow a lone query down.
    #[arg(long, default_value_t = 0)]
    pub async_threads: usize,
    /// What this process serves: `all`, the HTTP API over replicas in this process (`--replicas`); `replica`,
    /// one engine's scheduler over gRPC (the replica protocol, proto/embedding/v1) with /health, /metrics and the
    /// HTTP API on the same port; `gateway`, the HTTP API in front of `--replica` processes, loading no weights.
    #[arg(long, value_enum, default_value_t = Role::All)]
    pub role: Role,
    /// A replica for `--role gateway`, as HOST:PORT; repeat it. A name that resolves to several addresses (a
    /// Kubernetes headless Service) gives a replica each, and is resolved again as replicas come and go.
    #[arg(long = "replica", value_name = "HOST:PORT")]
    pub replica: Vec<String>,
    #[command(flatten)]
    pub remote: RemoteArgs,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Role {
    All,
    Replica,
    Gateway,
}

/// How a gateway watches and retries its replicas (`--role gateway`).
#[derive(Args)]
pub struct RemoteArgs {
    /// Time between health checks of each replica, in ms.
    #[arg(long, default_value_t = RemoteConfig::default().health_interval.as_millis() as u64)]
    pub health_interval_ms: u64,
    /// A health check unanswered for this long failed, in ms.
    #[arg(long, default_value_t = RemoteConfig::default().health_timeout.as_millis() as u64)]
    pub health_timeout_ms: u64,
    /// Failed health checks in a row that take a replica out (a failed call takes it out at once).
    #[arg(long, default_value_t = RemoteConfig::default().down_after)]
    pub down_after: u32,
    /// Time between resolutions of the `--replica` names, in ms.
    #[arg(long, default_value_t = RemoteConfig::default().resolve_interval.as_millis() as u64)]
    pub resolve_interval_ms: u64,
    /// Pieces that may be sent again per request answered, over time.
    #[arg(long, default_value_t = RemoteConfig::default().retry_ratio)]
    pub retry_ratio: f64,
    /// Re-sends allowed at once before the ratio limits them.
    #[arg(long, default_value_t = RemoteConfig::default().retry_burst)]
    pub retry_burst: f64,
}

impl RemoteArgs {
    fn config(&self) -> Result<RemoteConfig> {
        if self.down_after == 0 || self.health_interval_ms == 0 || self.resolve_interval_ms == 0 {
            bail!(
                "--down-after, --health-interval-ms and --resolve-interval-ms must be at least 1"
            );
        }
        if !(self.retry_ratio >= 0.0 && self.retry_burst >= 0.0) {
            bail!("--retry-ratio and --retry-burst must be at least 0");
        }
        Ok(RemoteConfig {
            health_interval: Duration::from_millis(self.health_interval_ms),
            health_timeout: Duration::from_millis(self.health_timeout_ms),
            down_after: self.down_after,
            resolve_interval: Duration::from_millis(self.resolve_interval_ms),
            retry_ratio: self.retry_ratio,
            retry_burst: self.retry_burst,
            ..RemoteConfig::default()
        })
    }
}

/// Gateway settings of `serve`.
#[derive(Args)]
pub struct GatewayArgs {
    /// Require `Authorization: Bearer <KEY>` on every route but /health. A key given here shows in `ps`: prefer
    /// the environment variable or `--api-key-file`.
    #[arg(long, env = "EMBED_WORKBENCH_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// Read the API key from this file (its first line).
    #[arg(long, conflicts_with = "api_key")]
    pub api_key_file: Option<PathBuf>,
    /// Name the model is served as: reported in responses, and what a request's `model` must say (or leave
    /// out). Repeat it for aliases; the first is reported. Default: the model directory's name.
    #[arg(long = "served-model-name", alias = "model-name", value_name = "NAME")]
    pub served_model_names: Vec<String>,
    /// Most inputs in one request.
    #[arg(long, default_value_t = GatewayConfig::default().max_client_batch)]
    pub max_client_batch: usize,
    /// Requests with more inputs are split into sub-batches of this many, spread across replicas.
    #[arg(long, default_value_t = GatewayConfig::default().split_size)]
    pub split_size: usize,
    /// Largest request body in bytes.
    #[arg(long, default_value_t = GatewayConfig::default().max_payload_bytes)]
    pub max_payload_bytes: usize,
    /// Truncate inputs over the model's token limit instead of refusing them (when a request does not say).
    #[arg(long)]
    pub auto_truncate: bool,
    /// Prompt of the model's config_sentence_transformers.json applied when a request names none (default: the
    /// model's own `default_prompt_name`, if set).
    #[arg(long)]
    pub default_prompt_name: Option<String>,
    /// On SIGTERM or Ctrl-C, how long to answer what was accepted before giving up (exit 1); a second signal
    /// exits at once.
    #[arg(long, default_value_t = GatewayConfig::default().shutdown_deadline_ms)]
    pub shutdown_deadline_ms: u64,
    /// Longest wait for a request's headers, idle keep-alive time included; the connection is closed past it.
    #[arg(long, default_value_t = GatewayConfig::default().header_timeout_ms)]
    pub header_timeout_ms: u64,
    /// Longest wait for a request's body once its headers are in (408 past it).
    #[arg(long, default_value_t = GatewayConfig::default().body_timeout_ms)]
    pub body_timeout_ms: u64,
    /// Most connections open at once; more wait in the listen backlog.
    #[arg(long, default_value_t = GatewayConfig::default().max_connections)]
    pub max_connections: usize,
    /// Largest request head in bytes (431 beyond; at least 8192).
    #[arg(long, default_value_t = GatewayConfig::default().max_header_bytes)]
    pub max_header_bytes: usize,
}

impl GatewayArgs {
    /// Loads the replicas and starts the gateway (on the current tokio runtime).
    pub fn start(&self, dir: &Path, config: EngineConfig) -> Result<Gateway> {
        let engines = crate::engines::load_replicas(dir, config, &|line| eprintln!("{line}"))?;
        let gateway = Gateway::new(engines, self.config(dir)?).context("starting the gateway")?;
        announce(gateway.front());
        Ok(gateway)
    }

    /// Starts a gateway in front of the remote replicas at `targets`; it reads only the model's tokenizer and
    /// settings from `dir`.
    pub async fn start_remote(
        &self,
        dir: &Path,
        config: EngineConfig,
        targets: Vec<String>,
        remote: RemoteConfig,
    ) -> Result<Gateway> {
        let front = ModelFront::load(dir, config).context("reading the model's tokenizer")?;
        let gateway = Gateway::remote(front, targets, remote, self.config(dir)?)
            .await
            .context("starting the gateway")?;
        announce(gateway.front());
        Ok(gateway)
    }

    fn config(&self, dir: &Path) -> Result<GatewayConfig> {
        let api_key = match &self.api_key_file {
            Some(path) => Some(read_key(path)?),
            None => self.api_key.clone(),
        };
        let mut names = self.served_model_names.iter().cloned();
        let model_name = names.next().unwrap_or_else(|| {
            dir.file_name()
                .map_or("model".into(), |n| n.to_string_lossy().into_owned())
        });
        Ok(GatewayConfig {
            model_name,
            model_aliases: names.collect(),
            api_key,
            max_client_batch: self.max_client_batch,
            split_size: self.split_size,
            max_payload_bytes: self.max_payload_bytes,
            auto_truncate: self.auto_truncate,
            default_prompt_name: self.default_prompt_name.clone(),
            shutdown_deadline_ms: self.shutdown_deadline_ms,
            header_timeout_ms: self.header_timeout_ms,
            body_timeout_ms: self.body_timeout_ms,
            max_connections: self.max_connections,
            max_header_bytes: self.max_header_bytes,
        })
    }
}

/// Says which routes a cross-encoder, a sparse or a multi-vector model answers: the dense embedding routes refuse them, and a
/// client pointed at those would otherwise learn that only from its first 422.
fn announce(front: &ModelFront) {
    if front.info().sparse {
        eprintln!(
            "model: a sparse (SPLADE) model of {} vocabulary entries: served on /embed_sparse and POST / (and /embed \
             with normalize: false), not on the dense embedding routes",
            front.info().dim
        );
    }
    if front.info().multi_vector {
        eprintln!(
            "model: a multi-vector (ColBERT) model of {}-wide vectors: served on /embed_multi (`\"prompt_name\": \
             \"query\"` or `\"document\"` names the task), not on the dense embedding routes",
            front.info().dim
        );
    }
    if let Some(lookup) = front.info().routes.get(1) {
        eprintln!(
            "model: a Router: `\"prompt_name\": \"{lookup}\"` asks for its {lookup} route, each token's weight looked \
             up without the model; the {} route, the default, runs the model",
            front.info().routes[0]
        );
    }
    if let Some(c) = &front.info().classifier {
        let rerank = if c.labels.len() == 1 {
            "/rerank, /v1/rerank, /v2/rerank, "
        } else {
            ""
        };
        eprintln!(
            "model: a cross-encoder scoring {} ({}): served on {rerank}/predict and POST /, not on the embedding routes",
            if c.labels.len() == 1 { "one label".to_owned() } else { format!("{} labels", c.labels.len()) },
            c.labels.join(", ")
        );
        if front.chat_pairs().is_some() {
            eprintln!(
                "model: each (query, document) pair is rendered through its chat template as `query` and `document` \
                 messages, then tokenized"
            );
        }
    }
}

/// The key in `path`: its first line, without the line end.
fn read_key(path: &Path) -> Result<String> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the API key from {}", path.display()))?;
    let key = text.lines().next().unwrap_or("").trim();
    if key.is_empty() {
        bail!("{} holds no API key", path.display());
    }
    Ok(key.to_owned())
}

pub fn run(args: ServeArgs) -> Result<()> {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let workers = match args.async_threads {
        0 => (cores / 4).max(1),
        n => n,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async {
        // The port first: a busy one is found before the model is downloaded or loaded.
        let listener = tokio::net::TcpListener::bind((args.host.as_str(), args.port))
            .await
            .with_context(|| format!("binding {}:{}", args.host, args.port))?;
        let addr = listener.local_addr()?;
        let (dir, config) = (args.engine.model_dir()?, args.engine.config()?);
        if args.role != Role::Gateway && !args.replica.is_empty() {
            bail!("--replica is for --role gateway");
        }
        let gateway = match args.role {
            Role::All | Role::Replica => args.gateway.start(&dir, config)?,
            Role::Gateway => {
                let remote = args.remote.config()?;
                args.gateway
                    .start_remote(&dir, config, args.replica.clone(), remote)
                    .await?
            }
        };
        let routes = match args.role {
            Role::Replica => gateway
                .router()
                .merge(engine::replica::grpc_routes(gateway.clone())),
            Role::All | Role::Gateway => gateway.router(),
        };
        // Scripts and tests read this line to find the port.
        println!("listening on http://{addr}");
        std::io::stdout().flush()?;
        let deadline = gateway.config().shutdown_deadline_ms;
        let first = signals();
        let shutdown = async move {
            let _ = first.await;
            eprintln!("draining: refusing new requests, answering the accepted ones (deadline {deadline} ms; a second signal exits at once)");
        };
        let counts = gateway.clone();
        gateway.serve_routes(listener, routes, shutdown).await.context("serving")?;
        let c = counts.requests();
        // The shutdown test reads this line.
        eprintln!(
            "shut down cleanly: {} requests received, {} answered",
            c.received, c.answered
        );
        Ok(())
    })
}

/// The number of the next SIGTERM (15) or SIGINT (2).
#[cfg(unix)]
async fn next_signal(
    term: &mut tokio::signal::unix::Signal,
    int: &mut tokio::signal::unix::Signal,
) -> i32 {
    tokio::select! {
        _ = term.recv() => 15,
        _ = int.recv() => 2,
    }
}

/// Resolves on the first SIGTERM or SIGINT; a second one exits the process at once, with 128 + its number as
/// the shell does for a process killed by it.
fn signals() -> tokio::sync::oneshot::Receiver<()> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            // Both handlers are installed once, before the first signal, so a second one is never missed.
            let (Ok(mut term), Ok(mut int)) = (
                signal(SignalKind::terminate()),
                signal(SignalKind::interrupt()),
            ) else {
                engine::gateway::shutdown_signal().await;
                let _ = tx.send(());
                return;
            };
            next_signal(&mut term, &mut int).await;
            let _ = tx.send(());
            let signo = next_signal(&mut term, &mut int).await;
            eprintln!("second signal: exiting without draining");
            std::process::exit(128 + signo);
        }
        #[cfg(not(unix))]
        {
            engine::gateway::shutdown_signal().await;
            let _ = tx.send(());
            let _ = tokio::signal::ctrl_c().await;
            std::process::exit(130);
        }
    });
    rx
}
