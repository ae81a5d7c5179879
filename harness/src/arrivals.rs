//! Arrival processes: when a step's requests are due. Synthetic ones (metronome, Poisson, gamma bursts with the
//! CV as the burstiness knob), a real trace's gaps time-scaled to the rate, and ServeGen's per-window rate/CV
//! model. Every schedule is a pure function of (process, rate, duration, seed).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Exp, Gamma};

use crate::trace::{Arrival, InputError, Trace};
use crate::workload::repo_path;

#[derive(Debug, thiserror::Error)]
pub enum ArrivalsError {
    #[error(transparent)]
    Trace(#[from] InputError),
    #[error(
        "unknown arrivals `{0}`: expected uniform, poisson, gamma:CV, azure-conv, azure-code, mooncake, \
         servegen[:client=N][,window=S], or a trace file (Azure CSV, Mooncake or native JSON Lines)"
    )]
    Unknown(String),
    #[error("arrivals `{spec}`: {message}")]
    Invalid { spec: String, message: String },
    #[error("cannot draw arrival gaps at {rate:?} requests/s with CV {cv:?}: {message}")]
    Gaps { rate: f64, cv: f64, message: String },
    #[error("{rate:?} requests/s for {duration_s:?} s is more than the {MAX_ARRIVALS} arrivals one run may schedule")]
    TooMany { rate: f64, duration_s: f64 },
}

/// The most arrivals one schedule holds: tens of bytes each, and far more requests than a step can send.
pub const MAX_ARRIVALS: usize = 10_000_000;

/// When requests are due.
#[derive(Clone, Debug)]
pub enum Arrivals {
    /// Evenly spaced (CV 0): a constant-throughput load, as wrk2 offers.
    Uniform,
    /// Exponential gaps (CV 1).
    Poisson,
    /// Gamma-distributed gaps with this coefficient of variation: above 1 bursts, below 1 smoother than Poisson.
    Gamma { cv: f64 },
    /// A real trace's gaps, time-scaled so that each step gets its rate (see [`Trace::rescaled`]).
    Trace(Arc<Trace>),
    /// ServeGen's generative model: one window's active clients, each a gamma renewal process with its own share
    /// of the rate and its own CV, superposed.
    ServeGen(Arc<ServeGenWindow>),
}

/// The shipped traces by name.
pub const NAMED_TRACES: [(&str, &str); 3] = [
    ("azure-conv", "workloads/traces/azure2023_llm_conv.csv"),
    ("azure-code", "workloads/traces/azure2023_llm_code.csv"),
    (
        "mooncake",
        "workloads/traces/mooncake_fast25_synthetic.jsonl",
    ),
];
const SERVEGEN: &str = "workloads/traces/servegen_language_m-small/clients_rate_cv_windows.csv";

impl Arrivals {
    /// `uniform`, `poisson`, `gamma:CV`, a shipped trace's name, `servegen[:client=N][,window=S]` or a trace file.
    pub fn parse(spec: &str) -> Result<Arrivals, ArrivalsError> {
        let invalid = |message: String| ArrivalsError::Invalid {
            spec: spec.into(),
            message,
        };
        let (kind, arg) = spec.split_once(':').unwrap_or((spec, ""));
        Ok(match kind {
            "uniform" => Arrivals::Uniform,
            "poisson" => Arrivals::Poisson,
            "gamma" => {
                let cv: f64 = arg
                    .parse()
                    .map_err(|_| invalid(format!("`{arg}` is not a CV (gamma:4 for bursts)")))?;
                Arrivals::Gamma {
                    cv: check_cv(cv).map_err(invalid)?,
                }
            }
            "servegen" => {
                let (mut client, mut window) = (None, None);
                for kv in arg.split(',').filter(|s| !s.is_empty()) {
                    let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
                    let v: u64 = v
                        .parse()
                        .map_err(|_| invalid(format!("`{kv}` needs a number")))?;
                    match k {
                        "client" => client = Some(v),
                        "window" => window = Some(v),
                        _ => return Err(invalid(format!("unknown option `{k}` (client, window)"))),
                    }
                }
                let window = ServeGenWindow::load(&repo_path(SERVEGEN), client, window).map_err(
                    |e| match e {
                        ArrivalsError::Invalid { message, .. } => invalid(message),
                        other => other,
                    },
                )?;
                Arrivals::ServeGen(Arc::new(window))
            }
            _ => {
                let path = match NAMED_TRACES.iter().find(|(name, _)| *name == spec) {
                    Some((_, file)) => repo_path(file),
                    None if Path::new(spec).is_file() => PathBuf::from(spec),
                    None => return Err(ArrivalsError::Unknown(spec.into())),
                };
                Arrivals::Trace(Arc::new(Trace::load(&path)?))
            }
        })
    }

    /// Arrivals at `rate` per second on average over `duration_s`, drawn with `seed`.
    pub fn schedule(
        &self,
        rate: f64,
        duration_s: f64,
        seed: u64,
    ) -> Result<Vec<Arrival>, ArrivalsError> {
        let too_many = || ArrivalsError::TooMany { rate, duration_s };
        // Written so that a NaN product is refused too.
        if (rate * duration_s).partial_cmp(&(MAX_ARRIVALS as f64)) != Some(std::cmp::Ordering::Less)
        {
            return Err(too_many());
        }
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let arrivals = match self {
            Arrivals::Uniform => (0..(rate * duration_s).round() as usize)
                .map(|i| Arrival::at(i as f64 / rate))
                .collect(),
            Arrivals::Poisson => {
                renewal(Gaps::poisson(rate)?, duration_s, &mut rng).ok_or_else(too_many)?
            }
            Arrivals::Gamma { cv } => {
                renewal(Gaps::gamma(rate, *cv)?, duration_s, &mut rng).ok_or_else(too_many)?
            }
            Arrivals::Trace(trace) => {
                let start = rng.gen_range(0..trace.arrivals.len());
                trace.rescaled(start, rate, duration_s)
            }
            Arrivals::ServeGen(w) => {
                let total: f64 = w.clients.iter().map(|c| c.rate).sum();
                let mut all = Vec::new();
                for c in &w.clients {
                    let gaps = Gaps::gamma(rate * c.rate / total, c.cv)?;
                    all.extend(renewal(gaps, duration_s, &mut rng).ok_or_else(too_many)?);
                }
                all.sort_by(|a, b| a.at.total_cmp(&b.at));
                all
            }
        };
        // Each renewal process stops at the bound on its own; ServeGen's clients together can still pass it.
        if arrivals.len() > MAX_ARRIVALS {
            return Err(too_many());
        }
        Ok(arrivals)
    }

    /// What the results and reports call it.
    pub fn describe(&self) -> String {
        match self {
            Arrivals::Uniform => "uniform (CV 0)".into(),
            Arrivals::Poisson => "poisson (CV 1)".into(),
            Arrivals::Gamma { cv } => format!("gamma (CV {cv})"),
            Arrivals::Trace(t) => {
                let s = t.stats();
                format!(
                    "trace {} ({} requests over {:.0} s, {:.2} req/s, CV {:.2}), time-scaled",
                    t.name, s.requests, s.span_s, s.mean_rate, s.cv
                )
            }
            Arrivals::ServeGen(w) => format!(
                "servegen window {} s{} ({} clients, {:.2} req/s in the trace), gamma per client, rate-scaled",
                w.window_start_s,
                w.client.map_or(String::new(), |c| format!(", client {c}")),
                w.clients.len(),
                w.clients.iter().map(|c| c.rate).sum::<f64>()
            ),
        }
    }
}

/// A distribution of gaps between arrivals.
enum Gaps {
    Exp(Exp<f64>),
    Gamma(Gamma<f64>),
}

impl Gaps {
    fn poisson(rate: f64) -> Result<Gaps, ArrivalsError> {
        Exp::new(rate.max(f64::MIN_POSITIVE))
            .map(Gaps::Exp)
            .map_err(|e| Gaps::error(rate, 1.0, e))
    }

    /// Gamma with mean `1/rate` and coefficient of variation `cv`: shape `1/cv²`.
    fn gamma(rate: f64, cv: f64) -> Result<Gaps, ArrivalsError> {
        let shape = 1.0 / (cv * cv).max(1e-6);
        let scale = 1.0 / (rate.max(f64::MIN_POSITIVE) * shape);
        Gamma::new(shape, scale)
            .map(Gaps::Gamma)
            .map_err(|e| Gaps::error(rate, cv, e))
    }

    fn error(rate: f64, cv: f64, e: impl std::fmt::Display) -> ArrivalsError {
        ArrivalsError::Gaps {
            rate,
            cv,
            message: e.to_string(),
        }
    }

    fn sample(&self, rng: &mut impl Rng) -> f64 {
        match self {
            Gaps::Exp(d) => d.sample(rng),
            Gaps::Gamma(d) => d.sample(rng),
        }
    }
}

/// A CV whose gamma gaps can be drawn: positive, and small enough that its square (the shape's inverse) is
/// finite.
fn check_cv(cv: f64) -> Result<f64, String> {
    if cv > 0.0 && (cv * cv).is_finite() {
        Ok(cv)
    } else {
        Err(format!(
            "CV {cv:?}: must be positive and at most about 1e154 (its square must be finite)"
        ))
    }
}

/// A renewal process over `[0, duration)`, started in steady state: the first arrival a uniform fraction of a gap
/// in, so that superposed processes do not all fire at 0.
fn renewal(gaps: Gaps, duration_s: f64, rng: &mut impl Rng) -> Option<Vec<Arrival>> {
    let mut t = gaps.sample(rng) * rng.gen::<f64>();
    let mut out = Vec::new();
    while t < duration_s {
        if out.len() == MAX_ARRIVALS {
            return None;
        }
        out.push(Arrival::at(t));
        t += gaps.sample(rng);
    }
    Some(out)
}

/// One 10-minute window of ServeGen's per-client model: each active client's rate and CV of gaps.
#[derive(Clone, Debug)]
pub struct ServeGenWindow {
    pub window_start_s: u64,
    pub client: Option<u64>,
    pub clients: Vec<ServeGenClient>,
}

#[derive(Clone, Copy, Debug)]
pub struct ServeGenClient {
    pub rate: f64,
    pub cv: f64,
}

impl ServeGenWindow {
    /// Reads `client_id,window_start_s,rate_rps,cv,...` and keeps one window: `window`, or else the one with the
    /// highest total rate; all clients, or only `client`.
    pub fn load(
        path: &Path,
        client: Option<u64>,
        window: Option<u64>,
    ) -> Result<ServeGenWindow, ArrivalsError> {
        let parse_err = |line: usize, message: String| InputError::Parse {
            path: path.to_owned(),
            line,
            message,
        };
        let mut csv = csv::Reader::from_path(path).map_err(|e| InputError::Format {
            path: path.to_owned(),
            message: e.to_string(),
        })?;
        // (window, client, rate, cv)
        let mut rows: Vec<(u64, u64, f64, f64)> = Vec::new();
        for (i, record) in csv.records().enumerate() {
            let record = record.map_err(|e| parse_err(i + 2, e.to_string()))?;
            let num = |c: usize| -> Result<f64, InputError> {
                let field = record.get(c).unwrap_or("");
                field.parse::<f64>().map_err(|_| {
                    parse_err(
                        i + 2,
                        format!("column {}: `{field}` is not a number", c + 1),
                    )
                })
            };
            let id = num(0)? as u64;
            if client.is_some_and(|c| c != id) {
                continue;
            }
            let (rate, cv) = (num(2)?, num(3)?);
            if !rate.is_finite() {
                return Err(parse_err(i + 2, format!("rate {rate:?} is not finite")).into());
            }
            // A CV of 0 (a single request in the window) says nothing about burstiness: take Poisson's.
            let cv = if cv == 0.0 {
                1.0
            } else {
                check_cv(cv).map_err(|m| parse_err(i + 2, m))?
            };
            if rate > 0.0 {
                rows.push((num(1)? as u64, id, rate, cv));
            }
        }
        let invalid = |message: String| ArrivalsError::Invalid {
            spec: "servegen".into(),
            message,
        };
        let window_start_s = match window {
            Some(w) => w,
            None => {
                let mut totals = std::collections::BTreeMap::<u64, f64>::new();
                for &(w, _, rate, _) in &rows {
                    *totals.entry(w).or_default() += rate;
                }
                totals
                    .into_iter()
                    .max_by(|a, b| a.1.total_cmp(&b.1))
                    .map(|(w, _)| w)
                    .ok_or_else(|| invalid(format!("no active window for client {client:?}")))?
            }
        };
        let clients: Vec<ServeGenClient> = rows
            .iter()
            .filter(|r| r.0 == window_start_s)
            .map(|&(_, _, rate, cv)| ServeGenClient { rate, cv })
            .collect();
        if clients.is_empty() {
            return Err(invalid(format!(
                "no active client in the window starting at {window_start_s} s"
            )));
        }
        Ok(ServeGenWindow {
            window_start_s,
            client,
            clients,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::TraceStats;

    #[test]
    fn synthetic_processes_have_their_rate_and_burstiness() {
        let (rate, duration) = (200.0, 200.0);
        for (arrivals, cv, tol) in [
            (Arrivals::Uniform, 0.0, 1e-9f64),
            (Arrivals::Poisson, 1.0, 0.03),
            (Arrivals::Gamma { cv: 0.5 }, 0.5, 0.03),
            (Arrivals::Gamma { cv: 4.0 }, 4.0, 0.15),
        ] {
            let a = arrivals.schedule(rate, duration, 42).unwrap();
            let s = TraceStats::of(&a);
            let expected = rate * duration;
            // Bursty processes' counts wander more: the tolerance follows the CV.
            let count_tol = 0.02 + 0.03 * cv;
            assert!(
                (a.len() as f64 - expected).abs() <= count_tol * expected,
                "{arrivals:?}: {} arrivals",
                a.len()
            );
            assert!(
                (s.cv - cv).abs() <= tol.max(tol * cv),
                "{arrivals:?}: CV {}",
                s.cv
            );
            assert!(a.iter().all(|x| x.at >= 0.0 && x.at < duration));
            // Same seed, same schedule; another seed, another one.
            assert_eq!(a, arrivals.schedule(rate, duration, 42).unwrap());
            if cv > 0.0 {
                assert_ne!(a, arrivals.schedule(rate, duration, 43).unwrap());
            }
        }
    }

    #[test]
    fn servegen_window_model() {
        let busiest = ServeGenWindow::load(&repo_path(SERVEGEN), None, None).unwrap();
        assert!(busiest.clients.len() > 1);
        let one = ServeGenWindow::load(&repo_path(SERVEGEN), Some(0), Some(337_800)).unwrap();
        assert_eq!(one.clients.len(), 1);
        assert!((one.clients[0].rate - 11.326_666).abs() < 1e-4);
        assert!((one.clients[0].cv - 1.133_956).abs() < 1e-4);

        let arrivals = Arrivals::ServeGen(Arc::new(busiest));
        let a = arrivals.schedule(100.0, 100.0, 7).unwrap();
        assert!((a.len() as f64 - 10_000.0).abs() < 1_000.0, "{}", a.len());
        assert!(a.windows(2).all(|w| w[0].at <= w[1].at));

        let e = Arrivals::parse("servegen:client=999")
            .unwrap_err()
            .to_string();
        assert!(e.contains("no active window"), "{e}");
        let e = Arrivals::parse("servegen:colour=1")
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown option"), "{e}");
    }

    #[test]
    fn schedules_past_ten_million_arrivals_are_refused_not_allocated() {
        for arrivals in [
            Arrivals::Uniform,
            Arrivals::Poisson,
            Arrivals::Gamma { cv: 4.0 },
        ] {
            let e = arrivals.schedule(1e6, 1e300, 1).unwrap_err().to_string();
            assert!(e.contains("more than the 10000000 arrivals"), "{e}");
        }
        // Within the bound, a schedule is drawn as before.
        assert_eq!(
            Arrivals::Uniform.schedule(100.0, 2.0, 1).unwrap().len(),
            200
        );
    }

    #[test]
    fn gamma_cv_whose_square_overflows_is_refused() {
        let e = Arrivals::parse("gamma:1e200").unwrap_err().to_string();
        assert!(e.contains("CV 1e200") && e.contains("square"), "{e}");
        // Built directly, the process reports its error instead of panicking.
        let e = Arrivals::Gamma { cv: 1e200 }
            .schedule(10.0, 1.0, 1)
            .unwrap_err()
            .to_string();
        assert!(e.contains("cannot draw arrival gaps"), "{e}");
    }

    #[test]
    fn servegen_rows_with_inf_or_nan_rate_or_cv_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("windows.csv");
        for (row, what) in [
            ("0,0,inf,1.0", "rate inf"),
            ("0,0,NaN,1.0", "rate NaN"),
            ("0,0,1.0,inf", "CV inf"),
            ("0,0,1.0,NaN", "CV NaN"),
            ("0,0,1.0,1e200", "CV 1e200"),
        ] {
            std::fs::write(
                &path,
                format!("client_id,window_start_s,rate_rps,cv\n0,0,2.0,1.5\n{row}\n"),
            )
            .unwrap();
            let e = ServeGenWindow::load(&path, None, None)
                .unwrap_err()
                .to_string();
            assert!(e.contains("line 3") && e.contains(what), "{row}: {e}");
        }
    }

    #[test]
    fn specs() {
        assert!(matches!(Arrivals::parse("gamma:2.5"), Ok(Arrivals::Gamma { cv }) if cv == 2.5));
        assert!(Arrivals::parse("gamma:-1").is_err());
        assert!(matches!(
            Arrivals::parse("azure-conv"),
            Ok(Arrivals::Trace(_))
        ));
        let e = Arrivals::parse("no-such-thing").unwrap_err().to_string();
        assert!(
            e.contains("unknown arrivals") && e.contains("poisson"),
            "{e}"
        );
    }
}
