// Scaled dot-product attention on tensor cores (Ops::attention with `gpu_attention = tensor-cores`): the same
// contract, grid and tiles as attention.cu (read its header), with both products on bf16 m16n8k16 MMA tiles and f32
// accumulation; the softmax stays in f32. Q, K, V and each tile's (unnormalised) probabilities are rounded to bf16
// for the products; the running sums add the probabilities in f32.
//
// A block is one tile of (sequence, query head, QUERIES = 16 query rows): the rows of one MMA tile. Its MMA_WARPS
// warps split the keys: warp w takes key tiles w, w + MMA_WARPS, ... of MMA_KEYS keys, stages each (K row-major,
// V transposed, both bf16) in its own slice of shared memory, and keeps its own online softmax (running max, sum
// and unnormalised output per row, in the MMA accumulator layout: FlashAttention-2's scheme, where the scores'
// accumulator fragment is already the probabilities' A fragment of the next product). At the end the warps'
// partial results are merged through shared memory. Splitting the keys, not the rows, is what keeps 4 warps busy
// on one 16-row tile of a long sequence; a 12-token query uses one warp of the block.
//
// Fragment layouts are the PTX ISA's for mma.m16n8k16 with .bf16 (g = lane / 4, t = lane % 4; two bf16 per
// 32-bit register, the lower index in the low half):
//   A (16 x 16, row): a0 = (row g, cols 2t, 2t+1), a1 = (g + 8, 2t..), a2 = (g, 2t + 8..), a3 = (g + 8, 2t + 8..)
//   B (16 x 8, col):  b0 = (rows 2t, 2t+1, col g), b1 = (rows 2t + 8, 2t + 9, col g)
//   C (16 x 8, f32):  c0, c1 = (row g, cols 2t, 2t+1), c2, c3 = (row g + 8, cols 2t, 2t+1)
//
// Two entry points, the same body sized for the widest head each takes: `attention_mma` for heads up to
// HEAD_DIM_NARROW holds the tile's Q fragments in registers beside the output accumulators; `attention_mma_wide`
// (up to HEAD_DIM_MAX, EmbeddingGemma's 256) has twice the accumulators, so it stages the Q fragments once per
// block in shared memory (d / 16 k-steps x 32 lanes x 4 registers) and reads them back per key tile: in registers
// both would not fit in 255 (tests/nvrtc_kernels.rs checks ptxas reports no spills).
// Dynamic shared memory: MMA_WARPS * attention_mma_warp_bytes(d), then for the wide one the staged Q fragments,
// d * 32 bytes (the host's formula is the same; past 48 KiB the host opts in).

static_assert(QUERIES == 16, "a block's query rows are the 16 rows of one MMA tile");
static_assert(MMA_KEYS == 16, "a warp's key tile is two n-blocks of Q K^T and one k-step of P V");
static_assert(HEAD_DIM_NARROW % 32 == 0 && HEAD_DIM_MAX % 32 == 0, "staging reads a head 32 columns at a time");
static_assert(MMA_PAD % 2 == 0, "staged rows keep 32-bit fragment loads aligned");

// Shared memory one warp uses: its staged K (MMA_KEYS x (d + MMA_PAD)) and V^T (d x (MMA_KEYS + MMA_PAD)) in
// bf16; the merge reuses it for the warp's 16 x d accumulators and 16 maxima and sums (always smaller).
__device__ __forceinline__ int attention_mma_warp_bytes(int d) {
    return 2 * (MMA_KEYS * (d + MMA_PAD) + d * (MMA_KEYS + MMA_PAD));
}

__device__ __forceinline__ unsigned pack_bf16(float lo, float hi) {
    return (unsigned)f32_to_bf16(lo) | ((unsigned)f32_to_bf16(hi) << 16);
}

template <int D_MAX>
__device__ __forceinline__ void attention_mma_body(ATTENTION_PARAMS, float* smem) {
    constexpr int K_STEPS_MAX = D_MAX / 16, N_BLOCKS_MAX = D_MAX / 8;
    constexpr bool STAGE_Q = D_MAX > HEAD_DIM_NARROW;
    AttentionTile tile;
    if (!attention_tile(offsets, keys, tiles, meta, heads, kv_heads, head_dim, &tile)) {
        return;
    }
    const int start = tile.start, len = tile.len, keys_seen = tile.keys, q0 = tile.q0, qc = tile.qc, kc = tile.kc,
              vc = tile.vc;
    const int d = head_dim, k_steps = d / 16, n_blocks = d / 8;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, tq = lane & 3;
    const int ldk = d + MMA_PAD, ldv = MMA_KEYS + MMA_PAD;
    const int warp_bytes = attention_mma_warp_bytes(d);

    unsigned short* ks = (unsigned short*)((char*)smem + warp * warp_bytes);  // MMA_KEYS x ldk
    unsigned short* vt = ks + MMA_KEYS * ldk;                                 // d x ldv

    // The A fragment of 16-column step k of this tile's queries (rows past the sequence: 0).
    const int r_lo = q0 + g, r_hi = q0 + g + 8;
    const float* q_lo = qkv + (size_t)(start + min(r_lo, len - 1)) * ld_qkv + qc;
    const float* q_hi = qkv + (size_t)(start + min(r_hi, len - 1)) * ld_qkv + qc;
    auto q_fragment = [&](int k, unsigned* a, int stride) {
        const int c = 16 * k + 2 * tq;
        const bool lo = k < k_steps && r_lo < len, hi = k < k_steps && r_hi < len;
        a[0] = lo ? pack_bf16(q_lo[c], q_lo[c + 1]) : 0u;
        a[stride] = hi ? pack_bf16(q_hi[c], q_hi[c + 1]) : 0u;
        a[2 * stride] = lo ? pack_bf16(q_lo[c + 8], q_lo[c + 9]) : 0u;
        a[3 * stride] = hi ? pack_bf16(q_hi[c + 8], q_hi[c + 9]) : 0u;
    };
    // Held in registers (narrow), or staged after the warps' slices (wide: warp w makes steps w, w + MMA_WARPS, ...
    // for every lane; lane l's register r of step k at qs[(4 k + r) * 32 + l], so each of a step's four reads is 32
    // consecutive words, one per bank).
    unsigned qa[STAGE_Q ? 1 : K_STEPS_MAX][4];
    unsigned* qs = (unsigned*)((char*)smem + MMA_WARPS * warp_bytes);
    if constexpr (STAGE_Q) {
        for (int k = warp; k < k_steps; k += MMA_WARPS) {
            q_fragment(k, qs + 4 * 32 * k + lane, 32);
        }
        __syncthreads();
    } else {
#pragma unroll
        for (int k = 0; k < K_STEPS_MAX; k++) {
            q_fragment(k, qa[k], 1);
        }
    }

    // Per row (g: index 0, g + 8: index 1): running max, this thread's share of the running sum, and the
    // unnormalised output of the thread's columns (n-block j: c0, c1 of row g, c2, c3 of row g + 8).
    float m[2] = {NEG_INF, NEG_INF}, l[2] = {0.0f, 0.0f};
    float acc[N_BLOCKS_MAX][4];
#pragma unroll
    for (int j = 0; j < N_BLOCKS_MAX; j++) {
        acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
    }

    int key_begin, key_end;
    tile_keys(q0, min(len, q0 + QUERIES) - 1, keys_seen, causal, window, MMA_KEYS, &key_begin, &key_end);
    for (int k0 = key_begin + warp * MMA_KEYS; k0 < key_end; k0 += MMA_WARPS * MMA_KEYS) {
        // Stage the tile; keys past the sequence are zeros (a probability of 0 times a stale NaN would be NaN).
        // Lane e takes head column e (then e + 32, ...) of all MMA_KEYS keys: the tile's 2 x MMA_KEYS loads are
        // issued before any is used (a load at a time would wait out the memory latency per key), each key's row
        // read by the warp as one coalesced segment; V^T gets two keys per 32-bit store.
        __syncwarp();
#pragma unroll
        for (int c = 0; c < D_MAX / 32; c++) {
            if (c < d / 32) {
                const int e = 32 * c + lane;
                float kf[MMA_KEYS], vf[MMA_KEYS];
#pragma unroll
                for (int j = 0; j < MMA_KEYS; j++) {
                    const bool in = k0 + j < keys_seen;
                    const float* row = qkv + (size_t)(start + (in ? k0 + j : 0)) * ld_qkv;
                    kf[j] = in ? row[kc + e] : 0.0f;
                    vf[j] = in ? row[vc + e] : 0.0f;
                }
#pragma unroll
                for (int j = 0; j < MMA_KEYS; j += 2) {
                    ks[j * ldk + e] = f32_to_bf16(kf[j]);
                    ks[(j + 1) * ldk + e] = f32_to_bf16(kf[j + 1]);
                    *(unsigned*)(vt + e * ldv + j) = pack_bf16(vf[j], vf[j + 1]);
                }
            }
        }
        __syncwarp();

        // Scores of the 16 rows against keys k0 .. k0 + 7 (n-block 0) and k0 + 8 .. k0 + 15 (n-block 1).
        float sc[2][4];
#pragma unroll
        for (int nb = 0; nb < 2; nb++) {
            sc[nb][0] = sc[nb][1] = sc[nb][2] = sc[nb][3] = 0.0f;
            const unsigned short* krow = ks + (8 * nb + g) * ldk + 2 * tq;
#pragma unroll
            for (int k = 0; k < K_STEPS_MAX; k++) {
                if (k < k_steps) {
                    const unsigned b0 = *(const unsigned*)(krow + 16 * k);
                    const unsigned b1 = *(const unsigned*)(krow + 16 * k + 8);
                    if constexpr (STAGE_Q) {
                        const unsigned* q = qs + 4 * 32 * k + lane;
                        const unsigned a[4] = {q[0], q[32], q[64], q[96]};
                        mma_bf16_16816(sc[nb], a, b0, b1);
                    } else {
                        mma_bf16_16816(sc[nb], qa[k], b0, b1);
                    }
                }
            }
        }

        // Mask, then the online softmax of the two rows; a row's 16 scores are spread over the 4 lanes of its
        // group (2 per n-block each), so the max is reduced over those lanes.
        float tile_max[2] = {NEG_INF, NEG_INF};
#pragma unroll
        for (int nb = 0; nb < 2; nb++) {
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int row = q0 + g + 8 * (i >> 1), key = k0 + 8 * nb + 2 * tq + (i & 1);
                const bool visible = key_visible(row, key, len, keys_seen, causal, window);
                sc[nb][i] = visible ? attention_score(sc[nb][i], scale, softcap, relative_bias(bias, reach, row, key))
                                    : NEG_INF;
                tile_max[i >> 1] = fmaxf(tile_max[i >> 1], sc[nb][i]);
            }
        }
        float correction[2];
        bool any[2];
#pragma unroll
        for (int r = 0; r < 2; r++) {
            tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 1));
            tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 2));
            const float m_new = fmaxf(m[r], tile_max[r]);
            // As in attention.cu: a row with nothing visible yet keeps its zero state.
            any[r] = m_new != NEG_INF;
            correction[r] = any[r] ? expf(m[r] - m_new) : 1.0f;
            m[r] = m_new;
            l[r] *= correction[r];
        }
#pragma unroll
        for (int nb = 0; nb < 2; nb++) {
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int r = i >> 1;
                sc[nb][i] = any[r] ? expf(sc[nb][i] - m[r]) : 0.0f;
                l[r] += sc[nb][i];
            }
        }
#pragma unroll
        for (int j = 0; j < N_BLOCKS_MAX; j++) {
            acc[j][0] *= correction[0];
            acc[j][1] *= correction[0];
            acc[j][2] *= correction[1];
            acc[j][3] *= correction[1];
        }

        // P (16 rows x 16 keys) as an A fragment: the scores' C fragments of n-blocks 0 and 1, in bf16.
        const unsigned pa[4] = {pack_bf16(sc[0][0], sc[0][1]), pack_bf16(sc[0][2], sc[0][3]),
                                pack_bf16(sc[1][0], sc[1][1]), pack_bf16(sc[1][2], sc[1][3])};
        // acc += P V, 8 head columns per n-block; V^T's rows make B's column g contiguous in the keys.
#pragma unroll
        for (int j = 0; j < N_BLOCKS_MAX; j++) {
            if (j < n_blocks) {
                const unsigned short* vrow = vt + (8 * j + g) * ldv + 2 * tq;
                const unsigned b0 = *(const unsigned*)vrow;
                const unsigned b1 = *(const unsigned*)(vrow + 8);
                mma_bf16_16816(acc[j], pa, b0, b1);
            }
        }
    }

    // Each row's sum over its group's 4 lanes.
#pragma unroll
    for (int r = 0; r < 2; r++) {
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    }

    // Merge the warps: each leaves its accumulators (16 x d), maxima and sums in its own slice, then the block
    // rescales every warp's part to the rows' common max: out = sum_w acc_w e^(m_w - M) / sum_w l_w e^(m_w - M).
    __syncthreads();
    float* part = (float*)((char*)smem + warp * warp_bytes);
#pragma unroll
    for (int j = 0; j < N_BLOCKS_MAX; j++) {
        if (j < n_blocks) {
            const int c = 8 * j + 2 * tq;
            part[g * d + c] = acc[j][0];
            part[g * d + c + 1] = acc[j][1];
            part[(g + 8) * d + c] = acc[j][2];
            part[(g + 8) * d + c + 1] = acc[j][3];
        }
    }
    if (tq == 0) {
        part[16 * d + g] = m[0];
        part[16 * d + g + 8] = m[1];
        part[16 * d + 16 + g] = l[0];
        part[16 * d + 16 + g + 8] = l[1];
    }
    __syncthreads();
    for (int i = threadIdx.x; i < QUERIES * d; i += MMA_WARPS * 32) {
        const int r = i / d, c = i - r * d;
        const int row = q0 + r;
        if (row >= len) {
            continue;
        }
        float top = NEG_INF;
        for (int w = 0; w < MMA_WARPS; w++) {
            const float* p = (const float*)((const char*)smem + w * warp_bytes);
            top = fmaxf(top, p[16 * d + r]);
        }
        // A row sees a key (the batch's keys and the model's window see to it), so top is finite and the sum
        // positive; one that sees none gets 0.
        float sum = 0.0f, out = 0.0f;
        for (int w = 0; w < MMA_WARPS; w++) {
            const float* p = (const float*)((const char*)smem + w * warp_bytes);
            const float mw = p[16 * d + r];
            if (mw != NEG_INF) {
                const float f = expf(mw - top);
                sum += p[16 * d + 16 + r] * f;
                out += p[r * d + c] * f;
            }
        }
        const float v = sum > 0.0f ? out / sum : 0.0f;
        ctx[(size_t)(start + row) * ld_ctx + qc + c] = v;
        shadow_store(shadow, heads * d, start + row, qc + c, v);
    }
}

ATTENTION_ENTRY(attention_mma, MMA_WARPS * 32, attention_mma_body, HEAD_DIM_NARROW)
ATTENTION_ENTRY(attention_mma_wide, MMA_WARPS * 32, attention_mma_body, HEAD_DIM_MAX)
