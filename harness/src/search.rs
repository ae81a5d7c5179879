//! The adaptive search over load levels and the findings read off its steps — pure functions of what the steps
//! measured, tested without threads or a target.
//!
//! Rate mode (open loop): a closed-loop probe at high concurrency measures the maximum throughput; steps are
//! spread below and a little past it, denser near the top; then the SLO boundary (highest passing rate below the
//! lowest failing one) is bisected until it is narrower than the resolution. When every spread step passes the
//! search goes higher; when none does, lower.
//!
//! Concurrency mode (closed loop): 1, 2, 4, ... clients until a level misses the SLO, throughput stops growing
//! for two doublings, or the maximum is reached; then the SLO boundary is bisected.

use serde::{Deserialize, Serialize};

use crate::step::StepResult;
use crate::workload::Level;

/// How the search runs.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SearchSettings {
    /// Step a rate (open loop) or a concurrency (closed loop).
    pub rate_mode: bool,
    /// Clients of the rate mode's probe.
    pub probe_concurrency: usize,
    /// Steps spread from `lo` to `hi` times the probed maximum.
    pub spread: usize,
    pub lo: f64,
    pub hi: f64,
    /// Narrowing stops when the SLO boundary's bracket is within this fraction of its upper end.
    pub resolution: f64,
    /// Steps at most, the probe not counted.
    pub max_steps: usize,
    pub max_concurrency: usize,
}

/// What the search needs of a finished step.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Observation {
    pub level: Level,
    pub probe: bool,
    /// Requests/s (rate mode) or tokens/s (concurrency mode) achieved.
    pub throughput: f64,
    pub pass: bool,
}

/// The next step, or why the search is over.
#[derive(Clone, Debug, PartialEq)]
pub enum Next {
    Run { level: Level, phase: String },
    Done(String),
}

/// Throughput gains under this fraction count as a plateau.
const PLATEAU: f64 = 0.05;

pub fn next(settings: &SearchSettings, history: &[Observation]) -> Next {
    let steps: Vec<&Observation> = history.iter().filter(|o| !o.probe).collect();
    if settings.rate_mode && history.iter().all(|o| !o.probe) {
        return Next::Run {
            level: Level::Concurrency(settings.probe_concurrency),
            phase: format!(
                "probe: {}, closed loop, for the maximum throughput",
                crate::count(settings.probe_concurrency, "client")
            ),
        };
    }
    if steps.len() >= settings.max_steps {
        return Next::Done(format!("step limit ({}) reached", settings.max_steps));
    }
    let ran = |x: f64| {
        steps
            .iter()
            .any(|o| (o.level.value() - x).abs() <= 1e-6 * x.max(1.0))
    };
    let lowest_fail = steps
        .iter()
        .filter(|o| !o.pass)
        .map(|o| o.level.value())
        .min_by(f64::total_cmp);
    let best_pass = steps
        .iter()
        .filter(|o| o.pass && lowest_fail.is_none_or(|f| o.level.value() < f))
        .map(|o| o.level.value())
        .max_by(f64::total_cmp);
    if settings.rate_mode {
        let capacity = history
            .iter()
            .find(|o| o.probe)
            .map_or(0.0, |o| o.throughput);
        if capacity <= 0.0 {
            return Next::Done(
                "the probe got no answers: nothing to step (see the step's errors: is the target up, and the \
                 --api right?)"
                    .into(),
            );
        }
        let spread = spread_levels(settings, capacity);
        if let Some(&rate) = spread.iter().find(|&&r| !ran(r)) {
            return Next::Run {
                level: Level::Rate(rate),
                phase: format!(
                    "spread: {:.0}% of the probed maximum {capacity:.1} req/s",
                    rate / capacity * 100.0
                ),
            };
        }
        let max_run = steps.iter().map(|o| o.level.value()).fold(0.0, f64::max);
        match (best_pass, lowest_fail) {
            (_, None) => Next::Run {
                level: Level::Rate(max_run * 1.3),
                phase: "extend: every step met the SLO, going higher".into(),
            },
            (None, Some(fail)) if fail / 2.0 < capacity / 1000.0 => {
                Next::Done(format!(
                    "no rate met the SLO, down to {fail:.3} req/s: even a lone request misses it; see the steps' \
                     latency and errors, and raise --slo-ms (or --max-error-rate) if the SLO is tighter than one \
                     request takes"
                ))
            }
            (None, Some(fail)) => Next::Run {
                level: Level::Rate(fail / 2.0),
                phase: "extend: no step met the SLO, going lower".into(),
            },
            (Some(pass), Some(fail)) => {
                narrow(settings, pass, fail, Level::Rate, |a, b| (a + b) / 2.0)
            }
        }
    } else {
        let Some(max_run) = steps.iter().map(|o| o.level.value()).max_by(f64::total_cmp) else {
            return Next::Run {
                level: Level::Concurrency(1),
                phase: "ramp: 1 client".into(),
            };
        };
        match (best_pass, lowest_fail) {
            (None, Some(_)) => Next::Done(
                "even 1 client misses the SLO: one request takes longer than it allows; raise --batch-slo-ms \
                 (or --slo-ms), or send fewer texts per request (--batch-size)"
                    .into(),
            ),
            (Some(pass), Some(fail)) => narrow(
                settings,
                pass,
                fail,
                |x| Level::Concurrency(x as usize),
                |a, b| ((a + b) / 2.0).floor(),
            ),
            (_, None) => {
                let at = |c: f64| {
                    steps
                        .iter()
                        .find(|o| o.level.value() == c)
                        .map(|o| o.throughput)
                };
                let gain = |c: f64| match (at(c), at(c / 2.0)) {
                    (Some(hi), Some(lo)) if lo > 0.0 => Some(hi / lo - 1.0),
                    _ => None,
                };
                let flat = |c: f64| gain(c).is_some_and(|g| g < PLATEAU);
                if flat(max_run) && flat(max_run / 2.0) {
                    Next::Done(format!(
                        "throughput plateaued: two doublings up to {max_run} clients gained under {:.0}% each",
                        PLATEAU * 100.0
                    ))
                } else if max_run as usize >= settings.max_concurrency {
                    Next::Done(format!(
                        "maximum concurrency ({}) reached",
                        settings.max_concurrency
                    ))
                } else {
                    let c = (max_run as usize * 2).min(settings.max_concurrency);
                    Next::Run {
                        level: Level::Concurrency(c),
                        phase: format!("ramp: {}", crate::count(c, "client")),
                    }
                }
            }
        }
    }
}

/// Bisects the SLO boundary between the highest passing level and the lowest failing one.
fn narrow(
    settings: &SearchSettings,
    pass: f64,
    fail: f64,
    level: impl Fn(f64) -> Level,
    mid: impl Fn(f64, f64) -> f64,
) -> Next {
    let width = (fail - pass) / fail;
    let m = mid(pass, fail);
    if width <= settings.resolution || m <= pass {
        return Next::Done(format!(
            "SLO boundary between {pass:.4} and {fail:.4} ({:.1}% wide, resolution {:.0}%)",
            width * 100.0,
            settings.resolution * 100.0
        ));
    }
    Next::Run {
        level: level(m),
        phase: format!("narrow: between {pass:.4} (meets the SLO) and {fail:.4} (misses it)"),
    }
}

/// `settings.spread` rates from `lo` to `hi` times `capacity`, denser toward the top where the boundary usually is.
pub fn spread_levels(settings: &SearchSettings, capacity: f64) -> Vec<f64> {
    let n = settings.spread.max(2);
    (0..n)
        .map(|k| {
            let x = k as f64 / (n - 1) as f64;
            capacity * (settings.lo + (settings.hi - settings.lo) * x.powf(0.7))
        })
        .collect()
}

/// A finding read off the steps, with the rule and the steps that decided it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    /// Offered requests/s (rate mode) or clients (concurrency mode); `None` when no step qualifies.
    pub value: Option<f64>,
    /// True when no tested step exceeded it: the real point is at least this.
    pub lower_bound: bool,
    /// Indices of the steps that decided it.
    pub steps: Vec<usize>,
    pub how: String,
}

impl Finding {
    /// `42.0 req/s offered`, `>= 4 clients` for a lower bound, or `none`, in `unit` (the steps',
    /// [`unit_of`]; none: the bare number, for tables whose header has it).
    pub fn show(&self, unit: &str) -> String {
        let bound = if self.lower_bound { ">= " } else { "" };
        match (self.value, unit) {
            (Some(v), "") => format!("{bound}{v:.1}"),
            (Some(v), "clients") => format!("{bound}{v:.0} clients"),
            (Some(v), unit) => format!("{bound}{v:.1} {unit}"),
            (None, _) => "none".into(),
        }
    }
}

/// The unit of the steps' levels: `req/s offered` (rate steps) or `clients` (concurrency steps); the probe is
/// neither.
pub fn unit_of(steps: &[StepResult]) -> &'static str {
    steps.iter().find(|s| !s.probe).map_or("", unit)
}

/// The level a step is plotted and judged at: its measured offered rate, or its concurrency.
pub fn x_of(step: &StepResult) -> f64 {
    match step.level {
        Level::Rate(_) => step.main().offered_rps,
        Level::Concurrency(c) => c as f64,
    }
}

/// The unit of a step's level as findings quote it: for rate steps the measured offered rate (what the plots'
/// x axis and the `offered/s` column show), never the achieved one.
fn unit(step: &StepResult) -> &'static str {
    match step.level {
        Level::Rate(_) => "req/s offered",
        Level::Concurrency(_) => "clients",
    }
}

/// The measured steps (no probe, none without requests in its window), ordered by level.
fn ordered(steps: &[StepResult]) -> Vec<&StepResult> {
    let mut v: Vec<&StepResult> = steps.iter().filter(|s| !s.probe && s.measured()).collect();
    v.sort_by(|a, b| x_of(a).total_cmp(&x_of(b)));
    v
}

/// The saturation point: the highest level meeting the SLO below the lowest level that misses it.
pub fn saturation(steps: &[StepResult]) -> Finding {
    let v = ordered(steps);
    let fail = v.iter().find(|s| !s.pass);
    let pass = v
        .iter()
        .filter(|s| s.pass && fail.is_none_or(|f| x_of(s) < x_of(f)))
        .max_by(|a, b| x_of(a).total_cmp(&x_of(b)));
    let describe = |s: &StepResult| {
        let m = s.main();
        let verdict = if s.pass {
            "meets the SLO".to_owned()
        } else {
            s.classes
                .iter()
                .flat_map(|c| {
                    c.verdict
                        .reasons
                        .iter()
                        .map(move |r| format!("{}: {r}", c.class))
                })
                .collect::<Vec<_>>()
                .join("; ")
        };
        format!(
            "{:.1} {} (step {}, {} {:.1} ms): {verdict}",
            x_of(s),
            unit(s),
            s.index,
            crate::workload::quantile_name(m.slo.quantile),
            m.slo_latency_ms
        )
    };
    let rule = "highest level whose step meets every class's SLO (latency quantile, error share, stability) below \
                the lowest level that misses it";
    match (pass, fail) {
        (Some(p), Some(f)) => Finding {
            value: Some(x_of(p)),
            lower_bound: false,
            steps: vec![p.index, f.index],
            how: format!(
                "{rule}. Passes at {}; fails at {}",
                describe(p),
                describe(f)
            ),
        },
        (Some(p), None) => Finding {
            value: Some(x_of(p)),
            lower_bound: true,
            steps: vec![p.index],
            how: format!(
                "{rule}. No step missed the SLO; the highest tested is {}",
                describe(p)
            ),
        },
        (None, Some(f)) => Finding {
            value: None,
            lower_bound: false,
            steps: vec![f.index],
            how: format!(
                "{rule}. No step met it; the lowest tested is {}",
                describe(f)
            ),
        },
        (None, None) => Finding {
            value: None,
            lower_bound: false,
            steps: vec![],
            how: "no steps".into(),
        },
    }
}

/// Share of the offered rate the achieved rate must reach to count as following it.
const FOLLOWS: f64 = 0.95;

/// The knee. Rate mode: the highest offered rate up to which the achieved rate follows the offered one (within
/// 5%) at every step. Concurrency mode: the fewest clients reaching 95% of the highest tokens/s seen.
pub fn knee(steps: &[StepResult]) -> Finding {
    let v = ordered(steps);
    let Some(first) = v.first() else {
        return Finding {
            value: None,
            lower_bound: false,
            steps: vec![],
            how: "no steps".into(),
        };
    };
    if matches!(first.level, Level::Concurrency(_)) {
        let best = v.iter().map(|s| s.main().tokens_per_s).fold(0.0, f64::max);
        let Some(k) = v.iter().find(|s| s.main().tokens_per_s >= FOLLOWS * best) else {
            return Finding {
                value: None,
                lower_bound: false,
                steps: vec![],
                how: "no step answered anything".into(),
            };
        };
        // Only steps past the knee show that more clients add queueing; the highest step is a lower bound.
        let beyond = v.iter().filter(|s| x_of(s) > x_of(k)).count();
        let after = match beyond {
            0 => "no step had more clients: the knee may be higher".to_owned(),
            n => format!(
                "{} with more clients gained under {:.0}%: more clients add queueing, not throughput",
                crate::count(n, "step"),
                (1.0 - FOLLOWS) * 100.0
            ),
        };
        return Finding {
            value: Some(x_of(k)),
            lower_bound: beyond == 0,
            steps: vec![k.index],
            how: format!(
                "fewest clients reaching {:.0}% of the highest throughput seen ({best:.0} tokens/s): {} \
                 (step {}, {:.0} tokens/s); {after}",
                FOLLOWS * 100.0,
                crate::count(x_of(k) as usize, "client"),
                k.index,
                k.main().tokens_per_s
            ),
        };
    }
    // A step kept up when its answers in the window kept pace with its arrivals, or when every request due was
    // answered and the backlog stayed level: a short burst's answers landing just after the window are not
    // falling behind, while an overloaded step's growing backlog is.
    let follows = |s: &&&StepResult| {
        let m = s.main();
        m.achieved_rps >= FOLLOWS * m.offered_rps
            || (m.requests > 0 && m.ok == m.requests && m.stability.stable)
    };
    let below = v.iter().position(|s| !follows(&s));
    let last_following = match below {
        Some(0) => None,
        Some(i) => Some(v[i - 1]),
        None => v.last().copied(),
    };
    let rule = format!(
        "highest offered rate up to which every step's achieved rate is at least {:.0}% of its offered rate (or \
         every request was answered, with a level backlog)",
        FOLLOWS * 100.0
    );
    let fmt = |s: &StepResult| {
        format!(
            "{:.1} req/s offered, {:.1} achieved (step {})",
            s.main().offered_rps,
            s.main().achieved_rps,
            s.index
        )
    };
    match (last_following, below.map(|i| v[i])) {
        (Some(k), Some(b)) => Finding {
            value: Some(x_of(k)),
            lower_bound: false,
            steps: vec![k.index, b.index],
            how: format!("{rule}. Follows at {}; falls behind at {}", fmt(k), fmt(b)),
        },
        (Some(k), None) => Finding {
            value: Some(x_of(k)),
            lower_bound: true,
            steps: vec![k.index],
            how: format!("{rule}. Every step followed; the highest is {}", fmt(k)),
        },
        (None, b) => Finding {
            value: None,
            lower_bound: false,
            steps: b.map(|b| vec![b.index]).unwrap_or_default(),
            how: format!(
                "{rule}. Even the lowest step fell behind: {}",
                b.map(fmt).unwrap_or_default()
            ),
        },
    }
}

/// The best throughput a configuration sustained while meeting its SLO: requests/s (rate mode) or tokens/s
/// (concurrency mode) of its passing steps below the lowest failing one.
pub fn throughput_within_slo(steps: &[StepResult]) -> Option<f64> {
    let v = ordered(steps);
    let fail = v.iter().find(|s| !s.pass).map(|s| x_of(s));
    v.iter()
        .filter(|s| s.pass && fail.is_none_or(|f| x_of(s) < f))
        .map(|s| s.throughput())
        .max_by(f64::total_cmp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn findings_are_shown_with_their_unit_and_lower_bound() {
        let finding = |value, lower_bound| Finding {
            value,
            lower_bound,
            steps: vec![],
            how: String::new(),
        };
        assert_eq!(finding(Some(4.0), true).show("clients"), ">= 4 clients");
        assert_eq!(
            finding(Some(226.04), false).show("req/s offered"),
            "226.0 req/s offered"
        );
        assert_eq!(finding(Some(226.04), true).show(""), ">= 226.0");
        assert_eq!(finding(None, false).show("clients"), "none");
    }

    fn settings(rate_mode: bool) -> SearchSettings {
        SearchSettings {
            rate_mode,
            probe_concurrency: 64,
            spread: 6,
            lo: 0.1,
            hi: 1.2,
            resolution: 0.05,
            max_steps: 20,
            max_concurrency: 64,
        }
    }

    /// Drives `next` against a model of a server: `pass(level)` and `throughput(level)`.
    fn drive(
        settings: &SearchSettings,
        probe: f64,
        pass: impl Fn(f64) -> bool,
        throughput: impl Fn(f64) -> f64,
    ) -> Vec<Observation> {
        let mut history = Vec::new();
        while let Next::Run { level, .. } = next(settings, &history) {
            let probe_step = matches!(level, Level::Concurrency(_)) && settings.rate_mode;
            let x = level.value();
            history.push(Observation {
                level,
                probe: probe_step,
                throughput: if probe_step { probe } else { throughput(x) },
                pass: probe_step || pass(x),
            });
            assert!(history.len() < 40, "the search does not end");
        }
        history
    }

    fn boundary(history: &[Observation]) -> (f64, f64) {
        let fail = history
            .iter()
            .filter(|o| !o.probe && !o.pass)
            .map(|o| o.level.value())
            .fold(f64::MAX, f64::min);
        let pass = history
            .iter()
            .filter(|o| !o.probe && o.pass && o.level.value() < fail)
            .map(|o| o.level.value())
            .fold(0.0, f64::max);
        (pass, fail)
    }

    #[test]
    fn rate_search_narrows_the_slo_boundary_to_the_resolution() {
        for true_point in [13.0, 47.0, 88.0, 99.0] {
            let h = drive(
                &settings(true),
                100.0,
                |x| x <= true_point,
                |x| x.min(100.0),
            );
            assert_eq!(h[0].level, Level::Concurrency(64));
            let (pass, fail) = boundary(&h);
            assert!(
                pass <= true_point && true_point < fail,
                "{true_point}: {pass}..{fail}"
            );
            assert!((fail - pass) / fail <= 0.05, "{true_point}: {pass}..{fail}");
            assert!(h.len() <= 1 + 6 + 6, "{true_point}: {} steps", h.len());
        }
    }

    #[test]
    fn rate_search_goes_past_a_too_low_probe_and_below_a_too_high_one() {
        // The probe underestimates: every spread step passes, so the search extends upward.
        let h = drive(&settings(true), 50.0, |x| x <= 140.0, |x| x);
        let (pass, fail) = boundary(&h);
        assert!(
            pass <= 140.0 && 140.0 < fail && (fail - pass) / fail <= 0.05,
            "{pass}..{fail}"
        );
        // Nothing passes until far below the probe.
        let h = drive(&settings(true), 100.0, |x| x <= 2.0, |x| x);
        let (pass, fail) = boundary(&h);
        assert!(
            pass <= 2.0 && 2.0 < fail && (fail - pass) / fail <= 0.05,
            "{pass}..{fail}"
        );
        // Nothing passes at all.
        let mut p = settings(true);
        p.max_steps = 40;
        let h = drive(&p, 100.0, |_| false, |x| x);
        assert!(matches!(next(&p, &h), Next::Done(why) if why.contains("no rate met")));
    }

    #[test]
    fn concurrency_search_stops_at_a_plateau_or_bisects_the_slo() {
        // Throughput saturates at 2 clients; the SLO holds everywhere: stop after two flat doublings.
        let h = drive(&settings(false), 0.0, |_| true, |c| 1000.0 * c.min(2.0));
        let levels: Vec<f64> = h.iter().map(|o| o.level.value()).collect();
        assert_eq!(levels, [1.0, 2.0, 4.0, 8.0]);
        // Latency grows with clients: the SLO breaks above 5.
        let h = drive(&settings(false), 0.0, |c| c <= 5.0, |c| 100.0 * c);
        let (pass, fail) = boundary(&h);
        assert_eq!((pass, fail), (5.0, 6.0));
    }

    #[test]
    fn when_even_the_lowest_step_fails_the_search_says_what_to_try() {
        let fail = |level| Observation {
            level,
            probe: false,
            throughput: 1.0,
            pass: false,
        };
        let Next::Done(why) = next(&settings(false), &[fail(Level::Concurrency(1))]) else {
            panic!("the search stops at 1 client");
        };
        assert!(
            why.contains("--batch-slo-ms") && why.contains("--batch-size"),
            "{why}"
        );
        // Rate mode goes lower, halving, until the rate is negligible; then it says what to try.
        let probe = Observation {
            level: Level::Concurrency(64),
            probe: true,
            throughput: 100.0,
            pass: true,
        };
        let mut history = vec![probe];
        let why = loop {
            match next(&settings(true), &history) {
                Next::Run { level, .. } => history.push(fail(level)),
                Next::Done(why) => break why,
            }
        };
        let lowest = history
            .iter()
            .map(|o| o.level.value())
            .fold(f64::MAX, f64::min);
        assert!(lowest < 0.2, "went down to {lowest}");
        assert!(why.contains("--slo-ms"), "{why}");
    }

    #[test]
    fn spread_is_denser_near_the_top() {
        let l = spread_levels(&settings(true), 100.0);
        assert_eq!(l.len(), 6);
        assert!((l[0] - 10.0).abs() < 1e-9 && (l[5] - 120.0).abs() < 1e-9);
        assert!(l[5] - l[4] < l[1] - l[0]);
    }
}
