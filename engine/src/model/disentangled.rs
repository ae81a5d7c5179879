//! DeBERTa's relative position embeddings as each layer's attention reads them (transformers'
//! `DebertaV2Encoder.get_rel_embedding` and `DisentangledSelfAttention.disentangled_attention_bias`): the
//! encoder's table (`encoder.rel_embeddings`, through `encoder.LayerNorm` where `norm_rel_ebd` says), projected by
//! each layer's key and query projections (`share_att_key`) or its own (`pos_key_proj`, `pos_query_proj`). The
//! products do not depend on the input, so they are made once, at load: a forward pass only reads their rows.

use rayon::prelude::*;

use super::{BertConfig, DebertaConfig, Weights};
use crate::backend::ops::{Device, PositionProjections};
use crate::error::Result;
use crate::model::Tensor;

/// The encoder's relative position embeddings, `2·span` rows of `hidden`, normed where the config says; `None`
/// without relative attention.
pub(crate) fn relative_embeddings(w: &Weights, c: &BertConfig) -> Result<Option<Vec<f32>>> {
    let (Some(deberta), Some(_)) = (&c.deberta, c.attention().disentangled) else {
        return Ok(None);
    };
    let (rows, h) = (2 * deberta.span(), c.hidden_size);
    let table = w.get("encoder.rel_embeddings.weight", &[rows, h])?;
    let mut table = table.data().to_vec();
    if deberta.norm_rel_embeddings {
        let weight = w.get("encoder.LayerNorm.weight", &[h])?;
        let bias = w.get("encoder.LayerNorm.bias", &[h])?;
        let eps = c.norm_eps();
        for row in table.chunks_exact_mut(h) {
            let mean = row.iter().map(|&x| x as f64).sum::<f64>() / h as f64;
            let var = row.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / h as f64;
            let inv = 1.0 / (var + eps).sqrt();
            for ((x, g), b) in row.iter_mut().zip(weight.data()).zip(bias.data()) {
                *x = ((*x as f64 - mean) * inv) as f32 * g + b;
            }
        }
    }
    Ok(Some(table))
}

/// Layer `block`'s projections of the relative position embeddings `table` (each term's only where the config
/// takes it), handed to the device.
pub(crate) fn position_projections<D: Device>(
    w: &Weights,
    d: &D,
    deberta: &DebertaConfig,
    block: &str,
    table: &[f32],
    hidden: usize,
) -> Result<PositionProjections<D>> {
    let (key, query) = match deberta.share_att_key {
        true => ("attention.self.key_proj", "attention.self.query_proj"),
        false => (
            "attention.self.pos_key_proj",
            "attention.self.pos_query_proj",
        ),
    };
    let project = |name: &str| -> Result<D::Param> {
        let weight = w.get(&format!("{block}.{name}.weight"), &[hidden, hidden])?;
        let bias = w.get(&format!("{block}.{name}.bias"), &[hidden])?;
        d.position_projection(Tensor::from_vec(linear(
            table,
            weight.data(),
            bias.data(),
            hidden,
        )))
    };
    Ok(PositionProjections {
        key: deberta.c2p.then(|| project(key)).transpose()?,
        query: deberta.p2c.then(|| project(query)).transpose()?,
    })
}

/// `x · Wᵀ + b` for rows `x` of `n` (`W` square, PyTorch's `[out, in]`), on the host: once per layer at load,
/// `2·span` rows, so a plain loop over the rows in parallel; each dot product in 16 lanes, which the compiler
/// vectorizes (a single f32 sum it may not reorder).
fn linear(x: &[f32], weight: &[f32], bias: &[f32], n: usize) -> Vec<f32> {
    let mut out = vec![0.0; x.len()];
    out.par_chunks_mut(n)
        .zip(x.par_chunks(n))
        .for_each(|(out, row)| {
            for ((o, w), b) in out.iter_mut().zip(weight.chunks_exact(n)).zip(bias) {
                let mut lanes = [0f32; 16];
                let (whole, tail) = (row.len() / 16 * 16, row.len() % 16);
                for (xs, ws) in row[..whole]
                    .chunks_exact(16)
                    .zip(w[..whole].chunks_exact(16))
                {
                    for l in 0..16 {
                        lanes[l] += xs[l] * ws[l];
                    }
                }
                let rest: f32 = (0..tail).map(|i| row[whole + i] * w[whole + i]).sum();
                *o = lanes.iter().sum::<f32>() + rest + b;
            }
        });
    out
}

#[cfg(test)]
mod tests {
    /// The host projection is `x · Wᵀ + b`, lanes and tail alike.
    #[test]
    fn linear_is_x_times_w_transposed_plus_b() {
        let n = 19;
        let x: Vec<f32> = (0..3 * n).map(|i| (i as f32 * 0.37).sin()).collect();
        let w: Vec<f32> = (0..n * n).map(|i| (i as f32 * 0.11).cos()).collect();
        let b: Vec<f32> = (0..n).map(|i| i as f32 * 0.5).collect();
        let got = super::linear(&x, &w, &b, n);
        for r in 0..3 {
            for o in 0..n {
                let want: f64 = (0..n)
                    .map(|i| x[r * n + i] as f64 * w[o * n + i] as f64)
                    .sum::<f64>()
                    + b[o] as f64;
                assert!((got[r * n + o] as f64 - want).abs() < 1e-4, "[{r}][{o}]");
            }
        }
    }
}
