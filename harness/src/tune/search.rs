//! `f`: a short saturation search from the current rate, on the running engine, without leaving the screen.
//! Each step holds a rate for a few ticks (the first left out, to settle) and passes when every judged tick meets
//! the SLO quantile with no refusal, error or timeout and keeps up with the offered rate. The rate grows ×1.5
//! until a step fails (halves until one passes), then the boundary is bisected to 10%; the rate is then set back.

use tui::Point;

/// Ticks per step, the first of which settles.
const TICKS: usize = 4;
const MAX_STEPS: usize = 10;
/// The boundary is found once it is this narrow, relative to the failing rate.
const RESOLUTION: f64 = 0.1;

pub struct Search {
    origin: f64,
    rate: f64,
    /// Highest rate that passed, lowest that failed.
    lo: Option<f64>,
    hi: Option<f64>,
    ticks: usize,
    pass: bool,
    steps: usize,
}

impl Search {
    pub fn new(rate: f64) -> Search {
        Search {
            origin: rate,
            rate,
            lo: None,
            hi: None,
            ticks: 0,
            pass: true,
            steps: 0,
        }
    }

    /// Takes a tick; returns the next rate to offer when a step ends, or, when the search is done, the rate to
    /// return to and the finding.
    pub fn observe(
        &mut self,
        point: Option<&Point>,
        slo_ms: f64,
    ) -> Option<Result<f64, (f64, String)>> {
        self.ticks += 1;
        if self.ticks > 1 {
            let ok = point.is_some_and(|p| {
                p.refused + p.errors + p.timeouts == 0
                    && p.p99_ms.is_some_and(|l| l <= slo_ms)
                    && p.achieved >= 0.9 * p.offered
            });
            self.pass &= ok;
        }
        if self.ticks < TICKS {
            return None;
        }
        if self.pass {
            self.lo = Some(self.lo.map_or(self.rate, |l: f64| l.max(self.rate)));
        } else {
            self.hi = Some(self.hi.map_or(self.rate, |h: f64| h.min(self.rate)));
        }
        self.steps += 1;
        (self.ticks, self.pass) = (0, true);
        let done = match (self.lo, self.hi) {
            (Some(lo), Some(hi)) => (hi - lo) / hi <= RESOLUTION,
            _ => false,
        };
        if done || self.steps >= MAX_STEPS {
            let found = match (self.lo, self.hi) {
                (Some(lo), Some(hi)) => {
                    format!("saturation ≈ {lo:.1} req/s (p99 within the SLO; {hi:.1} failed)")
                }
                (Some(lo), None) => format!("every step passed, up to {lo:.1} req/s"),
                (None, Some(hi)) => format!("no step passed, down to {hi:.1} req/s"),
                (None, None) => "no step finished".into(),
            };
            return Some(Err((self.origin, found)));
        }
        self.rate = match (self.lo, self.hi) {
            (Some(lo), Some(hi)) => (lo + hi) / 2.0,
            (Some(lo), None) => lo * 1.5,
            (None, Some(hi)) => hi / 2.0,
            (None, None) => self.rate,
        };
        Some(Ok(self.rate))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Against a target that meets the SLO below 330 req/s, the search brackets 330 within 10% and returns to
    /// where it started.
    #[test]
    fn finds_the_boundary_and_returns() {
        let mut search = Search::new(100.0);
        let mut rate = 100.0;
        for _ in 0..200 {
            let p = Point {
                offered: rate,
                achieved: rate,
                p99_ms: Some(if rate < 330.0 { 50.0 } else { 400.0 }),
                ..Point::default()
            };
            match search.observe(Some(&p), 100.0) {
                None => {}
                Some(Ok(next)) => rate = next,
                Some(Err((back, found))) => {
                    assert_eq!(back, 100.0);
                    let lo = search.lo.unwrap();
                    let hi = search.hi.unwrap();
                    assert!(
                        lo < 330.0 && hi >= 330.0 && (hi - lo) / hi <= 0.1,
                        "{lo} {hi}"
                    );
                    assert!(found.contains("saturation"), "{found}");
                    return;
                }
            }
        }
        panic!("the search did not end");
    }
}
