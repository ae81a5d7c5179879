//! BERT encoder forward pass on the CPU, over a ragged batch.
//!
//! Mirrors Hugging Face transformers' `modeling_bert.py` (BertEmbeddings, BertSelfAttention, BertSelfOutput,
//! BertIntermediate, BertOutput, BertLayer) block for block, and sentence-transformers' Pooling and Normalize
//! modules after it. Differences, all exact in real arithmetic: sequences are concatenated without padding, so
//! attention runs per sequence and needs no mask; Q, K and V are one fused projection; the residual of each
//! block is added in its output projection's epilogue, before the LayerNorm.
//!
//! Every operation is split into tasks through [`Par`], so the same code runs eager (one fork/join per operation)
//! or inside a plan (all threads run the whole pass, with a barrier after each operation): see
//! [`crate::backend::cpu::par`].

use super::{BertConfig, ModelDir, Pooling, Tensor, Weights};
use crate::backend::cpu::attention::{self, Qkv};
use crate::backend::cpu::gemm::{self, Dtype, Epilogue, Isa, PackedB};
use crate::backend::cpu::kernels;
use crate::backend::cpu::par::{Mat, Par, Scratch};
use crate::batch::Batch;
use crate::error::Result;

/// Rows per task of the row-wise operations: enough to amortise a task, few enough to balance.
const ROWS_PER_TASK: usize = 16;

/// Runs `f(row)` for every row in `0..rows`, in tasks of [`ROWS_PER_TASK`] rows.
fn for_rows(par: &dyn Par, rows: usize, f: &(dyn Fn(usize) + Sync)) {
    par.run(rows.div_ceil(ROWS_PER_TASK), &|task, _| {
        (task * ROWS_PER_TASK..((task + 1) * ROWS_PER_TASK).min(rows)).for_each(f)
    });
}

/// `y = x · Wᵀ + b`, weights read in PyTorch's `[out, in]` layout and packed once for our GEMM kernel.
pub struct Linear {
    weight: PackedB,
    bias: Tensor,
}

impl Linear {
    pub fn load(
        w: &Weights,
        prefix: &str,
        out_dim: usize,
        in_dim: usize,
        dtype: Dtype,
    ) -> Result<Self> {
        Self::load_stacked(w, &[prefix], out_dim, in_dim, dtype)
    }

    /// Stacks several projections of the same input (Q, K, V → QKV), so one GEMM reads the input once.
    pub fn load_stacked(
        w: &Weights,
        prefixes: &[&str],
        out_dim: usize,
        in_dim: usize,
        dtype: Dtype,
    ) -> Result<Self> {
        let (mut weight, mut bias) = (Vec::new(), Vec::new());
        for p in prefixes {
            weight.extend_from_slice(w.get(&format!("{p}.weight"), &[out_dim, in_dim])?.data());
            bias.extend_from_slice(w.get(&format!("{p}.bias"), &[out_dim])?.data());
        }
        let n = out_dim * prefixes.len();
        Ok(Linear {
            weight: PackedB::pack(&weight, n, in_dim, dtype),
            bias: Tensor::from_vec(bias),
        })
    }

    /// `out = gelu?(x · Wᵀ + b) + residual?`
    fn forward(
        &self,
        par: &dyn Par,
        x: Mat,
        out: Mat,
        gelu: bool,
        residual: Option<Mat>,
        s: &Scratch,
    ) {
        let epi = Epilogue {
            bias: Some(self.bias.data()),
            gelu,
            residual,
        };
        gemm::linear(par, x, &self.weight, epi, out, s);
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

    fn row(&self, row: &mut [f32]) {
        kernels::layer_norm(row, self.gamma.data(), self.beta.data(), self.eps);
    }

    fn forward(&self, par: &dyn Par, x: Mat) {
        for_rows(par, x.rows, &|r| {
            // Safety: each task owns its rows.
            self.row(unsafe { x.row_mut(r) });
        });
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

    fn forward(&self, par: &dyn Par, batch: &Batch, x: Mat) {
        let h = x.cols;
        let (word, pos, ty) = (
            self.word.data(),
            self.position.data(),
            &self.token_type.data()[..h],
        );
        let offsets = batch.offsets();
        for_rows(par, x.rows, &|t| {
            // Position of token t inside its own sequence: the ragged layout restarts positions per sequence.
            let seq = offsets.partition_point(|&o| o <= t) - 1;
            let p = t - offsets[seq];
            let id = batch.ids()[t] as usize;
            let (w, pe) = (&word[id * h..(id + 1) * h], &pos[p * h..(p + 1) * h]);
            // Safety: each task owns its rows.
            let row = unsafe { x.row_mut(t) };
            for j in 0..h {
                row[j] = w[j] + pe[j] + ty[j];
            }
            self.norm.row(row);
        });
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
    /// Attention's products on the bf16 tile: with bf16 weights, when heads split into bf16 pairs evenly.
    bf16_attention: bool,
}

impl Layer {
    pub fn load(w: &Weights, c: &BertConfig, i: usize, dtype: Dtype) -> Result<Self> {
        let (h, f) = (c.hidden_size, c.intermediate_size);
        let p = format!("encoder.layer.{i}");
        let qkv = ["query", "key", "value"].map(|n| format!("{p}.attention.self.{n}"));
        let eps = c.layer_norm_eps;
        Ok(Layer {
            qkv: Linear::load_stacked(w, &qkv.each_ref().map(String::as_str), h, h, dtype)?,
            attn_out: Linear::load(w, &format!("{p}.attention.output.dense"), h, h, dtype)?,
            attn_norm: LayerNorm::load(w, &format!("{p}.attention.output.LayerNorm"), h, eps)?,
            intermediate: Linear::load(w, &format!("{p}.intermediate.dense"), f, h, dtype)?,
            output: Linear::load(w, &format!("{p}.output.dense"), h, f, dtype)?,
            out_norm: LayerNorm::load(w, &format!("{p}.output.LayerNorm"), h, eps)?,
            heads: c.num_attention_heads,
            bf16_attention: dtype == Dtype::Bf16 && (h / c.num_attention_heads).is_multiple_of(2),
        })
    }

    /// The layer's input is in `b.hidden` and its output lands there.
    fn forward(&self, par: &dyn Par, offsets: &[usize], b: &Buffers) {
        let s = b.scratch;
        let (x, tmp) = (b.hidden, b.tmp);
        let (qkv, ctx) = (b.qkv(), b.ctx());
        self.qkv.forward(par, x, qkv, false, None, s);
        let qkv = if self.bf16_attention {
            Qkv::Bf16 {
                ptr: to_bf16(par, qkv, b.qkv16()),
                ld: qkv.cols,
            }
        } else {
            Qkv::F32(qkv)
        };
        attention::attention(par, offsets, qkv, ctx, self.heads, s);
        self.attn_out.forward(par, ctx, tmp, false, Some(x), s);
        self.attn_norm.forward(par, tmp);
        // The intermediate activations reuse the memory of QKV and the context: both are dead by now.
        let inter = b.inter();
        self.intermediate.forward(par, tmp, inter, true, None, s);
        self.output.forward(par, inter, x, false, Some(tmp), s);
        self.out_norm.forward(par, x);
    }
}

/// Rounds `x` to bf16 into `out` (row-major, `x.cols` apart), whole rows per task; returns `out`.
fn to_bf16(par: &dyn Par, x: Mat, out: *mut u16) -> *const u16 {
    #[cfg(target_arch = "x86_64")]
    {
        let out = out as usize;
        for_rows(par, x.rows, &|r| {
            // Safety: bf16 attention is only chosen where AVX512-BF16 exists; each task owns its rows of
            // `out`, which holds x.rows × x.cols values.
            unsafe {
                let dst = std::slice::from_raw_parts_mut((out as *mut u16).add(r * x.cols), x.cols);
                crate::backend::cpu::gemm::to_bf16(x.row(r), dst);
            }
        });
        out as *const u16
    }
    #[cfg(not(target_arch = "x86_64"))]
    unreachable!("bf16 needs AVX512-BF16: {par:p} {x:?} {out:p}")
}

/// A sentence-embedding BERT: encoder, pooling and optional L2 normalisation.
pub struct Bert {
    pub config: BertConfig,
    pub pooling: Pooling,
    pub normalize: bool,
    dtype: Dtype,
    embeddings: Embeddings,
    layers: Vec<Layer>,
}

impl Bert {
    /// Loads the weights, packed for `dtype` (bf16 needs AVX512-BF16; see [`gemm::bf16_supported`]).
    pub fn load(dir: &ModelDir, dtype: Dtype) -> Result<Self> {
        let w = Weights::open(&dir.weights_path)?;
        let c = &dir.config;
        Ok(Bert {
            embeddings: Embeddings::load(&w, c)?,
            layers: (0..c.num_hidden_layers)
                .map(|i| Layer::load(&w, c, i, dtype))
                .collect::<Result<_>>()?,
            config: c.clone(),
            pooling: dir.pooling,
            normalize: dir.normalize,
            dtype,
        })
    }

    pub fn dim(&self) -> usize {
        self.config.hidden_size
    }

    pub fn dtype(&self) -> Dtype {
        self.dtype
    }

    /// Runs the batch and writes one pooled embedding per sequence into the rows of `out`. Every thread of `par`
    /// calls this with the same arguments. The batch must have passed [`Batch::validate`] and fit the arena.
    pub fn forward(&self, par: &dyn Par, batch: &Batch, b: &Buffers, out: Mat) {
        assert_eq!(b.tokens, batch.tokens(), "buffers carved for another batch");
        self.embeddings.forward(par, batch, b.hidden);
        for layer in &self.layers {
            layer.forward(par, batch.offsets(), b);
        }
        self.pool(par, batch, b.hidden, out);
    }

    fn pool(&self, par: &dyn Par, batch: &Batch, x: Mat, out: Mat) {
        let offsets = batch.offsets();
        for_rows(par, batch.len(), &|s| {
            let (start, end) = (offsets[s], offsets[s + 1]);
            // Safety: the hidden states are read only here; each task owns its output rows.
            let row = unsafe { out.row_mut(s) };
            match self.pooling {
                Pooling::Cls => row.copy_from_slice(unsafe { x.row(start) }),
                Pooling::Mean => {
                    row.fill(0.0);
                    for t in start..end {
                        for (o, &v) in row.iter_mut().zip(unsafe { x.row(t) }) {
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

    /// An arena for batches of up to `tokens` tokens, with scratch for `threads` threads.
    pub fn arena(&self, tokens: usize, threads: usize) -> Arena {
        let c = &self.config;
        let (h, f) = (c.hidden_size, c.intermediate_size);
        let max_len = tokens.min(c.max_position_embeddings);
        let linear_scratch = self
            .layers
            .first()
            .map(|l| {
                [&l.qkv, &l.attn_out, &l.intermediate, &l.output]
                    .map(|lin| lin.weight.scratch_floats())
                    .into_iter()
                    .max()
                    .unwrap_or(0)
            })
            .unwrap_or(0);
        let bf16 = self.layers.first().is_some_and(|l| l.bf16_attention);
        let attn_scratch =
            attention::scratch_floats(Isa::detect(), max_len, h / c.num_attention_heads, bf16);
        // QKV and the context, then (bf16 attention) QKV rounded to bf16; or the feed-forward activations.
        let big = (4 * h + if bf16 { 3 * h / 2 } else { 0 }).max(f);
        Arena {
            tokens,
            h,
            f,
            hidden: vec![0.0; tokens * h],
            tmp: vec![0.0; tokens * h],
            big: vec![0.0; tokens * big],
            scratch: Scratch::new(threads, linear_scratch.max(attn_scratch)),
        }
    }
}

/// The activation memory of one forward pass: the hidden states, the block's intermediate (`tmp`), one region
/// that holds QKV and the attention context (and QKV in bf16 for bf16 attention) and then, once they are dead,
/// the feed-forward activations, and each thread's scratch. A plan keeps one per bucket; eager runs allocate one per call.
pub struct Arena {
    tokens: usize,
    h: usize,
    f: usize,
    hidden: Vec<f32>,
    tmp: Vec<f32>,
    big: Vec<f32>,
    scratch: Scratch,
}

impl Arena {
    pub fn bytes(&self) -> usize {
        4 * (self.hidden.len() + self.tmp.len() + self.big.len() + self.scratch.floats())
    }

    /// Touches every page now, so a plan's first replay does not pay the page faults.
    pub fn prefault(&mut self) {
        for buf in [&mut self.hidden, &mut self.tmp, &mut self.big] {
            buf.fill(0.0);
        }
        self.scratch.prefault();
    }

    /// The arena carved for a batch of `tokens` tokens; the borrow keeps it for one forward pass.
    pub fn buffers(&mut self, tokens: usize) -> Buffers<'_> {
        assert!(
            tokens <= self.tokens,
            "batch of {tokens} tokens in an arena of {}",
            self.tokens
        );
        let (h, f) = (self.h, self.f);
        Buffers {
            hidden: Mat::new(&mut self.hidden, tokens, h),
            tmp: Mat::new(&mut self.tmp, tokens, h),
            big: self.big.as_mut_ptr(),
            tokens,
            h,
            f,
            scratch: &self.scratch,
        }
    }
}

/// The arena carved for one batch, shared by the threads of its forward pass.
pub struct Buffers<'a> {
    hidden: Mat,
    tmp: Mat,
    big: *mut f32,
    tokens: usize,
    h: usize,
    f: usize,
    scratch: &'a Scratch,
}

// Safety: like `Mat`, written only by tasks that own disjoint parts, with barriers between operations.
unsafe impl Sync for Buffers<'_> {}

impl Buffers<'_> {
    fn qkv(&self) -> Mat {
        Mat::from_raw(self.big, self.tokens, 3 * self.h)
    }

    fn ctx(&self) -> Mat {
        // Safety: `big` holds tokens × max(4h, f) floats; the context follows the QKV block.
        Mat::from_raw(
            unsafe { self.big.add(self.tokens * 3 * self.h) },
            self.tokens,
            self.h,
        )
    }

    fn inter(&self) -> Mat {
        Mat::from_raw(self.big, self.tokens, self.f)
    }

    /// QKV rounded to bf16, after QKV and the context (only in arenas made for bf16 attention).
    fn qkv16(&self) -> *mut u16 {
        // Safety: such an arena's `big` holds tokens × (4h + 3h/2) floats.
        unsafe { self.big.add(self.tokens * 4 * self.h) as *mut u16 }
    }
}
