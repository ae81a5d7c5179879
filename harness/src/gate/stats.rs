//! Paired A/B statistics: each round runs the baseline and the candidate once, back to back, and gives one ratio
//! (candidate over baseline, oriented so that above 1 is slower). The interval is a seeded percentile bootstrap
//! of the geometric mean ratio over the rounds; a benchmark fails only when its whole interval is past the
//! threshold, passes only when its whole interval is below it, and is otherwise inconclusive.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

/// Fewer rounds than this never decide: a bootstrap over so few pairs is far too narrow to trust.
pub const MIN_ROUNDS: usize = 5;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Pass,
    Fail,
    Inconclusive,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Pass => "pass",
            Verdict::Fail => "FAIL",
            Verdict::Inconclusive => "inconclusive",
        }
    }
}

/// A ratio's point estimate and 95% interval.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    pub ratio: f64,
    pub lo: f64,
    pub hi: f64,
}

/// Geometric mean of `ratios` and its 95% percentile-bootstrap interval (`resamples` draws, seeded). None when
/// a ratio is not positive and finite or there are none.
pub fn bootstrap(ratios: &[f64], resamples: usize, seed: u64) -> Option<Interval> {
    if ratios.is_empty() || ratios.iter().any(|r| !(r.is_finite() && *r > 0.0)) {
        return None;
    }
    let logs: Vec<f64> = ratios.iter().map(|r| r.ln()).collect();
    let n = logs.len();
    let mean = |xs: &mut dyn Iterator<Item = f64>| xs.sum::<f64>() / n as f64;
    let point = mean(&mut logs.iter().copied());
    let mut rng = StdRng::seed_from_u64(seed);
    let mut means: Vec<f64> = (0..resamples.max(100))
        .map(|_| mean(&mut (0..n).map(|_| logs[rng.gen_range(0..n)])))
        .collect();
    means.sort_by(f64::total_cmp);
    let at = |q: f64| means[((means.len() - 1) as f64 * q).round() as usize];
    Some(Interval {
        ratio: point.exp(),
        lo: at(0.025).exp(),
        hi: at(0.975).exp(),
    })
}

/// The verdict on an interval of slowdown ratios: fail when all of it is above `1 + threshold`, pass when all of
/// it is at or below, inconclusive otherwise (and always with fewer than [`MIN_ROUNDS`] rounds).
pub fn decide(interval: Option<Interval>, rounds: usize, threshold: f64) -> Verdict {
    let Some(i) = interval else {
        return Verdict::Inconclusive;
    };
    let limit = 1.0 + threshold;
    if rounds < MIN_ROUNDS {
        Verdict::Inconclusive
    } else if i.lo > limit {
        Verdict::Fail
    } else if i.hi <= limit {
        Verdict::Pass
    } else {
        Verdict::Inconclusive
    }
}

/// Rounds likely to narrow an interval of this width to `target` (width shrinks with the square root of the
/// rounds), at least one more than now.
pub fn rounds_for(interval: &Interval, rounds: usize, target: f64) -> usize {
    let width = (interval.hi.ln() - interval.lo.ln()).max(1e-9);
    let factor = (width / target.max(1e-9)).powi(2);
    ((rounds as f64 * factor).ceil() as usize).clamp(rounds + 1, rounds * 20 + 20)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_distr::{Distribution, Normal};

    /// Paired rounds of a benchmark whose candidate is `shift` slower, each run with multiplicative noise `sd`.
    fn trial(shift: f64, sd: f64, rounds: usize, seed: u64) -> Verdict {
        let mut rng = StdRng::seed_from_u64(seed);
        let noise = Normal::new(0.0, sd).expect("sd is finite");
        let ratios: Vec<f64> = (0..rounds)
            .map(|_| {
                let base = 10.0 * f64::exp(noise.sample(&mut rng));
                let cand = 10.0 * (1.0 + shift) * f64::exp(noise.sample(&mut rng));
                cand / base
            })
            .collect();
        decide(bootstrap(&ratios, 2000, seed), rounds, 0.05)
    }

    #[test]
    fn a_ten_percent_shift_is_detected() {
        let fails = (0..100).filter(|&s| trial(0.10, 0.01, 8, s) == Verdict::Fail);
        assert!(fails.count() >= 95);
    }

    #[test]
    fn no_shift_passes_in_95_percent_of_trials() {
        let passes = (0..200).filter(|&s| trial(0.0, 0.01, 8, s) == Verdict::Pass);
        assert!(passes.count() >= 190);
        // And it never fails.
        assert!((0..200).all(|s| trial(0.0, 0.01, 8, s) != Verdict::Fail));
    }

    #[test]
    fn noise_is_inconclusive_not_failing() {
        let verdicts: Vec<Verdict> = (0..100).map(|s| trial(0.0, 0.15, 6, s)).collect();
        let inconclusive = verdicts
            .iter()
            .filter(|v| **v == Verdict::Inconclusive)
            .count();
        assert!(inconclusive >= 80, "{inconclusive} of 100 inconclusive");
        // A false failure needs the whole interval past +5% with no shift at all: rare, and bounded here.
        let fails = verdicts.iter().filter(|v| **v == Verdict::Fail).count();
        assert!(fails <= 5, "{fails} false failures");
    }

    #[test]
    fn too_few_rounds_or_bad_data_never_decide() {
        let i = bootstrap(&[1.5, 1.5, 1.5], 500, 1);
        assert_eq!(decide(i, 3, 0.05), Verdict::Inconclusive);
        assert_eq!(bootstrap(&[1.0, f64::NAN], 500, 1), None);
        assert_eq!(bootstrap(&[], 500, 1), None);
        assert_eq!(decide(None, 10, 0.05), Verdict::Inconclusive);
    }

    #[test]
    fn the_bootstrap_is_seeded_and_brackets_the_point() {
        let r = [1.0, 1.02, 0.98, 1.01, 0.99, 1.03];
        let a = bootstrap(&r, 1000, 9).expect("valid");
        assert_eq!(Some(a), bootstrap(&r, 1000, 9));
        assert!(a.lo <= a.ratio && a.ratio <= a.hi);
        assert!(rounds_for(&a, 6, 0.01) > 6);
    }
}
