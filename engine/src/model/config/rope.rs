//! Rotary positions' frequencies as transformers computes them (`modeling_rope_utils.py`'s rope types), read from
//! either generation's keys: transformers 5's `rope_parameters`, or 4's `rope_scaling` beside a top-level
//! `rope_theta`. Every rotary architecture makes its table from one [`Rope`].

use serde::Deserialize;
use serde_json::Value;

/// One set of transformers' rotary parameters, after merging the places a config names them.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
struct RopeParameters {
    rope_theta: Option<f64>,
    rope_type: Option<String>,
    /// transformers 4's older name, read where `rope_type` is absent (files saved by 4.4x carry both).
    #[serde(rename = "type")]
    kind: Option<String>,
    factor: Option<f64>,
    low_freq_factor: Option<f64>,
    high_freq_factor: Option<f64>,
    original_max_position_embeddings: Option<f64>,
    attention_factor: Option<f64>,
    mscale: Option<f64>,
    mscale_all_dim: Option<f64>,
    beta_fast: Option<f64>,
    beta_slow: Option<f64>,
    /// Absent: true; null: false (transformers' `if truncate`).
    #[serde(default, deserialize_with = "super::present")]
    truncate: Option<Option<bool>>,
    partial_rotary_factor: Option<f64>,
}

/// transformers' `rope_scaling or rope_parameters`: the older key where it names anything (not null, not `{}`).
pub(super) fn scaling_or_parameters<'a>(
    rope_scaling: Option<&'a Value>,
    rope_parameters: Option<&'a Value>,
) -> Option<&'a Value> {
    let named = |v: &&Value| !(v.is_null() || v.as_object().is_some_and(|m| m.is_empty()));
    rope_scaling.filter(named).or(rope_parameters)
}

/// How a rotary table's frequencies differ from plain RoPE's `θ^(-2i/d)`.
#[derive(Clone, Debug, PartialEq)]
pub enum RopeScaling {
    /// Plain RoPE.
    None,
    /// transformers' `dynamic` NTK scaling: plain up to `max_position_embeddings` (the base grows only for longer
    /// sequences), so plain for a model the engine never runs past that length.
    Dynamic { factor: f64 },
    /// Every frequency divided by `factor` (positions interpolated: transformers' `linear`).
    Linear { factor: f64 },
    /// Llama 3.1's: long wavelengths (past `original / low_freq_factor` positions) divided by `factor`, short ones
    /// (under `original / high_freq_factor`) kept, those between interpolated.
    Llama3 {
        factor: f64,
        low_freq_factor: f64,
        high_freq_factor: f64,
        original: f64,
    },
    /// YaRN's: frequencies ramped from interpolated (divided by `factor`) to kept between the dimensions that turn
    /// `beta_slow` and `beta_fast` times over `original` positions; cos and sin times `attention_factor`.
    Yarn {
        factor: f64,
        attention_factor: f64,
        beta_fast: f64,
        beta_slow: f64,
        original: f64,
        truncate: bool,
    },
}

/// A model's rotary positions: a base and a scaling.
#[derive(Clone, Debug, PartialEq)]
pub struct Rope {
    pub theta: f64,
    pub scaling: RopeScaling,
}

/// transformers' default: plain RoPE of base 10,000 (its `default_theta`).
impl Default for Rope {
    fn default() -> Self {
        Rope::plain(10_000.0)
    }
}

impl Rope {
    /// Plain RoPE of base `theta`.
    pub fn plain(theta: f64) -> Self {
        Rope {
            theta,
            scaling: RopeScaling::None,
        }
    }

    /// The rotary parameters a config names in `sources`, each an object or null, in increasing priority (a later
    /// one's keys override an earlier one's, as transformers' `dict.update` merges `rope_scaling` into a layer
    /// kind's `rope_parameters`); `theta` is the base where none names one, `max_positions` the config's
    /// `max_position_embeddings` (YaRN's and Llama 3's pretraining length where they name none).
    pub(super) fn read(
        sources: &[Option<&Value>],
        theta: f64,
        max_positions: usize,
    ) -> Result<Rope, String> {
        let mut merged = serde_json::Map::new();
        for source in sources.iter().flatten() {
            match source {
                Value::Null => {}
                Value::Object(map) => merged.extend(map.clone()),
                other => return Err(format!("rotary parameters {other}: expected an object")),
            }
        }
        if let Some(kind) = ["full_attention", "sliding_attention"]
            .into_iter()
            .find(|k| merged.get(*k).is_some_and(Value::is_object))
        {
            return Err(format!(
                "rotary parameters nested by layer kind ({kind}) where the model takes one set"
            ));
        }
        let merged = Value::Object(merged);
        let p = RopeParameters::deserialize(&merged)
            .map_err(|e| format!("rotary parameters {merged}: {e}"))?;
        let theta = p.rope_theta.unwrap_or(theta);
        if !(theta > 0.0 && theta.is_finite()) {
            return Err(format!("rotary base {theta}: expected a positive number"));
        }
        let kind = p
            .rope_type
            .as_deref()
            .or(p.kind.as_deref())
            .unwrap_or("default");
        // transformers' default rotary ignores it; its scalings rotate only that fraction of a head.
        if kind != "default" && p.partial_rotary_factor.is_some_and(|f| f != 1.0) {
            return Err(format!(
                "partial_rotary_factor {:?} with {kind} rotary scaling: expected rotary over whole heads",
                p.partial_rotary_factor
            ));
        }
        let positive = |name: &str, v: Option<f64>| {
            v.filter(|v| *v > 0.0 && v.is_finite())
                .ok_or_else(|| format!("{kind} rotary scaling needs a positive {name}, got {v:?}"))
        };
        let original = positive(
            "original_max_position_embeddings",
            p.original_max_position_embeddings
                .or(Some(max_positions as f64)),
        );
        let scaling = match kind {
            "default" => RopeScaling::None,
            // Plain within max_position_embeddings (transformers grows the base only for longer sequences).
            "dynamic" => RopeScaling::Dynamic {
                factor: positive("factor", p.factor)?,
            },
            "linear" => RopeScaling::Linear {
                factor: positive("factor", p.factor)?,
            },
            "llama3" => {
                let (low_freq_factor, high_freq_factor) = (
                    positive("low_freq_factor", p.low_freq_factor)?,
                    positive("high_freq_factor", p.high_freq_factor)?,
                );
                if high_freq_factor <= low_freq_factor {
                    return Err(format!(
                        "llama3 rotary scaling: high_freq_factor {high_freq_factor} must exceed low_freq_factor \
                         {low_freq_factor}"
                    ));
                }
                RopeScaling::Llama3 {
                    factor: positive("factor", p.factor)?,
                    low_freq_factor,
                    high_freq_factor,
                    original: original?,
                }
            }
            "yarn" => {
                let original = original?;
                // DeepSeek-V3's files leave the factor to the ratio of the two lengths.
                let factor = positive(
                    "factor",
                    p.factor.or(Some(max_positions as f64 / original)),
                )?;
                let mscale = |m: f64| {
                    if factor <= 1.0 {
                        1.0
                    } else {
                        0.1 * m * factor.ln() + 1.0
                    }
                };
                let attention_factor = match (p.attention_factor, p.mscale, p.mscale_all_dim) {
                    (Some(a), _, _) => Some(a),
                    (None, Some(m), Some(all)) if m != 0.0 && all != 0.0 => Some(mscale(m) / mscale(all)),
                    _ => Some(mscale(1.0)),
                };
                let attention_factor = positive("attention_factor", attention_factor)?;
                RopeScaling::Yarn {
                    factor,
                    attention_factor,
                    // transformers reads 0 as absent too (`or`).
                    beta_fast: p.beta_fast.filter(|b| *b != 0.0).unwrap_or(32.0),
                    beta_slow: p.beta_slow.filter(|b| *b != 0.0).unwrap_or(1.0),
                    original,
                    truncate: p.truncate.is_none_or(|t| t.unwrap_or(false)),
                }
            }
            other => {
                return Err(format!(
                    "unsupported rope_type {other:?} (rotary scaling): expected default, linear, dynamic, \
                     llama3 or yarn"
                ))
            }
        };
        Ok(Rope { theta, scaling })
    }

    /// The `head_dim / 2` frequencies of a head of width `head_dim`, as transformers' rope type computes them.
    pub fn frequencies(&self, head_dim: usize) -> Vec<f64> {
        let d = head_dim as f64;
        let plain = (0..head_dim / 2).map(|i| self.theta.powf(-2.0 * i as f64 / d));
        match self.scaling {
            RopeScaling::None | RopeScaling::Dynamic { .. } => plain.collect(),
            RopeScaling::Linear { factor } => plain.map(|f| f / factor).collect(),
            RopeScaling::Llama3 {
                factor,
                low_freq_factor,
                high_freq_factor,
                original,
            } => plain
                .map(|f| {
                    let wavelength = 2.0 * std::f64::consts::PI / f;
                    if wavelength < original / high_freq_factor {
                        f
                    } else if wavelength > original / low_freq_factor {
                        f / factor
                    } else {
                        let smooth = (original / wavelength - low_freq_factor)
                            / (high_freq_factor - low_freq_factor);
                        (1.0 - smooth) * f / factor + smooth * f
                    }
                })
                .collect(),
            RopeScaling::Yarn {
                factor,
                beta_fast,
                beta_slow,
                original,
                truncate,
                ..
            } => {
                // The dimension that turns `rotations` times over `original` positions.
                let dim_of = |rotations: f64| {
                    d * (original / (rotations * 2.0 * std::f64::consts::PI)).ln()
                        / (2.0 * self.theta.ln())
                };
                let (mut low, mut high) = (dim_of(beta_fast), dim_of(beta_slow));
                if truncate {
                    (low, high) = (low.floor(), high.ceil());
                }
                let (low, mut high) = (low.max(0.0), high.min(d - 1.0));
                if low == high {
                    high += 0.001;
                }
                plain
                    .enumerate()
                    .map(|(i, f)| {
                        let kept = 1.0 - ((i as f64 - low) / (high - low)).clamp(0.0, 1.0);
                        f / factor * (1.0 - kept) + f * kept
                    })
                    .collect()
            }
        }
    }

    /// What cos and sin are multiplied by (YaRN's attention factor; else 1).
    pub fn attention_factor(&self) -> f64 {
        match self.scaling {
            RopeScaling::Yarn {
                attention_factor, ..
            } => attention_factor,
            _ => 1.0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn read(v: Value) -> Result<Rope, String> {
        Rope::read(&[Some(&v)], 1e4, 2048)
    }

    #[test]
    fn both_type_keys_read_and_rope_type_wins() {
        // transformers 4.4x saved `rope_type` beside the older `type`; serde's alias would call that a duplicate.
        let r =
            read(json!({"type": "dynamic", "rope_type": "linear", "factor": 2.0})).expect("read");
        assert_eq!(r.scaling, RopeScaling::Linear { factor: 2.0 });
        let r = read(json!({"type": "dynamic", "factor": 2.0})).expect("read");
        assert_eq!(r.frequencies(8), Rope::plain(1e4).frequencies(8));
    }

    /// transformers reads `truncate` with Python's truthiness (null: false) and ignores `partial_rotary_factor`
    /// without a scaling; `rope_scaling: {}` names nothing.
    #[test]
    fn truthiness_and_empty_keys_as_transformers_reads_them() {
        let yarn = |truncate: Value| {
            let r = read(json!({"rope_type": "yarn", "factor": 4.0, "truncate": truncate}))
                .expect("read");
            match r.scaling {
                RopeScaling::Yarn { truncate, .. } => truncate,
                other => panic!("{other:?}"),
            }
        };
        assert_eq!((yarn(Value::Null), yarn(json!(true))), (false, true));
        let absent = read(json!({"rope_type": "yarn", "factor": 4.0})).expect("read");
        assert!(matches!(
            absent.scaling,
            RopeScaling::Yarn { truncate: true, .. }
        ));
        let plain =
            read(json!({"rope_type": "default", "partial_rotary_factor": 0.5})).expect("read");
        assert_eq!(plain, Rope::plain(1e4));
        let parameters = json!({"rope_type": "linear", "factor": 2.0});
        assert_eq!(
            scaling_or_parameters(Some(&json!({})), Some(&parameters)),
            Some(&parameters)
        );
    }

    #[test]
    fn later_sources_override_earlier_ones() {
        let layer = json!({"rope_type": "default", "rope_theta": 5e5});
        let scaling = json!({"rope_type": "linear", "factor": 8.0});
        let r = Rope::read(&[Some(&layer), Some(&scaling)], 1e4, 2048).expect("read");
        assert_eq!(r.theta, 5e5);
        assert_eq!(r.scaling, RopeScaling::Linear { factor: 8.0 });
        let plain = Rope::read(&[Some(&Value::Null), None], 3e3, 2048).expect("read");
        assert_eq!(plain, Rope::plain(3e3));
    }

    /// Llama 3.1's published parameters (factor 8, 1 and 4, 8192 positions) at head width 128, base 5e5: one index
    /// per band, the smoothed one against what transformers' `_compute_llama3_parameters` gives (in f32).
    #[test]
    fn llama3_bands() {
        let r = read(
            json!({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 8192, "rope_theta": 5e5}),
        )
        .expect("read");
        let f = r.frequencies(128);
        let plain = Rope::plain(5e5).frequencies(128);
        assert_eq!(f[0], plain[0]); // wavelength 2π: kept
                                    // The longest wavelengths, and index 40's (2π·5e5^(80/128) ≈ 2.29e4 > 8192): divided by the factor.
        assert!((f[63] - plain[63] / 8.0).abs() < 1e-18);
        assert!((f[40] - plain[40] / 8.0).abs() < 1e-18);
        // Index 30's (≈ 2.95e3, between 2048 and 8192): smoothed, 0.0013718936825171113 in transformers.
        assert!(
            (f[30] / 0.001_371_893_682_517_111_3 - 1.0).abs() < 1e-6,
            "{}",
            f[30]
        );
        assert_eq!(r.attention_factor(), 1.0);
    }

    /// Qwen's YaRN example (factor 4 over 32,768 positions, head width 128, base 1e6): attention factor
    /// `0.1 ln 4 + 1`, the first dimensions kept, the last ones interpolated.
    #[test]
    fn yarn_ramp_and_attention_factor() {
        let r = read(json!({"rope_type": "yarn", "factor": 4.0,
            "original_max_position_embeddings": 32768, "rope_theta": 1e6}))
        .expect("read");
        assert!((r.attention_factor() - (0.1 * 4f64.ln() + 1.0)).abs() < 1e-15);
        let (f, plain) = (r.frequencies(128), Rope::plain(1e6).frequencies(128));
        assert_eq!(f[0], plain[0]);
        assert!((f[63] - plain[63] / 4.0).abs() < 1e-20);
        assert!(f[30] < plain[30] && f[30] > plain[30] / 4.0, "ramped");
        // mscale / mscale_all_dim (DeepSeek's) and an explicit attention factor.
        let r =
            read(json!({"rope_type": "yarn", "factor": 4.0, "mscale": 1.0, "mscale_all_dim": 1.0}))
                .expect("read");
        assert_eq!(r.attention_factor(), 1.0);
        let r = read(json!({"rope_type": "yarn", "factor": 4.0, "attention_factor": 0.5}))
            .expect("read");
        assert_eq!(r.attention_factor(), 0.5);
    }

    #[test]
    fn refusals_name_what_is_wrong() {
        for (v, says) in [
            (json!({"rope_type": "longrope"}), "unsupported rope_type"),
            (json!({"rope_type": "linear"}), "positive factor"),
            (
                json!({"rope_type": "llama3", "factor": 8.0}),
                "low_freq_factor",
            ),
            (
                json!({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 4.0, "high_freq_factor": 1.0}),
                "must exceed",
            ),
            (json!({"rope_theta": -1.0}), "rotary base"),
            (
                json!({"rope_type": "linear", "factor": 2.0, "partial_rotary_factor": 0.5}),
                "partial_rotary_factor",
            ),
            (json!("linear"), "expected an object"),
            (
                json!({"full_attention": {"rope_type": "yarn", "factor": 4.0}}),
                "nested by layer kind",
            ),
            (
                json!({"rope_type": "yarn", "factor": 4.0, "mscale": 1.0, "mscale_all_dim": -100.0 / 4f64.ln()}),
                "attention_factor",
            ),
        ] {
            let e = read(v.clone()).expect_err("refused");
            assert!(e.contains(says), "{v}: {e}");
        }
    }
}
