// Scaled dot-product attention over a ragged batch (Ops::attention): ctx[:, head] = softmax(S) V per sequence and
// head, S being Q K^T times `scale`, soft-capped where `softcap` > 0, plus `bias` (attention_score), from the fused
// [Q | K | V] projection; query head h reads key/value head h / (heads / kv_heads); causal: query i sees keys 0..=i
// of its own sequence; window >= 0: only keys at most `window` from it (a sliding window, ModernBERT's local
// layers); the keys of sequence s are its first keys[s] tokens (all of them but for a query's unattended expansion,
// Batch::keys), every token a query. Sequences never see each other.
//
// `shadow` (may be null): ctx's bf16 rounding for the output projection (common.cuh).
//
// Flash-style: a block is a tile of (sequence, query head, QUERIES query rows); it streams the sequence's keys and
// values through shared memory KEYS at a time and keeps, per query row, the running max, the running sum and
// the unnormalised output (online softmax), so the len x len scores never exist. A warp owns QPW query rows and
// works them together, so each step is QPW independent chains rather than one (at small batches the kernel is
// bound by latency, not throughput): for each key tile lane j scores key j against the warp's QPW queries, the
// reductions over the warp run side by side, then every lane accumulates its own columns of V (head_dim / 32 of
// them) for the QPW rows, each value read once, weighted by the probabilities shuffled from the lanes.
//
// Grid: (query tiles of the bucket, heads). The batch's tiles are listed in `tiles` ({sequence, first query row}
// each, as many as `meta` says), so the grid covers what the bucket can hold (tokens / QUERIES + sequences tiles)
// and no block is spent on tiles past a short sequence's end; blocks past the batch's tiles return at once.
// head_dim: a multiple of 32, at most HEAD_DIM_MAX (the host checks). Dynamic shared memory:
// (KEYS * (d + 1) + KEYS * d + QUERIES * d) floats (past 48 KiB for heads wider than 128: the host opts in).
//
// Two entry points, the same body sized for the widest head each takes: `attention` for heads up to
// HEAD_DIM_NARROW, `attention_wide` up to HEAD_DIM_MAX (EmbeddingGemma's 256), so the common heads keep their
// registers (a lane's accumulators are QPW x COLS columns, sized at compile time).

// QUERIES, KEYS, WARPS, HEAD_DIM_NARROW and HEAD_DIM_MAX are defined by the host (engine/src/backend/cuda/nvrtc.rs,
// from the constants its tile list, launch and shared-memory size use).
#define QPW (QUERIES / WARPS)
static_assert(QUERIES % WARPS == 0, "a warp owns QUERIES / WARPS query rows");
static_assert(KEYS == 32, "lane j of a warp scores key j of a tile");
static_assert(HEAD_DIM_NARROW % 32 == 0 && HEAD_DIM_MAX % 32 == 0, "a lane accumulates D_MAX / 32 columns");

template <int D_MAX>
__device__ __forceinline__ void attention_body(ATTENTION_PARAMS, float* smem) {
    constexpr int COLS_MAX = D_MAX / 32;
    AttentionTile tile;
    if (!attention_tile(offsets, keys, tiles, meta, heads, kv_heads, head_dim, &tile)) {
        return;
    }
    const int start = tile.start, len = tile.len, keys_seen = tile.keys, q0 = tile.q0, qc = tile.qc, kc = tile.kc,
              vc = tile.vc;
    const int d = head_dim, cols = d / 32;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int row0 = q0 + warp * QPW;  // the warp's first query row

    // K rows padded by one float so that lane j reading row j walks distinct banks.
    float* ks = smem;                   // KEYS x (d + 1)
    float* vs = ks + KEYS * (d + 1);    // KEYS x d
    float* qs = vs + KEYS * d;          // QUERIES x d

    // Rows by warp, columns by lane: coalesced, and no division by the runtime head_dim.
    for (int r = warp; r < QUERIES; r += WARPS) {
        const bool in = q0 + r < len;
        const float* src = qkv + (size_t)(start + q0 + r) * ld_qkv + qc;
        for (int e = lane; e < d; e += 32) {
            qs[r * d + e] = in ? src[e] : 0.0f;
        }
    }

    float m[QPW], l[QPW], acc[QPW][COLS_MAX];
#pragma unroll
    for (int i = 0; i < QPW; i++) {
        m[i] = NEG_INF;
        l[i] = 0.0f;
#pragma unroll
        for (int c = 0; c < COLS_MAX; c++) {
            acc[i][c] = 0.0f;
        }
    }

    // Keys any query row of this tile sees.
    int key_begin, key_end;
    tile_keys(q0, min(len, q0 + QUERIES) - 1, keys_seen, causal, window, KEYS, &key_begin, &key_end);
    const float* qw = qs + warp * QPW * d;
    for (int k0 = key_begin; k0 < key_end; k0 += KEYS) {
        __syncthreads();
        for (int j = warp; j < KEYS; j += WARPS) {
            const bool in = k0 + j < keys_seen;
            const float* row = qkv + (size_t)(start + k0 + j) * ld_qkv;
            for (int e = lane; e < d; e += 32) {
                ks[j * (d + 1) + e] = in ? row[kc + e] : 0.0f;
                vs[j * d + e] = in ? row[vc + e] : 0.0f;
            }
        }
        __syncthreads();
        const int key = k0 + lane;
        // Lane j's key against the warp's QPW queries: one read of each key value, QPW independent sums.
        float score[QPW];
#pragma unroll
        for (int i = 0; i < QPW; i++) {
            score[i] = 0.0f;
        }
        const float* k = ks + lane * (d + 1);
#pragma unroll 4
        for (int e = 0; e < d; e++) {
            const float kv_e = k[e];
#pragma unroll
            for (int i = 0; i < QPW; i++) {
                score[i] += qw[i * d + e] * kv_e;
            }
        }
        float p[QPW], tile_max[QPW];
#pragma unroll
        for (int i = 0; i < QPW; i++) {
            const int row = row0 + i;
            const bool visible = key_visible(row, key, len, keys_seen, causal, window);
            score[i] = visible ? attention_score(score[i], scale, softcap, relative_bias(bias, reach, row, key))
                               : NEG_INF;
            tile_max[i] = score[i];
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
#pragma unroll
            for (int i = 0; i < QPW; i++) {
                tile_max[i] = fmaxf(tile_max[i], __shfl_xor_sync(0xffffffffu, tile_max[i], o));
            }
        }
        float correction[QPW], sum[QPW];
#pragma unroll
        for (int i = 0; i < QPW; i++) {
            const float m_new = fmaxf(m[i], tile_max[i]);
            // A row that has seen nothing yet (m_new = -inf: past the sequence, or no visible key so far) adds
            // nothing and keeps its zero state; otherwise expf(-inf) = 0 masks the invisible keys.
            const bool any = m_new != NEG_INF;
            p[i] = any ? expf(score[i] - m_new) : 0.0f;
            correction[i] = any ? expf(m[i] - m_new) : 1.0f;  // 0 on the first visible tile (m = -inf)
            m[i] = m_new;
            sum[i] = p[i];
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
#pragma unroll
            for (int i = 0; i < QPW; i++) {
                sum[i] += __shfl_xor_sync(0xffffffffu, sum[i], o);
            }
        }
#pragma unroll
        for (int i = 0; i < QPW; i++) {
            l[i] = l[i] * correction[i] + sum[i];
#pragma unroll
            for (int c = 0; c < COLS_MAX; c++) {
                acc[i][c] *= correction[i];
            }
        }
#pragma unroll 4
        for (int j = 0; j < KEYS; j++) {
            float pj[QPW];
#pragma unroll
            for (int i = 0; i < QPW; i++) {
                pj[i] = __shfl_sync(0xffffffffu, p[i], j);
            }
#pragma unroll
            for (int c = 0; c < COLS_MAX; c++) {
                if (c < cols) {
                    const float v = vs[j * d + c * 32 + lane];
#pragma unroll
                    for (int i = 0; i < QPW; i++) {
                        acc[i][c] += pj[i] * v;
                    }
                }
            }
        }
    }

#pragma unroll
    for (int i = 0; i < QPW; i++) {
        const int row = row0 + i;
        if (row < len) {
            // A row sees a key (the batch's keys and the model's window see to it); one that sees none gets 0.
            const float inv = l[i] > 0.0f ? 1.0f / l[i] : 0.0f;
            float* o = ctx + (size_t)(start + row) * ld_ctx + qc;
#pragma unroll
            for (int c = 0; c < COLS_MAX; c++) {
                if (c < cols) {
                    const float v = acc[i][c] * inv;
                    o[c * 32 + lane] = v;
                    shadow_store(shadow, heads * d, start + row, qc + c * 32 + lane, v);
                }
            }
        }
    }
}

ATTENTION_ENTRY(attention, WARPS * 32, attention_body, HEAD_DIM_NARROW)
ATTENTION_ENTRY(attention_wide, WARPS * 32, attention_body, HEAD_DIM_MAX)
