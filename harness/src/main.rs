//! `bench`: the Embedding Workbench command line.

mod arrivals;
mod config;
mod curve;
mod embed;
mod engines;
mod gate;
mod generator;
mod input;
mod knobs;
mod pace;
mod plans;
mod report;
mod results;
mod search;
mod serve;
mod step;
mod sweep;
mod target;
mod trace;
mod tune;
mod workload;

use std::io::{BufWriter, Write};
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};
use engine::tokenizer::TokenizerKind;

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
    /// Embed texts: JSON Lines with a `text` field (or plain lines) in, one `{"id": ..., "embedding": [...]}` line out
    /// each, in input order (blank lines skipped).
    Embed(embed::EmbedArgs),
    /// Tokenize texts: JSON Lines with a `text` field (or plain lines) in, one JSON array of ids out each (blank
    /// lines skipped).
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
    /// saturation for each knob combination; write `results/<run-id>/` and `reports/<run-id>/`. Exit status 0 when
    /// it ran (verdicts in the report), 1 on an error, 2 when the target is unreachable, 3 when no request was
    /// answered.
    Sweep(sweep::SweepArgs),
    /// Tune a running engine under live traffic: charts, knobs changed while the load runs, results on quit
    /// (`--headless --script FILE --duration S` without a terminal).
    Tune(tune::TuneArgs),
    /// Replay one trace (or one batch re-index of a corpus) at one setting; same outputs and exit status as a
    /// sweep.
    Replay(sweep::ReplayArgs),
    /// CI performance gates: instruction counts under valgrind, and interleaved A/B timing against a revision.
    /// Exit status 0 pass, 1 regression, 2 could not measure or decide.
    Gate(gate::GateArgs),
    /// Draw the report of a results directory (or result.json) again.
    Report {
        /// `results/<run-id>/` or its result.json.
        results: PathBuf,
        #[arg(long, default_value = "reports")]
        reports_dir: PathBuf,
    },
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

fn tokenize(args: TokenizeArgs) -> Result<()> {
    use engine::tokenizer::{Scratch, Truncation, TruncationSide};
    // A model directory's tokenizer as the model runs it (a StaticEmbedding's without special tokens).
    let (path, add_special_tokens) = match (&args.tokenizer_json, &args.model) {
        (Some(file), _) => (file.clone(), true),
        (None, model) => {
            let dir = match model {
                Some(dir) => dir.clone(),
                None => engine::model::fetch::default_model_dir()?,
            };
            let file = dir.join("tokenizer.json");
            match engine::model::ModelDir::open(&dir) {
                Ok(model) => (model.tokenizer_path, model.add_special_tokens),
                // A directory the engine cannot run (or holding only a tokenizer): its tokenizer.json as it is.
                Err(e) if file.is_file() => {
                    eprintln!("tokenize: {e}; tokenizing with {} as it is", file.display());
                    (file, true)
                }
                Err(e) => return Err(e.into()),
            }
        }
    };
    let truncation = args.max_length.map(|max_length| Truncation {
        max_length,
        side: if args.truncate_left {
            TruncationSide::Left
        } else {
            TruncationSide::Right
        },
    });
    let tokenizer = engine::tokenizer::load(&path, args.tokenizer, truncation, add_special_tokens)
        .with_context(|| format!("loading the tokenizer {}", path.display()))?;
    let mut out = BufWriter::new(std::io::stdout().lock());
    let (mut scratch, mut ids) = (Scratch::default(), Vec::new());
    let blank = std::cell::Cell::new(0);
    for input in input::inputs(input::open(args.input.as_deref())?, args.lines, &[], &blank) {
        let (n, input) = input?;
        tokenizer
            .encode_with(&input.text, &mut scratch, &mut ids)
            .with_context(|| format!("input line {n}"))?;
        serde_json::to_writer(&mut out, &ids)?;
        out.write_all(b"\n")?;
    }
    out.flush()?;
    Ok(())
}

/// `1 client`, `2 clients`.
pub(crate) fn count(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// Exit status: 0 done, 1 an error, and for `sweep`/`replay` 2 an unreachable target, 3 no request answered
/// ([`sweep::RunFailure`]); `gate` has its own.
fn main() -> std::process::ExitCode {
    match run(Cli::parse().command) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("Error: {e:?}");
            let code = e
                .downcast_ref::<sweep::RunFailure>()
                .map_or(1, sweep::RunFailure::exit_code);
            std::process::ExitCode::from(code)
        }
    }
}

fn run(command: Command) -> Result<()> {
    match command {
        Command::Embed(args) => embed::run(args),
        Command::Tokenize(args) => tokenize(args),
        Command::Serve(args) => serve::run(args),
        Command::Plans(args) => plans::run(args),
        Command::Curve(args) => curve::run(args),
        Command::Sweep(args) => sweep::sweep(args),
        Command::Replay(args) => sweep::replay(args),
        Command::Tune(args) => tune::run(args),
        Command::Gate(args) => std::process::exit(gate::run(args)),
        Command::Report {
            results,
            reports_dir,
        } => match tune::rereport(&results, &reports_dir)? {
            Some(page) => {
                eprintln!("report: {}", page.display());
                Ok(())
            }
            None => sweep::rereport(results, reports_dir),
        },
    }
}
