//! BERT encoder forward pass on the CPU, over a ragged batch.
//!
//! Mirrors Hugging Face transformers' `modeling_bert.py` (BertEmbeddings, BertSelfAttention, BertSelfOutput,
//! BertIntermediate, BertOutput, BertLayer) block for block, and sentence-transformers' Pooling and Normalize
//! modules after it. Differences, all exact in real arithmetic: sequences are concatenated without padding, so
//! attention runs per sequence and needs no mask; Q, K and V are one fused projection.

use rayon::prelude::*;

use super::{BertConfig, ModelDir, Pooling, Tensor, Weights};
use crate::backend::cpu::kernels::{self, View};
use crate::backend::cpu::packed::{self, Epilogue, PackedB};
use crate::batch::Batch;
use crate::error::Result;

/// `y = x · Wᵀ + b`, weights read in PyTorch's `[out, in]` layout and packed once for our GEMM kernel.
pub struct Linear {
    weight: PackedB,
    bias: Tensor,
}

impl Linear {
    pub fn load(w: &Weights, prefix: &str, out_dim: usize, in_dim: usize) -> Result<Self> {
        Self::load_stacked(w, &[prefix], out_dim, in_dim)
    }

    /// Stacks several projections of the same input (Q, K, V → QKV), so one GEMM reads the input once.
    pub fn load_stacked(
        w: &Weights,
        prefixes: &[&str],
        out_dim: usize,
        in_dim: usize,
    ) -> Result<Self> {
        let (mut weight, mut bias) = (Vec::new(), Vec::new());
        for p in prefixes {
            weight.extend_from_slice(w.get(&format!("{p}.weight"), &[out_dim, in_dim])?.data());
            bias.extend_from_slice(w.get(&format!("{p}.bias"), &[out_dim])?.data());
        }
        let n = out_dim * prefixes.len();
        Ok(Linear {
            weight: PackedB::pack(&weight, n, in_dim),
            bias: Tensor::from_vec(bias, vec![n]),
        })
    }

    fn out_dim(&self) -> usize {
        self.weight.n()
    }

    fn forward(&self, x: &[f32], rows: usize, out: &mut [f32], epi: Epilogue, threads: usize) {
        packed::matmul(x, rows, &self.weight, self.bias.data(), epi, out, threads);
    }
}

pub struct LayerNorm {
    gamma: Tensor,
    beta: Tensor,
    eps: f32,
}

impl LayerNorm {
    pub fn load(w: &Weights, prefix: &str, dim: usize, eps: f64) -> Result<Self> {
        Ok(LayerNorm {
            gamma: w.get(&format!("{prefix}.weight"), &[dim])?,
            beta: w.get(&format!("{prefix}.bias"), &[dim])?,
            eps: eps as f32,
        })
    }

    /// `x = LayerNorm(x + residual)`; an empty residual gives a plain LayerNorm.
    fn forward(&self, x: &mut [f32], residual: &[f32]) {
        kernels::add_layer_norm(x, residual, self.gamma.data(), self.beta.data(), self.eps);
    }
}

/// BertEmbeddings: word + absolute position + token type (always type 0 for single sentences), then LayerNorm.
pub struct Embeddings {
    word: Tensor,
    position: Tensor,
    token_type: Tensor,
    norm: LayerNorm,
}

impl Embeddings {
    pub fn load(w: &Weights, c: &BertConfig) -> Result<Self> {
        let h = c.hidden_size;
        Ok(Embeddings {
            word: w.get("embeddings.word_embeddings.weight", &[c.vocab_size, h])?,
            position: w.get(
                "embeddings.position_embeddings.weight",
                &[c.max_position_embeddings, h],
            )?,
            token_type: w.get(
                "embeddings.token_type_embeddings.weight",
                &[c.type_vocab_size, h],
            )?,
            norm: LayerNorm::load(w, "embeddings.LayerNorm", h, c.layer_norm_eps)?,
        })
    }

    fn forward(&self, batch: &Batch, out: &mut [f32]) {
        let h = self.norm.gamma.shape()[0];
        let (word, pos, ty) = (
            self.word.data(),
            self.position.data(),
            &self.token_type.data()[..h],
        );
        let offsets = batch.offsets();
        out.par_chunks_mut(h).enumerate().for_each(|(t, row)| {
            // Position of token t inside its own sequence: the ragged layout restarts positions per sequence.
            let seq = offsets.partition_point(|&o| o <= t) - 1;
            let p = t - offsets[seq];
            let id = batch.ids()[t] as usize;
            let (w, pe) = (&word[id * h..(id + 1) * h], &pos[p * h..(p + 1) * h]);
            for j in 0..h {
                row[j] = w[j] + pe[j] + ty[j];
            }
        });
        self.norm.forward(out, &[]);
    }
}

/// One BertLayer: self-attention (BertSelfAttention + BertSelfOutput), then the feed-forward block
/// (BertIntermediate + BertOutput), each closed by residual + LayerNorm (post-norm, as BERT).
pub struct Layer {
    qkv: Linear,
    attn_out: Linear,
    attn_norm: LayerNorm,
    intermediate: Linear,
    output: Linear,
    out_norm: LayerNorm,
    heads: usize,
}

impl Layer {
    pub fn load(w: &Weights, c: &BertConfig, i: usize) -> Result<Self> {
        let (h, f) = (c.hidden_size, c.intermediate_size);
        let p = format!("encoder.layer.{i}");
        let qkv = ["query", "key", "value"].map(|n| format!("{p}.attention.self.{n}"));
        Ok(Layer {
            qkv: Linear::load_stacked(w, &qkv.each_ref().map(String::as_str), h, h)?,
            attn_out: Linear::load(w, &format!("{p}.attention.output.dense"), h, h)?,
            attn_norm: LayerNorm::load(
                w,
                &format!("{p}.attention.output.LayerNorm"),
                h,
                c.layer_norm_eps,
            )?,
            intermediate: Linear::load(w, &format!("{p}.intermediate.dense"), f, h)?,
            output: Linear::load(w, &format!("{p}.output.dense"), h, f)?,
            out_norm: LayerNorm::load(w, &format!("{p}.output.LayerNorm"), h, c.layer_norm_eps)?,
            heads: c.num_attention_heads,
        })
    }

    /// `hidden` holds the layer's input and receives its output.
    fn forward(&self, batch: &Batch, hidden: &mut [f32], ws: &mut Workspace, threads: usize) {
        let t = batch.tokens();
        let h = self.attn_out.out_dim();
        let ctx = &mut ws.ctx[..t * h];
        let qkv = &mut ws.qkv[..t * 3 * h];
        self.qkv.forward(hidden, t, qkv, Epilogue::Bias, threads);
        attention(batch, qkv, ctx, h, self.heads);
        let tmp = &mut ws.tmp[..t * h];
        self.attn_out.forward(ctx, t, tmp, Epilogue::Bias, threads);
        self.attn_norm.forward(tmp, hidden);
        let inter = &mut ws.inter[..t * self.intermediate.out_dim()];
        self.intermediate
            .forward(tmp, t, inter, Epilogue::BiasGelu, threads);
        self.output
            .forward(inter, t, hidden, Epilogue::Bias, threads);
        self.out_norm.forward(hidden, tmp);
    }
}

/// Scaled dot-product attention per (sequence, head), reading Q, K, V in place from the fused `[t, 3h]` buffer.
/// Sequences never see each other, which is what the padding mask achieves in the padded reference.
fn attention(batch: &Batch, qkv: &[f32], ctx: &mut [f32], h: usize, heads: usize) {
    let d = h / heads;
    let scale = 1.0 / (d as f32).sqrt();
    let offsets = batch.offsets();
    // Raw pointers cross the rayon boundary as integers: every task writes its own (rows × head columns) block.
    let (qkv_ptr, ctx_ptr) = (qkv.as_ptr() as usize, ctx.as_mut_ptr() as usize);
    let stride = 3 * h as isize;
    (0..batch.len() * heads).into_par_iter().for_each_init(
        Vec::new,
        |scores: &mut Vec<f32>, task| {
            let (s, head) = (task / heads, task % heads);
            let (start, len) = (offsets[s], offsets[s + 1] - offsets[s]);
            scores.resize(len * len, 0.0);
            let base = qkv_ptr as *const f32;
            // Safety: start + len ≤ t rows of the [t, 3h] buffer; head columns stay within h; each task's ctx block is
            // disjoint from every other task's.
            unsafe {
                let q = base.add(start * 3 * h + head * d);
                let k = q.add(h);
                let v = q.add(2 * h);
                let q = View {
                    ptr: q,
                    rs: stride,
                    cs: 1,
                };
                let kt = View {
                    ptr: k,
                    rs: 1,
                    cs: stride,
                };
                kernels::matmul_strided(len, len, d, scores.as_mut_ptr(), len as isize, q, kt, 1.0);
                kernels::softmax_rows(scores, len, scale);
                let p = View {
                    ptr: scores.as_ptr(),
                    rs: len as isize,
                    cs: 1,
                };
                let v = View {
                    ptr: v,
                    rs: stride,
                    cs: 1,
                };
                let out = (ctx_ptr as *mut f32).add(start * h + head * d);
                kernels::matmul_strided(len, d, len, out, h as isize, p, v, 1.0);
            }
        },
    );
}

/// Activation buffers, grown to the largest batch seen and reused, so a steady stream of batches allocates nothing.
#[derive(Default)]
pub struct Workspace {
    hidden: Vec<f32>,
    qkv: Vec<f32>,
    ctx: Vec<f32>,
    tmp: Vec<f32>,
    inter: Vec<f32>,
}

impl Workspace {
    fn reserve(&mut self, tokens: usize, h: usize, f: usize) {
        for (buf, width) in [
            (&mut self.hidden, h),
            (&mut self.qkv, 3 * h),
            (&mut self.ctx, h),
            (&mut self.tmp, h),
            (&mut self.inter, f),
        ] {
            if buf.len() < tokens * width {
                buf.resize(tokens * width, 0.0);
            }
        }
    }
}

/// A sentence-embedding BERT: encoder, pooling and optional L2 normalisation.
pub struct Bert {
    pub config: BertConfig,
    pub pooling: Pooling,
    pub normalize: bool,
    embeddings: Embeddings,
    layers: Vec<Layer>,
}

impl Bert {
    pub fn load(dir: &ModelDir) -> Result<Self> {
        let w = Weights::open(&dir.weights_path)?;
        let c = &dir.config;
        Ok(Bert {
            embeddings: Embeddings::load(&w, c)?,
            layers: (0..c.num_hidden_layers)
                .map(|i| Layer::load(&w, c, i))
                .collect::<Result<_>>()?,
            config: c.clone(),
            pooling: dir.pooling,
            normalize: dir.normalize,
        })
    }

    pub fn dim(&self) -> usize {
        self.config.hidden_size
    }

    /// Runs the batch and writes one pooled embedding per sequence into `out` (`batch.len() × dim`).
    /// The batch must have passed [`Batch::validate`]; GEMMs use `threads` threads of the current rayon pool.
    pub fn forward(&self, batch: &Batch, ws: &mut Workspace, threads: usize, out: &mut [f32]) {
        let (h, f) = (self.config.hidden_size, self.config.intermediate_size);
        let t = batch.tokens();
        ws.reserve(t, h, f);
        let mut hidden = std::mem::take(&mut ws.hidden);
        let x = &mut hidden[..t * h];
        self.embeddings.forward(batch, x);
        for layer in &self.layers {
            layer.forward(batch, x, ws, threads);
        }
        self.pool(batch, x, out);
        ws.hidden = hidden;
    }

    fn pool(&self, batch: &Batch, x: &[f32], out: &mut [f32]) {
        let h = self.config.hidden_size;
        let offsets = batch.offsets();
        out.par_chunks_mut(h).enumerate().for_each(|(s, row)| {
            let (start, end) = (offsets[s], offsets[s + 1]);
            match self.pooling {
                Pooling::Cls => row.copy_from_slice(&x[start * h..(start + 1) * h]),
                Pooling::Mean => {
                    row.fill(0.0);
                    for tok in x[start * h..end * h].chunks_exact(h) {
                        for (o, &v) in row.iter_mut().zip(tok) {
                            *o += v;
                        }
                    }
                    let inv = 1.0 / (end - start) as f32;
                    row.iter_mut().for_each(|o| *o *= inv);
                }
            }
            if self.normalize {
                kernels::l2_normalize(row);
            }
        });
    }
}
