//! `bench`: the Embedding Workbench command line.

mod arrivals;
mod gate;
mod generator;
mod knobs;
mod plans;
mod report;
mod results;
mod search;
mod serve;
mod step;
mod sweep;
mod target;
mod trace;
mod workload;

use std::io::{BufRead, BufWriter, Write};
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand};
use engine::{Engine, EngineConfig};

#[derive(Parser)]
#[command(
    name = "bench",
    version,
    about = "Embedding Workbench: embed, serve, benchmark and tune"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Embed texts: JSON Lines with a `text` field (or plain lines) in, one `{"embedding": [...]}` line out each.
    Embed(EmbedArgs),
    /// Tokenize texts: JSON Lines with a `text` field (or plain lines) in, one JSON array of ids out each.
    Tokenize(TokenizeArgs),
    /// Serve embeddings over HTTP: OpenAI-compatible /v1/embeddings, TEI-style /embed, /tokenize, /health, /info,
    /// /metrics.
    Serve(serve::ServeArgs),
    /// Measure what forward plans buy: eager vs replayed latency per batch shape, capture cost, start-up time.
    Plans(plans::PlansArgs),
    /// Find where the engine saturates: step the load (open-loop rate, or batch concurrency) from low to past
    /// saturation for each knob combination; write results/<run-id>/ and reports/<run-id>/.
    Sweep(sweep::SweepArgs),
    /// Replay one trace (or one batch re-index of a corpus) at one setting; same outputs as a sweep.
    Replay(sweep::ReplayArgs),
    /// CI performance gates: instruction counts under valgrind, and interleaved A/B timing against a revision.
    /// Exit status 0 pass, 1 regression, 2 could not measure or decide.
    Gate(gate::GateArgs),
    /// Draw the report of a results directory (or result.json) again.
    Report {
        /// results/<run-id>/ or its result.json.
        results: PathBuf,
        #[arg(long, default_value = "reports")]
        reports_dir: PathBuf,
    },
}

/// Engine settings shared by every command that loads a model.
#[derive(Args)]
pub(crate) struct EngineArgs {
    /// Model directory (sentence-transformers layout); default: all-MiniLM-L6-v2, fetched on first use.
    #[arg(long)]
    model: Option<PathBuf>,
    /// Compute threads (0: one per core).
    #[arg(long, default_value_t = 0)]
    threads: usize,
    /// Token budget of one batch.
    #[arg(long, default_value_t = EngineConfig::default().max_batch_tokens)]
    max_batch_tokens: usize,
    /// Tokenizer implementation: `fast` (in-house) or `hf` (the Hugging Face crate).
    #[arg(long, default_value = "fast")]
    tokenizer: String,
    /// Longest a partial batch waits for more work before it is dispatched, in milliseconds (the scheduler's:
    /// `serve` and the harness; `embed` has all its work at once).
    #[arg(long, default_value_t = EngineConfig::default().max_wait_ms)]
    max_wait_ms: u64,
    /// Wait for each batch's answers before submitting the next (overlap is on by default).
    #[arg(long)]
    no_overlap: bool,
    /// Queue bound in tokens; work beyond it is refused as overloaded (the scheduler's: `serve`, the harness).
    #[arg(long, default_value_t = EngineConfig::default().max_queue_tokens)]
    max_queue_tokens: usize,
    /// Queue bound in sequences.
    #[arg(long, default_value_t = EngineConfig::default().max_queue_requests)]
    max_queue_requests: usize,
    /// Precision of the linear layers: f32, or bf16 where the CPU has AVX512-BF16 (f32 elsewhere).
    #[arg(long, default_value = "f32")]
    dtype: String,
    /// When forward plans are made: off (always eager), eager (at start-up, as many as the plan cache holds) or lazy.
    #[arg(long, default_value = "lazy")]
    capture: String,
    /// Token rungs of the bucket ladder, comma-separated (default: doubling from 16 to the token budget).
    #[arg(long, value_delimiter = ',')]
    token_buckets: Vec<usize>,
    /// Sequence rungs of the bucket ladder, comma-separated (default: fourfold from 1 to the sequence cap).
    #[arg(long, value_delimiter = ',')]
    seq_buckets: Vec<usize>,
    /// Memory cap of the plan cache, in MiB.
    #[arg(long, default_value_t = EngineConfig::default().plan_cache_mib)]
    plan_cache_mib: usize,
}

impl EngineArgs {
    fn model_dir(&self) -> Result<PathBuf> {
        match &self.model {
            Some(dir) => Ok(dir.clone()),
            None => Ok(engine::model::fetch::default_model_dir()?),
        }
    }

    fn config(&self) -> Result<EngineConfig> {
        Ok(EngineConfig {
            threads: self.threads,
            max_batch_tokens: self.max_batch_tokens,
            tokenizer: self.tokenizer.parse()?,
            max_wait_ms: self.max_wait_ms,
            overlap: !self.no_overlap,
            max_queue_tokens: self.max_queue_tokens,
            max_queue_requests: self.max_queue_requests,
            dtype: self.dtype.parse()?,
            capture: self.capture.parse()?,
            token_buckets: self.token_buckets.clone(),
            seq_buckets: self.seq_buckets.clone(),
            plan_cache_mib: self.plan_cache_mib,
            ..Default::default()
        })
    }

    fn load(&self) -> Result<Engine> {
        load_engine(&self.model_dir()?, self.config()?)
    }
}

fn load_engine(dir: &std::path::Path, config: EngineConfig) -> Result<Engine> {
    let engine = Engine::load(dir, config)
        .with_context(|| format!("loading the model from {}", dir.display()))?;
    let info = engine.backend().info();
    let requested = engine.config().dtype;
    let fallback = if info.dtype != requested {
        format!(" ({requested} requested: this CPU lacks AVX512-BF16)")
    } else {
        String::new()
    };
    let startup = info.startup_capture.map_or(String::new(), |t| {
        format!(
            ", {} plans captured at start-up in {t:.2?}",
            info.startup_plans
        )
    });
    eprintln!(
        "engine: {} backend, {} threads, {:?} kernels, {}{fallback}, capture {}{startup}",
        info.name, info.threads, info.isa, info.dtype, info.capture
    );
    Ok(engine)
}

#[derive(Args)]
struct EmbedArgs {
    #[command(flatten)]
    engine: EngineArgs,
    /// Read plain text, one input per line, instead of JSON Lines.
    #[arg(long)]
    lines: bool,
    /// Embed each input on its own, one after another (as online queries arrive), and report the latency
    /// percentiles of one input instead of bulk throughput.
    #[arg(long)]
    per_input: bool,
    /// Input file; standard input when absent or `-`.
    input: Option<PathBuf>,
}

#[derive(Args)]
struct TokenizeArgs {
    /// Model directory holding tokenizer.json; default: all-MiniLM-L6-v2, fetched on first use.
    #[arg(long, conflicts_with = "tokenizer_json")]
    model: Option<PathBuf>,
    /// A tokenizer.json to read instead of a model directory's.
    #[arg(long)]
    tokenizer_json: Option<PathBuf>,
    /// Tokenizer implementation: `fast` (in-house) or `hf` (the Hugging Face crate).
    #[arg(long, default_value = "fast")]
    tokenizer: String,
    /// Truncate to this many ids, special tokens included; no truncation when absent.
    #[arg(long)]
    max_length: Option<usize>,
    /// With --max-length, cut the start of the text instead of its end.
    #[arg(long, requires = "max_length")]
    truncate_left: bool,
    /// Read plain text, one input per line, instead of JSON Lines.
    #[arg(long)]
    lines: bool,
    /// Input file; standard input when absent or `-`.
    input: Option<PathBuf>,
}

fn open_input(input: Option<&std::path::Path>) -> Result<Box<dyn BufRead>> {
    Ok(match input {
        None => Box::new(std::io::stdin().lock()),
        Some(p) if p.as_os_str() == "-" => Box::new(std::io::stdin().lock()),
        Some(p) => Box::new(std::io::BufReader::new(
            std::fs::File::open(p).with_context(|| format!("opening {}", p.display()))?,
        )),
    })
}

fn tokenize(args: TokenizeArgs) -> Result<()> {
    use engine::tokenizer::{Scratch, Truncation, TruncationSide};
    let path = match (&args.tokenizer_json, &args.model) {
        (Some(file), _) => file.clone(),
        (None, Some(dir)) => dir.join("tokenizer.json"),
        (None, None) => engine::model::fetch::default_model_dir()?.join("tokenizer.json"),
    };
    let truncation = args.max_length.map(|max_length| Truncation {
        max_length,
        side: if args.truncate_left {
            TruncationSide::Left
        } else {
            TruncationSide::Right
        },
    });
    let tokenizer = engine::tokenizer::load(&path, args.tokenizer.parse()?, truncation)
        .with_context(|| format!("loading the tokenizer {}", path.display()))?;
    let mut out = BufWriter::new(std::io::stdout().lock());
    let (mut scratch, mut ids) = (Scratch::default(), Vec::new());
    for (n, line) in open_input(args.input.as_deref())?.lines().enumerate() {
        let line = line.with_context(|| format!("reading input line {}", n + 1))?;
        let text =
            parse_input(&line, args.lines).with_context(|| format!("input line {}", n + 1))?;
        tokenizer
            .encode_with(&text, &mut scratch, &mut ids)
            .with_context(|| format!("input line {}", n + 1))?;
        serde_json::to_writer(&mut out, &ids)?;
        out.write_all(b"\n")?;
    }
    out.flush()?;
    Ok(())
}

/// Inputs are embedded in chunks of this many, so a large input streams instead of being held whole.
const CHUNK: usize = 2048;

fn embed(args: EmbedArgs) -> Result<()> {
    let engine = args.engine.load()?;
    let reader = open_input(args.input.as_deref())?;
    let mut out = BufWriter::new(std::io::stdout().lock());
    let mut chunk = Vec::with_capacity(CHUNK);
    let mut stats = EmbedStats {
        per_input: args.per_input.then(step::histogram),
        ..Default::default()
    };
    for (n, line) in reader.lines().enumerate() {
        let line = line.with_context(|| format!("reading input line {}", n + 1))?;
        chunk
            .push(parse_input(&line, args.lines).with_context(|| format!("input line {}", n + 1))?);
        if chunk.len() == CHUNK {
            write_embeddings(&engine, &chunk, &mut stats, &mut out)?;
            chunk.clear();
        }
    }
    write_embeddings(&engine, &chunk, &mut stats, &mut out)?;
    out.flush()?;
    if let Some(h) = &stats.per_input {
        let p = step::Percentiles::of(h);
        eprintln!(
            "per input: n {}, p50 {:.3} ms, p90 {:.3} ms, p99 {:.3} ms, mean {:.3} ms",
            p.count, p.p50, p.p90, p.p99, p.mean
        );
    }
    let secs = stats.time.as_secs_f64();
    eprintln!(
        "embedded {} inputs ({} tokens) in {secs:.3} s: {:.0} tokens/s",
        stats.inputs,
        stats.tokens,
        stats.tokens as f64 / secs.max(1e-9)
    );
    Ok(())
}

/// Work done by `bench embed`, timed from tokenization to the last embedding (model load and output excluded).
#[derive(Default)]
struct EmbedStats {
    inputs: usize,
    tokens: usize,
    time: std::time::Duration,
    /// With `--per-input`: each input's latency, tokenization to embedding, in microseconds.
    per_input: Option<hdrhistogram::Histogram<u64>>,
}

fn parse_input(line: &str, plain: bool) -> Result<String> {
    if plain {
        return Ok(line.to_owned());
    }
    let value: serde_json::Value = serde_json::from_str(line).context("not valid JSON")?;
    match value.get("text") {
        Some(serde_json::Value::String(s)) => Ok(s.clone()),
        Some(_) => bail!("the `text` field is not a string"),
        None => bail!("no `text` field (use --lines for plain text)"),
    }
}

fn write_embeddings(
    engine: &Engine,
    texts: &[String],
    stats: &mut EmbedStats,
    out: &mut impl Write,
) -> Result<()> {
    // Each input line is one input, so the inputs written so far say where this chunk starts.
    let first_line = stats.inputs + 1;
    let line = |k: usize| format!("input line {}", first_line + k);
    let start = std::time::Instant::now();
    let embeddings = match &mut stats.per_input {
        None => engine.embed(texts).with_context(|| {
            format!(
                "embedding input lines {first_line}-{}",
                first_line + texts.len() - 1
            )
        })?,
        Some(h) => {
            let mut all = Vec::with_capacity(texts.len());
            for (k, t) in texts.iter().enumerate() {
                let one = std::time::Instant::now();
                all.extend(engine.embed(&[t]).with_context(|| line(k))?);
                h.saturating_record(one.elapsed().as_micros() as u64);
            }
            all
        }
    };
    stats.time += start.elapsed();
    // Counted apart from the timed work: the figure is what embedding costs, not this bookkeeping.
    let mut tokens = 0;
    for (k, t) in texts.iter().enumerate() {
        tokens += engine.tokenize(t).with_context(|| line(k))?.len();
    }
    for e in embeddings {
        serde_json::to_writer(&mut *out, &serde_json::json!({ "embedding": e }))?;
        out.write_all(b"\n")?;
    }
    stats.inputs += texts.len();
    stats.tokens += tokens;
    Ok(())
}

fn main() -> Result<()> {
    match Cli::parse().command {
        Command::Embed(args) => embed(args),
        Command::Tokenize(args) => tokenize(args),
        Command::Serve(args) => serve::run(args),
        Command::Plans(args) => plans::run(args),
        Command::Sweep(args) => sweep::sweep(args),
        Command::Replay(args) => sweep::replay(args),
        Command::Gate(args) => std::process::exit(gate::run(args)),
        Command::Report {
            results,
            reports_dir,
        } => sweep::rereport(results, reports_dir),
    }
}
