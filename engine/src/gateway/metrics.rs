//! Prometheus text metrics: request counts by route and outcome, per-stage latency histograms, queue size,
//! batch telemetry and how the backend ran each forward pass (eager, capture, replay). Histograms are kept in HDR form and rendered onto fixed Prometheus buckets when scraped.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use hdrhistogram::Histogram;

use crate::scheduler::{BatchStats, ClassLoad, Load, Priority};

/// Where a request's time went, and the tokens it computed, as carried in the response headers (TEI's
/// `x-*-time` and `x-compute-tokens`).
#[derive(Clone, Copy, Debug, Default)]
pub struct Times {
    pub tokenization: Duration,
    pub queue: Duration,
    pub inference: Duration,
    pub total: Duration,
    /// Tokens embedded; `None` for a request that embeds nothing (`/tokenize`, `/decode`).
    pub tokens: Option<usize>,
}

impl Times {
    /// `(header, duration)` pairs, in pipeline order.
    pub fn stages(&self) -> [(&'static str, Duration); 4] {
        [
            ("tokenization", self.tokenization),
            ("queue", self.queue),
            ("inference", self.inference),
            ("total", self.total),
        ]
    }
}

/// Seconds; spans loopback-fast requests to overloaded ones.
const LATENCY_BUCKETS: [f64; 14] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];
const TOKEN_BUCKETS: [f64; 9] = [
    64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0,
];
const FILL_BUCKETS: [f64; 6] = [0.1, 0.25, 0.5, 0.75, 0.9, 1.0];

/// One HDR histogram recording values scaled to integers (`scale` units per rendered unit).
struct Hist {
    hist: Mutex<Histogram<u64>>,
    scale: f64,
}

impl Hist {
    fn new(scale: f64) -> Self {
        Hist {
            // Bounded, so `saturating_record` clamps rather than drops (it never auto-resizes): an hour in
            // microseconds, three significant digits.
            hist: Mutex::new(
                Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid constant bounds"),
            ),
            scale,
        }
    }

    fn record(&self, value: f64) {
        let v = (value * self.scale).round().max(0.0) as u64;
        self.lock().saturating_record(v);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Histogram<u64>> {
        self.hist.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sum of the recorded values, in rendered units.
    fn sum_of(h: &Histogram<u64>, scale: f64) -> f64 {
        h.mean() * h.len() as f64 / scale
    }

    /// How many values were recorded, and their sum in rendered units.
    fn count_and_sum(&self) -> (u64, f64) {
        let h = self.lock();
        (h.len(), Self::sum_of(&h, self.scale))
    }

    fn render(&self, out: &mut String, name: &str, labels: &str, buckets: &[f64]) {
        let h = self.lock();
        let sep = if labels.is_empty() { "" } else { "," };
        for &le in buckets {
            let count = h.count_between(0, (le * self.scale) as u64);
            let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"{le}\"}} {count}");
        }
        let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {}", h.len());
        let sum = Self::sum_of(&h, self.scale);
        let block = if labels.is_empty() {
            String::new()
        } else {
            format!("{{{labels}}}")
        };
        let _ = writeln!(out, "{name}_sum{block} {sum}");
        let _ = writeln!(out, "{name}_count{block} {}", h.len());
    }
}

/// The batch and forward counters as numbers, for a reader in the same process (the harness) that would
/// otherwise render the text exposition only to parse it back.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct MetricsSnapshot {
    pub batches: u64,
    pub batch_tokens: f64,
    /// Sum over batches of tokens / token budget.
    pub batch_fill: f64,
    /// Sequences over all batches.
    pub batch_seqs: u64,
    /// Tokens of the batches' buckets beyond their own (a plan runs at its bucket's size).
    pub padding_tokens: u64,
    /// Forward passes by how they ran.
    pub eager_forwards: u64,
    pub capture_forwards: u64,
    pub replay_forwards: u64,
    /// Pieces of requests a remote replica failed, and those sent again to another.
    pub lost_pieces: u64,
    pub resent_pieces: u64,
}

/// Everything `/metrics` reports, shared by the routes and every replica's scheduler observer.
pub struct Metrics {
    requests: Mutex<BTreeMap<(&'static str, &'static str), u64>>,
    stages: [Hist; 4],
    batch_tokens: Hist,
    batch_fill: Hist,
    batch_forward: Hist,
    batch_seqs: AtomicU64,
    plans: Mutex<PlanCounters>,
    /// Pieces of requests whose remote replica failed them, and those of them sent to another replica.
    lost_pieces: AtomicU64,
    resent_pieces: AtomicU64,
}

/// Sums over every forward pass that reported how it ran.
#[derive(Default)]
struct PlanCounters {
    /// By [`crate::plan::Run`]: eager, capture, replay.
    forwards: [u64; 3],
    padding_tokens: u64,
    capture_seconds: f64,
}

impl Default for Metrics {
    fn default() -> Self {
        // Latencies in microseconds, fill in thousandths.
        Metrics {
            requests: Mutex::default(),
            stages: std::array::from_fn(|_| Hist::new(1e6)),
            batch_tokens: Hist::new(1.0),
            batch_fill: Hist::new(1e3),
            batch_forward: Hist::new(1e6),
            batch_seqs: AtomicU64::new(0),
            plans: Mutex::default(),
            lost_pieces: AtomicU64::new(0),
            resent_pieces: AtomicU64::new(0),
        }
    }
}

impl Metrics {
    pub fn count(&self, route: &'static str, outcome: &'static str) {
        let mut requests = self.requests.lock().unwrap_or_else(PoisonError::into_inner);
        *requests.entry((route, outcome)).or_default() += 1;
    }

    pub fn record_times(&self, times: &Times) {
        for (hist, (_, d)) in self.stages.iter().zip(times.stages()) {
            hist.record(d.as_secs_f64());
        }
    }

    pub fn record_batch(&self, stats: &BatchStats) {
        self.batch_tokens.record(stats.tokens as f64);
        self.batch_fill.record(stats.fill);
        self.batch_forward.record(stats.forward.as_secs_f64());
        self.batch_seqs
            .fetch_add(stats.seqs as u64, Ordering::Relaxed);
        if let Some(plan) = stats.plan {
            let mut p = self.plans.lock().unwrap_or_else(PoisonError::into_inner);
            p.forwards[plan.run as usize] += 1;
            p.padding_tokens += plan.padding_tokens as u64;
            p.capture_seconds += plan.capture_time.map_or(0.0, |t| t.as_secs_f64());
        }
    }

    pub fn record_lost_piece(&self) {
        self.lost_pieces.fetch_add(1, Ordering::Relaxed);
    }

    pub fn record_resent_piece(&self) {
        self.resent_pieces.fetch_add(1, Ordering::Relaxed);
    }

    /// The counters `render` reports as `embed_batch_*` and `embed_forwards_total`.
    pub fn snapshot(&self) -> MetricsSnapshot {
        let (batches, batch_tokens) = self.batch_tokens.count_and_sum();
        let (forwards, padding_tokens) = {
            let p = self.plans.lock().unwrap_or_else(PoisonError::into_inner);
            (p.forwards, p.padding_tokens)
        };
        let [eager_forwards, capture_forwards, replay_forwards] = forwards;
        MetricsSnapshot {
            batches,
            batch_tokens,
            batch_fill: self.batch_fill.count_and_sum().1,
            batch_seqs: self.batch_seqs.load(Ordering::Relaxed),
            padding_tokens,
            eager_forwards,
            capture_forwards,
            replay_forwards,
            lost_pieces: self.lost_pieces.load(Ordering::Relaxed),
            resent_pieces: self.resent_pieces.load(Ordering::Relaxed),
        }
    }

    /// The Prometheus text exposition, with each replica's current queue.
    pub fn render(&self, loads: &[Load]) -> String {
        let mut out = String::new();
        out.push_str("# HELP embed_requests_total Requests answered, by route and outcome.\n");
        out.push_str("# TYPE embed_requests_total counter\n");
        for ((route, outcome), n) in self
            .requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
        {
            let _ = writeln!(
                out,
                "embed_requests_total{{route=\"{route}\",outcome=\"{outcome}\"}} {n}"
            );
        }
        out.push_str("# HELP embed_stage_seconds Time of each stage of successful requests.\n");
        out.push_str("# TYPE embed_stage_seconds histogram\n");
        for (hist, (stage, _)) in self.stages.iter().zip(Times::default().stages()) {
            let labels = format!("stage=\"{stage}\"");
            hist.render(&mut out, "embed_stage_seconds", &labels, &LATENCY_BUCKETS);
        }
        for (name, help, pick) in [
            (
                "embed_queue_sequences",
                "Sequences waiting in a replica's queue.",
                (|l: &Load| l.queued_seqs) as fn(&Load) -> usize,
            ),
            (
                "embed_queue_tokens",
                "Tokens waiting in a replica's queue.",
                |l: &Load| l.queued_tokens,
            ),
            (
                "embed_in_flight_tokens",
                "Tokens submitted to a replica's backend, not yet answered.",
                |l: &Load| l.in_flight_tokens,
            ),
        ] {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
            for (i, load) in loads.iter().enumerate() {
                let _ = writeln!(out, "{name}{{replica=\"{i}\"}} {}", pick(load));
            }
        }
        for (name, help, pick) in [
            (
                "embed_class_queue_sequences",
                "Sequences waiting in a replica's queue of one priority.",
                (|c: &ClassLoad| c.queued_seqs as u64) as fn(&ClassLoad) -> u64,
            ),
            (
                "embed_class_refused_total",
                "Submissions of one priority refused at admission (full queue, or past its deadline).",
                |c: &ClassLoad| c.refused,
            ),
            (
                "embed_class_expired_total",
                "Sequences of one priority whose deadline passed in the queue, never computed.",
                |c: &ClassLoad| c.expired,
            ),
            (
                "embed_class_abandoned_total",
                "Sequences of one priority whose caller went away while queued, never computed.",
                |c: &ClassLoad| c.abandoned,
            ),
        ] {
            let kind = if name.ends_with("_total") { "counter" } else { "gauge" };
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for (i, load) in loads.iter().enumerate() {
                for p in Priority::ALL {
                    let value = pick(&load.classes[p.index()]);
                    let _ = writeln!(out, "{name}{{replica=\"{i}\",priority=\"{p}\"}} {value}");
                }
            }
        }
        for (name, help, hist, buckets) in [
            (
                "embed_batch_tokens",
                "Tokens per batch.",
                &self.batch_tokens,
                &TOKEN_BUCKETS[..],
            ),
            (
                "embed_batch_fill",
                "Batch tokens over the token budget.",
                &self.batch_fill,
                &FILL_BUCKETS[..],
            ),
            (
                "embed_batch_forward_seconds",
                "Forward pass time per batch.",
                &self.batch_forward,
                &LATENCY_BUCKETS[..],
            ),
        ] {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
            hist.render(&mut out, name, "", buckets);
        }
        let p = self.plans.lock().unwrap_or_else(PoisonError::into_inner);
        out.push_str("# HELP embed_forwards_total Forward passes, by how they ran.\n");
        out.push_str("# TYPE embed_forwards_total counter\n");
        for (run, n) in ["eager", "capture", "replay"].iter().zip(p.forwards) {
            let _ = writeln!(out, "embed_forwards_total{{run=\"{run}\"}} {n}");
        }
        let _ = writeln!(
            out,
            "# HELP embed_padding_tokens_total Tokens of the batches' buckets beyond their own.\n\
             # TYPE embed_padding_tokens_total counter\nembed_padding_tokens_total {}",
            p.padding_tokens
        );
        for (name, help, counter) in [
            (
                "embed_replica_lost_pieces_total",
                "Pieces of requests whose remote replica failed them (died, stalled, cut off).",
                &self.lost_pieces,
            ),
            (
                "embed_replica_resent_pieces_total",
                "Lost pieces sent to another replica (within the retry budget).",
                &self.resent_pieces,
            ),
        ] {
            let n = counter.load(Ordering::Relaxed);
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {n}"
            );
        }
        let _ = writeln!(
            out,
            "# HELP embed_capture_seconds_total Time spent capturing plans.\n\
             # TYPE embed_capture_seconds_total counter\nembed_capture_seconds_total {}",
            p.capture_seconds
        );
        out
    }
}
