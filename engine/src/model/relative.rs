//! Relative position biases as T5 made them (transformers' `T5Attention._relative_position_bucket`,
//! bidirectional; MPNet's `relative_position_bucket` is the same function at 32 buckets and distance 128): a
//! learned bias per head and bucket of the key's distance from its query, laid out as the op set takes it; and
//! JinaBERT's symmetric ALiBi, a fixed slope per head times the distance.

use super::{Tensor, Weights};
use crate::backend::ops::{Device, RelativeBias};
use crate::error::{Error, Result};

/// The bucket of a key `relative` tokens after its query (before it when negative): half the buckets for keys
/// after, half for keys before; distances under a quarter of the buckets exact, the rest logarithmic up to
/// `max_distance`, the last bucket beyond. In f32 as torch computes it (its `math.log` divisor in f64, rounded).
pub(crate) fn relative_bucket(relative: i64, buckets: usize, max_distance: usize) -> usize {
    let half = (buckets / 2) as i64;
    let exact = (half / 2).max(1);
    let side = if relative > 0 { half } else { 0 };
    let n = relative.abs();
    let within = if n < exact {
        n
    } else {
        let scale = (max_distance as f64 / exact as f64).ln() as f32;
        let log = (n as f32 / exact as f32).ln() / scale;
        (exact + (log * (half - exact) as f32) as i64).min(half - 1)
    };
    (side + within) as usize
}

/// The table `name` (`[rows, heads]`: a bias per bucket and head) laid out per head and distance for sequences of
/// up to `reach` tokens, bucketed by [`relative_bucket`] with `buckets` and `max_distance`.
pub(crate) fn relative_bias<D: Device>(
    w: &Weights,
    d: &D,
    name: &str,
    (rows, heads): (usize, usize),
    (buckets, max_distance): (usize, usize),
    reach: usize,
) -> Result<RelativeBias<D>> {
    let weights = w.get(name, &[rows, heads])?;
    let width = 2 * reach - 1;
    let mut table = Vec::with_capacity(heads * width);
    for h in 0..heads {
        for distance in -(reach as i64 - 1)..reach as i64 {
            let bucket = relative_bucket(distance, buckets, max_distance);
            let v = weights.data().get(bucket * heads + h).ok_or_else(|| {
                Error::model(
                    w.path(),
                    format!("`{name}` has {rows} buckets; the attention uses {buckets}"),
                )
            })?;
            table.push(*v);
        }
    }
    Ok(RelativeBias {
        table: d.param(Tensor::from_vec(table))?,
        reach,
    })
}

/// ALiBi's slope of each of `heads` heads as JinaBERT computes them (its encoder's `_get_alibi_head_slopes`, after
/// Press et al.): for a power of two `n`, `2^(-8i/n)` for `i` in `1..=n`; otherwise the largest power of two's
/// slopes, then every other slope of twice it, as many as are missing.
pub(crate) fn alibi_slopes(heads: usize) -> Vec<f64> {
    let powers = |n: usize| -> Vec<f64> {
        let start = 2f64.powf(-(2f64.powf(-((n as f64).log2() - 3.0))));
        (0..n).map(|i| start * start.powi(i as i32)).collect()
    };
    if heads.is_power_of_two() {
        return powers(heads);
    }
    let p = 1usize << heads.ilog2();
    let mut slopes = powers(p);
    slopes.extend(alibi_slopes(2 * p).into_iter().step_by(2).take(heads - p));
    slopes
}

/// JinaBERT's symmetric ALiBi (`rebuild_alibi_tensor`) as a relative bias for sequences of up to `reach`
/// tokens: head `h`'s score of a key `d` tokens from its query takes `−slope_h · |d|`, in f32 as torch
/// multiplies the f32 slopes by the distances.
pub(crate) fn alibi_bias<D: Device>(d: &D, heads: usize, reach: usize) -> Result<RelativeBias<D>> {
    let mut table = Vec::with_capacity(heads * (2 * reach - 1));
    for slope in alibi_slopes(heads) {
        let slope = -(slope as f32);
        table.extend(
            (-(reach as i64 - 1)..reach as i64).map(|distance| slope * distance.abs() as f32),
        );
    }
    Ok(RelativeBias {
        table: d.param(Tensor::from_vec(table))?,
        reach,
    })
}

#[cfg(test)]
mod tests {
    /// ALiBi's slopes: the paper's for 8 heads (1/2 … 1/256); for 12 (jina-embeddings-v2-base-en's), those 8 then
    /// the odd-numbered ones of 16, 2^-0.5 … 2^-3.5.
    #[test]
    fn alibi_slopes_are_jinaberts() {
        let eight: Vec<f64> = (1..=8).map(|i| 2f64.powi(-i)).collect();
        assert_eq!(super::alibi_slopes(8), eight);
        let twelve = super::alibi_slopes(12);
        assert_eq!(twelve[..8], eight[..]);
        for (got, want) in twelve[8..].iter().zip([-0.5, -1.5, -2.5, -3.5]) {
            assert!((got - 2f64.powf(want)).abs() < 1e-15, "{got} vs 2^{want}");
        }
        assert_eq!(super::alibi_slopes(1), vec![1.0 / 256.0]);
    }

    /// Every distance from -300 to 300 falls in transformers' own bucket (`scripts/make_encoder_fixtures.py` wrote
    /// them from `MPNetEncoder.relative_position_bucket` and `T5Attention._relative_position_bucket`, each with its
    /// fixture's buckets and distance): the exact ones, the logarithmic ones, and the last one past the distance
    /// on either side.
    #[test]
    fn buckets_are_transformers_buckets() {
        for fixture in ["mpnet_mean", "t5_gated_mean", "t5_relu_cls"] {
            let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures")
                .join(fixture)
                .join("buckets.json");
            let json: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(path).expect("buckets.json"))
                    .expect("JSON");
            let number = |key: &str| json[key].as_u64().map_or(0, |v| v as usize);
            let (buckets, max_distance) = (number("num_buckets"), number("max_distance"));
            let pairs: Vec<(i64, u64)> = json["distances"]
                .as_array()
                .expect("distances")
                .iter()
                .zip(json["buckets"].as_array().expect("buckets"))
                .map(|(d, b)| (d.as_i64().expect("distance"), b.as_u64().expect("bucket")))
                .collect();
            assert_eq!(pairs.len(), 601);
            for (distance, bucket) in pairs {
                assert_eq!(
                    super::relative_bucket(distance, buckets, max_distance) as u64,
                    bucket,
                    "{fixture}: distance {distance}"
                );
            }
        }
    }
}
