//! sentence-transformers' modules after the Transformer one, over the op set: Pooling (each of its modes into its
//! own block of columns, as sentence-transformers concatenates them), then any Dense modules
//! (`act(x · Wᵀ + b)` per pooled row: LaBSE's and distiluse's tanh projection, EmbeddingGemma's two; a
//! cross-encoder's classification head, ModernBERT's with a LayerNorm after its first layer), then Normalize,
//! which the backend applies ([`Architecture::normalizes`](crate::backend::ops::Architecture::normalizes)).

use super::{layer_norm, stacked_linear, LayerNormWeights, ModelDir, Pooling, Weights};
use crate::backend::ops::{Activation, Device, Layout, Matrix, Ops, Slot};
use crate::batch::Batch;
use crate::error::Result;

/// One Dense module, loaded onto the device.
struct Dense<D: Device> {
    linear: D::Linear,
    act: Activation,
    /// ModernBERT's classification head norms its dense layer's output.
    norm: Option<LayerNormWeights<D>>,
    out: usize,
}

/// Pooling, Dense and Normalize: one embedding per sequence from the last hidden states.
pub struct Head<D: Device> {
    /// The Pooling module's modes, concatenated in order.
    pub modes: Vec<Pooling>,
    pub normalize: bool,
    pools_last: bool,
    hidden: usize,
    dense: Vec<Dense<D>>,
}

impl<D: Device> Head<D> {
    pub fn load(dir: &ModelDir, device: &D) -> Result<Self> {
        let dense = dir
            .dense
            .iter()
            .map(|m| {
                let w = Weights::open(&m.weights_path, &format!("{}.weight", m.name))?;
                let names = [(m.name.clone(), m.out_features)];
                let norm = m
                    .norm
                    .as_ref()
                    .map(|n| layer_norm(&w, device, &n.name, m.out_features, n.eps, n.bias))
                    .transpose()?;
                Ok(Dense {
                    linear: stacked_linear(&w, device, &names, m.in_features, m.bias)?,
                    act: m.activation,
                    norm,
                    out: m.out_features,
                })
            })
            .collect::<Result<_>>()?;
        Ok(Head {
            modes: dir.pooling.modes.clone(),
            normalize: dir.normalize,
            pools_last: dir.pools_last(),
            hidden: dir.config.hidden_size(),
            dense,
        })
    }

    /// Width of the pooled vector: the hidden states' per mode.
    fn pooled(&self) -> usize {
        self.modes.len() * self.hidden
    }

    /// Width of the sentence embedding.
    pub fn dim(&self) -> usize {
        self.dense.last().map_or(self.pooled(), |d| d.out)
    }

    /// Whether each pooled row is the embedding ([`ModelDir::pools_last`]: one mode, no Dense module after it): a
    /// backend may then normalize a row as it pools it; a Dense module's input, or a concatenation, is the pooled
    /// vectors as they are.
    pub fn pools_last(&self) -> bool {
        self.pools_last
    }

    /// Appends the slots the Dense modules read and write (the pooled rows, and each output but the last's, which
    /// is the embedding) to an architecture's layout, in a region of their own.
    pub fn extend(&self, layout: &mut Layout) {
        let region = layout.region_widths().len();
        let mut offset = 0;
        let inputs = std::iter::once(self.pooled()).chain(self.dense.iter().map(|d| d.out));
        for width in inputs.take(self.dense.len()) {
            layout.slots.push(Slot::new(region, offset, width, false));
            offset += width;
        }
    }

    /// Pools `x` (one row per token) into the first `batch.out_rows()` rows of `out` (a sequence that asked for
    /// its token states gets them copied instead), through the Dense modules if any; `acts` are the views of the
    /// slots [`Head::extend`] added. A backend serves token states only where [`Head::pools_last`].
    pub fn forward<O: Ops<Device = D>>(
        &self,
        ops: &O,
        batch: &Batch,
        x: O::Mat,
        acts: &[O::Mat],
        out: O::Mat,
    ) {
        let rows = batch.out_rows();
        let pool = |into: O::Mat| {
            for (i, &mode) in self.modes.iter().enumerate() {
                let block = into
                    .top(rows)
                    .columns(i * self.hidden..(i + 1) * self.hidden);
                ops.pool(batch, x, mode, block);
            }
        };
        let Some((last, inner)) = self.dense.split_last() else {
            pool(out);
            return;
        };
        pool(acts[0]);
        let dense = |d: &Dense<D>, input: O::Mat, output: O::Mat| {
            ops.linear(input, &d.linear, d.act, None, output);
            if let Some(norm) = &d.norm {
                ops.layer_norm(output, None, output, norm);
            }
        };
        for (i, d) in inner.iter().enumerate() {
            dense(d, acts[i].top(rows), acts[i + 1].top(rows));
        }
        dense(last, acts[inner.len()].top(rows), out.top(rows));
    }
}
