//! Request arrivals: the [`Trace`] type, its native JSON Lines format, adapters for the LLM-serving traces the
//! project ships (Azure 2023 CSV, Mooncake JSONL) and the time scaling that turns a trace into a step's schedule.
//!
//! The native format (documented in `workloads/README.md`) is one JSON object per line:
//! `{"t": 0.125, "inputs": 1, "tokens": 18, "texts": ["..."]}` — `t` seconds from the trace's start (required),
//! `inputs` per request (default 1, or the number of `texts`), `tokens` per input (optional), `texts` (optional;
//! without them a workload's corpus supplies the text).

use std::io::BufRead;
use std::path::{Path, PathBuf};

/// The most inputs one trace request may carry: each becomes a text picked for it, held until it is sent.
pub const MAX_INPUTS: u32 = 100_000;

/// Why an input file (a trace, a corpus) could not be read.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    #[error("reading {path}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}, line {line}: {message}")]
    Parse {
        path: PathBuf,
        line: usize,
        message: String,
    },
    #[error("{path}: {message}")]
    Format { path: PathBuf, message: String },
}

/// One request of a trace.
#[derive(Clone, Debug, PartialEq)]
pub struct Arrival {
    /// Seconds from the trace's start.
    pub at: f64,
    /// Inputs (texts) in the request.
    pub inputs: u32,
    /// Tokens per input, when the trace says (LLM traces give their prompt length).
    pub tokens: Option<u32>,
    /// The request's own texts; empty when a corpus supplies them.
    pub texts: Vec<String>,
}

impl Arrival {
    pub fn at(at: f64) -> Arrival {
        Arrival {
            at,
            inputs: 1,
            tokens: None,
            texts: Vec::new(),
        }
    }
}

/// Arrivals in time order, the first at 0.
#[derive(Clone, Debug)]
pub struct Trace {
    pub name: String,
    pub arrivals: Vec<Arrival>,
}

/// Count, span and burstiness of a list of arrivals.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TraceStats {
    pub requests: usize,
    pub span_s: f64,
    /// Gaps per second over the span: `(requests - 1) / span`.
    pub mean_rate: f64,
    /// Coefficient of variation of the gaps: 1 for Poisson, 0 for a metronome, above 1 for bursts.
    pub cv: f64,
}

impl TraceStats {
    pub fn of(arrivals: &[Arrival]) -> TraceStats {
        let gaps: Vec<f64> = arrivals.windows(2).map(|w| w[1].at - w[0].at).collect();
        let span = gaps.iter().sum::<f64>();
        let mean = span / gaps.len().max(1) as f64;
        let var = gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / gaps.len().max(1) as f64;
        TraceStats {
            requests: arrivals.len(),
            span_s: span,
            mean_rate: if span > 0.0 {
                gaps.len() as f64 / span
            } else {
                0.0
            },
            cv: if mean > 0.0 { var.sqrt() / mean } else { 0.0 },
        }
    }
}

impl Trace {
    /// Reads a trace file, its format told by its content: a CSV with an arrival-time column (Azure's LLM
    /// traces, BurstGPT's), JSON Lines with `timestamp` in milliseconds (Mooncake) or `t` in seconds (native).
    pub fn load(path: &Path) -> Result<Trace, InputError> {
        let io = |source| InputError::Io {
            path: path.to_owned(),
            source,
        };
        let file = std::fs::File::open(path).map_err(io)?;
        let mut reader = std::io::BufReader::new(file);
        let first = {
            let buf = reader.fill_buf().map_err(io)?;
            String::from_utf8_lossy(&buf[..buf.len().min(256)]).into_owned()
        };
        let name = path
            .file_stem()
            .map_or("trace".into(), |s| s.to_string_lossy().into_owned());
        let arrivals = if first.trim_start().starts_with('{') {
            read_jsonl(path, reader)?
        } else {
            read_csv(path, reader)?
        };
        if arrivals.len() < 2 {
            return Err(InputError::Format {
                path: path.to_owned(),
                message: format!("{} requests; a trace needs at least two", arrivals.len()),
            });
        }
        Ok(Trace::new(name, arrivals))
    }

    /// Sorts the arrivals by time and moves the first to 0.
    pub fn new(name: impl Into<String>, mut arrivals: Vec<Arrival>) -> Trace {
        arrivals.sort_by(|a, b| a.at.total_cmp(&b.at));
        let t0 = arrivals.first().map_or(0.0, |a| a.at);
        arrivals.iter_mut().for_each(|a| a.at -= t0);
        Trace {
            name: name.into(),
            arrivals,
        }
    }

    pub fn stats(&self) -> TraceStats {
        TraceStats::of(&self.arrivals)
    }

    /// `duration_s` seconds of arrivals at `rate` per second on average: `round(rate * duration)` consecutive
    /// requests from index `start` on (wrapping around the end), their gaps stretched or compressed by one factor
    /// so they fill the duration. The burstiness (CV of the gaps) is the trace's own.
    pub fn rescaled(&self, start: usize, rate: f64, duration_s: f64) -> Vec<Arrival> {
        let n = (rate * duration_s).round() as usize;
        let len = self.arrivals.len();
        if n == 0 || len < 2 {
            return Vec::new();
        }
        let span = self.stats().span_s;
        // The wrap from the last arrival to the first takes one mean gap.
        let wrap = span / (len - 1) as f64;
        let time = |i: usize| {
            let laps = (i / len) as f64;
            laps * (span + wrap) + self.arrivals[i % len].at
        };
        let s = start % len;
        let t0 = time(s);
        // n gaps cover the duration: the (n+1)-th arrival would fall just past its end.
        let scale = duration_s / (time(s + n) - t0).max(f64::MIN_POSITIVE);
        (s..s + n)
            .map(|i| Arrival {
                at: (time(i) - t0) * scale,
                ..self.arrivals[i % len].clone()
            })
            .collect()
    }
}

/// The columns a CSV trace names its arrival times by, matched without regard to case or surrounding spaces:
/// Azure's LLM inference traces (2023 and 2024: `TIMESTAMP`), BurstGPT's (`Timestamp`, seconds) and plain
/// exports. Not a bare `time`, which as often holds a latency.
const TIME_COLUMNS: [&str; 2] = ["timestamp", "arrival_time"];
/// The columns that give a request's prompt length in tokens: Azure's `ContextTokens`, BurstGPT's
/// `Request tokens`, and the names other exports use. Optional: without one the corpus picks lengths.
const TOKEN_COLUMNS: [&str; 5] = [
    "contexttokens",
    "request tokens",
    "input_length",
    "input_tokens",
    "prompt_tokens",
];

/// A CSV trace, one request per row: Azure LLM inference (`TIMESTAMP,ContextTokens,GeneratedTokens`, dates),
/// BurstGPT (`Timestamp,Model,Request tokens,...`, seconds from the start) or any CSV with such columns. The
/// prompt's length is taken as the input's token count.
fn read_csv(path: &Path, reader: impl std::io::Read) -> Result<Vec<Arrival>, InputError> {
    let mut csv = csv::Reader::from_reader(reader);
    let parse_err = |line: usize, message: String| InputError::Parse {
        path: path.to_owned(),
        line,
        message,
    };
    let headers = csv
        .headers()
        .map_err(|e| parse_err(1, e.to_string()))?
        .clone();
    let column = |names: &[&str]| {
        names.iter().find_map(|n| {
            headers
                .iter()
                .position(|h| h.trim().eq_ignore_ascii_case(n))
        })
    };
    let ts = column(&TIME_COLUMNS).ok_or_else(|| InputError::Format {
        path: path.to_owned(),
        message: format!(
            "no arrival-time column: a CSV trace names one `TIMESTAMP` (Azure's LLM traces), `Timestamp` \
             (BurstGPT's) or `arrival_time` (found: {})",
            headers.iter().collect::<Vec<_>>().join(",")
        ),
    })?;
    let ctx = column(&TOKEN_COLUMNS);
    let mut out = Vec::new();
    // Whether the first row's time was a number of seconds: a trace is all seconds or all dates.
    let mut seconds = None;
    for (i, record) in csv.records().enumerate() {
        let line = i + 2;
        let record = record.map_err(|e| parse_err(line, e.to_string()))?;
        let field = |c: usize| record.get(c).unwrap_or("").trim();
        let (at, is_seconds) = parse_time(field(ts)).map_err(|m| parse_err(line, m))?;
        if *seconds.get_or_insert(is_seconds) != is_seconds {
            let message = format!("time `{}` mixes seconds and dates in one trace", field(ts));
            return Err(parse_err(line, message));
        }
        let at = arrival_time(at).map_err(|m| parse_err(line, m))?;
        let tokens = match ctx {
            Some(c) => Some(field(c).parse::<u32>().map_err(|e| {
                let name = headers.get(c).unwrap_or("").trim();
                parse_err(line, format!("{name} `{}`: {e}", field(c)))
            })?),
            None => None,
        };
        out.push(Arrival {
            tokens,
            ..Arrival::at(at)
        });
    }
    Ok(out)
}

/// Every format's arrival times are finite seconds, not before the epoch: the generator schedules by them.
fn arrival_time(at: f64) -> Result<f64, String> {
    if at.is_finite() && at >= 0.0 {
        Ok(at)
    } else {
        Err(format!("arrival time {at} s is not a time"))
    }
}

/// A CSV trace's time: seconds as a number (BurstGPT's), or a date and time (Azure's); and whether it was seconds.
fn parse_time(s: &str) -> Result<(f64, bool), String> {
    match s.parse::<f64>() {
        Ok(secs) => Ok((secs, true)),
        Err(_) => parse_timestamp(s)
            .map(|t| (t, false))
            .map_err(|e| format!("{e}, nor a number of seconds")),
    }
}

/// `YYYY-MM-DD HH:MM:SS[.fraction]` (or ISO 8601's `T` between them), optionally followed by a zone: `Z`,
/// `+HH:MM`, `-HH:MM` or `±HHMM`, to seconds since 1970 UTC (the zone matters only where a trace mixes them).
fn parse_timestamp(s: &str) -> Result<f64, String> {
    let bad = || format!("timestamp `{s}` is not `YYYY-MM-DD HH:MM:SS[.fff][zone]`");
    let (date, time) = s.split_once([' ', 'T', 't']).ok_or_else(bad)?;
    let (time, offset_s) = split_zone(time).ok_or_else(bad)?;
    let num = |x: &str| x.parse::<i64>().map_err(|_| bad());
    let d: Vec<&str> = date.split('-').collect();
    let t: Vec<&str> = time.split(':').collect();
    let ([y, m, day], [hh, mm, ss]) = (d.as_slice(), t.as_slice()) else {
        return Err(bad());
    };
    let secs = ss.parse::<f64>().map_err(|_| bad())?;
    let (y, m, day, hh, mm) = (num(y)?, num(m)?, num(day)?, num(hh)?, num(mm)?);
    // In range, the day count below cannot overflow.
    if !((0..=9999).contains(&y)
        && (1..=12).contains(&m)
        && (1..=31).contains(&day)
        && (0..24).contains(&hh)
        && (0..60).contains(&mm))
    {
        return Err(bad());
    }
    let days = days_from_civil(y, m, day);
    Ok((days * 86_400 + hh * 3600 + mm * 60 - offset_s) as f64 + secs)
}

/// A time of day and its zone's offset from UTC in seconds (0 without a zone); `None` for a malformed zone.
fn split_zone(time: &str) -> Option<(&str, i64)> {
    if let Some(t) = time.strip_suffix(['Z', 'z']) {
        return Some((t, 0));
    }
    // A sign after the seconds starts the offset (the time itself has no sign).
    let Some(at) = time.rfind(['+', '-']) else {
        return Some((time, 0));
    };
    let (t, zone) = time.split_at(at);
    let sign = if zone.starts_with('-') { -1 } else { 1 };
    // `HH:MM` or `HHMM`, nothing else.
    let (hh, mm) = match &zone.as_bytes()[1..] {
        [h1, h2, b':', m1, m2] | [h1, h2, m1, m2] => ([*h1, *h2], [*m1, *m2]),
        _ => return None,
    };
    let two = |d: [u8; 2]| {
        d.iter()
            .all(u8::is_ascii_digit)
            .then(|| i64::from(d[0] - b'0') * 10 + i64::from(d[1] - b'0'))
    };
    let (h, m) = (two(hh)?, two(mm)?);
    (h < 24 && m < 60).then_some((t, sign * (h * 3600 + m * 60)))
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[derive(serde::Deserialize)]
struct JsonLine {
    /// Native: seconds.
    t: Option<f64>,
    /// Mooncake: milliseconds.
    timestamp: Option<f64>,
    inputs: Option<u32>,
    tokens: Option<u32>,
    /// Mooncake's prompt length.
    input_length: Option<u32>,
    #[serde(default)]
    texts: Vec<String>,
}

/// Native lines (`t` in seconds) or Mooncake's (`timestamp` in milliseconds, `input_length` tokens).
fn read_jsonl(path: &Path, reader: impl BufRead) -> Result<Vec<Arrival>, InputError> {
    let mut out = Vec::new();
    for (i, line) in reader.lines().enumerate() {
        let parse_err = |message: String| InputError::Parse {
            path: path.to_owned(),
            line: i + 1,
            message,
        };
        let line = line.map_err(|e| InputError::Io {
            path: path.to_owned(),
            source: e,
        })?;
        if line.trim().is_empty() {
            continue;
        }
        let l: JsonLine = serde_json::from_str(&line).map_err(|e| parse_err(e.to_string()))?;
        let at = match (l.t, l.timestamp) {
            (Some(t), _) => t,
            (None, Some(ms)) => ms / 1e3,
            (None, None) => {
                return Err(parse_err(
                    "no `t` (seconds) or `timestamp` (milliseconds)".into(),
                ))
            }
        };
        let at = arrival_time(at).map_err(parse_err)?;
        let inputs = match (l.inputs, l.texts.len()) {
            (Some(n), k) if k > 0 && n as usize != k => {
                return Err(parse_err(format!(
                    "`inputs` is {n} but {k} texts are given"
                )))
            }
            (Some(0), _) => return Err(parse_err("`inputs` is 0".into())),
            (Some(n), _) if n > MAX_INPUTS => {
                return Err(parse_err(format!(
                    "`inputs` is {n}, more than the {MAX_INPUTS} one request may carry"
                )))
            }
            (Some(n), _) => n,
            (None, 0) => 1,
            (None, k) => k as u32,
        };
        out.push(Arrival {
            at,
            inputs,
            tokens: l.tokens.or(l.input_length),
            texts: l.texts,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shipped(name: &str) -> Trace {
        Trace::load(&crate::workload::repo_path("workloads/traces").join(name)).unwrap()
    }

    fn close(a: f64, b: f64, rel: f64) -> bool {
        (a - b).abs() <= rel * b.abs()
    }

    /// Counts, spans, rates and burstiness of the shipped traces, as `shared/data/README.md` states them
    /// (checked independently with Python's csv/json modules).
    #[test]
    fn shipped_traces_parse_with_their_counts_and_rates() {
        for (file, requests, span, rate, cv, tokens) in [
            (
                "azure2023_llm_conv.csv",
                19_366,
                3501.72,
                5.530,
                1.094,
                22_361_870u64,
            ),
            (
                "azure2023_llm_code.csv",
                8_819,
                3435.95,
                2.566,
                13.15,
                18_059_974,
            ),
            (
                "mooncake_fast25_synthetic.jsonl",
                3_993,
                1022.03,
                3.906,
                1.011,
                61_194_628,
            ),
        ] {
            let trace = shipped(file);
            let s = trace.stats();
            assert_eq!(s.requests, requests, "{file}");
            assert!(close(s.span_s, span, 1e-4), "{file}: span {}", s.span_s);
            assert!(
                close(s.mean_rate, rate, 1e-3),
                "{file}: rate {}",
                s.mean_rate
            );
            assert!(close(s.cv, cv, 1e-3), "{file}: cv {}", s.cv);
            let total: u64 = trace
                .arrivals
                .iter()
                .map(|a| a.tokens.unwrap() as u64)
                .sum();
            assert_eq!(total, tokens, "{file}");
            assert_eq!(trace.arrivals[0].at, 0.0);
        }
    }

    #[test]
    fn rescaling_hits_the_rate_and_keeps_the_burstiness() {
        let trace = shipped("azure2023_llm_code.csv");
        let whole = trace.rescaled(0, 10.0, trace.arrivals.len() as f64 / 10.0);
        // The whole trace once round, compressed: same count, same CV.
        assert_eq!(whole.len(), trace.arrivals.len());
        assert!(close(TraceStats::of(&whole).cv, trace.stats().cv, 1e-6));
        for (start, rate, duration) in [(0, 50.0, 10.0), (8_000, 7.5, 4.0), (123, 400.0, 2.5)] {
            let a = trace.rescaled(start, rate, duration);
            assert_eq!(a.len(), (rate * duration).round() as usize);
            assert_eq!(a[0].at, 0.0);
            assert!(a.windows(2).all(|w| w[0].at <= w[1].at));
            assert!(a.last().unwrap().at < duration);
        }
    }

    #[test]
    fn native_lines_and_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        std::fs::write(
            &path,
            "{\"t\": 0.5, \"texts\": [\"a\", \"b\"]}\n\n{\"t\": 0.25, \"inputs\": 3, \"tokens\": 9}\n",
        )
        .unwrap();
        let t = Trace::load(&path).unwrap();
        assert_eq!(t.arrivals.len(), 2);
        assert_eq!(
            (t.arrivals[0].at, t.arrivals[0].inputs, t.arrivals[0].tokens),
            (0.0, 3, Some(9))
        );
        assert_eq!((t.arrivals[1].at, t.arrivals[1].inputs), (0.25, 2));

        std::fs::write(&path, "{\"t\": 0}\n{\"inputs\": 2}\n").unwrap();
        let e = Trace::load(&path).unwrap_err().to_string();
        assert!(e.contains("line 2") && e.contains("no `t`"), "{e}");

        let csv = dir.path().join("t.csv");
        std::fs::write(&csv, "when,ContextTokens\n1,2\n").unwrap();
        let e = Trace::load(&csv).unwrap_err().to_string();
        assert!(
            e.contains("no arrival-time column") && e.contains("found: when,ContextTokens"),
            "{e}"
        );
        std::fs::write(
            &csv,
            "TIMESTAMP,ContextTokens\n2023-11-16 18:15:46.5,3\nyesterday,4\n",
        )
        .unwrap();
        let e = Trace::load(&csv).unwrap_err().to_string();
        assert!(e.contains("line 3") && e.contains("yesterday"), "{e}");
    }

    #[test]
    fn a_request_of_four_billion_inputs_is_refused_not_allocated() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        std::fs::write(&path, "{\"t\": 0, \"inputs\": 4000000000}\n").unwrap();
        let e = Trace::load(&path).unwrap_err().to_string();
        assert!(
            e.contains("line 1") && e.contains("more than the 100000"),
            "{e}"
        );
    }

    #[test]
    fn azure_csv_nan_or_inf_seconds_are_refused_like_json_lines() {
        let dir = tempfile::tempdir().unwrap();
        let csv = dir.path().join("t.csv");
        for (time, what) in [
            ("2023-11-16 18:15:NaN", "arrival time NaN s"),
            ("2023-11-16 18:15:inf", "arrival time inf s"),
            ("1969-12-31 23:59:59", "arrival time -1 s"),
            ("99999999999999-01-01 00:00:00", "is not `YYYY-MM-DD"),
        ] {
            std::fs::write(
                &csv,
                format!("TIMESTAMP,ContextTokens\n2023-11-16 18:15:46.5,3\n{time},4\n"),
            )
            .unwrap();
            let e = Trace::load(&csv).unwrap_err().to_string();
            assert!(e.contains("line 3") && e.contains(what), "{time}: {e}");
        }
        let jsonl = dir.path().join("t.jsonl");
        std::fs::write(&jsonl, "{\"t\": 0}\n{\"t\": -2}\n").unwrap();
        let e = Trace::load(&jsonl).unwrap_err().to_string();
        assert!(
            e.contains("line 2") && e.contains("arrival time -2 s"),
            "{e}"
        );
    }

    #[test]
    fn burstgpt_csv_seconds_and_request_tokens() {
        let dir = tempfile::tempdir().unwrap();
        let csv = dir.path().join("BurstGPT_1.csv");
        std::fs::write(
            &csv,
            "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n\
             5,ChatGPT,472,18,490,Conversation log\n\
             45,ChatGPT,1087,0,1087,Conversation log\n\
             45.5,GPT-4,12,300,312,API log\n",
        )
        .unwrap();
        let t = Trace::load(&csv).unwrap();
        let got: Vec<_> = t.arrivals.iter().map(|a| (a.at, a.tokens)).collect();
        assert_eq!(
            got,
            [(0.0, Some(472)), (40.0, Some(1087)), (40.5, Some(12))]
        );
        // Without a token column the arrivals come with no lengths; a bad count names its column.
        std::fs::write(&csv, "arrival_time,model\n1,a\n3,b\n").unwrap();
        let t = Trace::load(&csv).unwrap();
        assert_eq!(t.arrivals[1].at, 2.0);
        assert!(t.arrivals.iter().all(|a| a.tokens.is_none()));
        std::fs::write(&csv, "Timestamp,Request tokens\n1,2\n3,many\n").unwrap();
        let e = Trace::load(&csv).unwrap_err().to_string();
        assert!(
            e.contains("line 3") && e.contains("Request tokens `many`"),
            "{e}"
        );
    }

    #[test]
    fn iso_timestamps_with_zones() {
        let plain = parse_timestamp("2024-05-10 00:00:00.0098750").unwrap();
        for s in [
            "2024-05-10T00:00:00.0098750",
            "2024-05-10 00:00:00.0098750Z",
            "2024-05-10 00:00:00.0098750+00:00",
            "2024-05-10T02:00:00.0098750+02:00",
            "2024-05-09T19:00:00.0098750-0500",
        ] {
            let t = parse_timestamp(s).unwrap();
            assert!((t - plain).abs() < 1e-6, "{s}: {t} vs {plain}");
        }
        for s in [
            "2024-05-10 00:00:00+2",
            "2024-05-10 00:00:00+25:00",
            "2024-05-10",
            "2024-05-10 00:00:00+0:500",
            "2024-05-10 00:00:00+05::00",
            "2024-05-10 00:00:00+:0500",
        ] {
            assert!(parse_timestamp(s).is_err(), "{s}");
        }
    }

    #[test]
    fn a_trace_mixing_seconds_and_dates_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let csv = dir.path().join("t.csv");
        std::fs::write(
            &csv,
            "TIMESTAMP,ContextTokens\n2023-11-16 18:15:46.5,3\n1700158546.5,4\n",
        )
        .unwrap();
        let e = Trace::load(&csv).unwrap_err().to_string();
        assert!(
            e.contains("line 3") && e.contains("mixes seconds and dates"),
            "{e}"
        );
        std::fs::write(&csv, "TIMESTAMP,ContextTokens\n1,3\nsoon,4\n").unwrap();
        let e = Trace::load(&csv).unwrap_err().to_string();
        assert!(e.contains("nor a number of seconds"), "{e}");
    }

    #[test]
    fn timestamps_cross_midnight() {
        let a = parse_timestamp("2023-12-31 23:59:59.5").unwrap();
        let b = parse_timestamp("2024-01-01 00:00:00.25").unwrap();
        assert!((b - a - 0.75).abs() < 1e-9);
        assert_eq!(parse_timestamp("1970-01-01 00:00:01").unwrap(), 1.0);
    }
}
