//! Scaled dot-product attention over a ragged batch, one task per (sequence, head), on our GEMM tiles.
//!
//! A task packs its head's keys (as `Kᵀ` panels) and values once into its thread's slab, then walks the query
//! rows one register tile at a time: scores for those rows only (`MR × len`, never `len × len`), a row softmax,
//! and the product with V written straight into the context matrix. Sequences never see each other, which is
//! what the padding mask achieves in the padded reference; there is no padding to mask.

use super::gemm::{self, Isa, Out};
use super::kernels;
use super::par::{Mat, Par, Scratch};

/// Scratch floats one task needs for sequences of up to `max_len` tokens and heads of width `d`.
pub fn scratch_floats(isa: Isa, max_len: usize, d: usize) -> usize {
    let (mr, nr) = (isa.mr(), isa.nr());
    let keys = max_len.div_ceil(nr) * nr;
    keys * d + d.div_ceil(nr) * nr * max_len + mr * keys
}

/// `ctx[:, head] = softmax(Q Kᵀ / √d) V` for every sequence and head; `qkv` is the fused `[t, 3h]` projection.
pub fn attention(
    par: &dyn Par,
    offsets: &[usize],
    qkv: Mat,
    ctx: Mat,
    heads: usize,
    scratch: &Scratch,
) {
    let isa = Isa::detect();
    let (mr, nr) = (isa.mr(), isa.nr());
    let h = ctx.cols;
    let d = h / heads;
    let scale = 1.0 / (d as f32).sqrt();
    let seqs = offsets.len() - 1;
    par.run_dynamic(seqs * heads, &|task, worker| {
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
            let mut ctx = vec![f32::NAN; t * h];
            let max_len = *lens.iter().max().unwrap();
            let scratch = Scratch::new(2, scratch_floats(Isa::detect(), max_len, h / heads));
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(2)
                .build()
                .unwrap();
            let (q, c) = (Mat::new(&mut qkv, t, 3 * h), Mat::new(&mut ctx, t, h));
            pool.install(|| attention(&Eager { threads: 2 }, &offsets, q, c, heads, &scratch));
            for (i, (a, e)) in ctx
                .iter()
                .zip(reference(&offsets, &qkv, h, heads))
                .enumerate()
            {
                assert!(
                    (a - e).abs() < 1e-5,
                    "h={h} heads={heads} [{i}]: {a} vs {e}"
                );
            }
        }
    }
}
