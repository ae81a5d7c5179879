//! `bench`: the Embedding Workbench command line.

mod arrivals;
mod generator;
mod knobs;
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
    /// Longest a partial batch waits for more work before it is dispatched, in milliseconds.
    #[arg(long, default_value_t = EngineConfig::default().max_wait_ms)]
    max_wait_ms: u64,
    /// Wait for each batch's answers before submitting the next (overlap is on by default).
    #[arg(long)]
    no_overlap: bool,
    /// Queue bound in tokens; work beyond it is refused as overloaded.
    #[arg(long, default_value_t = EngineConfig::default().max_queue_tokens)]
    max_queue_tokens: usize,
    /// Queue bound in sequences.
    #[arg(long, default_value_t = EngineConfig::default().max_queue_requests)]
    max_queue_requests: usize,
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
            ..Default::default()
        })
    }

    fn load(&self) -> Result<Engine> {
        load_engine(&self.model_dir()?, self.config()?)
    }
}

fn load_engine(dir: &std::path::Path, config: EngineConfig) -> Result<Engine> {
    Engine::load(dir, config).with_context(|| format!("loading the model from {}", dir.display()))
}

#[derive(Args)]
struct EmbedArgs {
    #[command(flatten)]
    engine: EngineArgs,
    /// Read plain text, one input per line, instead of JSON Lines.
    #[arg(long)]
    lines: bool,
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
    let mut stats = EmbedStats::default();
    for (n, line) in reader.lines().enumerate() {
        let line = line.with_context(|| format!("reading input line {}", n + 1))?;
        chunk
            .push(parse_input(&line, args.lines).with_context(|| format!("input line {}", n + 1))?);
        if chunk.len() == CHUNK {
            stats += write_embeddings(&engine, &chunk, &mut out)?;
            chunk.clear();
        }
    }
    stats += write_embeddings(&engine, &chunk, &mut out)?;
    out.flush()?;
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
}

impl std::ops::AddAssign for EmbedStats {
    fn add_assign(&mut self, o: Self) {
        self.inputs += o.inputs;
        self.tokens += o.tokens;
        self.time += o.time;
    }
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

fn write_embeddings(engine: &Engine, texts: &[String], out: &mut impl Write) -> Result<EmbedStats> {
    let start = std::time::Instant::now();
    let embeddings = engine.embed(texts)?;
    let time = start.elapsed();
    // Counted apart from the timed work: the figure is what embedding costs, not this bookkeeping.
    let tokens = texts
        .iter()
        .map(|t| engine.tokenize(t).map(|ids| ids.len()))
        .sum::<engine::Result<usize>>()?;
    for e in embeddings {
        serde_json::to_writer(&mut *out, &serde_json::json!({ "embedding": e }))?;
        out.write_all(b"\n")?;
    }
    Ok(EmbedStats {
        inputs: texts.len(),
        tokens,
        time,
    })
}

fn main() -> Result<()> {
    match Cli::parse().command {
        Command::Embed(args) => embed(args),
        Command::Tokenize(args) => tokenize(args),
        Command::Serve(args) => serve::run(args),
        Command::Sweep(args) => sweep::sweep(args),
        Command::Replay(args) => sweep::replay(args),
        Command::Report {
            results,
            reports_dir,
        } => sweep::rereport(results, reports_dir),
    }
}
