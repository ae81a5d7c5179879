// Pooling and the model's Normalize module (Ops::pool, and the CUDA backend's normalizing of pooled rows).

// One block per sequence: its output row is its tokens' mean (mode 0), first token (1), last token (2), column-wise
// maximum (3), sum over the square root of their count (4) or mean weighted by position, 1 to n (5), over its tokens
// from the readouts[s]-th on (a left-out prompt's; the last token at least), each weighted mean's weight its position
// in the whole sequence; a sequence whose readout is Tokens (readouts[s] = -1) gets a copy of every token's row
// instead, in its output rows out_offsets[s]..out_offsets[s + 1]. With `norms` (null for none), the pooled row then takes sentence-transformers'
// Normalize in the same pass: scaled to unit L2 norm (the norm clamped at 1e-12, as torch.nn.functional.normalize),
// its norm written to norms[s]; Tokens rows are left as they are (norms[s] = -1), since Normalize never applies to
// token states. (Fused: a separate Normalize launch was one more per forward, and one more read of the rows.)
extern "C" __global__ void pool(const float* x, int ldx, float* out, int ldo, int cols, const int* offsets,
                                const int* out_offsets, const int* readouts, const int* meta, int mode,
                                float* norms) {
    __shared__ float scratch[32];
    const int s = blockIdx.x;
    if (s >= META_SEQS(meta)) {
        return;
    }
    const int first = offsets[s], end = offsets[s + 1];
    // The same for every thread of the block, so the block returns whole and its reduction below stays whole.
    if (readouts[s] < 0) {
        for (int t = first; t < end; t++) {
            const float* in = x + (size_t)t * ldx;
            float* o = out + (size_t)(out_offsets[s] + t - first) * ldo;
            for (int c = threadIdx.x; c < cols; c += blockDim.x) {
                o[c] = in[c];
            }
        }
        if (norms && threadIdx.x == 0) {
            norms[s] = -1.0f;
        }
        return;
    }
    const int start = first + min(readouts[s], max(end - first - 1, 0));
    float* o = out + (size_t)out_offsets[s] * ldo;
    float q = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        float v;
        const float n = (float)(end - start);
        if (mode == 1) {
            v = x[(size_t)start * ldx + c];
        } else if (mode == 2) {
            v = x[(size_t)(end - 1) * ldx + c];
        } else if (mode == 3) {
            v = x[(size_t)start * ldx + c];
            for (int t = start + 1; t < end; t++) {
                v = fmaxf(v, x[(size_t)t * ldx + c]);
            }
        } else if (mode == 5) {
            // Weights k + 1..m (positions in the whole sequence), whose sum is (m - k)(m + k + 1) / 2.
            v = 0.0f;
            for (int t = start; t < end; t++) {
                v += (float)(t - first + 1) * x[(size_t)t * ldx + c];
            }
            const float k = (float)(start - first), m = (float)(end - first);
            v *= 2.0f / ((m - k) * (m + k + 1.0f));
        } else {
            v = 0.0f;
            for (int t = start; t < end; t++) {
                v += x[(size_t)t * ldx + c];
            }
            v *= mode == 4 ? 1.0f / sqrtf(n) : 1.0f / n;
        }
        o[c] = v;
        q += v * v;
    }
    if (!norms) {
        return;
    }
    // Each thread scales the columns it wrote: no barrier needed between the writes and these reads.
    const float norm = sqrtf(block_sum(q, scratch));
    const float inv = 1.0f / fmaxf(norm, 1e-12f);
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        o[c] *= inv;
    }
    if (threadIdx.x == 0) {
        norms[s] = norm;
    }
}
