//! Shape buckets, capture modes and the plan cache, shared by every backend.
//!
//! A *plan* is what a backend prepares once for a shape and then replays: on the CPU, an arena sized for the
//! bucket and a forward pass that the backend's threads run together in one dispatch; on a GPU, a captured graph.
//! A batch's (sequences, tokens) is rounded up to a [`Bucket`] of the [`Ladder`], and one plan serves every batch
//! that fits its bucket. [`PlanCache`] decides, per batch, whether to run eager, capture, or replay, following the
//! [`CaptureMode`], and keeps the plans under a memory cap, evicting the least recently used.

use std::collections::HashMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// When plans are made.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum CaptureMode {
    /// Never: every forward runs eager, operation by operation, with buffers allocated per call.
    Off,
    /// At start-up, smallest first, as many as the cache holds (slow start); any other on first use. `eager` was
    /// its name, and is still read.
    #[serde(alias = "eager")]
    #[value(alias = "eager")]
    Startup,
    /// On demand: a bucket's first batch runs eager, its second captures, later ones replay.
    #[default]
    Lazy,
}

impl std::fmt::Display for CaptureMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        crate::config::fmt_value_enum(self, f)
    }
}

/// The shape a plan is made for: any batch of at most `seqs` sequences and `tokens` tokens fits it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Bucket {
    pub seqs: usize,
    pub tokens: usize,
}

impl Bucket {
    pub fn fits(self, seqs: usize, tokens: usize) -> bool {
        seqs <= self.seqs && tokens <= self.tokens
    }
}

/// The rungs batch shapes are rounded up to, each list ascending.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ladder {
    pub tokens: Vec<usize>,
    pub seqs: Vec<usize>,
}

impl Ladder {
    /// Token rungs doubling from 16 up to the batch budget, sequence rungs growing fourfold from 1 up to the
    /// sequence cap; both end exactly at the cap, so every batch the scheduler cuts has a bucket.
    pub fn up_to(max_tokens: usize, max_seqs: usize) -> Ladder {
        fn rungs(first: usize, factor: usize, last: usize) -> Vec<usize> {
            let mut v: Vec<usize> = std::iter::successors(Some(first), |&r| Some(r * factor))
                .take_while(|&r| r < last)
                .collect();
            v.push(last);
            v
        }
        Ladder {
            tokens: rungs(16, 2, max_tokens),
            seqs: rungs(1, 4, max_seqs),
        }
    }

    pub fn validate(&self) -> Result<()> {
        for (name, rungs) in [("token_buckets", &self.tokens), ("seq_buckets", &self.seqs)] {
            if rungs.is_empty() || rungs[0] == 0 || rungs.windows(2).any(|w| w[0] >= w[1]) {
                return Err(Error::Config {
                    name,
                    message: format!("must be positive and strictly ascending, got {rungs:?}"),
                });
            }
        }
        Ok(())
    }

    /// The smallest bucket a batch fits, or `None` when it is beyond the top rung (it then runs eager).
    pub fn bucket(&self, seqs: usize, tokens: usize) -> Option<Bucket> {
        let up = |rungs: &[usize], v: usize| rungs.iter().copied().find(|&r| r >= v);
        Some(Bucket {
            seqs: up(&self.seqs, seqs)?,
            tokens: up(&self.tokens, tokens)?,
        })
    }
}

/// How one forward pass ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[repr(usize)]
pub enum Run {
    /// Operation by operation, buffers allocated for this call.
    Eager,
    /// A plan was made for the bucket, then run.
    Capture,
    /// An existing plan was run.
    Replay,
}

/// The plan cache's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CacheStats {
    pub plans: usize,
    pub bytes: usize,
    pub hits: u64,
    pub captures: u64,
    pub evictions: u64,
    /// Forwards that ran eager because their plan would not fit under the memory cap on its own.
    pub too_large: u64,
}

/// What one forward pass reports about its plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct ForwardStats {
    pub run: Run,
    /// The bucket the batch was rounded up to; `None` past the ladder's top rung.
    pub bucket: Option<Bucket>,
    /// Tokens the bucket holds beyond the batch's. A CPU plan skips them (its loops run to the batch's real
    /// size); a GPU graph computes them and masks them out.
    pub padding_tokens: usize,
    /// How long making the plan took, when this forward made it.
    pub capture_time: Option<Duration>,
    /// The cache after this forward.
    pub cache: CacheStats,
}

/// What the backend does with the next batch.
#[derive(Debug, PartialEq, Eq)]
pub enum Action {
    Eager,
    Capture,
    Replay,
}

enum Slot<P> {
    /// Ran once, eager; the next batch of this bucket captures.
    Seen,
    Ready {
        plan: P,
        bytes: usize,
        last_used: u64,
    },
    /// Its plan is larger than the cap on its own: its batches run eager, and it is never captured again (each
    /// try would build the whole plan — on a GPU, an eager run and a graph capture — only to be refused).
    TooLarge,
}

/// Plans by bucket, under a memory cap, with the capture mode's rules.
pub struct PlanCache<P> {
    mode: CaptureMode,
    cap_bytes: usize,
    slots: HashMap<Bucket, Slot<P>>,
    clock: u64,
    stats: CacheStats,
}

impl<P> PlanCache<P> {
    pub fn new(mode: CaptureMode, cap_bytes: usize) -> Self {
        PlanCache {
            mode,
            cap_bytes,
            slots: HashMap::new(),
            clock: 0,
            stats: CacheStats::default(),
        }
    }

    pub fn stats(&self) -> CacheStats {
        self.stats
    }

    pub fn cap_bytes(&self) -> usize {
        self.cap_bytes
    }

    /// Decides how the next batch of `bucket` runs. Under `lazy` the first sighting of a bucket runs eager and
    /// the second captures; under `startup` a missing plan (evicted, or past the start-up set) is captured at once.
    pub fn action(&mut self, bucket: Option<Bucket>) -> Action {
        let Some(bucket) = bucket else {
            return Action::Eager;
        };
        match (self.mode, self.slots.get(&bucket)) {
            (CaptureMode::Off, _) => Action::Eager,
            (_, Some(Slot::TooLarge)) => {
                self.stats.too_large += 1;
                Action::Eager
            }
            (_, Some(Slot::Ready { .. })) => Action::Replay,
            (CaptureMode::Lazy, None) => {
                self.slots.insert(bucket, Slot::Seen);
                Action::Eager
            }
            (CaptureMode::Lazy, Some(Slot::Seen)) | (CaptureMode::Startup, _) => Action::Capture,
        }
    }

    /// Whether a plan of `bytes` fits without evicting another.
    pub fn has_room(&self, bytes: usize) -> bool {
        self.stats.bytes + bytes <= self.cap_bytes
    }

    /// Whether a plan of `bytes` for `bucket` can be cached at all; if it is larger than the cap on its own, the
    /// bucket is marked so and its batches run eager from now on. Backends ask before building a plan.
    pub fn admits(&mut self, bucket: Bucket, bytes: usize) -> bool {
        if bytes <= self.cap_bytes {
            return true;
        }
        self.slots.insert(bucket, Slot::TooLarge);
        self.stats.too_large += 1;
        false
    }

    /// Stores a new plan, evicting the least recently used ones until it fits under the cap. A plan larger than
    /// the cap on its own is refused (and given back), as [`PlanCache::admits`] says.
    pub fn insert(&mut self, bucket: Bucket, plan: P, bytes: usize) -> std::result::Result<(), P> {
        if !self.admits(bucket, bytes) {
            return Err(plan);
        }
        while self.stats.bytes + bytes > self.cap_bytes {
            let Some(victim) = self
                .slots
                .iter()
                .filter_map(|(b, s)| match s {
                    Slot::Ready { last_used, .. } => Some((*last_used, *b)),
                    Slot::Seen | Slot::TooLarge => None,
                })
                .min()
                .map(|(_, b)| b)
            else {
                break;
            };
            if let Some(Slot::Ready { bytes, .. }) = self.slots.insert(victim, Slot::Seen) {
                self.stats.bytes -= bytes;
                self.stats.plans -= 1;
                self.stats.evictions += 1;
            }
        }
        self.clock += 1;
        self.slots.insert(
            bucket,
            Slot::Ready {
                plan,
                bytes,
                last_used: self.clock,
            },
        );
        self.stats.bytes += bytes;
        self.stats.plans += 1;
        self.stats.captures += 1;
        Ok(())
    }

    /// The plan of `bucket` for a replay, marked as just used.
    pub fn replay(&mut self, bucket: Bucket) -> Option<&mut P> {
        self.clock += 1;
        match self.slots.get_mut(&bucket) {
            Some(Slot::Ready {
                plan, last_used, ..
            }) => {
                *last_used = self.clock;
                self.stats.hits += 1;
                Some(plan)
            }
            _ => None,
        }
    }

    /// Whether a plan for `bucket` is cached now.
    pub fn contains(&self, bucket: Bucket) -> bool {
        matches!(self.slots.get(&bucket), Some(Slot::Ready { .. }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ladder_rounds_up_and_ends_at_the_caps() {
        let l = Ladder::up_to(100, 10);
        assert_eq!(l.tokens, vec![16, 32, 64, 100]);
        assert_eq!(l.seqs, vec![1, 4, 10]);
        assert_eq!(
            l.bucket(1, 1),
            Some(Bucket {
                seqs: 1,
                tokens: 16
            })
        );
        assert_eq!(
            l.bucket(2, 33),
            Some(Bucket {
                seqs: 4,
                tokens: 64
            })
        );
        assert_eq!(
            l.bucket(10, 100),
            Some(Bucket {
                seqs: 10,
                tokens: 100
            })
        );
        assert_eq!(l.bucket(11, 50), None);
        assert_eq!(l.bucket(1, 101), None);
        assert!(Ladder {
            tokens: vec![32, 16],
            seqs: vec![1]
        }
        .validate()
        .is_err());
    }

    #[test]
    fn lazy_mode_goes_eager_then_capture_then_replay() {
        let mut c = PlanCache::<u32>::new(CaptureMode::Lazy, 100);
        let b = Bucket {
            seqs: 1,
            tokens: 16,
        };
        assert_eq!(c.action(Some(b)), Action::Eager);
        assert_eq!(c.action(Some(b)), Action::Capture);
        c.insert(b, 7, 10).unwrap();
        assert_eq!(c.action(Some(b)), Action::Replay);
        assert_eq!(c.replay(b), Some(&mut 7));
        assert_eq!(c.action(None), Action::Eager);
        let s = c.stats();
        assert_eq!((s.plans, s.bytes, s.hits, s.captures), (1, 10, 1, 1));
    }

    #[test]
    fn off_never_captures_and_startup_captures_on_first_sight() {
        let b = Bucket {
            seqs: 4,
            tokens: 64,
        };
        let mut off = PlanCache::<u32>::new(CaptureMode::Off, 100);
        for _ in 0..3 {
            assert_eq!(off.action(Some(b)), Action::Eager);
        }
        let mut startup = PlanCache::<u32>::new(CaptureMode::Startup, 100);
        assert_eq!(startup.action(Some(b)), Action::Capture);
    }

    #[test]
    fn eviction_keeps_the_cap_and_drops_the_least_recently_used() {
        let mut c = PlanCache::<u32>::new(CaptureMode::Lazy, 25);
        let b = |t| Bucket { seqs: 1, tokens: t };
        c.insert(b(16), 1, 10).unwrap();
        c.insert(b(32), 2, 10).unwrap();
        c.replay(b(16));
        c.insert(b(64), 3, 10).unwrap();
        assert!(c.contains(b(16)) && !c.contains(b(32)) && c.contains(b(64)));
        assert_eq!(c.stats().evictions, 1);
        assert!(c.stats().bytes <= 25);
        // An evicted bucket was seen: its next batch captures again at once.
        assert_eq!(c.action(Some(b(32))), Action::Capture);
        assert_eq!(c.insert(b(128), 4, 26), Err(4));
        assert_eq!(c.stats().too_large, 1);
    }

    /// Regression (GPU check, session 8: BGE-large and Qwen3-0.6B at 32,768 batch tokens ran at 0.68-0.70x of
    /// their 16,384 rate): a bucket whose plan is larger than the cap stayed `Seen`, so every one of its batches
    /// built the plan again (on the GPU an eager run and a graph capture) before being refused and running eager.
    #[test]
    fn a_plan_larger_than_the_cap_is_not_built_again_for_every_batch() {
        for mode in [CaptureMode::Lazy, CaptureMode::Startup] {
            let mut c = PlanCache::<u32>::new(mode, 100);
            let big = Bucket {
                seqs: 8,
                tokens: 32768,
            };
            if mode == CaptureMode::Lazy {
                assert_eq!(c.action(Some(big)), Action::Eager);
            }
            assert_eq!(c.action(Some(big)), Action::Capture);
            assert_eq!(c.insert(big, 1, 101), Err(1));
            for _ in 0..3 {
                assert_eq!(c.action(Some(big)), Action::Eager, "{mode:?}");
            }
            // One refused build and three eager forwards, each counted; nothing cached.
            let s = c.stats();
            assert_eq!((s.too_large, s.captures, s.plans, s.bytes), (4, 0, 0, 0));
            // Asked before building, the cache refuses at once and marks the bucket the same way.
            let other = Bucket {
                seqs: 1,
                tokens: 65536,
            };
            assert!(!c.admits(other, 101));
            assert_eq!(c.action(Some(other)), Action::Eager);
        }
    }
}
