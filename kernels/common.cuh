// Helpers every kernel file shares. The backend compiles each `*.cu` as one NVRTC program with this file
// prepended (no include paths, no CUDA headers: bf16 is handled as its 16 bits, so the sources compile the same
// under any NVRTC, whatever headers it bundles).
//
// Conventions of every kernel (they mirror the CPU op set, engine/src/backend/ops.rs):
// - activations are f32, row-major, one row per token, with a row stride `ld` (a view of columns of a wider
//   matrix has the wider matrix's stride);
// - `meta` is device memory holding {tokens, sequences, attention tiles} of the batch being run, so a kernel captured in a CUDA
//   graph for a bucket serves every smaller batch of that bucket: grids are sized by the bucket, threads past the
//   batch's real size return at once;
// - `offsets` / `out_offsets` are the ragged batch's cumulative token and output-row offsets (int32), `tok_pos`
//   each token's position in its own sequence.

#define META_TOKENS(meta) ((meta)[0])
#define META_SEQS(meta) ((meta)[1])
// Query tiles of the batch's attention (attention.cu), listed in its `tiles` input.
#define META_TILES(meta) ((meta)[2])

// -inf without math.h (NVRTC has no host headers).
#define NEG_INF __int_as_float(0xff800000)

// What the host emulation (engine/tests/emulation/cuda_host.h, which runs these kernels on a CPU in tests)
// defines its own way: the block's dynamic shared memory, and the tensor-core instruction.
#ifndef EW_HOST_EMULATION
#define DYNAMIC_SMEM(T, name) extern __shared__ T name[]

// c += a b for one m16n8k16 tile: bf16 A (16 x 16, four registers) and B (16 x 8, two), f32 C (16 x 8, four),
// held across the warp in the PTX ISA's fragment layouts (kernels/attention_mma.cu spells them out). sm_80+.
__device__ __forceinline__ void mma_bf16_16816(float* c, const unsigned* a, unsigned b0, unsigned b1) {
#if __CUDA_ARCH__ < 800
    // No bf16 MMA before Ampere: the host refuses tensor-core attention there (Cuda::new), so this never runs.
    __trap();
#else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}
#endif

// f32 -> bf16 bits, rounding to nearest even (NaN kept quiet), as the CPU backend rounds its bf16 operands.
__device__ __forceinline__ unsigned short f32_to_bf16(float x) {
    unsigned int u = __float_as_uint(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        return (unsigned short)((u >> 16) | 0x40u);
    }
    u += 0x7fffu + ((u >> 16) & 1u);
    return (unsigned short)(u >> 16);
}

// bf16 bits -> f32 (exact).
__device__ __forceinline__ float bf16_to_f32(unsigned short b) {
    return __uint_as_float((unsigned int)b << 16);
}

// A GEMM's bf16 operand written by the kernel that produces it (`shadow`, dense: row stride `cols`), so the GEMM
// after it needs no rounding pass (engine/src/backend/cuda/ops.rs: `launch_producing`, `operand`); null when
// not wanted. Only the batch's rows are written: the scratch's rows past them keep earlier operands' values.
__device__ __forceinline__ void shadow_store(unsigned short* shadow, int cols, int r, int c, float v) {
    if (shadow) {
        shadow[(size_t)r * cols + c] = f32_to_bf16(v);
    }
}

// The tile of an attention block (attention.cu, attention_mma.cu: grid x over the batch's query tiles, y over
// the query heads): its sequence's first token and length, the keys its tokens attend to (its first `keys`: all but
// an unattended query expansion, Batch::keys), its first query row, and the columns of its query head and of the
// key and value heads that head reads in the fused [Q | K | V] rows. False for a block past the batch's tiles (a
// bucket's grid is larger than most batches), which returns at once.
struct AttentionTile {
    int start, len, keys, q0, qc, kc, vc;
};

// The parameters of every attention entry point (attention.cu's header has the contract), and an entry point that
// runs `body`, templated on the widest head it holds, with the block's dynamic shared memory: each kernel file has
// one for heads up to HEAD_DIM_NARROW and a `_wide` one up to HEAD_DIM_MAX.
#define ATTENTION_PARAMS                                                                                          \
    const float *qkv, int ld_qkv, float *ctx, int ld_ctx, const int *offsets, const int *keys, const int *tiles,  \
        const int *meta, int heads, int kv_heads, int head_dim, int causal, int window, float scale, float softcap, \
        const float *bias, int reach, unsigned short *shadow
#define ATTENTION_ENTRY(name, threads, body, d_max)                                                            \
    extern "C" __global__ void __launch_bounds__(threads) name(ATTENTION_PARAMS) {                             \
        DYNAMIC_SMEM(float, smem);                                                                             \
        body<d_max>(qkv, ld_qkv, ctx, ld_ctx, offsets, keys, tiles, meta, heads, kv_heads, head_dim, causal,  \
                    window, scale, softcap, bias, reach, shadow, smem);                                        \
    }

// A visible key's score q.k as Ops::attention takes it into the softmax (AttentionShape): scaled, soft-capped into
// (-softcap, softcap) where softcap > 0 (Gemma 2's attn_logit_softcapping), the relative position bias added.
__device__ __forceinline__ float attention_score(float qk, float scale, float softcap, float bias) {
    const float s = qk * scale;
    return (softcap > 0.0f ? softcap * tanhf(s / softcap) : s) + bias;
}

// The relative position bias of a score (Ops::attention's `bias`, MPNet's; null for none): the value of the block's
// head (blockIdx.y) for key - row, from a table of 2 reach - 1 values per head centred on distance 0. Read only for
// a visible key, whose distance the table covers.
__device__ __forceinline__ float relative_bias(const float* bias, int reach, int row, int key) {
    return bias ? bias[(size_t)blockIdx.y * (2 * reach - 1) + (key - row) + reach - 1] : 0.0f;
}

// Whether query `row` of a `len`-token sequence whose tokens attend to its first `keys` sees `key` (Ops::attention,
// AttentionShape::keys): among those keys, not after the row when causal, at most `window` away when window >= 0 (a
// sliding window).
__device__ __forceinline__ bool key_visible(int row, int key, int len, int keys, int causal, int window) {
    return key < keys && row < len && (!causal || key <= row) && (window < 0 || abs(key - row) <= window);
}

// The keys the query rows q0 .. last of a sequence whose tokens attend to its first `keys` see, from `*begin`
// (rounded down to a multiple of `align`, the key tile) to `*end`: a row's first and last visible keys ascend with
// the row.
__device__ __forceinline__ void tile_keys(int q0, int last, int keys, int causal, int window, int align, int* begin,
                                          int* end) {
    *begin = window < 0 ? 0 : max(0, q0 - window) / align * align;
    *end = causal ? min(last + 1, keys) : keys;
    if (window >= 0) {
        // Clamped so that a window wider than any sequence (up to INT_MAX from the host) cannot overflow.
        *end = min(*end, last + min(window, keys) + 1);
    }
}

__device__ __forceinline__ bool attention_tile(const int* offsets, const int* keys, const int* tiles,
                                               const int* meta, int heads, int kv_heads, int d, AttentionTile* tile) {
    const int t = blockIdx.x, h = blockIdx.y;
    if (t >= META_TILES(meta)) {
        return false;
    }
    const int s = tiles[2 * t], kv = h / (heads / kv_heads);
    tile->start = offsets[s];
    tile->len = offsets[s + 1] - tile->start;
    tile->keys = keys[s];
    tile->q0 = tiles[2 * t + 1];
    tile->qc = h * d;
    tile->kc = heads * d + kv * d;
    tile->vc = (heads + kv_heads) * d + kv * d;
    return true;
}

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) {
        v += __shfl_xor_sync(0xffffffffu, v, o);
    }
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) {
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    }
    return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the total. `scratch` holds 32
// floats of shared memory; the function may be called again with the same scratch.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) {
        scratch[warp] = v;
    }
    __syncthreads();
    v = lane < warps ? scratch[lane] : 0.0f;
    return warp_sum(v);
}

// LayerNorm of one token row in place (one block per row), the mean of squared deviations after the mean, as the
// CPU kernel: `s` is this thread's sum of the columns it holds (threadIdx.x, then every blockDim.x), which it
// wrote or read itself, so no barrier is needed before it reads them again. Writes the shadow when given.
__device__ __forceinline__ void layer_norm_row(float* row, int cols, int r, float s, const float* gamma,
                                               const float* beta, float eps, unsigned short* shadow,
                                               float* scratch) {
    const float mean = block_sum(s, scratch) / cols;
    float q = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        const float d = row[c] - mean;
        q += d * d;
    }
    const float inv = 1.0f / sqrtf(block_sum(q, scratch) / cols + eps);
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        const float v = (row[c] - mean) * inv * gamma[c] + beta[c];
        row[c] = v;
        shadow_store(shadow, cols, r, c, v);
    }
}
