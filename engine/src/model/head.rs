//! sentence-transformers' modules after the Transformer one, over the op set: Pooling (each of its modes into its
//! own block of columns, as sentence-transformers concatenates them), then any Dense modules
//! (`act(x · Wᵀ + b)` per pooled row: LaBSE's and distiluse's tanh projection, EmbeddingGemma's two; a
//! cross-encoder's classification head, ModernBERT's with a LayerNorm after its first layer), then Normalize,
//! which the backend applies ([`Architecture::normalizes`](crate::backend::ops::Architecture::normalizes)).

use std::ops::Range;

use super::{
    layer_norm, stacked_linear, DenseModule, LayerNormWeights, ModelDir, Pooling, SparseModule,
    Weights,
};
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

impl<D: Device> Dense<D> {
    fn load(m: &DenseModule, device: &D) -> Result<Self> {
        let w = Weights::open(&m.weights_path, &format!("{}.weight", m.name))?;
        let names = [(m.name.clone(), m.out_features)];
        let norm = m
            .norm
            .as_ref()
            .map(|n| layer_norm(&w, device, &n.name, m.out_features, n.eps, n.bias))
            .transpose()?;
        let linear = match m.logit_rows {
            // LogitScore: one row, the true token's less the false one's, in f32 before any rounding; the two rows
            // read alone, not the vocabulary-wide table.
            Some(rows) => {
                let shape = [rows.vocab, m.in_features];
                let name = format!("{}.weight", m.name);
                let mut weight = w.row(&name, shape, rows.true_id)?;
                if let Some(f) = rows.false_id {
                    for (t, f) in weight.iter_mut().zip(w.row(&name, shape, f)?) {
                        *t -= f;
                    }
                }
                device.linear(&weight, None, 1, m.in_features)?
            }
            None => stacked_linear(&w, device, &names, m.in_features, m.bias)?,
        };
        Ok(Dense {
            linear,
            act: m.activation,
            norm,
            out: m.out_features,
        })
    }

    fn forward<O: Ops<Device = D>>(&self, ops: &O, input: O::Mat, output: O::Mat) {
        ops.linear(input, &self.linear, self.act, None, output);
        if let Some(norm) = &self.norm {
            ops.layer_norm(output, None, output, norm);
        }
    }
}

/// Vocabulary entries per GEMM of a SPLADE head: its logits, a token's row of each block at a time, would be the
/// whole vocabulary wide otherwise (8,192 tokens × 30,522 entries: 1 GB of f32).
const VOCAB_BLOCK: usize = 2048;

/// SPLADE's head ([`SparseModule`]): the MLM transform over every token, then the vocabulary projection a block
/// of entries at a time, SpladePooling's activation in its epilogue, each block max-pooled into its columns.
struct Sparse<D: Device> {
    transform: Dense<D>,
    /// Each block's projection (bias and activation with it) and the entries it covers.
    blocks: Vec<(D::Linear, Range<usize>)>,
    vocab: usize,
    /// SpladePooling's activation, on every logit (monotone, so the max after it is the max before it, activated).
    activation: Activation,
}

impl<D: Device> Sparse<D> {
    fn load(s: &SparseModule, device: &D) -> Result<Self> {
        let hidden = s.transform.out_features;
        let w = Weights::open(
            &s.transform.weights_path,
            &format!("{}.weight", s.transform.name),
        )?;
        // The first name the checkpoint holds; with none, the first's absence is the error.
        let held = |names: &[String]| names.iter().find(|n| w.has(n)).unwrap_or(&names[0]).clone();
        let weight = w.get(&held(&s.decoder), &[s.vocab, hidden])?;
        let bias = match s.decoder_bias.is_empty() {
            true => None,
            false => Some(w.get(&held(&s.decoder_bias), &[s.vocab])?),
        };
        let blocks = (0..s.vocab)
            .step_by(VOCAB_BLOCK)
            .map(|start| {
                let cols = start..(start + VOCAB_BLOCK).min(s.vocab);
                let linear = device.linear(
                    &weight.data()[cols.start * hidden..cols.end * hidden],
                    bias.as_ref().map(|b| &b.data()[cols.clone()]),
                    cols.len(),
                    hidden,
                )?;
                Ok((linear, cols))
            })
            .collect::<Result<_>>()?;
        Ok(Sparse {
            transform: Dense::load(&s.transform, device)?,
            blocks,
            vocab: s.vocab,
            activation: s.activation,
        })
    }

    /// Its slots: the transform's output and one block's logits, per token.
    fn widths(&self) -> [usize; 2] {
        [self.transform.out, VOCAB_BLOCK.min(self.vocab)]
    }

    /// Every token's logits, activated, at their maximum over each sequence's tokens, into `out`'s rows.
    fn forward<O: Ops<Device = D>>(
        &self,
        ops: &O,
        batch: &Batch,
        x: O::Mat,
        acts: &[O::Mat],
        out: O::Mat,
    ) {
        let (transformed, logits) = (acts[0], acts[1]);
        self.transform.forward(ops, x, transformed);
        let act = self.activation;
        for (linear, cols) in &self.blocks {
            let block = logits.columns(0..cols.len());
            ops.linear(transformed, linear, act, None, block);
            ops.pool(batch, block, Pooling::Max, out.columns(cols.clone()));
        }
    }
}

/// Pooling, Dense and Normalize: one embedding per sequence from the last hidden states (or a SPLADE head's
/// weights per vocabulary entry).
pub struct Head<D: Device> {
    /// The Pooling module's modes, concatenated in order.
    pub modes: Vec<Pooling>,
    pub normalize: bool,
    /// A sparse model's top-k, which the backend applies as it hands the rows over
    /// ([`Architecture::max_active_dims`](crate::backend::ops::Architecture::max_active_dims)).
    pub max_active_dims: Option<usize>,
    pools_last: bool,
    /// A multi-vector model's: the Dense modules run on every token, nothing pooled.
    per_token: bool,
    hidden: usize,
    dense: Vec<Dense<D>>,
    sparse: Option<Sparse<D>>,
}

impl<D: Device> Head<D> {
    pub fn load(dir: &ModelDir, device: &D) -> Result<Self> {
        let dense = dir
            .dense
            .iter()
            .map(|m| Dense::load(m, device))
            .collect::<Result<_>>()?;
        Ok(Head {
            sparse: dir
                .sparse
                .as_ref()
                .map(|s| Sparse::load(s, device))
                .transpose()?,
            modes: dir.pooling.modes.clone(),
            normalize: dir.normalize,
            max_active_dims: dir.sparse.as_ref().and_then(|s| s.max_active_dims),
            pools_last: dir.pools_last(),
            per_token: dir.multi_vector.is_some(),
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
        match (&self.sparse, self.dense.last()) {
            (Some(s), _) => s.vocab,
            (None, Some(d)) => d.out,
            (None, None) => self.pooled(),
        }
    }

    /// Whether each pooled row is the embedding ([`ModelDir::pools_last`]: one mode, no Dense module after it): a
    /// backend may then normalize a row as it pools it; a Dense module's input, or a concatenation, is the pooled
    /// vectors as they are.
    pub fn pools_last(&self) -> bool {
        self.pools_last
    }

    /// Whether the Dense modules run on every token (a multi-vector model's head).
    pub fn per_token(&self) -> bool {
        self.per_token
    }

    /// Appends the slots the Dense modules read and write (the pooled rows, and each output but the last's, which
    /// is the embedding) to an architecture's layout, in a region of their own.
    pub fn extend(&self, layout: &mut Layout) {
        let region = layout.region_widths().len();
        let mut offset = 0;
        let inputs = std::iter::once(self.pooled()).chain(self.dense.iter().map(|d| d.out));
        let widths: Vec<usize> = match &self.sparse {
            Some(s) => s.widths().to_vec(),
            // Every token's row is its own input: nothing pooled to hold.
            None if self.per_token => inputs
                .skip(1)
                .take(self.dense.len().saturating_sub(1))
                .collect(),
            None => inputs.take(self.dense.len()).collect(),
        };
        for width in widths {
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
        if let Some(sparse) = &self.sparse {
            sparse.forward(ops, batch, x, acts, out.top(rows));
            return;
        }
        // A multi-vector model's batch asks every token's vector (`Readout::Vectors`): its rows are the tokens'.
        if let (true, Some((last, inner))) = (self.per_token, self.dense.split_last()) {
            let mut input = x.top(rows);
            for (d, act) in inner.iter().zip(acts) {
                d.forward(ops, input, act.top(rows));
                input = act.top(rows);
            }
            last.forward(ops, input, out.top(rows));
            return;
        }
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
        for (i, d) in inner.iter().enumerate() {
            d.forward(ops, acts[i].top(rows), acts[i + 1].top(rows));
        }
        last.forward(ops, acts[inner.len()].top(rows), out.top(rows));
    }
}
