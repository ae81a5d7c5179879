// LayerNorm and RMSNorm, one block per token row (Ops::layer_norm, Ops::rms_norm), in f32 as the CPU kernels:
// LayerNorm's mean, then the mean of squared deviations; RMSNorm over the row. Each also writes its
// output's bf16 rounding to `shadow` when given (common.cuh: the next GEMM's operand).

// `out` may be `x` itself (in place): each thread copies the columns it then normalises, so no barrier is needed.
// `res`, when not null, is added to `x` first (the residual of a block whose output is itself normed).
extern "C" __global__ void layer_norm(const float* x, int ldx, const float* res, int ldr, float* out, int ldo,
                                      int cols, const int* meta, const float* gamma, const float* beta, float eps,
                                      unsigned short* shadow) {
    __shared__ float scratch[32];
    const int r = blockIdx.x;
    if (r >= META_TOKENS(meta)) {
        return;
    }
    const float* in = x + (size_t)r * ldx;
    const float* added = res ? res + (size_t)r * ldr : nullptr;
    float* row = out + (size_t)r * ldo;
    float s = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        const float v = added ? in[c] + added[c] : in[c];
        row[c] = v;
        s += v;
    }
    layer_norm_row(row, cols, r, s, gamma, beta, eps, shadow, scratch);
}

// Each row is scaled by its root mean square and by `weight` (a value per column) into `out` (`x` itself for in
// place), or with `accumulate` added to `out` (another matrix: Gemma's norm of a block's output before its
// residual). Per-head norms (Qwen3's q/k norms) run with rotary, in elementwise.cu.
extern "C" __global__ void rms_norm(const float* x, int ldx, float* out, int ldo, int cols, const int* meta,
                                    const float* weight, float eps, int accumulate, unsigned short* shadow) {
    __shared__ float scratch[32];
    const int r = blockIdx.x;
    if (r >= META_TOKENS(meta)) {
        return;
    }
    const float* in = x + (size_t)r * ldx;
    float* o = out + (size_t)r * ldo;
    float s = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        s += in[c] * in[c];
    }
    const float inv = 1.0f / sqrtf(block_sum(s, scratch) / cols + eps);
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        const float v = in[c] * inv * weight[c] + (accumulate ? o[c] : 0.0f);
        o[c] = v;
        shadow_store(shadow, cols, r, c, v);
    }
}
