// Scaled dot-product attention over a ragged batch (Ops::attention): ctx[:, head] = softmax(Q K^T / sqrt(d)) V per
// sequence and head, from the fused [Q | K | V] projection; query head h reads key/value head h / (heads /
// kv_heads); causal: query i sees keys 0..=i of its own sequence. Sequences never see each other.
//
// Flash-style: a block is a tile of (sequence, query head, QUERIES query rows); it streams the sequence's keys and
// values through shared memory KEYS at a time and keeps, per query row, the running max, the running sum and
// the unnormalised output (online softmax), so the len x len scores never exist. A warp owns QPW query rows; for
// each key tile lane j scores key j against the warp's query, then every lane accumulates its own columns of V
// (head_dim / 32 of them) weighted by the probabilities shuffled from the lanes.
//
// Grid: (sequences of the bucket, heads, query tiles of the longest sequence the bucket can hold); blocks past
// the batch's sequences, or past their sequence's length, return at once. head_dim: a multiple of 32, at most
// HEAD_DIM_MAX (the host checks). Dynamic shared memory: attention_smem_floats(head_dim) floats.

#define WARPS 4
#define QPW 4
#define QUERIES (WARPS * QPW)
#define KEYS 32
#define HEAD_DIM_MAX 128
#define COLS_MAX (HEAD_DIM_MAX / 32)

extern "C" __global__ void __launch_bounds__(WARPS * 32)
    attention(const float* qkv, int ld_qkv, float* ctx, int ld_ctx, const int* offsets, const int* meta,
              int heads, int kv_heads, int head_dim, int causal, float scale) {
    const int s = blockIdx.x, h = blockIdx.y, q0 = blockIdx.z * QUERIES;
    if (s >= META_SEQS(meta)) {
        return;
    }
    const int start = offsets[s], len = offsets[s + 1] - start;
    if (q0 >= len) {
        return;
    }
    const int d = head_dim, cols = d / 32;
    const int kv = h / (heads / kv_heads);
    const int qc = h * d, kc = heads * d + kv * d, vc = (heads + kv_heads) * d + kv * d;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

    // K rows padded by one float so that lane j reading row j walks distinct banks.
    extern __shared__ float smem[];
    float* ks = smem;                   // KEYS x (d + 1)
    float* vs = ks + KEYS * (d + 1);    // KEYS x d
    float* qs = vs + KEYS * d;          // QUERIES x d

    for (int i = threadIdx.x; i < QUERIES * d; i += blockDim.x) {
        const int r = q0 + i / d;
        qs[i] = r < len ? qkv[(size_t)(start + r) * ld_qkv + qc + i % d] : 0.0f;
    }

    float m[QPW], l[QPW], acc[QPW][COLS_MAX];
    for (int i = 0; i < QPW; i++) {
        m[i] = NEG_INF;
        l[i] = 0.0f;
        for (int c = 0; c < COLS_MAX; c++) {
            acc[i][c] = 0.0f;
        }
    }

    // Keys any query row of this tile sees.
    const int last_q = min(len, q0 + QUERIES) - 1;
    const int key_end = causal ? last_q + 1 : len;
    for (int k0 = 0; k0 < key_end; k0 += KEYS) {
        __syncthreads();
        for (int i = threadIdx.x; i < KEYS * d; i += blockDim.x) {
            const int j = i / d, e = i % d;
            const bool in = k0 + j < len;
            const size_t at = (size_t)(start + k0 + j) * ld_qkv;
            ks[j * (d + 1) + e] = in ? qkv[at + kc + e] : 0.0f;
            vs[j * d + e] = in ? qkv[at + vc + e] : 0.0f;
        }
        __syncthreads();
        const int key = k0 + lane;
        for (int i = 0; i < QPW; i++) {
            const int row = q0 + warp * QPW + i;
            if (row >= len) {
                break;  // the same for the whole warp
            }
            const bool visible = key < len && (!causal || key <= row);
            float score = NEG_INF;
            if (visible) {
                const float* q = qs + (warp * QPW + i) * d;
                const float* k = ks + lane * (d + 1);
                float dot = 0.0f;
                for (int e = 0; e < d; e++) {
                    dot += q[e] * k[e];
                }
                score = dot * scale;
            }
            const float tile_max = warp_max(score);
            if (tile_max == NEG_INF) {
                continue;  // nothing visible to this row in this tile (warp-uniform)
            }
            const float m_new = fmaxf(m[i], tile_max);
            const float p = visible ? expf(score - m_new) : 0.0f;
            const float correction = expf(m[i] - m_new);  // 0 on the first tile (m = -inf)
            l[i] = l[i] * correction + warp_sum(p);
            for (int c = 0; c < COLS_MAX; c++) {
                acc[i][c] *= correction;
            }
            for (int j = 0; j < KEYS; j++) {
                const float pj = __shfl_sync(0xffffffffu, p, j);
                for (int c = 0; c < COLS_MAX; c++) {
                    if (c < cols) {
                        acc[i][c] += pj * vs[j * d + c * 32 + lane];
                    }
                }
            }
            m[i] = m_new;
        }
    }

    for (int i = 0; i < QPW; i++) {
        const int row = q0 + warp * QPW + i;
        if (row >= len) {
            break;
        }
        // Every row sees at least itself, so l > 0.
        const float inv = 1.0f / l[i];
        float* o = ctx + (size_t)(start + row) * ld_ctx + qc;
        for (int c = 0; c < COLS_MAX; c++) {
            if (c < cols) {
                o[c * 32 + lane] = acc[i][c] * inv;
            }
        }
    }
}
