//! Scaled dot-product attention over a ragged batch, one task per (sequence, head), on our GEMM tiles.
//!
//! A task packs its head's keys (as `Kᵀ` panels) and values once into its thread's slab, then walks the query
//! rows one register tile at a time: scores for those rows only (`MR × len`, never `len × len`), a row softmax,
//! and the product with V written straight into the context matrix. Sequences never see each other, which is
//! what the padding mask achieves in the padded reference; there is no padding to mask.
//!
//! With bf16 weights the two products run on the bf16 tile too (Q, K, V and the probabilities rounded to bf16,
//! f32 accumulation); the softmax stays in f32.

use super::gemm::{self, Isa, Out};
use super::kernels;
use super::par::{Mat, Par, Scratch};
use std::ops::Range;

use crate::backend::ops::{AttentionShape, Disentangled};

/// Scratch floats one task needs for sequences of up to `max_len` tokens under `shape`: its keys, values and a
/// tile's scores, then DeBERTa's position terms where the shape has them.
pub fn scratch_floats(isa: Isa, max_len: usize, shape: AttentionShape, bf16: bool) -> usize {
    let base = base_floats(isa, max_len, shape.head_dim, bf16);
    match shape.disentangled {
        Some(dis) => base + Positions::floats(isa, max_len, shape.head_dim, dis),
        None => base,
    }
}

/// Scratch floats of a task's keys, values and a tile's scores, for heads of width `d`.
fn base_floats(isa: Isa, max_len: usize, d: usize, bf16: bool) -> usize {
    let (mr, nr) = (isa.mr(), isa.nr());
    let keys = max_len.div_ceil(nr) * nr;
    let f32_need = keys * d + d.div_ceil(nr) * nr * max_len + mr * keys;
    if !bf16 {
        return f32_need;
    }
    // In 32-bit units (bf16 pairs): key panels, value panels, a tile's scores and its probabilities.
    let (mr, nr) = gemm::BF16_TILE;
    let keys = max_len.div_ceil(nr) * nr;
    let lp = max_len.div_ceil(2);
    f32_need.max(keys * d.div_ceil(2) + d.div_ceil(nr) * nr * lp + mr * keys + mr * lp)
}

/// What the scores take besides `q·k`.
#[derive(Clone, Copy)]
pub enum Bias<'a> {
    /// A relative position bias ([`crate::backend::ops::RelativeBias`]).
    Relative(Relative<'a>),
    /// DeBERTa's position projections ([`crate::backend::ops::PositionProjections`]): `2·span` rows of
    /// `heads · head_dim` each, the key projection's (c2p) and the query projection's (p2c).
    Disentangled {
        key: Option<&'a [f32]>,
        query: Option<&'a [f32]>,
    },
}

/// A relative position bias: `2·reach − 1` floats per head, the one for key `j` of query `i` at
/// `(j − i) + reach − 1`.
#[derive(Clone, Copy)]
pub struct Relative<'a> {
    pub table: &'a [f32],
    pub reach: usize,
}

impl<'a> Relative<'a> {
    /// Head `head`'s bias for query `q` against keys `0..`: indexed by the key.
    fn row(self, head: usize, q: usize) -> &'a [f32] {
        let start = head * (2 * self.reach - 1) + self.reach - 1 - q;
        &self.table[start..start + self.reach + q]
    }
}

/// DeBERTa's position terms for one attention call ([`crate::backend::ops::Disentangled`]): each relative
/// position's row of the projections, worked out once (a bucket is a logarithm), and the projections.
struct Positions<'a> {
    /// The row relative position `δ` reads, at `δ + max_len − 1`.
    rows: Vec<usize>,
    max_len: usize,
    key: Option<&'a [f32]>,
    query: Option<&'a [f32]>,
}

/// One (sequence, head)'s position terms, in its task's scratch: `c2p[i][r] = q_i · K_pos[lo + r]` for its
/// queries, `p2c[j][r] = k_j · Q_pos[lo + r]` for its keys (rows `ld` apart), over the rows `lo..` its relative
/// positions read, and one query's scaled terms by key.
struct Terms<'s> {
    lo: usize,
    ld: usize,
    c2p: Option<&'s [f32]>,
    p2c: Option<&'s [f32]>,
    row: &'s mut [f32],
}

impl<'a> Positions<'a> {
    /// Scratch floats of one task's [`Terms`]: the projections' rows a sequence reads (at most `2·max_len − 1`,
    /// at most the table's), packed, their products with the sequence's queries and keys, and one query's terms.
    fn floats(isa: Isa, max_len: usize, d: usize, dis: Disentangled) -> usize {
        let width = (2 * max_len).min(2 * dis.span).div_ceil(isa.nr()) * isa.nr();
        width * d + 2 * max_len * width + max_len
    }

    fn new(shape: AttentionShape, bias: Option<Bias<'a>>, max_len: usize) -> Option<Self> {
        match (shape.disentangled, bias) {
            (Some(dis), Some(Bias::Disentangled { key, query })) => {
                let n = max_len as i64;
                Some(Positions {
                    rows: (-(n - 1)..n.max(1)).map(|delta| dis.row(delta)).collect(),
                    max_len,
                    key,
                    query,
                })
            }
            (None, Some(Bias::Disentangled { .. })) | (Some(_), _) => {
                panic!(
                    "attention: DeBERTa's position terms need both the shape and the projections"
                )
            }
            (None, _) => None,
        }
    }

    fn row(&self, delta: i64) -> usize {
        self.rows[(delta + self.max_len as i64 - 1) as usize]
    }

    /// The terms of head `head` of the sequence at rows `start..start + len` of `qkv` (f32), its first `kl`
    /// tokens the keys, carved from `slab`.
    ///
    /// # Safety
    /// `qkv` covers those rows in the fused layout of `shape`; `slab` holds [`Positions::floats`] for a
    /// `max_len` at least `len`; the projections hold `2·span` rows of `heads · head_dim`.
    #[allow(clippy::too_many_arguments)]
    unsafe fn terms<'s>(
        &self,
        isa: Isa,
        qkv: Mat,
        shape: AttentionShape,
        (start, len, kl): (usize, usize, usize),
        head: usize,
        slab: &'s mut [f32],
    ) -> Terms<'s> {
        let (d, nr) = (shape.head_dim, isa.nr());
        let lo = self.row(1 - kl as i64);
        let width = self.row(len as i64 - 1) + 1 - lo;
        let padded = width.div_ceil(nr) * nr;
        let (panels, rest) = slab.split_at_mut(padded * d);
        let (c2p, rest) = rest.split_at_mut(len * padded);
        let (p2c, rest) = rest.split_at_mut(kl * padded);
        let (qc, kc, _) = columns(shape, head);
        let stride = shape.heads * d;
        // Rows `lo..lo + width` of head `head`'s columns of a projection, times `rows` rows of qkv from column
        // `col`, into `out`.
        let mut product = |proj: &[f32], col: usize, rows: usize, out: &'s mut [f32]| {
            // SAFETY: the projection holds rows `lo..lo + width` (rows of relative positions, within its 2·span)
            // of `stride` floats; `panels` holds `padded · d`; qkv covers the sequence's rows (the caller's
            // contract) and `out` `rows × padded`.
            unsafe {
                gemm::pack_rows(
                    proj.as_ptr().add(lo * stride + head * d),
                    stride,
                    width,
                    d,
                    nr,
                    panels,
                );
                let mat = Mat::new(&mut *out, rows, padded);
                for r0 in (0..rows).step_by(isa.mr()) {
                    for p in 0..width.div_ceil(nr) {
                        let tile = Out::plain(mat, r0, p * nr, nr.min(width - p * nr));
                        let panel = panels.as_ptr().add(p * nr * d);
                        let a = qkv.at(start + r0, col);
                        gemm::tile_f32(isa, a, qkv.ld, isa.mr().min(rows - r0), panel, d, &tile);
                    }
                }
            }
            let out: &'s [f32] = out;
            out
        };
        Terms {
            lo,
            ld: padded,
            c2p: self.key.map(|k| product(k, qc, len, c2p)),
            p2c: self.query.map(|q| product(q, kc, kl, p2c)),
            row: &mut rest[..kl],
        }
    }
}

impl Terms<'_> {
    /// Query `q`'s terms against each key, times `scale` (the scores' own): the bias its softmax adds.
    fn row(&mut self, positions: &Positions, q: usize, scale: f32) -> &[f32] {
        let c2p = self.c2p.map(|m| &m[q * self.ld..(q + 1) * self.ld]);
        for (j, out) in self.row.iter_mut().enumerate() {
            let r = positions.row(q as i64 - j as i64) - self.lo;
            let c2p = c2p.map_or(0.0, |m| m[r]);
            let p2c = self.p2c.map_or(0.0, |m| m[j * self.ld + r]);
            *out = (c2p + p2c) * scale;
        }
        self.row
    }
}

/// `ctx[:, head] = softmax(scores(Q Kᵀ) + bias) V` for every sequence and head, the scores scaled (and capped) as
/// `shape` says, from the fused `[Q | K | V]`
/// projection `qkv` in f32, or (`qkv16`) rounded to bf16 for the bf16 tiles. One task per (sequence, key/value
/// head) packs that head's keys and values once and serves every query head of its group (grouped-query
/// attention). Sequence `s`'s keys are its first `keys[s]` tokens (all of them but for ColBERT's unattended query
/// expansion, [`crate::Batch::keys`]); every token is a query.
#[allow(clippy::too_many_arguments)]
pub fn attention(
    par: &dyn Par,
    offsets: &[usize],
    keys: &[usize],
    qkv: Mat,
    qkv16: Option<Mat<u16>>,
    shape: AttentionShape,
    bias: Option<Bias>,
    ctx: Mat,
    scratch: &Scratch,
) {
    let AttentionShape {
        heads,
        kv_heads,
        head_dim: d,
        ..
    } = shape;
    let tokens = offsets.last().copied().unwrap_or(0);
    shape.check_softcap();
    assert!(
        heads > 0 && kv_heads > 0 && heads.is_multiple_of(kv_heads) && d > 0,
        "attention: {heads} heads over {kv_heads} key/value heads"
    );
    assert!(
        offsets.first() == Some(&0) && offsets.windows(2).all(|w| w[0] <= w[1]),
        "attention: offsets must start at 0 and ascend"
    );
    assert!(
        keys.len() + 1 == offsets.len()
            && (0..keys.len()).all(|s| keys[s] <= offsets[s + 1] - offsets[s]
                && (keys[s] > 0 || offsets[s + 1] == offsets[s])),
        "attention: each sequence's keys must be among its tokens, one at least"
    );
    assert!(
        qkv.rows >= tokens
            && qkv.cols == shape.qkv_width()
            && ctx.rows >= tokens
            && ctx.cols == heads * d,
        "attention: qkv {}×{}, ctx {}×{} for {tokens} tokens of {shape:?}",
        qkv.rows,
        qkv.cols,
        ctx.rows,
        ctx.cols
    );
    let max_len = offsets.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0);
    match bias {
        Some(Bias::Relative(b)) => assert!(
            max_len <= b.reach && b.reach > 0 && b.table.len() == shape.heads * (2 * b.reach - 1),
            "attention: the bias table does not cover these heads and lengths"
        ),
        Some(Bias::Disentangled { key, query }) => assert!(
            shape.disentangled.is_some_and(|dis| dis.span > 0
                && key.is_some() == dis.c2p
                && query.is_some() == dis.p2c
                && [key, query]
                    .iter()
                    .all(|p| p.is_none_or(|p| p.len() == 2 * dis.span * shape.heads * d)))
                && heads == kv_heads,
            "attention: DeBERTa's position projections do not cover these heads"
        ),
        None => {}
    }
    let positions = Positions::new(shape, bias, max_len);
    let base = base_floats(Isa::detect(), max_len, d, qkv16.is_some());
    match qkv16 {
        #[cfg(target_arch = "x86_64")]
        Some(q16) => {
            assert!(
                gemm::bf16_supported()
                    && d.is_multiple_of(2)
                    && q16.rows >= tokens
                    && q16.cols == qkv.cols,
                "attention: bf16 operands need AVX512-BF16, even heads and a qkv-shaped buffer"
            );
            assert!(
                scratch.floats_per_slab() >= scratch_floats(Isa::detect(), max_len, shape, true),
                "attention: scratch too small"
            );
            to_bf16_rows(par, qkv, q16);
            let bias = Scores {
                relative: relative(bias),
                positions: positions.as_ref(),
                base,
            };
            attention_bf16(par, offsets, keys, (qkv, q16), shape, bias, ctx, scratch)
        }
        #[cfg(not(target_arch = "x86_64"))]
        Some(_) => unreachable!("bf16 operands are only made where AVX512-BF16 exists"),
        None => {
            assert!(
                scratch.floats_per_slab() >= scratch_floats(Isa::detect(), max_len, shape, false),
                "attention: scratch too small"
            );
            let bias = Scores {
                relative: relative(bias),
                positions: positions.as_ref(),
                base,
            };
            attention_f32(par, offsets, keys, qkv, shape, bias, ctx, scratch)
        }
    }
}

/// What a task adds to its scores: a relative bias, or DeBERTa's position terms (computed in the slab's floats
/// past `base`).
#[derive(Clone, Copy)]
struct Scores<'a> {
    relative: Option<Relative<'a>>,
    positions: Option<&'a Positions<'a>>,
    base: usize,
}

impl<'a> Scores<'a> {
    /// Query `q`'s bias by key under head `head`: its position terms (`terms`, the head's) where the scores take
    /// them, else the relative table's row, if any. Inlined: it runs per query row.
    #[inline(always)]
    fn row<'t>(
        &self,
        terms: &'t mut Option<(&Positions, Terms)>,
        head: usize,
        q: usize,
        scale: f32,
    ) -> Option<&'t [f32]>
    where
        'a: 't,
    {
        match terms {
            Some((p, t)) => Some(t.row(p, q, scale)),
            None => self.relative.map(|b| b.row(head, q)),
        }
    }
}

fn relative(bias: Option<Bias>) -> Option<Relative> {
    match bias {
        Some(Bias::Relative(r)) => Some(r),
        _ => None,
    }
}

/// The keys any row of the query tile `q0..q0 + rows` sees, as a range of key panels `nr` wide: the first
/// panel's first key, and the end of the last row's keys (both ends of a row's keys ascend with the row). Keys
/// outside are never computed.
fn tile_keys(
    shape: AttentionShape,
    q0: usize,
    rows: usize,
    len: usize,
    nr: usize,
) -> (usize, usize) {
    let first = shape.keys(q0, len).start / nr * nr;
    (first, shape.keys(q0 + rows - 1, len).end)
}

/// Columns of query head `head`, and of the key and value heads it reads, in the fused projection.
fn columns(shape: AttentionShape, head: usize) -> (usize, usize, usize) {
    let d = shape.head_dim;
    let kv = head / (shape.heads / shape.kv_heads);
    let k0 = shape.heads * d;
    (head * d, k0 + kv * d, k0 + (shape.kv_heads + kv) * d)
}

#[allow(clippy::too_many_arguments)]
fn attention_f32(
    par: &dyn Par,
    offsets: &[usize],
    key_counts: &[usize],
    qkv: Mat,
    shape: AttentionShape,
    bias: Scores,
    ctx: Mat,
    scratch: &Scratch,
) {
    let isa = Isa::detect();
    let (mr, nr) = (isa.mr(), isa.nr());
    let d = shape.head_dim;
    let group = shape.heads / shape.kv_heads;
    // Every query sees every key (encoders without a window): no per-row key range to work out.
    let all = !shape.causal && shape.window.is_none();
    let seqs = offsets.len() - 1;
    par.run(seqs * shape.kv_heads, &|task, worker| {
        let (s, kv) = (task / shape.kv_heads, task % shape.kv_heads);
        let (start, len, kl) = (offsets[s], offsets[s + 1] - offsets[s], key_counts[s]);
        let keys = kl.div_ceil(nr) * nr;
        // SAFETY: the slab is this worker's, sized by `scratch_floats` for the longest sequence (checked by the
        // caller; `kl` ≤ `len`); the task reads rows start..start+len of qkv (read-only during this operation; the
        // caller checked they exist) and writes only its own heads' columns of those rows in ctx.
        unsafe {
            let (slab, extra) = scratch.slab(worker).split_at_mut(bias.base);
            let (kt, rest) = slab.split_at_mut(keys * d);
            let (v, rest) = rest.split_at_mut(d.div_ceil(nr) * nr * kl);
            let scores = Mat::new(&mut rest[..mr * keys], mr, keys);
            let (_, kc, vc) = columns(shape, kv * group);
            gemm::pack_rows(qkv.at(start, kc), qkv.ld, kl, d, nr, kt);
            gemm::pack_cols(qkv.at(start, vc), qkv.ld, kl, d, nr, v);
            for head in kv * group..(kv + 1) * group {
                let (qc, _, _) = columns(shape, head);
                // An empty sequence has no terms (nor queries to read them).
                let mut terms = bias.positions.filter(|_| len > 0).map(|p| {
                    (
                        p,
                        p.terms(isa, qkv, shape, (start, len, kl), head, &mut *extra),
                    )
                });
                for q0 in (0..len).step_by(mr) {
                    let rows = mr.min(len - q0);
                    let (first, seen) = tile_keys(shape, q0, rows, kl, nr);
                    let q = qkv.at(start + q0, qc);
                    for p in first / nr..seen.div_ceil(nr) {
                        let out = Out::plain(scores, 0, p * nr, nr.min(kl - p * nr));
                        gemm::tile_f32(isa, q, qkv.ld, rows, kt.as_ptr().add(p * nr * d), d, &out);
                    }
                    for r in 0..rows {
                        let b = bias.row(&mut terms, head, q0 + r, shape.scale);
                        let (row, q) = (scores.row_mut(r), (q0 + r, kl));
                        softmax_row(row, shape, all, q, first..seen, b);
                    }
                    for p in 0..d.div_ceil(nr) {
                        // Value rows `first..seen` of the panel (`nr` floats per row).
                        let panel = v.as_ptr().add(p * nr * kl + first * nr);
                        let out = Out::plain(ctx, start + q0, qc + p * nr, nr.min(d - p * nr));
                        let probs = scores.ptr().add(first);
                        gemm::tile_f32(isa, probs, scores.ld, rows, panel, seen - first, &out);
                    }
                }
            }
        }
    });
}

/// Softmax of the scores of `keys` scaled (and soft-capped) as `shape` says, plus `bias` (by key) when given.
#[inline(always)]
fn softmax_keys(keys: &mut [f32], shape: AttentionShape, bias: Option<&[f32]>) {
    match shape.softcap {
        Some(cap) => soft_capped_softmax(keys, shape.scale, cap, bias),
        None => scaled_softmax(keys, shape.scale, bias),
    }
}

/// [`softmax_keys`] with a soft cap: out of line, so that the common path's per-row code stays as small as it was.
#[inline(never)]
fn soft_capped_softmax(keys: &mut [f32], scale: f32, cap: f32, bias: Option<&[f32]>) {
    kernels::soft_cap(keys, scale / cap, cap);
    scaled_softmax(keys, 1.0, bias);
}

/// Softmax of `scale ·` the scores of `keys`, plus `bias` (by key) when given.
#[inline(always)]
fn scaled_softmax(keys: &mut [f32], scale: f32, bias: Option<&[f32]>) {
    let n = keys.len();
    match bias {
        Some(bias) => {
            for (v, b) in keys.iter_mut().zip(bias) {
                *v = *v * scale + b;
            }
            kernels::softmax_rows(keys, n, 1.0);
        }
        None => kernels::softmax_rows(keys, n, scale),
    }
}

/// The probabilities of query row `q` over the tile's `seen` keys, of the sequence's `len`: all of them when
/// every query sees every key (`all`), else its own keys' softmax and zeros for the rest. Inlined: it runs per
/// query row, and a call with its arguments costs as much as the rest of the row's bookkeeping.
#[inline(always)]
fn softmax_row(
    row: &mut [f32],
    shape: AttentionShape,
    all: bool,
    (q, len): (usize, usize),
    seen: Range<usize>,
    bias: Option<&[f32]>,
) {
    if all {
        return softmax_keys(&mut row[..len], shape, bias);
    }
    let visible = shape.keys(q, len);
    // A row that sees no key (a batch built against its model's window) gets 0.
    if visible.is_empty() {
        row[seen].fill(0.0);
        return;
    }
    softmax_keys(
        &mut row[visible.clone()],
        shape,
        bias.map(|b| &b[visible.clone()]),
    );
    row[seen.start..visible.start].fill(0.0);
    row[visible.end..seen.end].fill(0.0);
}

/// Rounds the fused projection to bf16, whole rows per task.
#[cfg(target_arch = "x86_64")]
fn to_bf16_rows(par: &dyn Par, x: Mat, out: Mat<u16>) {
    const ROWS_PER_TASK: usize = 16;
    par.run(x.rows.div_ceil(ROWS_PER_TASK), &|task, _| {
        for r in task * ROWS_PER_TASK..((task + 1) * ROWS_PER_TASK).min(x.rows) {
            // SAFETY: bf16 operands are only made where AVX512-BF16 exists (checked by the caller); each task owns
            // its rows of `out`, which has x's shape; x is read only.
            unsafe { gemm::to_bf16(x.row(r), out.row_mut(r)) };
        }
    });
}

/// The bf16 variant of [`attention_f32`]: Q tiles are read in place, keys are transposed as 32-bit pairs into the
/// tile's panel layout, and each pair of value rows is interleaved into one panel row.
///
/// Alignment: a key's bf16 pairs are read as 32-bit values, so every pair must start on 4 bytes. The buffer is
/// carved from f32 memory (4-aligned), and its row stride and every head's column are multiples of the head
/// width, which is even (checked by [`attention`]): every pair starts at an even u16 offset.
#[cfg(target_arch = "x86_64")]
#[allow(clippy::too_many_arguments)]
fn attention_bf16(
    par: &dyn Par,
    offsets: &[usize],
    key_counts: &[usize],
    (qkv32, qkv): (Mat, Mat<u16>),
    shape: AttentionShape,
    bias: Scores,
    ctx: Mat,
    scratch: &Scratch,
) {
    let (mr, nr) = gemm::BF16_TILE;
    let d = shape.head_dim;
    let group = shape.heads / shape.kv_heads;
    let dp = d / 2;
    // Every query sees every key (encoders without a window): no per-row key range to work out.
    let all = !shape.causal && shape.window.is_none();
    let seqs = offsets.len() - 1;
    par.run(seqs * shape.kv_heads, &|task, worker| {
        let (s, kv) = (task / shape.kv_heads, task % shape.kv_heads);
        let (start, len, kl) = (offsets[s], offsets[s + 1] - offsets[s], key_counts[s]);
        let (keys, lp) = (kl.div_ceil(nr) * nr, kl.div_ceil(2));
        // SAFETY: as in `attention_f32`; the slices are carved from this worker's slab, sized by `scratch_floats`
        // (checked by the caller); pairs are 4-byte aligned (see above).
        unsafe {
            let at = |j: usize, col: usize| qkv.at(start + j, col) as *const u16;
            let (_, kc, vc) = columns(shape, kv * group);
            let (slab, extra) = scratch.slab(worker).split_at_mut(bias.base);
            let (k_panels, rest) = slab.split_at_mut(keys * dp);
            let (v_panels, rest) = rest.split_at_mut(d.div_ceil(nr) * nr * lp);
            let (scores, rest) = rest.split_at_mut(mr * keys);
            let p_tile = std::slice::from_raw_parts_mut(rest.as_mut_ptr() as *mut u16, 2 * mr * lp);
            // A key's bf16 pairs are 32-bit values: packing them is the f32 transpose.
            gemm::pack_rows(at(0, kc) as *const f32, qkv.ld / 2, kl, dp, nr, k_panels);
            let v16 = std::slice::from_raw_parts_mut(
                v_panels.as_mut_ptr() as *mut u16,
                2 * v_panels.len(),
            );
            for p in 0..d.div_ceil(nr) {
                let cols = nr.min(d - p * nr);
                for kp in 0..lp {
                    let second = (2 * kp + 1 < kl).then(|| at(2 * kp + 1, vc + p * nr));
                    let dst = &mut v16[(p * lp + kp) * 2 * nr..(p * lp + kp + 1) * 2 * nr];
                    gemm::interleave_bf16(at(2 * kp, vc + p * nr), second, cols, dst);
                }
            }
            let scores = Mat::new(scores, mr, keys);
            for head in kv * group..(kv + 1) * group {
                let (qc, _, _) = columns(shape, head);
                // DeBERTa's position terms from the f32 projection (its own f32 products).
                // An empty sequence has no terms (nor queries to read them).
                let mut terms = bias.positions.filter(|_| len > 0).map(|p| {
                    let at = (start, len, kl);
                    (
                        p,
                        p.terms(Isa::detect(), qkv32, shape, at, head, &mut *extra),
                    )
                });
                for q0 in (0..len).step_by(mr) {
                    let rows = mr.min(len - q0);
                    // `first` is a multiple of the (even) panel width: it starts a value pair.
                    let (first, seen) = tile_keys(shape, q0, rows, kl, nr);
                    for p in first / nr..seen.div_ceil(nr) {
                        let out = Out::plain(scores, 0, p * nr, nr.min(kl - p * nr));
                        let panel = (k_panels.as_ptr() as *const u16).add(p * nr * d);
                        gemm::tile_bf16(at(q0, qc), qkv.ld, rows, panel, dp, &out);
                    }
                    for r in 0..rows {
                        let probs = scores.row_mut(r);
                        let b = bias.row(&mut terms, head, q0 + r, shape.scale);
                        softmax_row(probs, shape, all, (q0 + r, kl), first..seen, b);
                        let dst = &mut p_tile[r * 2 * lp..(r + 1) * 2 * lp];
                        gemm::to_bf16(&probs[first..seen], dst);
                    }
                    for p in 0..d.div_ceil(nr) {
                        // Value pairs from key `first` on.
                        let panel = v16.as_ptr().add((p * lp + first / 2) * 2 * nr);
                        let out = Out::plain(ctx, start + q0, qc + p * nr, nr.min(d - p * nr));
                        gemm::tile_bf16(
                            p_tile.as_ptr(),
                            2 * lp,
                            rows,
                            panel,
                            (seen - first).div_ceil(2),
                            &out,
                        );
                    }
                }
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::super::par::Eager;
    use super::*;
    use rand::{Rng, SeedableRng};

    /// Attention by its definition, in f64, one sequence and query head at a time.
    fn reference(
        offsets: &[usize],
        keys: &[usize],
        qkv: &[f32],
        shape: AttentionShape,
        bias: Option<Bias>,
    ) -> Vec<f32> {
        // DeBERTa's terms of query `i` and key `k` of a sequence at `s`, in f64.
        let positions = |head: usize, s: usize, i: usize, k: usize| -> f64 {
            let (Some(dis), Some(Bias::Disentangled { key, query })) = (shape.disentangled, bias)
            else {
                return 0.0;
            };
            let (d, w) = (shape.head_dim, shape.qkv_width());
            let (qc, kc, _) = columns(shape, head);
            let r = dis.row(i as i64 - k as i64);
            let hd = shape.heads * d;
            let dot = |proj: Option<&[f32]>, row: usize, col: usize| {
                proj.map_or(0.0, |p| {
                    (0..d)
                        .map(|x| qkv[row * w + col + x] as f64 * p[r * hd + head * d + x] as f64)
                        .sum::<f64>()
                })
            };
            (dot(key.filter(|_| dis.c2p), s + i, qc) + dot(query.filter(|_| dis.p2c), s + k, kc))
                * shape.scale as f64
        };
        let (d, w) = (shape.head_dim, shape.qkv_width());
        let h = shape.heads * d;
        let mut out = vec![0.0; offsets[offsets.len() - 1] * h];
        for (win, &kl) in offsets.windows(2).zip(keys) {
            let (s, len) = (win[0], win[1] - win[0]);
            for head in 0..shape.heads {
                let (qc, kc, vc) = columns(shape, head);
                for i in 0..len {
                    let seen = shape.keys(i, kl);
                    assert!(!seen.is_empty(), "query {i} sees no key of {kl}");
                    let scores: Vec<f64> = seen
                        .clone()
                        .map(|k| {
                            let score = (0..d)
                                .map(|j| {
                                    qkv[(s + i) * w + qc + j] as f64
                                        * qkv[(s + k) * w + kc + j] as f64
                                })
                                .sum::<f64>()
                                * shape.scale as f64;
                            let score = match shape.softcap {
                                Some(cap) => cap as f64 * (score / cap as f64).tanh(),
                                None => score,
                            };
                            let relative = match bias {
                                Some(Bias::Relative(b)) => {
                                    b.table[head * (2 * b.reach - 1) + k + b.reach - 1 - i] as f64
                                }
                                _ => 0.0,
                            };
                            score + relative + positions(head, s, i, k)
                        })
                        .collect();
                    let max = scores.iter().cloned().fold(f64::MIN, f64::max);
                    let z: f64 = scores.iter().map(|x| (x - max).exp()).sum();
                    for j in 0..d {
                        out[(s + i) * h + head * d + j] = seen
                            .clone()
                            .zip(&scores)
                            .map(|(k, x)| (x - max).exp() / z * qkv[(s + k) * w + vc + j] as f64)
                            .sum::<f64>()
                            as f32;
                    }
                }
            }
        }
        out
    }

    #[test]
    fn ragged_attention_matches_the_definition_bidirectional_causal_windowed_grouped_biased_and_capped(
    ) {
        let mut rng = rand::rngs::StdRng::seed_from_u64(9);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .expect("pool");
        // Heads narrower and wider than a panel, sequences shorter and longer than a tile, a 1-token sequence,
        // one key/value head per query head, and groups of 2 and 4 query heads per key/value head.
        let cases = [
            (4, 4, 8, vec![1usize, 5, 13, 40]),
            (12, 12, 32, vec![12, 150, 3]),
            (1, 1, 96, vec![33, 7]),
            (8, 4, 16, vec![29, 1, 14]),
            (4, 1, 64, vec![17, 40]),
        ];
        // Sliding windows narrower than a tile, wider than a panel, and past the longest sequence.
        let windows = [None, Some(3), Some(40), Some(1000)];
        for (heads, kv_heads, head_dim, lens) in cases {
            // Scores scaled by 1/√d, or (Gemma 2's) by another scale and soft-capped well inside their range.
            let root = (head_dim as f32).sqrt();
            let scores = [(1.0 / root, None), (2.0 / root, Some(1.5))];
            for (causal, window, (scale, softcap)) in [false, true].into_iter().flat_map(|c| {
                windows
                    .into_iter()
                    .flat_map(move |w| scores.map(|s| (c, w, s)))
            }) {
                let shape = AttentionShape {
                    causal,
                    window,
                    scale,
                    softcap,
                    ..AttentionShape::new(heads, kv_heads, head_dim)
                };
                let mut offsets = vec![0];
                for l in &lens {
                    offsets.push(offsets.last().unwrap() + l);
                }
                // Every token a key, or (ColBERT's unattended query expansion) the last quarter of each sequence
                // none's, where every query still sees a key.
                let some_keys: Vec<usize> = lens
                    .iter()
                    .map(|&l| {
                        let k = (l - l / 4).max(1);
                        match window.is_none_or(|w| l <= k + w) {
                            true => k,
                            false => l,
                        }
                    })
                    .collect();
                let t = *offsets.last().unwrap();
                let w = shape.qkv_width();
                let mut qkv: Vec<f32> = (0..t * w).map(|_| rng.gen_range(-2.0..2.0)).collect();
                let max_len = *lens.iter().max().unwrap();
                // A relative position bias (MPNet's) for sequences a little longer than the longest here.
                let reach = max_len + 2;
                let table: Vec<f32> = (0..heads * (2 * reach - 1))
                    .map(|_| rng.gen_range(-3.0..3.0))
                    .collect();
                let bias = Bias::Relative(Relative {
                    table: &table,
                    reach,
                });
                // bf16 rounds Q, K, V and the probabilities to 8 significant bits; f32 only reorders sums.
                for (bf16, tolerance, bias, keys) in [
                    (false, 1e-5, None, &lens),
                    (true, 3e-2, None, &lens),
                    (false, 1e-5, Some(bias), &lens),
                    (true, 3e-2, Some(bias), &lens),
                    (false, 1e-5, None, &some_keys),
                    (true, 3e-2, Some(bias), &some_keys),
                ] {
                    let expect = reference(&offsets, keys, &qkv, shape, bias);
                    if bf16 && !gemm::bf16_supported() {
                        eprintln!("SKIPPED: bf16 attention (this CPU has no AVX512-BF16)");
                        continue;
                    }
                    let mut ctx = vec![f32::NAN; t * heads * head_dim];
                    let scratch =
                        Scratch::new(2, scratch_floats(Isa::detect(), max_len, shape, bf16));
                    let mut qkv16 = vec![0u16; t * w];
                    let q16 = bf16.then(|| Mat::new(&mut qkv16, t, w));
                    let c = Mat::new(&mut ctx, t, heads * head_dim);
                    let q = Mat::new(&mut qkv, t, w);
                    let par = Eager { pool: &pool };
                    attention(&par, &offsets, keys, q, q16, shape, bias, c, &scratch);
                    for (i, (a, e)) in ctx.iter().zip(&expect).enumerate() {
                        assert!(
                            (a - e).abs() < tolerance,
                            "bf16={bf16} bias={} keys {keys:?} {shape:?} [{i}]: {a} vs {e}",
                            bias.is_some()
                        );
                    }
                }
            }
        }
    }

    /// DeBERTa's disentangled attention: both terms, each alone, log-bucketed positions (sequences longer and
    /// shorter than the buckets' exact half) and plain clamped ones, f32 and bf16 (terms in f32 either way), every
    /// token a key or (ColBERT's unattended expansion) the first three quarters; an empty sequence among them.
    #[test]
    fn disentangled_attention_matches_the_definition() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(17);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .expect("pool");
        let (heads, head_dim, lens) = (3, 16, vec![1usize, 9, 0, 40, 23]);
        let some_keys: Vec<usize> = lens.iter().map(|&l| (l - l / 4).max(l.min(1))).collect();
        let dises = [
            (8, Some((8, 32)), true, true),
            (8, Some((8, 32)), true, false),
            (8, Some((8, 32)), false, true),
            (6, None, true, true),
            (64, Some((64, 128)), true, true),
        ];
        for (span, buckets, c2p, p2c) in dises {
            let dis = Disentangled {
                span,
                buckets,
                c2p,
                p2c,
            };
            let terms = 1 + usize::from(c2p) + usize::from(p2c);
            let shape = AttentionShape {
                scale: 1.0 / ((head_dim * terms) as f32).sqrt(),
                disentangled: Some(dis),
                ..AttentionShape::new(heads, heads, head_dim)
            };
            let mut offsets = vec![0];
            for l in &lens {
                offsets.push(offsets.last().unwrap() + l);
            }
            let t = *offsets.last().unwrap();
            let w = shape.qkv_width();
            let mut qkv: Vec<f32> = (0..t * w).map(|_| rng.gen_range(-2.0..2.0)).collect();
            let mut proj = || -> Vec<f32> {
                (0..2 * span * heads * head_dim)
                    .map(|_| rng.gen_range(-2.0..2.0))
                    .collect()
            };
            let (key, query) = (proj(), proj());
            let bias = Bias::Disentangled {
                key: c2p.then_some(&key[..]),
                query: p2c.then_some(&query[..]),
            };
            let max_len = *lens.iter().max().unwrap();
            for (bf16, tolerance, keys) in [
                (false, 1e-5, &lens),
                (true, 3e-2, &lens),
                (false, 1e-5, &some_keys),
                (true, 3e-2, &some_keys),
            ] {
                let expect = reference(&offsets, keys, &qkv, shape, Some(bias));
                if bf16 && !gemm::bf16_supported() {
                    eprintln!("SKIPPED: bf16 attention (this CPU has no AVX512-BF16)");
                    continue;
                }
                let mut ctx = vec![f32::NAN; t * heads * head_dim];
                let scratch = Scratch::new(2, scratch_floats(Isa::detect(), max_len, shape, bf16));
                let mut qkv16 = vec![0u16; t * w];
                let q16 = bf16.then(|| Mat::new(&mut qkv16, t, w));
                let c = Mat::new(&mut ctx, t, heads * head_dim);
                let q = Mat::new(&mut qkv, t, w);
                let par = Eager { pool: &pool };
                attention(&par, &offsets, keys, q, q16, shape, Some(bias), c, &scratch);
                for (i, (a, e)) in ctx.iter().zip(&expect).enumerate() {
                    assert!(
                        (a - e).abs() < tolerance,
                        "bf16={bf16} keys {keys:?} {dis:?} [{i}]: {a} vs {e}"
                    );
                }
            }
        }
    }

    /// DeBERTa's rows: transformers' `make_log_bucket_position` at v3's 256 buckets over 512 positions for every
    /// relative position from -1100 to 1100 (`scripts/make_encoder_fixtures.py` wrote them), offset by the span
    /// and clamped.
    #[test]
    fn disentangled_rows_are_debertas_log_buckets() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/deberta_mean/buckets.json");
        let json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(path).expect("buckets.json"))
                .expect("JSON");
        let number = |key: &str| json[key].as_u64().map_or(0, |v| v as usize);
        let (buckets, max_position) = (number("num_buckets"), number("max_distance"));
        let dis = Disentangled {
            span: buckets,
            buckets: Some((buckets, max_position)),
            c2p: true,
            p2c: true,
        };
        let list = |key: &str| -> Vec<i64> {
            json[key]
                .as_array()
                .expect(key)
                .iter()
                .map(|v| v.as_i64().expect("integer"))
                .collect()
        };
        let (distances, rows) = (list("distances"), list("buckets"));
        assert_eq!(distances.len(), 2201);
        for (delta, bucket) in distances.into_iter().zip(rows) {
            let want = (bucket + buckets as i64).clamp(0, 2 * buckets as i64 - 1) as usize;
            assert_eq!(dis.row(delta), want, "δ {delta}");
        }
    }

    /// A cap the kernels would divide by is refused before anything runs, whatever built the shape.
    #[test]
    #[should_panic(expected = "soft cap")]
    fn a_soft_cap_of_zero_is_refused() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .expect("pool");
        let shape = AttentionShape {
            softcap: Some(0.0),
            ..AttentionShape::new(1, 1, 4)
        };
        let (mut qkv, mut ctx) = (vec![0.0; 12], vec![0.0; 4]);
        let scratch = Scratch::new(1, scratch_floats(Isa::detect(), 1, shape, false));
        let (q, c) = (Mat::new(&mut qkv, 1, 12), Mat::new(&mut ctx, 1, 4));
        attention(
            &Eager { pool: &pool },
            &[0, 1],
            &[1],
            q,
            None,
            shape,
            None,
            c,
            &scratch,
        );
    }
}
