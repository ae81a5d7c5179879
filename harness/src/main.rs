//! `bench`: the Embedding Workbench command line.

mod arrivals;
mod config;
mod curve;
mod engines;
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
use engine::tokenizer::TokenizerKind;
use engine::Engine;

pub(crate) use config::EngineArgs;
pub(crate) use engines::load_engine;

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
    /// The saturation curve: forward tokens/s against batch size in tokens (16 … 32768), and the smallest batch
    /// budget that reaches 95% of the peak.
    Curve(curve::CurveArgs),
    /// Find where the engine saturates: step the load (open-loop rate, or batch concurrency) from low to past
    /// saturation for each knob combination; write results/<run-id>/ and reports/<run-id>/.
    Sweep(sweep::SweepArgs),
    /// Replay one trace (or one batch re-index of a corpus) at one setting; same outputs as a sweep.
    Replay(sweep::ReplayArgs),
    /// Draw the report of a results directory (or result.json) again.
    Report {
        /// results/<run-id>/ or its result.json.
        results: PathBuf,
        #[arg(long, default_value = "reports")]
        reports_dir: PathBuf,
    },
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
    #[arg(long, value_enum, default_value_t = TokenizerKind::Fast)]
    tokenizer: TokenizerKind,
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
    let tokenizer = engine::tokenizer::load(&path, args.tokenizer, truncation)
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
        Command::Curve(args) => curve::run(args),
        Command::Sweep(args) => sweep::sweep(args),
        Command::Replay(args) => sweep::replay(args),
        Command::Report {
            results,
            reports_dir,
        } => sweep::rereport(results, reports_dir),
    }
}
