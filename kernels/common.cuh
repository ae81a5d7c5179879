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

// f32 -> bf16 bits, rounding to nearest even (NaN kept quiet), as the CPU backend rounds its bf16 operands.
__device__ __forceinline__ unsigned short f32_to_bf16(float x) {
    unsigned int u = __float_as_uint(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        return (unsigned short)((u >> 16) | 0x40u);
    }
    u += 0x7fffu + ((u >> 16) & 1u);
    return (unsigned short)(u >> 16);
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
