//! `bench embed`: a corpus in (JSON Lines with a `text` field, or plain lines), one `{"embedding": [...]}` line out
//! per input, in input order. The inputs go through a scheduler, as served requests do: fed as its queue drains
//! (within its bounds, so the backend always has the next batch), batched by its one batch builder, answered in
//! rows of the pooled results that are written straight to the output. `--per-input` embeds one input at a time
//! instead and reports its latency.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::io::{BufRead, BufWriter, IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::Args;
use engine::scheduler::Scheduler;
use engine::Engine;
use indicatif::{ProgressBar, ProgressStyle};

use crate::{open_input, parse_input, step, EngineArgs};

#[derive(Args)]
pub struct EmbedArgs {
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

/// One output line.
#[derive(serde::Serialize)]
struct Line<'a> {
    embedding: &'a [f32],
}

/// Work done, timed from the first input read to the last embedding written (model load excluded).
#[derive(Default)]
struct Stats {
    inputs: usize,
    tokens: usize,
    time: Duration,
    /// With `--per-input`: each input's latency, tokenization to embedding, in microseconds.
    per_input: Option<hdrhistogram::Histogram<u64>>,
}

pub fn run(args: EmbedArgs) -> Result<()> {
    let engine = args.engine.load()?;
    let total = match args.input.as_deref() {
        Some(p) if p.as_os_str() != "-" => Some(count_lines(p)?),
        _ => None,
    };
    let reader = open_input(args.input.as_deref())?;
    let mut out = BufWriter::new(std::io::stdout().lock());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .context("starting the async runtime")?;
    let mut progress = Progress::new(total);
    let stats = runtime.block_on(async {
        let scheduler = Scheduler::start(engine.backend().clone(), &engine.bulk_config(), |_| {});
        if args.per_input {
            per_input(
                &engine,
                &scheduler,
                reader,
                args.lines,
                &mut out,
                &mut progress,
            )
            .await
        } else {
            bulk(
                &engine,
                &scheduler,
                reader,
                args.lines,
                &mut out,
                &mut progress,
            )
            .await
        }
    })?;
    progress.finish();
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

/// The ids of input line `n` (0-based), with the line named in any error.
fn tokenize_line(
    engine: &Engine,
    n: usize,
    line: std::io::Result<String>,
    plain: bool,
) -> Result<Vec<u32>> {
    let line = line.with_context(|| format!("reading input line {}", n + 1))?;
    let text = parse_input(&line, plain).with_context(|| format!("input line {}", n + 1))?;
    engine
        .tokenize(&text)
        .with_context(|| format!("input line {}", n + 1))
}

/// The whole input through [`Scheduler::embed_all`]: submitted as the queue has room, written in input order as
/// the answers come.
async fn bulk(
    engine: &Engine,
    scheduler: &Scheduler,
    reader: Box<dyn BufRead>,
    plain: bool,
    out: &mut impl Write,
    progress: &mut Progress,
) -> Result<Stats> {
    let mut stats = Stats::default();
    // Token counts of the inputs submitted and not yet written, oldest first.
    let lens = RefCell::new(VecDeque::new());
    let seqs = reader.lines().enumerate().map(|(n, line)| {
        let ids = tokenize_line(engine, n, line, plain)?;
        lens.borrow_mut().push_back(ids.len());
        Ok::<_, anyhow::Error>(ids)
    });
    let start = Instant::now();
    scheduler
        .embed_all(seqs, |e| {
            stats.inputs += 1;
            stats.tokens += lens.borrow_mut().pop_front().unwrap_or(0);
            serde_json::to_writer(
                &mut *out,
                &Line {
                    embedding: &e.embedding,
                },
            )?;
            out.write_all(b"\n")?;
            progress.update(stats.inputs, stats.tokens);
            Ok(())
        })
        .await?;
    stats.time = start.elapsed();
    Ok(stats)
}

/// One input at a time, each waited for before the next is read: the latency of a lone query.
async fn per_input(
    engine: &Engine,
    scheduler: &Scheduler,
    reader: Box<dyn BufRead>,
    plain: bool,
    out: &mut impl Write,
    progress: &mut Progress,
) -> Result<Stats> {
    let mut stats = Stats::default();
    let mut latencies = step::histogram();
    for (n, line) in reader.lines().enumerate() {
        let line = line.with_context(|| format!("reading input line {}", n + 1))?;
        let one = Instant::now();
        let ids = tokenize_line(engine, n, Ok(line), plain)?;
        let tokens = ids.len();
        let answer = scheduler
            .submit(vec![ids], engine::Priority::Online)?
            .wait()
            .await;
        let elapsed = one.elapsed();
        let embedded = answer.with_context(|| format!("input line {}", n + 1))?;
        latencies.saturating_record(elapsed.as_micros() as u64);
        stats.time += elapsed;
        for e in embedded {
            serde_json::to_writer(
                &mut *out,
                &Line {
                    embedding: &e.embedding,
                },
            )?;
            out.write_all(b"\n")?;
        }
        stats.inputs += 1;
        stats.tokens += tokens;
        progress.update(stats.inputs, stats.tokens);
    }
    stats.per_input = Some(latencies);
    Ok(stats)
}

/// Inputs in a file: its lines, a last one without a newline included.
fn count_lines(path: &Path) -> Result<u64> {
    let mut file =
        std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let (mut lines, mut last) = (0u64, b'\n');
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = file
            .read(&mut buf)
            .with_context(|| format!("reading {}", path.display()))?;
        if n == 0 {
            break;
        }
        lines += buf[..n].iter().filter(|&&b| b == b'\n').count() as u64;
        last = buf[n - 1];
    }
    Ok(lines + u64::from(last != b'\n'))
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
