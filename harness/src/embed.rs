//! `bench embed`: a corpus in (JSON Lines with a `text` field, or plain lines), one `{"embedding": [...]}` line out
//! per input, in input order, with the input's kept fields (`--keep`, default `id`) before the embedding. The
//! inputs go through a scheduler, as served requests do: fed as its queue drains (within its bounds, so memory
//! stays bounded and the backend always has the next batch), batched by its one batch builder, answered in rows of
//! the pooled results that are written straight to the output as they come. Ctrl-C stops it with every line
//! written so far complete. Inputs over the model's token limit are cut to it and counted (`--no-truncate` refuses
//! them instead). `--prompt-name` puts one of the model's prompts before every input, as `prompt_name` does over
//! HTTP (by default the model's `default_prompt_name`, if set; `--prompt-name ''` puts none). `--per-input` embeds
//! one input at a time instead and reports its latency.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::io::{BufRead, BufWriter, IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use engine::gateway::EncodingFormat;
use engine::scheduler::{Scheduler, Work};
use engine::{Engine, Prompt, Readout, Row};
use indicatif::{ProgressBar, ProgressStyle};

use crate::input::{self, Input};
use crate::{step, EngineArgs};

#[derive(Args)]
pub struct EmbedArgs {
    #[command(flatten)]
    engine: EngineArgs,
    /// Read plain text, one input per line, instead of JSON Lines.
    #[arg(long)]
    lines: bool,
    /// Fields of each JSON input line copied to its output line, before `embedding` (comma-separated; those a
    /// line lacks are left out; `--keep ''` keeps none).
    #[arg(long, value_delimiter = ',', default_value = "id")]
    keep: Vec<String>,
    /// Fail on an input over the model's token limit instead of cutting it to the limit.
    #[arg(long)]
    no_truncate: bool,
    /// Put the model's prompt NAME (from its config_sentence_transformers.json: e5's `passage`, an instruction)
    /// before every input, as `prompt_name` does over HTTP; where the model's pooling leaves the prompt out
    /// (`include_prompt: false`), its tokens are not pooled. Default: the model's `default_prompt_name`, if set
    /// (`''`: none).
    #[arg(long, value_name = "NAME")]
    prompt_name: Option<String>,
    /// Embed each input on its own, one after another (as online queries arrive), and report the latency
    /// percentiles of one input instead of bulk throughput.
    #[arg(long)]
    per_input: bool,
    /// How each embedding is written, named as `encoding_format` is over HTTP: float, base64, int8 (round(127
    /// tanh(x)) of the pooled vector before Normalize), int8_scaled (with a `scale` field), binary, ubinary (sign
    /// bits packed), each also `_base64`.
    #[arg(long, default_value = "float")]
    output_format: EncodingFormat,
    /// Input file; standard input when absent or `-`.
    input: Option<PathBuf>,
}

/// Work done, timed from the first input read to the last embedding written (model load excluded).
#[derive(Default)]
struct Stats {
    inputs: usize,
    tokens: usize,
    /// Inputs cut to the model's limit.
    truncated: Cell<usize>,
    /// Blank lines skipped.
    blank: Cell<usize>,
    time: Duration,
    /// With `--per-input`: each input's latency, tokenization to embedding, in microseconds.
    per_input: Option<hdrhistogram::Histogram<u64>>,
}

/// How inputs are read and turned into ids.
struct Reading<'a> {
    engine: &'a Engine,
    plain: bool,
    keep: Vec<String>,
    no_truncate: bool,
    format: EncodingFormat,
    /// The prompt put before every input (`--prompt-name`, else the model's default), if any.
    prompt: Option<Prompt>,
}

impl Reading<'_> {
    /// The ids of input line `n` (after the prompt, if any), cut to the model's limit (counted in `truncated`)
    /// unless `--no-truncate`.
    fn tokenize(&self, n: usize, text: &str, truncated: &Cell<usize>) -> Result<Vec<u32>> {
        let text = Prompt::template(self.prompt.as_ref(), text);
        let mut ids = Vec::new();
        let cut = engine::tokenizer::with_thread_scratch(|scratch| {
            self.engine.tokenizer().encode_cut(&text, scratch, &mut ids)
        })
        .with_context(|| format!("input line {n}"))?;
        if cut {
            if self.no_truncate {
                bail!(
                    "input line {n} is over the model's limit of {} tokens (without --no-truncate it is cut to it)",
                    self.engine.info().max_seq_length
                );
            }
            truncated.set(truncated.get() + 1);
        }
        // A tokenizer that adds no special tokens (a StaticEmbedding's) gives none for whitespace; a word list
        // none for unknown or stop words.
        if ids.is_empty() {
            bail!("input line {n} gives no tokens for this model");
        }
        Ok(ids)
    }

    /// What each input's answer is: pooled, without the prompt's tokens where the model leaves them out.
    fn readout(&self) -> Readout {
        self.prompt
            .as_ref()
            .map_or(Readout::POOLED, Prompt::readout)
    }
}

pub fn run(args: EmbedArgs) -> Result<()> {
    let engine = args.engine.load()?;
    if engine.info().multi_vector {
        anyhow::bail!(
            "{} is a multi-vector (ColBERT) model: bench embed writes one vector per input; serve the model and \
             post /embed_multi (or call Engine::embed_vectors)",
            engine.info().path.display()
        );
    }
    if let Some(lookup) = engine.front().lookup(args.prompt_name.as_deref()) {
        anyhow::bail!(
            "--prompt-name {0}: that names the model's {0} route, whose vectors are looked up without the model; \
             bench embed runs the model's route ({1}): serve the model and post /embed_sparse with \
             `\"prompt_name\": \"{0}\"` instead",
            lookup.route(),
            engine.info().routes[0]
        );
    }
    let total = match args.input.as_deref() {
        Some(p) if p.as_os_str() != "-" => Some(count_inputs(p)?),
        _ => None,
    };
    let reader = input::open(args.input.as_deref())?;
    let mut out = BufWriter::new(std::io::stdout().lock());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let mut progress = Progress::new(total);
    let reading = Reading {
        engine: &engine,
        plain: args.lines,
        keep: args.keep.into_iter().filter(|k| !k.is_empty()).collect(),
        no_truncate: args.no_truncate,
        format: args.output_format,
        prompt: engine
            .front()
            .prompt_or_default(args.prompt_name.as_deref(), "--prompt-name")?
            .cloned(),
    };
    let mut stats = Stats::default();
    let interrupted = runtime.block_on(async {
        let scheduler = Scheduler::start(engine.backend().clone(), &engine.bulk_config(), |_| {});
        let work = async {
            if args.per_input {
                per_input(
                    &reading,
                    &scheduler,
                    reader,
                    &mut out,
                    &mut progress,
                    &mut stats,
                )
                .await
            } else {
                bulk(
                    &reading,
                    &scheduler,
                    reader,
                    &mut out,
                    &mut progress,
                    &mut stats,
                )
                .await
            }
        };
        // Each output line is written whole between two awaits, so stopping here leaves no torn line.
        tokio::select! {
            done = work => done.map(|()| false),
            _ = tokio::signal::ctrl_c() => Ok(true),
        }
    });
    progress.finish();
    out.flush()?;
    let interrupted = interrupted?;
    if let Some(h) = &stats.per_input {
        let p = step::Percentiles::of(h);
        eprintln!(
            "per input: n {}, p50 {:.3} ms, p90 {:.3} ms, p99 {:.3} ms, mean {:.3} ms",
            p.count, p.p50, p.p90, p.p99, p.mean
        );
    }
    let secs = stats.time.as_secs_f64();
    eprintln!(
        "embedded {} ({} tokens) in {secs:.3} s: {:.0} tokens/s",
        crate::count(stats.inputs, "input"),
        stats.tokens,
        stats.tokens as f64 / secs.max(1e-9)
    );
    let truncated = stats.truncated.get();
    if truncated > 0 {
        eprintln!(
            "{} over the model's limit of {} tokens cut to it (--no-truncate refuses them)",
            crate::count(truncated, "input"),
            engine.info().max_seq_length
        );
    }
    let blank = stats.blank.get();
    if blank > 0 {
        eprintln!("{} skipped", crate::count(blank, "blank line"));
    }
    if interrupted {
        eprintln!(
            "interrupted: the output holds the {} embedded so far, in input order",
            stats.inputs
        );
        std::process::exit(130);
    }
    Ok(())
}

/// One output line: the kept fields, then the embedding in `format` (and its scale, if it has one).
fn write_line(
    out: &mut impl Write,
    fields: &str,
    embedding: &Row,
    format: EncodingFormat,
) -> Result<()> {
    let vector = if format.reads_pooled() {
        embedding.unnormalized()
    } else {
        std::borrow::Cow::Borrowed(embedding.as_slice())
    };
    let encoded = format.encode(vector);
    out.write_all(b"{")?;
    out.write_all(fields.as_bytes())?;
    out.write_all(b"\"embedding\":")?;
    serde_json::to_writer(&mut *out, &encoded)?;
    if let Some(scale) = encoded.scale() {
        out.write_all(b",\"scale\":")?;
        serde_json::to_writer(&mut *out, &scale)?;
    }
    out.write_all(b"}\n")?;
    Ok(())
}

/// The whole input through [`Scheduler::embed_all`]: submitted as the queue has room, written in input order as
/// the answers come.
async fn bulk(
    reading: &Reading<'_>,
    scheduler: &Scheduler,
    reader: Box<dyn BufRead>,
    out: &mut impl Write,
    progress: &mut Progress,
    stats: &mut Stats,
) -> Result<()> {
    // Token counts and kept fields of the inputs submitted and not yet written, oldest first.
    let pending = RefCell::new(VecDeque::new());
    let (truncated, blank) = (&stats.truncated, &stats.blank);
    let seqs = input::inputs(reader, reading.plain, &reading.keep, blank).map(|input| {
        let (n, Input { text, fields }) = input?;
        let ids = reading.tokenize(n, &text, truncated)?;
        pending.borrow_mut().push_back((ids.len(), fields));
        Ok::<_, anyhow::Error>(ids)
    });
    let start = Instant::now();
    // The counts are kept as lines are written, so an interrupted run reports what its output holds.
    let (inputs, tokens, time) = (&mut stats.inputs, &mut stats.tokens, &mut stats.time);
    scheduler
        .embed_all(seqs, reading.readout(), |e| {
            let (n, fields) = pending.borrow_mut().pop_front().unwrap_or_default();
            write_line(out, &fields, &e.embedding, reading.format)?;
            *inputs += 1;
            *tokens += n;
            *time = start.elapsed();
            progress.update(*inputs, *tokens);
            Ok(())
        })
        .await
}
/// One input at a time, each waited for before the next is read: the latency of a lone query.
async fn per_input(
    reading: &Reading<'_>,
    scheduler: &Scheduler,
    reader: Box<dyn BufRead>,
    out: &mut impl Write,
    progress: &mut Progress,
    stats: &mut Stats,
) -> Result<()> {
    let mut latencies = step::histogram();
    let mut inputs = input::inputs(reader, reading.plain, &reading.keep, &stats.blank);
    loop {
        // Timed from parsing the line (reading it from a buffer is noise) to the embedding.
        let one = Instant::now();
        let Some(input) = inputs.next() else { break };
        let (n, Input { text, fields }) = input?;
        let ids = reading.tokenize(n, &text, &stats.truncated)?;
        let tokens = ids.len();
        let answer = scheduler
            .submit(
                vec![ids],
                Work {
                    priority: engine::Priority::Online,
                    readout: reading.readout(),
                    type1_from: None,
                },
            )?
            .wait()
            .await;
        let elapsed = one.elapsed();
        let embedded = answer.with_context(|| format!("input line {n}"))?;
        latencies.saturating_record(elapsed.as_micros() as u64);
        stats.time += elapsed;
        for e in embedded {
            write_line(out, &fields, &e.embedding, reading.format)?;
        }
        stats.inputs += 1;
        stats.tokens += tokens;
        progress.update(stats.inputs, stats.tokens);
    }
    stats.per_input = Some(latencies);
    Ok(())
}

/// Inputs in a file, for the progress bar's total: its lines with something other than white space.
fn count_inputs(path: &Path) -> Result<u64> {
    let mut file =
        std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let (mut inputs, mut filled) = (0u64, false);
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = file
            .read(&mut buf)
            .with_context(|| format!("reading {}", path.display()))?;
        if n == 0 {
            break;
        }
        for &b in &buf[..n] {
            if b == b'\n' {
                inputs += u64::from(filled);
                filled = false;
            } else if !b.is_ascii_whitespace() {
                filled = true;
            }
        }
    }
    Ok(inputs + u64::from(filled))
}

/// Progress on stderr: a bar (texts done of the total, tokens/s, ETA) when stderr is a terminal; otherwise, so a
/// long run logged to a file still shows it is moving, a plain line every [`Progress::LOG_EVERY`]. Standard output
/// carries only the embeddings either way.
struct Progress {
    bar: Option<ProgressBar>,
    total: Option<u64>,
    start: Instant,
    last_log: Instant,
    last_message: usize,
}

impl Progress {
    const LOG_EVERY: Duration = Duration::from_secs(10);

    fn new(total: Option<u64>) -> Progress {
        let bar = std::io::stderr().is_terminal().then(|| {
            let (bar, template) = match total {
                Some(n) => (
                    ProgressBar::new(n),
                    "embed [{bar:30}] {pos}/{len} texts, {msg}, eta {eta}",
                ),
                None => (ProgressBar::no_length(), "embed {pos} texts, {msg}"),
            };
            bar.set_style(
                ProgressStyle::with_template(template)
                    .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            bar
        });
        let now = Instant::now();
        Progress {
            bar,
            total,
            start: now,
            last_log: now,
            last_message: 0,
        }
    }

    fn update(&mut self, done: usize, tokens: usize) {
        let rate = tokens as f64 / self.start.elapsed().as_secs_f64().max(1e-9);
        match &self.bar {
            Some(bar) => {
                bar.set_position(done as u64);
                // The message is a formatted string: set on the first text, then every so many, not per text.
                if done == 1 || done >= self.last_message + 64 {
                    self.last_message = done;
                    bar.set_message(format!("{rate:.0} tokens/s"));
                }
            }
            None if self.last_log.elapsed() >= Self::LOG_EVERY => {
                self.last_log = Instant::now();
                let of = self.total.map_or(String::new(), |t| format!("/{t}"));
                let eta = self.total.map_or(String::new(), |t| {
                    let left = t.saturating_sub(done as u64) as f64;
                    let per_s = done as f64 / self.start.elapsed().as_secs_f64().max(1e-9);
                    format!(", eta {:.0} s", left / per_s.max(1e-9))
                });
                eprintln!("embed: {done}{of} texts, {rate:.0} tokens/s{eta}");
            }
            None => {}
        }
    }

    fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}
