//! DeBERTa v2 and v3's `config.json` keys beyond BERT's (transformers' `DebertaV2Config`, read as
//! `DisentangledSelfAttention`, `DebertaV2Embeddings` and `DebertaV2Encoder` read them): relative attention, its
//! position buckets and terms, and the embeddings' options.

use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

use super::{read_json, BertConfig};
use crate::backend::ops::Disentangled;
use crate::error::{Error, Result};

/// What DeBERTa's network reads from `config.json` besides BERT's sizes, with transformers' defaults (the
/// modules' `getattr` defaults where the config class has none).
#[derive(Clone, Debug, PartialEq)]
pub struct DebertaConfig {
    pub relative_attention: bool,
    /// `max_relative_positions` (`max_position_embeddings` where below 1).
    pub max_relative_positions: usize,
    /// `position_buckets`, where positive.
    pub position_buckets: Option<usize>,
    pub c2p: bool,
    pub p2c: bool,
    /// Whether the relative position embeddings go through the key and query projections of the content
    /// (`share_att_key`) or their own (`pos_key_proj`, `pos_query_proj`).
    pub share_att_key: bool,
    /// `norm_rel_ebd` has `layer_norm`: the relative position embeddings take the encoder's LayerNorm.
    pub norm_rel_embeddings: bool,
    /// `position_biased_input`: absolute position embeddings added to the tokens' (DeBERTa v3: none).
    pub position_biased_input: bool,
}

/// The keys as the file has them.
#[derive(Deserialize)]
struct DebertaFile {
    #[serde(default)]
    relative_attention: bool,
    #[serde(default = "unset")]
    max_relative_positions: i64,
    #[serde(default = "unset")]
    position_buckets: i64,
    /// A list, or (older files) a string of `|`-separated names.
    #[serde(default)]
    pos_att_type: Value,
    #[serde(default)]
    share_att_key: bool,
    norm_rel_ebd: Option<String>,
    #[serde(default = "yes")]
    position_biased_input: bool,
    #[serde(default)]
    conv_kernel_size: usize,
    attention_head_size: Option<usize>,
    pooler_hidden_size: Option<usize>,
    max_position_embeddings: usize,
    hidden_size: usize,
    num_attention_heads: usize,
    /// Read here for DebertaV2Config's defaults, which are not BERT's.
    type_vocab_size: Option<usize>,
    layer_norm_eps: Option<f64>,
}

fn unset() -> i64 {
    -1
}

fn yes() -> bool {
    true
}

impl DebertaConfig {
    /// The relative attention every layer runs, if relative attention is on and takes a term.
    pub fn disentangled(&self) -> Option<Disentangled> {
        (self.relative_attention && (self.c2p || self.p2c)).then(|| Disentangled {
            span: self.span(),
            buckets: self
                .position_buckets
                .map(|b| (b, self.max_relative_positions)),
            c2p: self.c2p,
            p2c: self.p2c,
        })
    }

    /// `att_span`: the position buckets, else the relative positions; the table holds twice as many rows.
    pub fn span(&self) -> usize {
        self.position_buckets.unwrap_or(self.max_relative_positions)
    }

    /// The terms a score is the sum of, which its scale divides by (`scale_factor`: counted from `pos_att_type`
    /// whether or not relative attention is on, as transformers counts them).
    pub fn terms(&self) -> usize {
        1 + usize::from(self.c2p) + usize::from(self.p2c)
    }
}

/// The most relative positions (or buckets) the engine reads: each layer's projections hold twice as many rows.
const MAX_SPAN: usize = 1 << 16;

/// Reads DeBERTa's keys from `config_path` into `bert` (its own, and DebertaV2Config's defaults of BERT's keys: no
/// token types, eps 1e-7), refusing what the engine does not run: DeBERTa-v2-xlarge's convolution
/// (`conv_kernel_size`), a head width other than the hidden size's share, a pooler of another width, buckets whose
/// logarithm has no base, a span past [`MAX_SPAN`]. Names in `pos_att_type` other than `c2p` and `p2c` are ignored,
/// as transformers ignores them (they neither add a term nor scale the scores).
pub(super) fn read_deberta(config_path: &Path, bert: &mut BertConfig) -> Result<()> {
    let f: DebertaFile = read_json(config_path)?;
    let fail = |message: String| Err(Error::model(config_path, message));
    if f.conv_kernel_size > 0 {
        return fail(format!(
            "unsupported: DeBERTa's convolution after its first layer (conv_kernel_size {}, DeBERTa-v2-xlarge's)",
            f.conv_kernel_size
        ));
    }
    let heads = f.num_attention_heads.max(1);
    if f.attention_head_size
        .is_some_and(|w| w * heads != f.hidden_size)
    {
        return fail(format!(
            "unsupported attention_head_size {:?}: the engine's heads split hidden_size {} evenly",
            f.attention_head_size, f.hidden_size
        ));
    }
    if f.pooler_hidden_size.is_some_and(|p| p != f.hidden_size) {
        return fail(format!(
            "unsupported pooler_hidden_size {:?}: a ContextPooler as wide as hidden_size {}",
            f.pooler_hidden_size, f.hidden_size
        ));
    }
    let terms: Vec<String> = match &f.pos_att_type {
        Value::Null => vec![],
        Value::String(s) => s
            .to_lowercase()
            .split('|')
            .map(|t| t.trim().to_owned())
            .collect(),
        Value::Array(items) => {
            let names: Option<Vec<String>> = items
                .iter()
                .map(|t| t.as_str().map(str::to_owned))
                .collect();
            match names {
                Some(names) => names,
                None => return fail("pos_att_type holds something other than names".into()),
            }
        }
        other => return fail(format!("pos_att_type {other}: expected a list of names")),
    };
    let max_relative_positions = match usize::try_from(f.max_relative_positions) {
        Ok(n) if n >= 1 => n,
        _ => f.max_position_embeddings,
    };
    let position_buckets = usize::try_from(f.position_buckets).ok().filter(|&b| b > 0);
    if let Some(b) = position_buckets.filter(|_| f.relative_attention) {
        // The log buckets divide by log((max − 1) / (b / 2)): it must be positive.
        if b < 2 || max_relative_positions <= b / 2 + 1 {
            return fail(format!(
                "position_buckets {b} with max_relative_positions {max_relative_positions}: the buckets need at \
                 least 2, and more relative positions than half the buckets plus one"
            ));
        }
    }
    let config = DebertaConfig {
        relative_attention: f.relative_attention,
        max_relative_positions,
        position_buckets,
        c2p: terms.iter().any(|t| t == "c2p"),
        p2c: terms.iter().any(|t| t == "p2c"),
        share_att_key: f.share_att_key,
        norm_rel_embeddings: f
            .norm_rel_ebd
            .unwrap_or_default()
            .to_lowercase()
            .split('|')
            .any(|t| t.trim() == "layer_norm"),
        position_biased_input: f.position_biased_input,
    };
    if config.relative_attention && !(1..=MAX_SPAN).contains(&config.span()) {
        return fail(format!(
            "relative attention over {} positions: expected 1 to {MAX_SPAN}",
            config.span()
        ));
    }
    bert.type_vocab_size = f.type_vocab_size.unwrap_or(0);
    bert.layer_norm_eps = f.layer_norm_eps.unwrap_or(1e-7);
    bert.deberta = Some(config);
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::model::{BertConfig, ModelConfig};

    /// A DeBERTa config of 4 heads of 16 over `max_position_embeddings` 512, with `extra`'s keys, as read.
    fn read(extra: serde_json::Value) -> Result<BertConfig, String> {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("config.json");
        let mut config = json!({"model_type": "deberta-v2", "vocab_size": 10, "hidden_size": 64,
            "num_hidden_layers": 1, "num_attention_heads": 4, "intermediate_size": 16,
            "max_position_embeddings": 512});
        for (k, v) in extra.as_object().expect("object") {
            config[k] = v.clone();
        }
        std::fs::write(&path, config.to_string()).expect("write");
        match ModelConfig::read(&path).map_err(|e| e.to_string())? {
            ModelConfig::Bert(c) => Ok(c),
            other => panic!("not read as DeBERTa: {other:?}"),
        }
    }

    /// DeBERTa v3's config as the Hub has it: `max_relative_positions` -1 is the position table's 512, buckets of
    /// 256 over it; DebertaV2Config's defaults where keys are missing (no token types, eps 1e-7, a position
    /// table); the scores scaled by every term `pos_att_type` names (a string or a list; other names ignored,
    /// as transformers ignores them), whether or not relative attention is on.
    #[test]
    fn debertas_settings_and_defaults_are_transformers() {
        let v3 = read(
            json!({"relative_attention": true, "max_relative_positions": -1,
            "position_buckets": 256, "pos_att_type": ["p2c", "c2p"], "norm_rel_ebd": "layer_norm",
            "share_att_key": true, "position_biased_input": false}),
        )
        .expect("v3");
        let dis = v3.attention().disentangled.expect("disentangled");
        assert_eq!(
            (dis.span, dis.buckets, dis.c2p, dis.p2c),
            (256, Some((256, 512)), true, true)
        );
        assert_eq!(v3.attention().scale, 1.0 / (16.0f32 * 3.0).sqrt());
        let d = v3.deberta.as_ref().expect("DeBERTa's keys");
        assert!(d.norm_rel_embeddings && d.share_att_key && !v3.position_table());
        assert_eq!((v3.type_vocab_size, v3.layer_norm_eps), (0, 1e-7));

        let defaults = read(json!({})).expect("defaults");
        assert!(defaults.attention().disentangled.is_none() && defaults.position_table());
        assert_eq!(defaults.attention().scale, 1.0 / 4.0);
        let d = defaults.deberta.as_ref().expect("DeBERTa's keys");
        assert!(!d.share_att_key && !d.norm_rel_embeddings && d.position_buckets.is_none());

        for (pos_att_type, c2p, p2c) in [
            (json!("c2p|p2c"), true, true),
            (json!("C2P"), true, false),
            (json!(["p2c", "p2p"]), false, true),
            (json!(["C2P"]), false, false),
            (json!("c2p|"), true, false),
        ] {
            let c = read(
                json!({"relative_attention": true, "max_relative_positions": 16,
                "pos_att_type": pos_att_type}),
            )
            .expect("read");
            let terms = 1 + usize::from(c2p) + usize::from(p2c);
            assert_eq!(
                c.attention().scale,
                1.0 / ((16 * terms) as f32).sqrt(),
                "{pos_att_type}"
            );
            let dis = c.attention().disentangled;
            assert_eq!(
                dis.map(|d| (d.c2p, d.p2c, d.span, d.buckets)),
                (c2p || p2c).then_some((c2p, p2c, 16, None))
            );
        }
        // Terms named without relative attention still scale the scores (transformers counts them).
        let off = read(json!({"pos_att_type": "c2p|p2c", "position_buckets": 1})).expect("off");
        assert!(off.attention().disentangled.is_none());
        assert_eq!(off.attention().scale, 1.0 / 48.0f32.sqrt());
    }

    /// What the engine does not run is refused by name.
    #[test]
    fn what_deberta_is_not_run_is_refused() {
        let relative = json!({"relative_attention": true, "pos_att_type": "c2p"});
        let with = |extra: serde_json::Value| {
            let mut j = relative.clone();
            for (k, v) in extra.as_object().expect("object") {
                j[k] = v.clone();
            }
            j
        };
        for (extra, needle) in [
            (with(json!({"conv_kernel_size": 3})), "convolution"),
            (
                with(json!({"attention_head_size": 8})),
                "attention_head_size",
            ),
            (
                with(json!({"pooler_hidden_size": 32})),
                "pooler_hidden_size",
            ),
            (
                with(json!({"position_buckets": 256, "max_relative_positions": 100})),
                "position_buckets 256",
            ),
            (
                with(json!({"max_position_embeddings": 1u64 << 40})),
                "relative attention over",
            ),
            (with(json!({"model_type": "deberta"})), "DeBERTa v1"),
        ] {
            let err = read(extra.clone()).expect_err("refused");
            assert!(err.contains(needle), "{extra}: {err}");
        }
    }
}
