//! Workloads: what traffic a step sends. A [`Workload`] is one or more classes of traffic, each with its own SLO:
//! `online` (one query per request, open loop, arrivals from a trace or a process), `batch` (a corpus re-indexed
//! in large requests of many passages, closed loop with bounded concurrency), `mixed` (both at once) and `rerank`
//! (one query against many passages per request, open loop: a cross-encoder's traffic). Texts come from a
//! [`Corpus`]; a trace's own texts or token counts are used when it has them.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::arrivals::{Arrivals, ArrivalsError};
use crate::trace::{Arrival, InputError};

/// A path under the repository: as given when it exists from the current directory, else under the workspace
/// this binary was built from (so `bench` and the tests find `workloads/` from anywhere in the checkout).
pub fn repo_path(rel: &str) -> PathBuf {
    let here = PathBuf::from(rel);
    if here.exists() {
        return here;
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(rel)
}

/// Texts to embed, with their token counts (special tokens included).
pub struct Corpus {
    pub name: String,
    pub texts: Vec<Arc<str>>,
    pub tokens: Vec<u32>,
    /// Indices ordered by token count, to find a text of a given length.
    by_len: Vec<usize>,
}

/// `[CLS]` and `[SEP]`: the shipped corpora's `n_tok_minilm` counts leave them out.
const SPECIAL_TOKENS: u32 = 2;

impl Corpus {
    /// JSON Lines with a `text` field and, optionally, `n_tok_minilm` (otherwise a length estimate of one token
    /// per four bytes is kept, used only where the target does not report its token count).
    pub fn load(path: &Path) -> Result<Corpus, InputError> {
        let content = std::fs::read_to_string(path).map_err(|source| InputError::Io {
            path: path.to_owned(),
            source,
        })?;
        #[derive(Deserialize)]
        struct Line {
            text: String,
            n_tok_minilm: Option<u32>,
        }
        let mut pairs = Vec::new();
        for (i, line) in content.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let l: Line = serde_json::from_str(line).map_err(|e| InputError::Parse {
                path: path.to_owned(),
                line: i + 1,
                message: e.to_string(),
            })?;
            if !l.text.is_empty() {
                // Counts come from the file: saturate rather than overflow.
                let estimate = u32::try_from(l.text.len() / 4).unwrap_or(u32::MAX);
                let n = l.n_tok_minilm.unwrap_or(estimate);
                pairs.push((Arc::<str>::from(l.text), n.saturating_add(SPECIAL_TOKENS)));
            }
        }
        if pairs.is_empty() {
            return Err(InputError::Format {
                path: path.to_owned(),
                message: "no non-empty `text` fields".into(),
            });
        }
        let name = path
            .file_stem()
            .map_or("corpus".into(), |s| s.to_string_lossy().into_owned());
        Ok(Corpus::new(name, pairs))
    }

    pub fn new(name: String, pairs: Vec<(Arc<str>, u32)>) -> Corpus {
        let (texts, tokens): (Vec<_>, Vec<_>) = pairs.into_iter().unzip();
        let mut by_len: Vec<usize> = (0..texts.len()).collect();
        by_len.sort_by_key(|&i| tokens[i]);
        Corpus {
            name,
            texts,
            tokens,
            by_len,
        }
    }

    pub fn total_tokens(&self) -> u64 {
        self.tokens.iter().map(|&t| t as u64).sum()
    }

    /// A random text; with `tokens`, one of the texts whose length is nearest to it.
    fn pick(&self, rng: &mut impl Rng, tokens: Option<u32>) -> usize {
        let Some(want) = tokens else {
            return rng.gen_range(0..self.texts.len());
        };
        let len = |k: usize| self.tokens[self.by_len[k]];
        let k = self.by_len.partition_point(|&i| self.tokens[i] < want);
        // The nearest length among the neighbours, then any text of exactly that length.
        let k = match (k.checked_sub(1), k < self.by_len.len()) {
            (Some(below), true) if want - len(below) <= len(k) - want => below,
            (Some(below), false) => below,
            _ => k,
        };
        let target = len(k);
        let lo = self.by_len.partition_point(|&i| self.tokens[i] < target);
        let hi = self.by_len.partition_point(|&i| self.tokens[i] <= target);
        self.by_len[rng.gen_range(lo..hi)]
    }
}

/// One request's inputs.
#[derive(Clone, Debug)]
pub struct Request {
    pub texts: Arc<[Arc<str>]>,
    /// A reranker's query, scored against each of `texts` (a cross-encoder's request); `None`: embed the texts.
    pub query: Option<Arc<str>>,
    /// Tokens the corpus counts for these texts; the target's own count is preferred when it reports one.
    pub est_tokens: u32,
    /// The model's prompt to put before each text (`prompt_name`), its class's ([`Class::prompt_name`]).
    pub prompt_name: Option<Arc<str>>,
}

/// Where a closed-loop class's requests come from: the corpus in order, chunk after chunk (a re-index), or
/// random texts (a probe of an online class).
pub struct Source {
    corpus: Arc<Corpus>,
    per_request: usize,
    order: Order,
    /// Each request a query of `corpus` against passages, as [`Class::rerank`] says.
    rerank: Option<Rerank>,
}

enum Order {
    /// The next index, and where to stop (one pass over the corpus) if anywhere.
    Sequential(AtomicUsize, Option<usize>),
    Random(Box<Mutex<StdRng>>),
}

impl Source {
    /// The corpus in order from `start`, `per_request` texts a request, wrapping around; with `once`, a single
    /// pass over it, after which there is nothing more to send.
    pub fn sequential(corpus: Arc<Corpus>, per_request: usize, start: usize, once: bool) -> Source {
        let end = once.then(|| start + corpus.texts.len());
        Source {
            corpus,
            per_request,
            order: Order::Sequential(AtomicUsize::new(start), end),
            rerank: None,
        }
    }

    /// Random texts, `per_request` a request; with `rerank`, a random query against random passages.
    pub fn random(
        corpus: Arc<Corpus>,
        per_request: usize,
        seed: u64,
        rerank: Option<Rerank>,
    ) -> Source {
        Source {
            corpus,
            per_request,
            order: Order::Random(Box::new(Mutex::new(StdRng::seed_from_u64(seed)))),
            rerank,
        }
    }

    /// The next request; `None` once a single pass is done.
    pub fn next(&self) -> Option<Request> {
        let n = self.corpus.texts.len();
        let picks: Vec<usize> = match &self.order {
            Order::Sequential(cursor, end) => {
                let start = cursor.fetch_add(self.per_request, Ordering::Relaxed);
                let stop = end.map_or(start + self.per_request, |e| {
                    e.min(start + self.per_request)
                });
                if stop <= start {
                    return None;
                }
                (start..stop).map(|i| i % n).collect()
            }
            Order::Random(rng) => {
                let mut rng = rng.lock().unwrap_or_else(PoisonError::into_inner);
                if let Some(rerank) = &self.rerank {
                    return Some(rerank.request(&self.corpus, &mut *rng, None));
                }
                (0..self.per_request)
                    .map(|_| self.corpus.pick(&mut *rng, None))
                    .collect()
            }
        };
        Some(request(&self.corpus, &picks))
    }

    /// Requests a single pass takes, if this source makes one.
    pub fn requests_in_pass(&self) -> Option<usize> {
        match &self.order {
            Order::Sequential(_, Some(_)) => {
                Some(self.corpus.texts.len().div_ceil(self.per_request))
            }
            _ => None,
        }
    }
}

fn request(corpus: &Corpus, picks: &[usize]) -> Request {
    Request {
        texts: picks.iter().map(|&i| corpus.texts[i].clone()).collect(),
        query: None,
        est_tokens: picks
            .iter()
            .fold(0u32, |sum, &i| sum.saturating_add(corpus.tokens[i])),
        prompt_name: None,
    }
}

/// A reranking class's requests: a query of the class's corpus against `per_request` random passages of
/// `passages` (a search's candidates).
#[derive(Clone)]
pub struct Rerank {
    pub passages: Arc<Corpus>,
    pub per_request: usize,
}

impl Rerank {
    /// A random query of `queries` (of about `tokens` tokens, when given) against random passages; its tokens are
    /// the pairs' (the query's counted once a passage: the model reads it with each).
    fn request(&self, queries: &Corpus, rng: &mut impl Rng, tokens: Option<u32>) -> Request {
        let query = queries.pick(rng, tokens);
        let picks: Vec<usize> = (0..self.per_request)
            .map(|_| self.passages.pick(rng, None))
            .collect();
        let passages = request(&self.passages, &picks);
        let n = u32::try_from(self.per_request).unwrap_or(u32::MAX);
        Request {
            query: Some(queries.texts[query].clone()),
            est_tokens: passages
                .est_tokens
                .saturating_add(queries.tokens[query].saturating_mul(n)),
            ..passages
        }
    }
}

/// The built-in workloads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum WorkloadKind {
    /// One query per request, open loop, arrivals from a trace or process; the sweep steps the rate.
    Online,
    /// One query against `--rerank-passages` passages per request (a cross-encoder's, or a multi-vector model's
    /// by MaxSim, served on `/rerank`), open loop as `online`; the sweep steps the rate.
    Rerank,
    /// A corpus in large requests of many passages, closed loop; the sweep steps the concurrency.
    Batch,
    /// Online traffic stepped as in `online` while a batch re-index runs at fixed concurrency; each has its SLO.
    Mixed,
}

impl std::fmt::Display for WorkloadKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            WorkloadKind::Online => "online",
            WorkloadKind::Rerank => "rerank",
            WorkloadKind::Batch => "batch",
            WorkloadKind::Mixed => "mixed",
        })
    }
}

/// A class's service-level objective: its latency quantile within a bound, errors within a share.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Slo {
    /// 0.99 for p99.
    pub quantile: f64,
    pub latency_ms: f64,
    /// Refused, failed and timed-out requests, as a share of those scheduled.
    pub max_error_rate: f64,
}

impl Slo {
    pub fn describe(&self) -> String {
        format!(
            "{} <= {} ms, errors <= {}%",
            quantile_name(self.quantile),
            self.latency_ms,
            self.max_error_rate * 100.0
        )
    }
}

/// `p99`, `p99.9`, `p50`.
pub fn quantile_name(q: f64) -> String {
    format!("p{}", (q * 1000.0).round() / 10.0)
}

/// How a class offers load.
pub enum Drive {
    /// Requests at scheduled times, whatever is outstanding.
    Open {
        arrivals: Arrivals,
        /// Pick texts whose token counts match the trace's (when it has them), instead of random ones.
        match_lengths: bool,
    },
    /// A fixed number of clients, each sending its next request when its last is answered.
    Closed {
        concurrency: usize,
        per_request: usize,
    },
}

/// One class of traffic.
pub struct Class {
    pub name: String,
    pub corpus: Arc<Corpus>,
    pub drive: Drive,
    pub slo: Slo,
    /// The scheduler queue its requests ask for (`x-priority` over HTTP).
    pub priority: engine::Priority,
    /// A request unanswered this long is abandoned and counted as timed out (its latency recorded as this).
    pub timeout: Duration,
    /// Each request a query of `corpus` against passages (a reranker's), instead of texts to embed.
    pub rerank: Option<Rerank>,
    /// The model's prompt its texts are sent with (`--query-prompt-name`, `--passage-prompt-name`): e5's
    /// `query`, Qwen3-Embedding's instruction, an inference-free sparse model's query route.
    pub prompt_name: Option<Arc<str>>,
}

/// The classes of one workload; the first is the one a sweep steps.
pub struct Workload {
    pub kind: WorkloadKind,
    pub classes: Vec<Class>,
    pub seed: u64,
    /// Closed-loop classes make one pass over their corpus from its start (a timed re-index) instead of cycling.
    pub corpus_pass: bool,
}

/// The load a sweep step puts on the stepped class.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Level {
    /// Requests per second, open loop.
    Rate(f64),
    /// Clients, closed loop.
    Concurrency(usize),
}

impl Level {
    pub fn value(&self) -> f64 {
        match *self {
            Level::Rate(r) => r,
            Level::Concurrency(c) => c as f64,
        }
    }
}

/// What one class sends during a step.
pub enum ClassLoad {
    /// `(seconds from the step's start, request)`, in time order.
    Open(Vec<(f64, Request)>),
    Closed {
        concurrency: usize,
        source: Arc<Source>,
    },
}

impl Workload {
    /// The stepped class at `level` (a rate for an open class, a concurrency for a closed one; a concurrency on an
    /// open class probes it closed loop), the others as they are, over `duration_s`.
    pub fn loads(
        &self,
        level: Level,
        duration_s: f64,
        step_seed: u64,
    ) -> Result<Vec<ClassLoad>, ArrivalsError> {
        self.classes
            .iter()
            .enumerate()
            .map(|(i, class)| {
                let seed = self.seed ^ step_seed.rotate_left(17) ^ (i as u64).rotate_left(41);
                let swept = (i == 0).then_some(level);
                Ok(match (&class.drive, swept) {
                    (
                        Drive::Open {
                            arrivals,
                            match_lengths,
                        },
                        None | Some(Level::Rate(_)),
                    ) => {
                        let rate = match swept {
                            Some(Level::Rate(r)) => r,
                            _ => 0.0,
                        };
                        let schedule = arrivals.schedule(rate, duration_s, seed)?;
                        ClassLoad::Open(requests(class, &schedule, *match_lengths, seed))
                    }
                    (Drive::Open { .. }, Some(Level::Concurrency(concurrency))) => {
                        ClassLoad::Closed {
                            concurrency,
                            source: Arc::new(Source::random(
                                class.corpus.clone(),
                                1,
                                seed,
                                class.rerank.clone(),
                            )),
                        }
                    }
                    (
                        Drive::Closed {
                            concurrency,
                            per_request,
                        },
                        swept,
                    ) => {
                        let concurrency = match swept {
                            Some(level) => level.value().round().max(1.0) as usize,
                            None => *concurrency,
                        };
                        let start = if self.corpus_pass {
                            0
                        } else {
                            StdRng::seed_from_u64(seed).gen_range(0..class.corpus.texts.len())
                        };
                        let source = Source::sequential(
                            class.corpus.clone(),
                            *per_request,
                            start,
                            self.corpus_pass,
                        );
                        ClassLoad::Closed {
                            concurrency,
                            source: Arc::new(source),
                        }
                    }
                })
            })
            .collect()
    }

    /// Whether the stepped class is open loop (the sweep steps a rate) or closed (it steps a concurrency).
    pub fn steps_rate(&self) -> bool {
        matches!(
            self.classes.first().map(|c| &c.drive),
            Some(Drive::Open { .. })
        )
    }
}

/// Texts for each arrival: its own, or corpus texts (of matching length when asked and known); for a reranking
/// class, a corpus query (the trace's length when asked) against random passages.
fn requests(
    class: &Class,
    schedule: &[Arrival],
    match_lengths: bool,
    seed: u64,
) -> Vec<(f64, Request)> {
    let corpus = &class.corpus;
    let mut rng = StdRng::seed_from_u64(seed.wrapping_add(1));
    schedule
        .iter()
        .map(|a| {
            let request = if let Some(rerank) = &class.rerank {
                rerank.request(corpus, &mut rng, a.tokens.filter(|_| match_lengths))
            } else if a.texts.is_empty() {
                let tokens = a.tokens.filter(|_| match_lengths);
                let picks: Vec<usize> = (0..a.inputs)
                    .map(|_| corpus.pick(&mut rng, tokens))
                    .collect();
                request(corpus, &picks)
            } else {
                let texts = u32::try_from(a.texts.len()).unwrap_or(u32::MAX);
                let est = a.tokens.unwrap_or(0).saturating_mul(texts);
                Request {
                    texts: a.texts.iter().map(|t| Arc::from(t.as_str())).collect(),
                    query: None,
                    est_tokens: est,
                    prompt_name: None,
                }
            };
            (a.at, request)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn corpus() -> Corpus {
        let pairs = [("a", 3), ("bb", 10), ("cc", 10), ("ddd", 50)]
            .map(|(t, n)| (Arc::from(t), n))
            .to_vec();
        Corpus::new("test".into(), pairs)
    }

    #[test]
    fn picks_texts_of_the_nearest_length() {
        let c = corpus();
        let mut rng = StdRng::seed_from_u64(1);
        for (want, allowed) in [
            (1, &[0][..]),
            (3, &[0]),
            (8, &[1, 2]),
            (29, &[1, 2]),
            (31, &[3]),
            (999, &[3]),
        ] {
            for _ in 0..20 {
                let i = c.pick(&mut rng, Some(want));
                assert!(allowed.contains(&i), "{want} tokens: picked {i}");
            }
        }
    }

    #[test]
    fn sequential_source_walks_the_corpus_in_chunks() {
        let source = Source::sequential(Arc::new(corpus()), 3, 2, false);
        let first = source.next().unwrap();
        assert_eq!(
            &*first.texts,
            &[Arc::from("cc"), Arc::from("ddd"), Arc::from("a")]
        );
        assert_eq!(first.est_tokens, 63);
        assert_eq!(
            &*source.next().unwrap().texts,
            &[Arc::from("bb"), Arc::from("cc"), Arc::from("ddd")]
        );
        // One pass: four texts in requests of three, then nothing.
        let once = Source::sequential(Arc::new(corpus()), 3, 0, true);
        assert_eq!(once.requests_in_pass(), Some(2));
        assert_eq!(once.next().unwrap().texts.len(), 3);
        assert_eq!(once.next().unwrap().texts.len(), 1);
        assert!(once.next().is_none());
    }

    #[test]
    fn token_counts_near_u32_max_saturate_instead_of_overflowing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("huge.jsonl");
        std::fs::write(
            &path,
            "{\"text\": \"a\", \"n_tok_minilm\": 4294967295}\n{\"text\": \"b\", \"n_tok_minilm\": 4294967294}\n",
        )
        .unwrap();
        let c = Arc::new(Corpus::load(&path).unwrap());
        assert_eq!(c.tokens, [u32::MAX, u32::MAX]);
        let source = Source::sequential(c.clone(), 2, 0, true);
        assert_eq!(source.next().unwrap().est_tokens, u32::MAX);
        let arrival = Arrival {
            tokens: Some(u32::MAX / 2 + 1),
            texts: vec!["x".into(), "y".into()],
            ..Arrival::at(0.0)
        };
        let planned = requests(&class(c, None), &[arrival], false, 1);
        assert_eq!(planned[0].1.est_tokens, u32::MAX);
    }

    fn class(corpus: Arc<Corpus>, rerank: Option<Rerank>) -> Class {
        Class {
            name: "test".into(),
            corpus,
            drive: Drive::Closed {
                concurrency: 1,
                per_request: 1,
            },
            slo: Slo {
                quantile: 0.99,
                latency_ms: 1.0,
                max_error_rate: 0.0,
            },
            priority: engine::Priority::Online,
            timeout: Duration::from_secs(1),
            rerank,
            prompt_name: None,
        }
    }

    /// A rerank request: one query (of the trace's length when asked) against as many passages as asked, its
    /// tokens the pairs' (the query read once a passage); a probe's the same shape.
    #[test]
    fn rerank_requests_pair_a_query_with_passages() {
        let passages = Arc::new(Corpus::new(
            "p".into(),
            vec![
                (Arc::from("passage one"), 20),
                (Arc::from("passage two"), 30),
            ],
        ));
        let rerank = Rerank {
            passages: passages.clone(),
            per_request: 5,
        };
        let queries = Arc::new(corpus());
        let arrival = Arrival {
            tokens: Some(48),
            ..Arrival::at(0.0)
        };
        let planned = requests(
            &class(queries.clone(), Some(rerank.clone())),
            &[arrival],
            true,
            7,
        );
        let r = &planned[0].1;
        assert_eq!(r.query.as_deref(), Some("ddd"));
        assert_eq!(r.texts.len(), 5);
        let passage_tokens: u32 = r
            .texts
            .iter()
            .map(|t| if &**t == "passage one" { 20 } else { 30 })
            .sum();
        assert_eq!(r.est_tokens, passage_tokens + 5 * 50);
        let probe = Source::random(queries, 1, 3, Some(rerank)).next().unwrap();
        assert!(probe.query.is_some() && probe.texts.len() == 5);
    }

    #[test]
    fn shipped_corpora_load() {
        let q = Corpus::load(&repo_path("workloads/text/queries_multilingual.jsonl")).unwrap();
        assert_eq!(q.texts.len(), 17_793);
        assert_eq!(q.total_tokens(), 332_998 + 2 * 17_793);
        let dir = tempfile::tempdir().unwrap();
        let bad = dir.path().join("bad.jsonl");
        std::fs::write(&bad, "{\"text\": \"fine\"}\nnot json\n").unwrap();
        let e = Corpus::load(&bad).err().unwrap().to_string();
        assert!(e.contains("line 2"), "{e}");
    }
}
