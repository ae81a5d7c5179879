//! `bench loadtest`: an open-loop generator over HTTP on loopback against an in-process `bench serve`, for each
//! token budget × overlap setting × request rate. Requests leave on a fixed schedule whatever the server's pace
//! (so queueing shows), and each one's latency is send-to-last-byte.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use clap::Args;
use hdrhistogram::Histogram;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use crate::serve::GatewayArgs;
use crate::EngineArgs;

#[derive(Args)]
pub struct LoadtestArgs {
    #[command(flatten)]
    engine: EngineArgs,
    #[command(flatten)]
    gateway: GatewayArgs,
    /// Token budgets to run, comma-separated (overrides --max-batch-tokens).
    #[arg(long, value_delimiter = ',', default_value = "256,512,2048,8192")]
    budgets: Vec<usize>,
    /// Overlap settings to run: on, off, or both.
    #[arg(long, value_delimiter = ',', default_value = "on,off")]
    overlap: Vec<Overlap>,
    /// Request rates in requests per second, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "25,50,100")]
    rates: Vec<f64>,
    /// How long each rate is offered, in seconds.
    #[arg(long, default_value_t = 5.0)]
    duration_s: f64,
    /// Inputs per request.
    #[arg(long, default_value_t = 1)]
    inputs_per_request: usize,
    /// JSON Lines with a `text` field: the inputs, used in turn.
    #[arg(long, default_value = "workloads/text/queries_multilingual.jsonl")]
    texts: PathBuf,
    /// Also write one JSON line per run here.
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum Overlap {
    On,
    Off,
}

/// One run's figures.
#[derive(serde::Serialize)]
struct Row {
    schema_version: u32,
    max_batch_tokens: usize,
    overlap: bool,
    offered_rps: f64,
    sent: usize,
    ok: usize,
    overloaded: usize,
    failed: usize,
    throughput_rps: f64,
    p50_ms: f64,
    p99_ms: f64,
    batches: u64,
}

pub fn run(args: LoadtestArgs) -> Result<()> {
    let texts = read_texts(&args.texts)?;
    let dir = args.engine.model_dir()?;
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    let mut out = match &args.out {
        Some(p) => {
            Some(std::fs::File::create(p).with_context(|| format!("creating {}", p.display()))?)
        }
        None => None,
    };
    println!(
        "{:>7} {:>7} {:>8} {:>6} {:>6} {:>5} {:>9} {:>9} {:>9} {:>8}",
        "budget", "overlap", "rate/s", "sent", "ok", "429", "done/s", "p50 ms", "p99 ms", "batches"
    );
    for &budget in &args.budgets {
        for &overlap in &args.overlap {
            let mut config = args.engine.config()?;
            config.max_batch_tokens = budget;
            config.overlap = matches!(overlap, Overlap::On);
            let rows = runtime.block_on(run_config(&args, &dir, config, &texts))?;
            for row in rows {
                println!(
                    "{:>7} {:>7} {:>8.0} {:>6} {:>6} {:>5} {:>9.1} {:>9.2} {:>9.2} {:>8}",
                    row.max_batch_tokens,
                    if row.overlap { "on" } else { "off" },
                    row.offered_rps,
                    row.sent,
                    row.ok,
                    row.overloaded,
                    row.throughput_rps,
                    row.p50_ms,
                    row.p99_ms,
                    row.batches
                );
                if let Some(f) = out.as_mut() {
                    use std::io::Write;
                    serde_json::to_writer(&mut *f, &row)?;
                    writeln!(f)?;
                }
            }
        }
    }
    Ok(())
}

fn read_texts(path: &std::path::Path) -> Result<Vec<String>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let texts: Vec<String> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| v.get("text")?.as_str().map(str::to_owned))
        .filter(|t| !t.is_empty())
        .collect();
    if texts.is_empty() {
        bail!("{} has no non-empty `text` fields", path.display());
    }
    Ok(texts)
}

/// Starts a gateway with `config` on a free loopback port and offers each rate in turn.
async fn run_config(
    args: &LoadtestArgs,
    dir: &std::path::Path,
    config: engine::EngineConfig,
    texts: &[String],
) -> Result<Vec<Row>> {
    let gateway = args.gateway.start(dir, config.clone())?;
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
    let url = format!("http://{}/v1/embeddings", listener.local_addr()?);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(gateway.clone().serve(listener, async {
        let _ = stopped.await;
    }));
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let mut rows = Vec::new();
    let mut next_text = 0;
    for &rate in &args.rates {
        let batches_before: u64 = gateway.loads().iter().map(|l| l.batches).sum();
        let bodies: Vec<Bytes> = (0..(rate * args.duration_s).ceil() as usize)
            .map(|_| {
                let input: Vec<&str> = (0..args.inputs_per_request)
                    .map(|_| {
                        next_text = (next_text + 1) % texts.len();
                        texts[next_text].as_str()
                    })
                    .collect();
                Bytes::from(serde_json::json!({ "input": input }).to_string())
            })
            .collect();
        let stats = offer(&client, &url, rate, bodies).await?;
        let batches: u64 = gateway.loads().iter().map(|l| l.batches).sum();
        rows.push(Row {
            schema_version: 1,
            max_batch_tokens: config.max_batch_tokens,
            overlap: config.overlap,
            offered_rps: rate,
            batches: batches - batches_before,
            ..stats
        });
    }
    let _ = stop.send(());
    server.await??;
    Ok(rows)
}

#[derive(Default)]
struct Tally {
    ok: usize,
    overloaded: usize,
    failed: usize,
}

/// Sends `bodies` at `rate` per second on a fixed schedule and waits for every answer.
async fn offer(
    client: &Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>,
    url: &str,
    rate: f64,
    bodies: Vec<Bytes>,
) -> Result<Row> {
    // Microseconds up to an hour: `saturating_record` clamps to the bounds and never resizes.
    let latencies = Arc::new(Mutex::new(Histogram::<u64>::new_with_bounds(
        1,
        3_600_000_000,
        3,
    )?));
    let tally = Arc::new(Mutex::new(Tally::default()));
    let sent = bodies.len();
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(sent);
    for (i, body) in bodies.into_iter().enumerate() {
        tokio::time::sleep_until((start + Duration::from_secs_f64(i as f64 / rate)).into()).await;
        let request = http::Request::post(url)
            .header("content-type", "application/json")
            .body(Full::new(body))?;
        let (client, latencies, tally) = (client.clone(), latencies.clone(), tally.clone());
        tasks.push(tokio::spawn(async move {
            let t0 = Instant::now();
            let outcome = match client.request(request).await {
                Ok(response) => {
                    let status = response.status();
                    match response.into_body().collect().await {
                        Ok(_) => Some(status),
                        Err(_) => None,
                    }
                }
                Err(_) => None,
            };
            let elapsed = t0.elapsed();
            let mut tally = tally
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            match outcome {
                Some(s) if s.is_success() => {
                    tally.ok += 1;
                    latencies
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .saturating_record(elapsed.as_micros() as u64);
                }
                Some(s) if s.as_u16() == 429 => tally.overloaded += 1,
                _ => tally.failed += 1,
            }
        }));
    }
    for t in tasks {
        t.await?;
    }
    let wall = start.elapsed().as_secs_f64();
    let h = latencies
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let tally = tally
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let ms = |q: f64| h.value_at_quantile(q) as f64 / 1e3;
    Ok(Row {
        schema_version: 1,
        max_batch_tokens: 0,
        overlap: false,
        offered_rps: rate,
        sent,
        ok: tally.ok,
        overloaded: tally.overloaded,
        failed: tally.failed,
        throughput_rps: tally.ok as f64 / wall,
        p50_ms: ms(0.5),
        p99_ms: ms(0.99),
        batches: 0,
    })
}
