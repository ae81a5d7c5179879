//! DeBERTa v2 and v3's `config.json` keys beyond BERT's (transformers' `DebertaV2Config`, read as
//! `DisentangledSelfAttention`, `DebertaV2Embeddings` and `DebertaV2Encoder` read them): relative attention, its
//! position buckets and terms, and the embeddings' options.

use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

use super::read_json;
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

/// Reads DeBERTa's keys from `config_path`, refusing what the engine does not run: DeBERTa-v2-xlarge's convolution
/// (`conv_kernel_size`), a head width other than the hidden size's share, a pooler of another width, terms other
/// than `c2p` and `p2c`, buckets whose logarithm has no base.
pub(super) fn read_deberta(config_path: &Path) -> Result<DebertaConfig> {
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
    if let Some(t) = terms.iter().find(|t| !["c2p", "p2c"].contains(&t.as_str())) {
        return fail(format!(
            "unsupported pos_att_type {t:?}: expected \"c2p\" and \"p2c\" (DeBERTa v2's and v3's terms)"
        ));
    }
    let max_relative_positions = match usize::try_from(f.max_relative_positions) {
        Ok(n) if n >= 1 => n,
        _ => f.max_position_embeddings,
    };
    let position_buckets = usize::try_from(f.position_buckets).ok().filter(|&b| b > 0);
    if let Some(b) = position_buckets {
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
    if config.relative_attention && config.span() == 0 {
        return fail("relative attention over no positions".into());
    }
    Ok(config)
}
