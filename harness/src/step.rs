//! A step: one load level held for a while, and what it measured. [`analyze`] is a pure function of the
//! generator's samples: it drops the warm-up, computes each class's rates, latency and queue percentiles (HDR
//! histograms), batch fill from the target's counters, checks the step's stability and whether the generator kept
//! up, and judges each class against its SLO.

use base64::Engine as _;
use hdrhistogram::serialization::{Serializer, V2DeflateSerializer};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::generator::{Outcome, Sample};
use crate::target::Telemetry;
use crate::workload::{quantile_name, Level, Slo};

/// Percentiles of one latency distribution, in milliseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Percentiles {
    pub count: u64,
    pub mean: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
}

/// Microsecond HDR histograms up to an hour at three significant digits; `saturating_record` clamps.
pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid constant bounds")
}

fn record_ms(h: &mut Histogram<u64>, seconds: f64) {
    h.saturating_record((seconds * 1e6).round().max(1.0) as u64);
}

impl Percentiles {
    pub fn of(h: &Histogram<u64>) -> Percentiles {
        let ms = |q: f64| h.value_at_quantile(q) as f64 / 1e3;
        Percentiles {
            count: h.len(),
            mean: h.mean() / 1e3,
            p50: ms(0.5),
            p90: ms(0.9),
            p99: ms(0.99),
            p999: ms(0.999),
            max: h.max() as f64 / 1e3,
        }
    }
}

/// A histogram in HdrHistogram's V2 deflate format, base64: what every HdrHistogram implementation reads.
pub fn encode(h: &Histogram<u64>) -> String {
    let mut bytes = Vec::new();
    // Writing to a Vec cannot fail, and the histogram is always representable.
    if V2DeflateSerializer::new().serialize(h, &mut bytes).is_err() {
        return String::new();
    }
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Whether a step held a steady state, and by which rule.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Stability {
    pub stable: bool,
    /// The rule applied and the figures it saw.
    pub rule: String,
}

/// The verdict against the SLO, with the reasons for a failure.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    pub pass: bool,
    pub reasons: Vec<String>,
}

/// One class's figures over the measured window.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClassMetrics {
    pub class: String,
    pub closed_loop: bool,
    /// Requests due (open loop) or sent (closed) in the window.
    pub requests: u64,
    pub offered_rps: f64,
    /// Successful answers that arrived in the window, per second.
    pub achieved_rps: f64,
    pub inputs_per_s: f64,
    pub tokens_per_s: f64,
    pub ok: u64,
    pub refused: u64,
    /// How fast refusals came back: a server shedding load should answer them at once.
    #[serde(default)]
    pub refusal_ms: Option<Percentiles>,
    pub errors: u64,
    pub timeouts: u64,
    pub error_rate: f64,
    /// Of requests due in the window, answered or timed out (a timeout counts as its timeout: a lower bound).
    pub latency_ms: Percentiles,
    /// The target's queue time and forward time, when it reports them: where the latency went.
    pub queue_ms: Option<Percentiles>,
    pub inference_ms: Option<Percentiles>,
    /// Requests answered within the SLO's latency, per second of the window (vLLM's goodput).
    pub goodput_rps: f64,
    /// Share of the requests due in the window answered within the SLO's latency.
    pub slo_attainment: f64,
    pub dispatch_delay_ms: Percentiles,
    /// The latency at the SLO's quantile.
    pub slo_latency_ms: f64,
    pub slo: Slo,
    pub stability: Stability,
    pub verdict: Verdict,
    pub latency_histogram: String,
    pub dispatch_histogram: String,
    /// The whole step (warm-up included) in buckets of time.
    pub timeline: Vec<Bucket>,
    /// A soak's (a step of at least [`SOAK_S`]) minutes, warm-up included: drift shows here.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub minutes: Vec<Bucket>,
}

/// One bucket of a step's timeline: requests due and answered in it, and the latency of those due in it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Bucket {
    pub t: f64,
    pub due: u32,
    pub answered: u32,
    pub p50_ms: f64,
    pub p99_ms: f64,
}

/// Buckets of one second, or more for long steps so a timeline has at most 120.
fn timeline(samples: &[&Sample], end_s: f64) -> Vec<Bucket> {
    buckets(samples, end_s, (end_s / 120.0).max(1.0))
}

/// A step of at least this long (a soak) also reports itself minute by minute.
pub const SOAK_S: f64 = 120.0;

/// The step's samples in buckets of `width` seconds.
fn buckets(samples: &[&Sample], end_s: f64, width: f64) -> Vec<Bucket> {
    let n = (end_s / width).ceil().max(1.0) as usize;
    let mut hists: Vec<Histogram<u64>> = (0..n).map(|_| histogram()).collect();
    let mut answered = vec![0u32; n];
    let bucket = |t: f64| ((t / width).max(0.0) as usize).min(n - 1);
    for s in samples {
        if matches!(s.outcome, Outcome::Ok | Outcome::Timeout) {
            record_ms(&mut hists[bucket(s.scheduled)], s.latency());
        }
        if s.outcome == Outcome::Ok && s.done < end_s {
            answered[bucket(s.done)] += 1;
        }
    }
    hists
        .iter()
        .zip(answered)
        .enumerate()
        .map(|(i, (h, answered))| Bucket {
            t: i as f64 * width,
            due: samples.iter().filter(|s| bucket(s.scheduled) == i).count() as u32,
            answered,
            p50_ms: h.value_at_quantile(0.5) as f64 / 1e3,
            p99_ms: h.value_at_quantile(0.99) as f64 / 1e3,
        })
        .collect()
}

/// The target's batches during the window (from its telemetry).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Batches {
    pub batches: f64,
    pub mean_tokens: f64,
    /// Tokens over the token budget, averaged over batches.
    pub mean_fill: f64,
    /// Share of the forward passes that replayed a captured plan (the rest ran eager or captured); absent from
    /// results written before it was recorded.
    #[serde(default)]
    pub replayed: f64,
}

/// What a step did and measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StepResult {
    pub index: usize,
    /// Why this level was run (the search's phase and reason).
    pub phase: String,
    /// The closed-loop probe of a rate sweep: it measures the maximum throughput and is no point of the curves.
    pub probe: bool,
    pub level: Level,
    pub duration_s: f64,
    pub warmup_s: f64,
    pub wall_s: f64,
    pub classes: Vec<ClassMetrics>,
    pub batches: Option<Batches>,
    /// The generator fell behind its schedule (dispatch delay p99 over the bound): the load offered was less
    /// regular than planned, and latency (counted from the schedule) includes the delay.
    pub behind: bool,
    pub pass: bool,
    pub errors: Vec<String>,
    /// Resident memory of the process running the engine, `(seconds, MiB)`, when known: a soak's leak check.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rss_mib: Vec<(f64, f64)>,
    /// At the same instants, the part of it that is the harness's own request records (held until the step ends,
    /// in the same process): what grows with the requests sent, not with the engine.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub log_mib: Vec<(f64, f64)>,
    /// The fault this step had injected (`--kill-replica-at-s`) and what it cost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fault: Option<Fault>,
}

/// A replica killed mid-step and what the step's requests saw. Lost and duplicated must be 0 for a gateway that
/// re-sends a dead replica's pieces; retried counts the re-sends.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Fault {
    /// Seconds from the step's start, and what was killed.
    pub at_s: f64,
    pub what: String,
    /// Requests of the step not answered: errors and timeouts (refusals, 429/503, are counted apart).
    pub lost: u64,
    pub refused: u64,
    /// Answers with more embeddings than inputs.
    pub duplicated: u64,
    /// Pieces the gateway sent again to another replica.
    pub retried: u64,
}

impl StepResult {
    /// The stepped class's figures. Every step has one entry per workload class, so at least one: [`analyze`]
    /// makes them and `results::read` refuses files without.
    pub fn main(&self) -> &ClassMetrics {
        &self.classes[0]
    }

    /// Whether the stepped class had requests due in the measured window. One without (a rate so low, or requests
    /// so slow, that none fell in it) says nothing of the SLO: it fails its verdict, but decides no finding.
    pub fn measured(&self) -> bool {
        self.main().requests > 0
    }

    /// The step's throughput figure, the one searches compare and reports plot: requests/s of a rate step (and of
    /// a rate sweep's closed-loop probe), tokens/s of a concurrency step (a bulk client's work is tokens).
    pub fn throughput(&self) -> f64 {
        match self.level {
            Level::Rate(_) => self.main().achieved_rps,
            Level::Concurrency(_) if self.probe => self.main().achieved_rps,
            Level::Concurrency(_) => self.main().tokens_per_s,
        }
    }
}

/// What `analyze` needs to know about each class.
pub struct ClassSpec<'a> {
    pub name: &'a str,
    pub slo: Slo,
    pub closed_loop: bool,
}

/// Analysis settings.
pub struct Window {
    pub warmup_s: f64,
    pub end_s: f64,
    /// Dispatch-delay p99 above this flags the step as behind.
    pub max_dispatch_delay_ms: f64,
    /// The step is one pass over a corpus (a re-index), ending when the work does: its tail has fewer clients
    /// busy, so its halves are not compared for stability.
    pub one_pass: bool,
}

pub fn analyze(
    samples: &[Sample],
    classes: &[ClassSpec],
    window: &Window,
    telemetry: Option<(Telemetry, Telemetry)>,
) -> (Vec<ClassMetrics>, Option<Batches>, bool) {
    let metrics: Vec<ClassMetrics> = classes
        .iter()
        .enumerate()
        .map(|(i, spec)| {
            let mine: Vec<&Sample> = samples.iter().filter(|s| s.class == i).collect();
            class_metrics(&mine, spec, window)
        })
        .collect();
    let behind = metrics
        .iter()
        .any(|m| !m.closed_loop && m.dispatch_delay_ms.p99 > window.max_dispatch_delay_ms);
    let batches = telemetry.and_then(|(a, b)| {
        let n = b.batches - a.batches;
        (n > 0.0).then(|| Batches {
            batches: n,
            mean_tokens: (b.batch_tokens - a.batch_tokens) / n,
            mean_fill: (b.fill - a.fill) / n,
            replayed: (b.replays - a.replays) / (b.forwards - a.forwards).max(1.0),
        })
    });
    (metrics, batches, behind)
}

fn class_metrics(samples: &[&Sample], spec: &ClassSpec, w: &Window) -> ClassMetrics {
    let len = (w.end_s - w.warmup_s).max(1e-9);
    let in_window = |t: f64| t >= w.warmup_s && t < w.end_s;
    let due: Vec<&Sample> = samples
        .iter()
        .copied()
        .filter(|s| in_window(s.scheduled))
        .collect();
    let answered: Vec<&Sample> = samples
        .iter()
        .copied()
        .filter(|s| s.outcome == Outcome::Ok && in_window(s.done))
        .collect();
    let count = |o: Outcome| due.iter().filter(|s| s.outcome == o).count() as u64;
    let (ok, refused, errors, timeouts) = (
        count(Outcome::Ok),
        count(Outcome::Refused),
        count(Outcome::Error),
        count(Outcome::Timeout),
    );
    let (mut latency, mut dispatch) = (histogram(), histogram());
    let (mut queue, mut inference, mut refusal) = (histogram(), histogram(), histogram());
    let good = due
        .iter()
        .filter(|s| s.outcome == Outcome::Ok && s.latency() * 1e3 <= spec.slo.latency_ms)
        .count();
    for s in &due {
        if matches!(s.outcome, Outcome::Ok | Outcome::Timeout) {
            record_ms(&mut latency, s.latency());
        }
        if s.outcome == Outcome::Refused {
            record_ms(&mut refusal, s.done - s.sent);
        }
        record_ms(&mut dispatch, s.dispatch_delay().max(0.0));
        if let Some(q) = s.queue {
            record_ms(&mut queue, q);
        }
        if let Some(f) = s.inference {
            record_ms(&mut inference, f);
        }
    }
    let error_rate = if due.is_empty() {
        0.0
    } else {
        (refused + errors + timeouts) as f64 / due.len() as f64
    };
    let slo_latency_ms = latency.value_at_quantile(spec.slo.quantile) as f64 / 1e3;
    let stability = if w.one_pass {
        Stability {
            stable: true,
            rule: "one pass over the corpus: it ends when the work does (fewer clients busy in its tail), so \
                   its halves are not compared"
                .into(),
        }
    } else if spec.closed_loop {
        closed_stability(&answered, w)
    } else {
        open_stability(samples, w)
    };
    let mut reasons = Vec::new();
    if due.is_empty() {
        reasons.push("no requests in the measured window".to_owned());
    }
    if !latency.is_empty() && slo_latency_ms > spec.slo.latency_ms {
        reasons.push(format!(
            "{} {slo_latency_ms:.1} ms > {} ms",
            quantile_name(spec.slo.quantile),
            spec.slo.latency_ms
        ));
    }
    if error_rate > spec.slo.max_error_rate {
        reasons.push(format!(
            "{:.1}% refused, failed or timed out > {}%",
            error_rate * 100.0,
            spec.slo.max_error_rate * 100.0
        ));
    }
    if !stability.stable {
        reasons.push(format!("unstable: {}", stability.rule));
    }
    ClassMetrics {
        class: spec.name.to_owned(),
        closed_loop: spec.closed_loop,
        requests: due.len() as u64,
        offered_rps: due.len() as f64 / len,
        achieved_rps: answered.len() as f64 / len,
        inputs_per_s: answered.iter().map(|s| s.inputs as u64).sum::<u64>() as f64 / len,
        tokens_per_s: answered.iter().map(|s| s.tokens as u64).sum::<u64>() as f64 / len,
        ok,
        refused,
        refusal_ms: (!refusal.is_empty()).then(|| Percentiles::of(&refusal)),
        errors,
        timeouts,
        error_rate,
        latency_ms: Percentiles::of(&latency),
        queue_ms: (!queue.is_empty()).then(|| Percentiles::of(&queue)),
        inference_ms: (!inference.is_empty()).then(|| Percentiles::of(&inference)),
        goodput_rps: good as f64 / len,
        slo_attainment: if due.is_empty() {
            0.0
        } else {
            good as f64 / due.len() as f64
        },
        dispatch_delay_ms: Percentiles::of(&dispatch),
        slo_latency_ms,
        slo: spec.slo,
        stability,
        verdict: Verdict {
            pass: reasons.is_empty(),
            reasons,
        },
        latency_histogram: encode(&latency),
        dispatch_histogram: encode(&dispatch),
        timeline: timeline(samples, w.end_s),
        minutes: if w.end_s >= SOAK_S {
            buckets(samples, w.end_s, 60.0)
        } else {
            Vec::new()
        },
    }
}

/// Open loop: the backlog (requests due but not yet answered) at the window's start, middle and end. A steady
/// state keeps it level; overload makes it grow in both halves. Growth up to max(3, 2% of the window's
/// requests) per half is noise (a burst of the trace). A request that timed out was never answered: it stays in
/// the backlog (counting its timeout as an answer made a step whose requests all timed out look steady).
fn open_stability(samples: &[&Sample], w: &Window) -> Stability {
    let backlog = |t: f64| {
        let due = samples.iter().filter(|s| s.scheduled <= t).count() as i64;
        let done = samples
            .iter()
            .filter(|s| s.outcome != Outcome::Timeout && s.done <= t)
            .count() as i64;
        due - done
    };
    let mid = (w.warmup_s + w.end_s) / 2.0;
    let (b0, b1, b2) = (backlog(w.warmup_s), backlog(mid), backlog(w.end_s));
    let in_window = samples
        .iter()
        .filter(|s| s.scheduled >= w.warmup_s && s.scheduled < w.end_s)
        .count();
    let slack = (0.02 * in_window as f64).max(3.0);
    let grows = (b1 - b0) as f64 > slack && (b2 - b1) as f64 > slack;
    Stability {
        stable: !grows,
        rule: format!(
            "backlog {b0} -> {b1} -> {b2} requests over the window's halves (unstable when it grows by more than \
             {slack:.0} in both)"
        ),
    }
}

/// Closed loop: tokens answered in each half of the window; unstable when the halves differ by more than 30%.
/// With fewer than two answers per half there is nothing to compare.
fn closed_stability(answered: &[&Sample], w: &Window) -> Stability {
    let mid = (w.warmup_s + w.end_s) / 2.0;
    let (first, second): (Vec<&&Sample>, Vec<&&Sample>) =
        answered.iter().partition(|s| s.done < mid);
    if first.len() < 2 || second.len() < 2 {
        return Stability {
            stable: true,
            rule: format!(
                "{} and {} answers in the window's halves: too few to compare (lengthen the step)",
                first.len(),
                second.len()
            ),
        };
    }
    let tokens = |v: &[&&Sample]| v.iter().map(|s| s.tokens as u64).sum::<u64>() as f64;
    let (a, b) = (tokens(&first), tokens(&second));
    let ratio = b / a.max(1.0);
    Stability {
        stable: (0.7..=1.0 / 0.7).contains(&ratio),
        rule: format!(
            "tokens answered in the window's halves {a:.0} and {b:.0} (ratio {ratio:.2}; unstable outside 0.70-1.43)"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(scheduled: f64, latency: f64, outcome: Outcome) -> Sample {
        Sample {
            class: 0,
            scheduled,
            sent: scheduled,
            done: scheduled + latency,
            outcome,
            inputs: 1,
            tokens: 10,
            queue: Some(latency / 2.0),
            inference: Some(latency / 4.0),
        }
    }

    fn spec() -> ClassSpec<'static> {
        ClassSpec {
            name: "online",
            slo: Slo {
                quantile: 0.99,
                latency_ms: 50.0,
                max_error_rate: 0.01,
            },
            closed_loop: false,
        }
    }

    const WINDOW: Window = Window {
        warmup_s: 1.0,
        end_s: 11.0,
        max_dispatch_delay_ms: 5.0,
        one_pass: false,
    };

    #[test]
    fn steady_load_passes_and_warmup_is_excluded() {
        // 100/s for 11 s, 10 ms each; the start of the warm-up second is slow and must not count.
        let samples: Vec<Sample> = (0..1100)
            .map(|i| {
                let t = i as f64 / 100.0;
                sample(t, if t < 0.4 { 0.5 } else { 0.01 }, Outcome::Ok)
            })
            .collect();
        let (m, _, behind) = analyze(&samples, &[spec()], &WINDOW, None);
        let m = &m[0];
        assert!(!behind);
        assert_eq!(m.requests, 1000);
        assert!((m.offered_rps - 100.0).abs() < 1e-9);
        assert!((m.achieved_rps - 100.0).abs() < 0.2, "{}", m.achieved_rps);
        assert!((m.tokens_per_s - 1000.0).abs() < 2.0);
        assert!((m.latency_ms.max - 10.0).abs() < 0.05, "{:?}", m.latency_ms);
        assert!(m.stability.stable, "{:?}", m.stability);
        assert!(m.verdict.pass, "{:?}", m.verdict);
        assert_eq!((m.goodput_rps, m.slo_attainment), (100.0, 1.0));
        assert!((m.inference_ms.unwrap().p50 - 2.5).abs() < 0.01);
        // The serialized histogram reads back with the same count.
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(&m.latency_histogram)
            .unwrap();
        let h: Histogram<u64> = hdrhistogram::serialization::Deserializer::new()
            .deserialize(&mut &bytes[..])
            .unwrap();
        assert_eq!(h.len(), 1000);
    }

    #[test]
    fn a_single_reindex_pass_is_not_unstable_by_the_halves_rule() {
        // Four clients until the corpus runs out at 6 s, then one straggler to 10 s: the halves differ 4:1.
        let closed = || ClassSpec {
            closed_loop: true,
            ..spec()
        };
        let samples: Vec<Sample> = (0..200)
            .map(|i| sample(i as f64 * 0.025, 0.01, Outcome::Ok))
            .chain((0..40).map(|i| sample(6.0 + i as f64 * 0.1, 0.01, Outcome::Ok)))
            .collect();
        let timed = Window {
            warmup_s: 0.0,
            end_s: 10.1,
            ..WINDOW
        };
        let (m, _, _) = analyze(&samples, &[closed()], &timed, None);
        assert!(
            !m[0].stability.stable,
            "a timed step is judged by its halves"
        );
        let pass = Window {
            one_pass: true,
            ..timed
        };
        let (m, _, _) = analyze(&samples, &[closed()], &pass, None);
        assert!(m[0].stability.stable, "{:?}", m[0].stability);
        assert!(m[0].verdict.pass, "{:?}", m[0].verdict);
    }

    #[test]
    fn overload_fails_on_latency_and_stability() {
        // Served at 80/s while 100/s arrive: the queue, and so latency, grows all along.
        let samples: Vec<Sample> = (0..1100)
            .map(|i| {
                let t = i as f64 / 100.0;
                let finish = i as f64 / 80.0 + 0.01;
                sample(t, finish - t, Outcome::Ok)
            })
            .collect();
        let (m, _, _) = analyze(&samples, &[spec()], &WINDOW, None);
        let m = &m[0];
        assert!(!m.stability.stable, "{:?}", m.stability);
        assert!(!m.verdict.pass);
        assert!(
            m.verdict.reasons.iter().any(|r| r.starts_with("p99")),
            "{:?}",
            m.verdict
        );
        assert!(
            m.achieved_rps < 81.0 && m.achieved_rps > 79.0,
            "{}",
            m.achieved_rps
        );
    }

    #[test]
    fn a_step_whose_requests_time_out_is_not_stable() {
        // From second 3 on, every request times out after 1 s: each one was "done" at its timeout before.
        let samples: Vec<Sample> = (0..1100)
            .map(|i| {
                let t = i as f64 / 100.0;
                if t < 3.0 {
                    sample(t, 0.01, Outcome::Ok)
                } else {
                    sample(t, 1.0, Outcome::Timeout)
                }
            })
            .collect();
        let (m, _, _) = analyze(&samples, &[spec()], &WINDOW, None);
        assert!(!m[0].stability.stable, "{:?}", m[0].stability);
        assert!(!m[0].verdict.pass);
    }

    #[test]
    fn errors_and_dispatch_delay_are_judged() {
        let mut samples: Vec<Sample> = (100..1100)
            .map(|i| {
                sample(
                    i as f64 / 100.0,
                    0.01,
                    if i % 20 == 0 {
                        Outcome::Refused
                    } else {
                        Outcome::Ok
                    },
                )
            })
            .collect();
        samples.iter_mut().for_each(|s| s.sent += 0.02);
        let (m, _, behind) = analyze(&samples, &[spec()], &WINDOW, None);
        assert!(behind);
        assert_eq!(m[0].refused, 50);
        assert!(!m[0].verdict.pass);
        assert!(
            m[0].verdict.reasons[0].contains("5.0% refused"),
            "{:?}",
            m[0].verdict
        );
    }

    #[test]
    fn batch_fill_from_telemetry() {
        let before = Telemetry {
            batches: 10.0,
            batch_tokens: 1000.0,
            fill: 2.0,
            replays: 4.0,
            forwards: 10.0,
            resent_pieces: 0.0,
        };
        let after = Telemetry {
            batches: 20.0,
            batch_tokens: 6000.0,
            fill: 7.0,
            replays: 12.0,
            forwards: 20.0,
            resent_pieces: 0.0,
        };
        let (_, b, _) = analyze(&[], &[spec()], &WINDOW, Some((before, after)));
        assert_eq!(
            b,
            Some(Batches {
                batches: 10.0,
                mean_tokens: 500.0,
                mean_fill: 0.5,
                replayed: 0.8
            })
        );
    }
}
