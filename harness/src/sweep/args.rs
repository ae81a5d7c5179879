//! The command lines of `bench sweep` and `bench replay`.

use std::path::PathBuf;

use clap::Args;

use crate::target::Api;
use crate::workload::WorkloadKind;

/// What both commands take: the workload, the target, the knobs, the SLOs and where results go.
#[derive(Args, Debug)]
pub struct Common {
    /// online (open-loop queries), batch (closed-loop re-index of a corpus), mixed (both, each with its SLO) or
    /// rerank (open-loop queries, each against --rerank-passages passages, for a cross-encoder).
    #[arg(long, value_enum, default_value_t = WorkloadKind::Online)]
    pub workload: WorkloadKind,
    /// in-process (the gateway path without HTTP), serve (our HTTP server on loopback), processes (a gateway here
    /// in front of `replicas` replica processes over gRPC on loopback), or an http:// URL.
    #[arg(long, default_value = "in-process")]
    pub target: String,
    /// Wire format of a URL target, and of `serve`'s.
    #[arg(long, value_enum, default_value_t = Api::Openai)]
    pub api: Api,
    /// The engine the harness starts (`--model`, `--config FILE`, a flag per setting); the knobs apply on top.
    #[command(flatten)]
    pub engine: crate::EngineArgs,
    /// Model name sent to a URL target (OpenAI's `model` field).
    #[arg(long)]
    pub model_name: Option<String>,
    /// An engine knob for every run, NAME=VALUE (any engine setting, named as its flag with `_`); repeatable.
    #[arg(long = "set", value_name = "NAME=VALUE")]
    pub sets: Vec<String>,
    /// Arrivals of the online class: uniform, poisson, gamma:CV, azure-conv, azure-code, mooncake,
    /// `servegen[:client=N][,window=S]`, or a trace file.
    #[arg(long, default_value = "azure-conv")]
    pub arrivals: String,
    /// Pick queries whose token counts match the trace's (when it has them) instead of random ones.
    #[arg(long)]
    pub match_lengths: bool,
    /// Corpus of the online class (JSON Lines with `text`).
    #[arg(long, default_value = "workloads/text/queries_multilingual.jsonl")]
    pub queries: String,
    /// Corpus of the batch class, and the passages a rerank query is scored against.
    #[arg(long, default_value = "workloads/text/passages_en.jsonl")]
    pub passages: String,
    /// Passages per rerank request (a search's candidates).
    #[arg(long, default_value_t = 16)]
    pub rerank_passages: usize,
    /// Send the online class's texts (the queries) with this `prompt_name`: a prompt of the model's
    /// `config_sentence_transformers.json` (e5's `query`, Qwen3-Embedding's instruction), or an inference-free
    /// sparse model's `query` route. Over OpenAI's API it rides as the body's `prompt_name` (ours reads it).
    #[arg(long)]
    pub query_prompt_name: Option<String>,
    /// Send the batch class's texts (the passages) with this `prompt_name`, as `--query-prompt-name`.
    #[arg(long)]
    pub passage_prompt_name: Option<String>,
    /// Use only the first N texts of each corpus.
    #[arg(long)]
    pub corpus_limit: Option<usize>,
    /// Passages per batch request.
    #[arg(long, default_value_t = 16)]
    pub batch_size: usize,
    /// Clients of the batch class in the mixed workload.
    #[arg(long, default_value_t = 1)]
    pub batch_concurrency: usize,
    /// Online SLO: latency at --slo-quantile within this many milliseconds.
    #[arg(long, default_value_t = 100.0)]
    pub slo_ms: f64,
    /// Batch SLO, per bulk request.
    #[arg(long, default_value_t = 30_000.0)]
    pub batch_slo_ms: f64,
    /// The latency quantile the SLOs bound (0.99: p99).
    #[arg(long, default_value_t = 0.99)]
    pub slo_quantile: f64,
    /// Share of requests that may be refused, fail or time out within the SLO.
    #[arg(long, default_value_t = 0.01)]
    pub max_error_rate: f64,
    /// Abandon a request after this long (default: 10 x its class's SLO, at least 1 s).
    #[arg(long)]
    pub timeout_ms: Option<f64>,
    /// Flag a step whose dispatch delay p99 exceeds this: the generator fell behind its schedule.
    #[arg(long, default_value_t = 10.0)]
    pub max_dispatch_delay_ms: f64,
    /// A fault step: kill one replica process (SIGKILL) this many seconds into every step, report the requests
    /// lost, duplicated and retried, and start it again before the next step (`--target processes` only).
    #[arg(long)]
    pub kill_replica_at_s: Option<f64>,
    /// Seed of every schedule and text choice: the same seed and rate give the same requests for every knob value.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Name of the run's directories (default: UTC time and workload).
    #[arg(long)]
    pub run_id: Option<String>,
    /// Where `results/<run-id>/` goes (relative to the current directory).
    #[arg(long, default_value = "results")]
    pub results_dir: PathBuf,
    /// Where `reports/<run-id>/` goes.
    #[arg(long, default_value = "reports")]
    pub reports_dir: PathBuf,
    /// Write results only, no plots or page.
    #[arg(long)]
    pub no_report: bool,
}

#[derive(Args, Debug)]
pub struct SweepArgs {
    #[command(flatten)]
    pub common: Common,
    /// Sweep an engine knob over values, NAME=V1,V2,...; several axes multiply.
    #[arg(long = "axis", value_name = "NAME=V1,V2")]
    pub axes: Vec<String>,
    /// Seconds each step offers load (default: 10 online and mixed, 20 batch).
    #[arg(long)]
    pub step_s: Option<f64>,
    /// Seconds at the start of each step left out of its figures (default: 2 online and mixed, 4 batch).
    #[arg(long)]
    pub warmup_s: Option<f64>,
    /// Seconds of the closed-loop probe for the maximum throughput (rate sweeps).
    #[arg(long, default_value_t = 5.0)]
    pub probe_s: f64,
    #[arg(long, default_value_t = 64)]
    pub probe_concurrency: usize,
    /// Steps spread below the probed maximum.
    #[arg(long, default_value_t = 7)]
    pub spread: usize,
    /// Narrow the SLO boundary until it is this fraction wide.
    #[arg(long, default_value_t = 0.1)]
    pub resolution: f64,
    /// Steps at most per configuration, the probe not counted.
    #[arg(long, default_value_t = 12)]
    pub max_steps: usize,
    /// Most clients a concurrency sweep tries.
    #[arg(long, default_value_t = 16)]
    pub max_concurrency: usize,
}

#[derive(Args, Debug)]
pub struct ReplayArgs {
    #[command(flatten)]
    pub common: Common,
    /// Requests/s of the online class (the arrivals time-scaled to it); default: the trace's own mean rate.
    #[arg(long)]
    pub rate: Option<f64>,
    /// Seconds to replay (online and mixed); a batch replay runs until the corpus is embedded once. A replay of
    /// two minutes or more is a soak: it also reports each minute's throughput, p99 and resident memory.
    #[arg(long, default_value_t = 60.0, alias = "duration", value_parser = parse_seconds)]
    pub duration_s: f64,
    /// Clients of the batch class (batch workload).
    #[arg(long, default_value_t = 2)]
    pub concurrency: usize,
    /// Seconds at the start left out of the figures.
    #[arg(long, default_value_t = 0.0)]
    pub warmup_s: f64,
}

/// A duration in seconds, or with a unit: `90`, `90s`, `10m`, `1h`.
fn parse_seconds(s: &str) -> Result<f64, String> {
    let s = s.trim();
    let (number, unit) = match s.char_indices().last() {
        Some((i, 's')) => (&s[..i], 1.0),
        Some((i, 'm')) => (&s[..i], 60.0),
        Some((i, 'h')) => (&s[..i], 3600.0),
        _ => (s, 1.0),
    };
    number
        .trim()
        .parse::<f64>()
        .map(|n| n * unit)
        .map_err(|e| format!("{s:?} is not a duration (seconds, or 90s, 10m, 1h): {e}"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_duration_reads_seconds_or_a_unit() {
        use super::parse_seconds as p;
        assert_eq!(
            (p("90"), p("90s"), p("10m"), p("1.5h")),
            (Ok(90.0), Ok(90.0), Ok(600.0), Ok(5400.0))
        );
        assert!(p("ten minutes").is_err());
    }
}
