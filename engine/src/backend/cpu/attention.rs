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

/// Scratch floats one task needs for sequences of up to `max_len` tokens and heads of width `d`.
pub fn scratch_floats(isa: Isa, max_len: usize, d: usize, bf16: bool) -> usize {
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

/// Where attention reads Q, K and V: the fused `[t, 3h]` projection, in f32, or rounded to bf16 (`ld` in u16)
/// for the bf16 tiles.
#[derive(Clone, Copy)]
pub enum Qkv {
    F32(Mat),
    Bf16 { ptr: *const u16, ld: usize },
}

// Safety: read only, during one operation.
unsafe impl Sync for Qkv {}

/// `ctx[:, head] = softmax(Q Kᵀ / √d) V` for every sequence and head.
pub fn attention(
    par: &dyn Par,
    offsets: &[usize],
    qkv: Qkv,
    ctx: Mat,
    heads: usize,
    scratch: &Scratch,
) {
    let qkv = match qkv {
        Qkv::F32(m) => m,
        #[cfg(target_arch = "x86_64")]
        Qkv::Bf16 { ptr, ld } => return attention_bf16(par, offsets, ptr, ld, ctx, heads, scratch),
        #[cfg(not(target_arch = "x86_64"))]
        Qkv::Bf16 { .. } => unreachable!("bf16 needs AVX512-BF16"),
    };
    let isa = Isa::detect();
    let (mr, nr) = (isa.mr(), isa.nr());
    let h = ctx.cols;
    let d = h / heads;
    let scale = 1.0 / (d as f32).sqrt();
    let seqs = offsets.len() - 1;
    par.run(seqs * heads, &|task, worker| {
        let (s, head) = (task / heads, task % heads);
        let (start, len) = (offsets[s], offsets[s + 1] - offsets[s]);
        let keys = len.div_ceil(nr) * nr;
        // Safety: the slab is this worker's; the task reads rows start..start+len of qkv (read-only during this
        // operation) and writes only its own head's columns of those rows in ctx.
        unsafe {
            let slab = scratch.slab(worker);
            let (kt, rest) = slab.split_at_mut(keys * d);
            let (v, rest) = rest.split_at_mut(d.div_ceil(nr) * nr * len);
            let scores = &mut rest[..mr * keys];
            gemm::pack_rows(qkv.at(start, h + head * d), qkv.ld, len, d, nr, kt);
            gemm::pack_cols(qkv.at(start, 2 * h + head * d), qkv.ld, len, d, nr, v);
            let scores = Mat::new(scores, mr, keys);
            for q0 in (0..len).step_by(mr) {
                let rows = mr.min(len - q0);
                let q = qkv.at(start + q0, head * d);
                for p in 0..keys / nr {
                    let out = Out::plain(scores, 0, p * nr, nr.min(len - p * nr));
                    gemm::tile_f32(isa, q, qkv.ld, rows, kt.as_ptr().add(p * nr * d), d, &out);
                }
                for r in 0..rows {
                    kernels::softmax_rows(&mut scores.row_mut(r)[..len], len, scale);
                }
                for p in 0..d.div_ceil(nr) {
                    let panel = v.as_ptr().add(p * nr * len);
                    let out = Out::plain(ctx, start + q0, head * d + p * nr, nr.min(d - p * nr));
                    gemm::tile_f32(isa, scores.ptr(), scores.ld, rows, panel, len, &out);
                }
            }
        }
    });
}

/// The bf16 variant of [`attention`]: Q tiles are read in place, keys are transposed as 32-bit pairs into the
/// tile's panel layout, and each pair of value rows is interleaved into one panel row.
#[cfg(target_arch = "x86_64")]
fn attention_bf16(
    par: &dyn Par,
    offsets: &[usize],
    qkv: *const u16,
    ld: usize,
    ctx: Mat,
    heads: usize,
    scratch: &Scratch,
) {
    let (mr, nr) = gemm::BF16_TILE;
    let h = ctx.cols;
    let d = h / heads;
    let dp = d / 2;
    let scale = 1.0 / (d as f32).sqrt();
    let seqs = offsets.len() - 1;
    let qkv = qkv as usize;
    par.run(seqs * heads, &|task, worker| {
        let (s, head) = (task / heads, task % heads);
        let (start, len) = (offsets[s], offsets[s + 1] - offsets[s]);
        let (keys, lp) = (len.div_ceil(nr) * nr, len.div_ceil(2));
        // Safety: as in `attention`; the slices are carved from this worker's slab, sized by `scratch_floats`.
        unsafe {
            let row = |j: usize, part: usize| {
                (qkv as *const u16).add((start + j) * ld + part * h + head * d)
            };
            let slab = scratch.slab(worker);
            let (k_panels, rest) = slab.split_at_mut(keys * dp);
            let (v_panels, rest) = rest.split_at_mut(d.div_ceil(nr) * nr * lp);
            let (scores, rest) = rest.split_at_mut(mr * keys);
            let p_tile = std::slice::from_raw_parts_mut(rest.as_mut_ptr() as *mut u16, 2 * mr * lp);
            // A key's bf16 pairs are 32-bit values: packing them is the f32 transpose.
            gemm::pack_rows(row(0, 1) as *const f32, ld / 2, len, dp, nr, k_panels);
            let v16 = std::slice::from_raw_parts_mut(
                v_panels.as_mut_ptr() as *mut u16,
                2 * v_panels.len(),
            );
            for p in 0..d.div_ceil(nr) {
                let cols = nr.min(d - p * nr);
                for kp in 0..lp {
                    let second = (2 * kp + 1 < len).then(|| row(2 * kp + 1, 2).add(p * nr));
                    let dst = &mut v16[(p * lp + kp) * 2 * nr..(p * lp + kp + 1) * 2 * nr];
                    gemm::interleave_bf16(row(2 * kp, 2).add(p * nr), second, cols, dst);
                }
            }
            let scores = Mat::new(scores, mr, keys);
            for q0 in (0..len).step_by(mr) {
                let rows = mr.min(len - q0);
                for p in 0..keys / nr {
                    let out = Out::plain(scores, 0, p * nr, nr.min(len - p * nr));
                    let panel = (k_panels.as_ptr() as *const u16).add(p * nr * d);
                    gemm::tile_bf16(row(q0, 0), ld, rows, panel, dp, &out);
                }
                for r in 0..rows {
                    let probs = &mut scores.row_mut(r)[..len];
                    kernels::softmax_rows(probs, len, scale);
                    gemm::to_bf16(probs, &mut p_tile[r * 2 * lp..(r + 1) * 2 * lp]);
                }
                for p in 0..d.div_ceil(nr) {
                    let panel = v16.as_ptr().add(p * lp * 2 * nr);
                    let out = Out::plain(ctx, start + q0, head * d + p * nr, nr.min(d - p * nr));
                    gemm::tile_bf16(p_tile.as_ptr(), 2 * lp, rows, panel, lp, &out);
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

    /// Attention by its definition, in f64, one sequence at a time.
    fn reference(offsets: &[usize], qkv: &[f32], h: usize, heads: usize) -> Vec<f32> {
        let d = h / heads;
        let mut out = vec![0.0; offsets[offsets.len() - 1] * h];
        for w in offsets.windows(2) {
            let (s, len) = (w[0], w[1] - w[0]);
            for head in 0..heads {
                for i in 0..len {
                    let q = |j: usize| qkv[(s + i) * 3 * h + head * d + j] as f64;
                    let scores: Vec<f64> = (0..len)
                        .map(|k| {
                            (0..d)
                                .map(|j| q(j) * qkv[(s + k) * 3 * h + h + head * d + j] as f64)
                                .sum::<f64>()
                                / (d as f64).sqrt()
                        })
                        .collect();
                    let max = scores.iter().cloned().fold(f64::MIN, f64::max);
                    let z: f64 = scores.iter().map(|x| (x - max).exp()).sum();
                    for j in 0..d {
                        out[(s + i) * h + head * d + j] = (0..len)
                            .map(|k| {
                                (scores[k] - max).exp() / z
                                    * qkv[(s + k) * 3 * h + 2 * h + head * d + j] as f64
                            })
                            .sum::<f64>()
                            as f32;
                    }
                }
            }
        }
        out
    }

    #[test]
    fn ragged_attention_matches_the_definition() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(9);
        // Heads narrower and wider than a panel, sequences shorter and longer than a tile, a 1-token sequence.
        for (h, heads, lens) in [
            (32, 4, vec![1usize, 5, 13, 40]),
            (384, 12, vec![12, 150, 3]),
            (96, 1, vec![33, 7]),
        ] {
            let mut offsets = vec![0];
            for l in &lens {
                offsets.push(offsets.last().unwrap() + l);
            }
            let t = *offsets.last().unwrap();
            let mut qkv: Vec<f32> = (0..t * 3 * h).map(|_| rng.gen_range(-2.0..2.0)).collect();
            let max_len = *lens.iter().max().unwrap();
            let expect = reference(&offsets, &qkv, h, heads);
            // bf16 rounds Q, K, V and the probabilities to 8 significant bits; f32 only reorders sums.
            for (bf16, tolerance) in [(false, 1e-5), (true, 3e-2)] {
                if bf16 && !super::super::gemm::bf16_supported() {
                    continue;
                }
                let mut ctx = vec![f32::NAN; t * h];
                let scratch =
                    Scratch::new(2, scratch_floats(Isa::detect(), max_len, h / heads, bf16));
                let pool = rayon::ThreadPoolBuilder::new()
                    .num_threads(2)
                    .build()
                    .unwrap();
                let mut qkv16 = vec![0u16; t * 3 * h];
                let q = if bf16 {
                    for (src, dst) in qkv.chunks(3 * h).zip(qkv16.chunks_mut(3 * h)) {
                        unsafe { super::super::gemm::to_bf16(src, dst) };
                    }
                    Qkv::Bf16 {
                        ptr: qkv16.as_ptr(),
                        ld: 3 * h,
                    }
                } else {
                    Qkv::F32(Mat::new(&mut qkv, t, 3 * h))
                };
                let c = Mat::new(&mut ctx, t, h);
                let par = Eager { threads: 2 };
                pool.install(|| attention(&par, &offsets, q, c, heads, &scratch));
                for (i, (a, e)) in ctx.iter().zip(&expect).enumerate() {
                    assert!(
                        (a - e).abs() < tolerance,
                        "bf16={bf16} h={h} heads={heads} [{i}]: {a} vs {e}"
                    );
                }
            }
        }
    }
}
