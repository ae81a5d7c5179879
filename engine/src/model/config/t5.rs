//! T5's (and mT5's) `config.json`, for the encoder alone (sentence-t5, GTR).

use std::path::Path;

use serde::Deserialize;

use super::{check_dims, read_json};
use crate::backend::ops::{Activation, AttentionShape, Glu};
use crate::error::{Error, Result};

/// The subset of a Hugging Face T5 `config.json` that the encoder needs.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct T5Config {
    pub vocab_size: usize,
    pub d_model: usize,
    /// Per-head width (not necessarily `d_model / num_heads`).
    pub d_kv: usize,
    pub d_ff: usize,
    pub num_layers: usize,
    pub num_heads: usize,
    #[serde(default = "default_buckets")]
    pub relative_attention_num_buckets: usize,
    #[serde(default = "default_max_distance")]
    pub relative_attention_max_distance: usize,
    #[serde(default = "default_eps")]
    pub layer_norm_epsilon: f64,
    /// `"{act}"` or `"gated-{act}"` (`gated-gelu` meaning the tanh GELU, as transformers reads it); absent, the
    /// family's default (T5's `relu`, mT5's `gated-gelu`), set as the file is read.
    #[serde(default)]
    pub feed_forward_proj: String,
}

fn default_buckets() -> usize {
    32
}
fn default_max_distance() -> usize {
    128
}
fn default_eps() -> f64 {
    1e-6
}

/// The feed-forward block's activation: one linear layer then an activation, or a gated pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum T5FeedForward {
    /// `wo(act(wi(x)))` (T5DenseActDense).
    Dense(Activation),
    /// `wo(act(wi_0(x)) · wi_1(x))` (T5DenseGatedActDense).
    Gated(Glu),
}

impl T5Config {
    /// Every layer's attention: bidirectional, no window, scores unscaled (T5 folds the scale into its
    /// initialisation).
    pub fn attention(&self) -> AttentionShape {
        AttentionShape {
            scale: 1.0,
            ..AttentionShape::new(self.num_heads, self.num_heads, self.d_kv)
        }
    }

    /// The feed-forward block `feed_forward_proj` names, if the engine runs it.
    pub fn feed_forward(&self) -> Option<T5FeedForward> {
        let (gated, act) = match self.feed_forward_proj.strip_prefix("gated-") {
            Some(act) => (true, act),
            None => (false, self.feed_forward_proj.as_str()),
        };
        Some(match (gated, act) {
            (false, "relu") => T5FeedForward::Dense(Activation::Relu),
            (false, "gelu") => T5FeedForward::Dense(Activation::Gelu),
            // transformers reads `gated-gelu` as the tanh approximation (T5 v1.1, sentence-t5, GTR).
            (true, "gelu" | "gelu_new" | "gelu_pytorch_tanh") => {
                T5FeedForward::Gated(Glu::GeluTanh)
            }
            (true, "silu" | "swish") => T5FeedForward::Gated(Glu::Silu),
            _ => return None,
        })
    }
}

/// Reads T5's config (`mt5`: mT5's, whose feed-forward defaults to the gated one).
pub(super) fn read_t5(config_path: &Path, mt5: bool) -> Result<T5Config> {
    let mut config: T5Config = read_json(config_path)?;
    if config.feed_forward_proj.is_empty() {
        config.feed_forward_proj = if mt5 { "gated-gelu" } else { "relu" }.into();
    }
    check_dims(
        config_path,
        &[
            ("vocab_size", Some(config.vocab_size)),
            ("d_model", Some(config.d_model)),
            ("d_ff", Some(config.d_ff)),
            ("num_layers", Some(config.num_layers)),
            (
                "num_heads × d_kv",
                config.num_heads.checked_mul(config.d_kv),
            ),
        ],
    )?;
    let fail = |message: String| Err(Error::model(config_path, message));
    if config.feed_forward().is_none() {
        return fail(format!(
            "unsupported feed_forward_proj {:?}: expected \"relu\", \"gelu\", \"gated-gelu\", \"gated-gelu_new\" or \
             \"gated-silu\"",
            config.feed_forward_proj
        ));
    }
    if config.num_heads == 0 || config.d_kv == 0 {
        return fail("num_heads and d_kv must be positive".into());
    }
    // The bucket function needs exact buckets (a quarter of them) and a longest distance past them.
    let (buckets, distance) = (
        config.relative_attention_num_buckets,
        config.relative_attention_max_distance,
    );
    if buckets < 4 || distance <= buckets / 4 {
        return fail(format!(
            "relative_attention_num_buckets {buckets} / relative_attention_max_distance {distance}: expected at \
             least 4 buckets and a distance past a quarter of them"
        ));
    }
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A T5 or mT5 config file with `extra` keys, read as the engine reads it.
    fn read(mt5: bool, extra: &str) -> Result<T5Config> {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("config.json");
        let text = format!(
            r#"{{"vocab_size": 100, "d_model": 64, "d_kv": 16, "d_ff": 96, "num_layers": 2, "num_heads": 4{extra}}}"#
        );
        std::fs::write(&path, text).expect("write");
        read_t5(&path, mt5)
    }

    #[test]
    fn feed_forward_defaults_by_family_and_reads_transformers_names() {
        let ff = |mt5, extra| read(mt5, extra).expect("config").feed_forward();
        assert_eq!(ff(false, ""), Some(T5FeedForward::Dense(Activation::Relu)));
        assert_eq!(ff(true, ""), Some(T5FeedForward::Gated(Glu::GeluTanh)));
        assert_eq!(
            ff(false, r#", "feed_forward_proj": "gated-gelu""#),
            Some(T5FeedForward::Gated(Glu::GeluTanh))
        );
        assert_eq!(
            ff(false, r#", "feed_forward_proj": "gelu""#),
            Some(T5FeedForward::Dense(Activation::Gelu))
        );
        for refused in [
            r#", "feed_forward_proj": "gated-relu""#,
            r#", "relative_attention_num_buckets": 2"#,
            r#", "relative_attention_max_distance": 8"#,
            r#", "num_heads": 18446744073709551615"#,
            r#", "d_ff": 1099511627776"#,
        ] {
            assert!(read(false, refused).is_err(), "{refused}");
        }
    }
}
