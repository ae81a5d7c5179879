//! Relative position biases as T5 made them (transformers' `T5Attention._relative_position_bucket`,
//! bidirectional; MPNet's `relative_position_bucket` is the same function at 32 buckets and distance 128): a
//! learned bias per head and bucket of the key's distance from its query, laid out as the op set takes it.

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

#[cfg(test)]
mod tests {
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
