// Element-wise operations: the GEMM epilogue where cuBLASLt's does not cover it, the gated units' gates (SwiGLU,
// GeGLU with either GELU), rotary embedding,
// and the bf16 rounding of GEMM operands (`to_bf16`, where the producer did not write them: bias_act and glu
// take a `shadow` as the norms do, see common.cuh). A 2-D grid: blockIdx.x is the row (a bucket's rows may pass the
// 65,535 a grid's y allows), y-blocks cover the columns.

// Exact (erf) GELU, BERT's `hidden_act = "gelu"`.
__device__ __forceinline__ float gelu(float u) {
    return 0.5f * u * (1.0f + erff(u * 0.70710678118654752f));
}

// GELU's tanh approximation (ALBERT's `gelu_new`, Gemma's `gelu_pytorch_tanh`):
// g/2 (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))).
__device__ __forceinline__ float gelu_tanh(float g) {
    return 0.5f * g * (1.0f + tanhf(0.7978845608f * (g + 0.044715f * g * g * g)));
}

// A linear layer's activation (Ops::linear): 0 none, 1 exact GELU, 2 tanh (sentence-transformers' Dense), 3 ReLU
// (T5's feed-forward), 4 GELU's tanh approximation, 5 SPLADE's log(1 + ReLU), 6 that twice (SpladePooling's
// `log1p_relu`).
__device__ __forceinline__ float activate(float v, int act) {
    return act == 1   ? gelu(v)
           : act == 2 ? tanhf(v)
           : act == 3 ? fmaxf(v, 0.0f)
           : act == 4 ? gelu_tanh(v)
           : act == 5 ? log1pf(fmaxf(v, 0.0f))
           : act == 6 ? log1pf(log1pf(fmaxf(v, 0.0f)))
                      : v;
}

// out = act(y + bias) + residual, in place on `y` (the GEMM's output); `bias` and `residual` may be null, `act`
// as `activate`.
extern "C" __global__ void bias_act(float* y, int ld, int cols, const int* meta, const float* bias, int act,
                                    const float* residual, int ldr, unsigned short* shadow) {
    const int r = blockIdx.x, c = blockIdx.y * blockDim.x + threadIdx.x;
    if (r >= META_TOKENS(meta) || c >= cols) {
        return;
    }
    float v = y[(size_t)r * ld + c];
    if (bias) {
        v += bias[c];
    }
    v = activate(v, act);
    if (residual) {
        v += residual[(size_t)r * ldr + c];
    }
    y[(size_t)r * ld + c] = v;
    shadow_store(shadow, cols, r, c, v);
}

// out = act(y + bias), in place on a bf16 GEMM output (an operand slot under --gpu-intermediate bf16), in f32
// between the roundings; `bias` may be null, `act` as `activate`. What the next GEMM reads as it is.
extern "C" __global__ void bias_act_bf16(unsigned short* y, int ld, int cols, const int* meta, const float* bias,
                                         int act) {
    const int r = blockIdx.x, c = blockIdx.y * blockDim.x + threadIdx.x;
    if (r >= META_TOKENS(meta) || c >= cols) {
        return;
    }
    unsigned short* p = y + (size_t)r * ld + c;
    float v = bf16_to_f32(*p);
    if (bias) {
        v += bias[c];
    }
    v = activate(v, act);
    *p = f32_to_bf16(v);
}

// A gated linear unit's product: act(g) * u, act 0 SiLU (SwiGLU: g / (1 + e^-g)), 1 exact GELU, 2 GELU's tanh
// approximation (GeGLU).
__device__ __forceinline__ float glu_mul(float g, float u, int act) {
    return (act == 1 ? gelu(g) : act == 2 ? gelu_tanh(g) : g / (1.0f + expf(-g))) * u;
}

// out = act(x[:, ..f]) * x[:, f..].
extern "C" __global__ void glu(const float* x, int ldx, float* out, int ldo, int f, const int* meta, int act,
                               unsigned short* shadow) {
    const int r = blockIdx.x, c = blockIdx.y * blockDim.x + threadIdx.x;
    if (r >= META_TOKENS(meta) || c >= f) {
        return;
    }
    const float v = glu_mul(x[(size_t)r * ldx + c], x[(size_t)r * ldx + f + c], act);
    out[(size_t)r * ldo + c] = v;
    shadow_store(shadow, f, r, c, v);
}

// The same between bf16 operand slots (--gpu-intermediate bf16): bf16 in, f32 math, bf16 out.
extern "C" __global__ void glu_bf16(const unsigned short* x, int ldx, unsigned short* out, int ldo, int f,
                                    const int* meta, int act) {
    const int r = blockIdx.x, c = blockIdx.y * blockDim.x + threadIdx.x;
    if (r >= META_TOKENS(meta) || c >= f) {
        return;
    }
    const unsigned short* row = x + (size_t)r * ldx;
    out[(size_t)r * ldo + c] = f32_to_bf16(glu_mul(bf16_to_f32(row[c]), bf16_to_f32(row[f + c]), act));
}

// Rotary embedding in place, rotate-half layout: for every head of `head_dim` columns and i < head_dim / 2,
// (x1, x2) <- (x1 cos - x2 sin, x2 cos + x1 sin) with the table row of the token's position (cos half, sin half).
// With `weight` (a value per column of `x`; null for none), each head is first scaled by its own root mean square
// and by its weights, as Qwen3's q/k norms (Ops::rotary): one pass where a norm launch and a rotary launch were.
// One warp per head (grid y over the heads in blocks of blockDim.x / 32): a lane takes the pairs (i, i + half)
// that rotary mixes, so a head's values never leave its warp. Writes no shadow: attention, next, reads f32.
extern "C" __global__ void rotary(float* x, int ld, int cols, int head_dim, const int* tok_pos, const int* meta,
                                  const float* table, const float* weight, float eps) {
    const int r = blockIdx.x, lane = threadIdx.x & 31;
    const int head = blockIdx.y * (blockDim.x >> 5) + (threadIdx.x >> 5);
    // Both conditions are the same for every lane of a warp, so a warp returns whole and its shuffles stay full.
    if (r >= META_TOKENS(meta) || head * head_dim >= cols) {
        return;
    }
    const int half = head_dim / 2;
    float* h = x + (size_t)r * ld + (size_t)head * head_dim;
    float inv = 1.0f;
    if (weight) {
        float s = 0.0f;
        for (int i = lane; i < half; i += 32) {
            s += h[i] * h[i] + h[half + i] * h[half + i];
        }
        inv = 1.0f / sqrtf(warp_sum(s) / head_dim + eps);
    }
    const float* w = weight ? weight + (size_t)head * head_dim : 0;
    const float* t = table + (size_t)tok_pos[r] * head_dim;
    for (int i = lane; i < half; i += 32) {
        float u = h[i], v = h[half + i];
        if (w) {
            u = u * inv * w[i];
            v = v * inv * w[half + i];
        }
        const float c = t[i], s = t[half + i];
        h[i] = u * c - v * s;
        h[half + i] = v * c + u * s;
    }
}

// The bf16 operand of a GEMM: `x` rounded to bf16 into a dense `rows x cols` matrix (row stride `cols`).
// Every row of the grid is written (rows past the batch become zeros). A shadow (common.cuh) writes the batch's
// rows only, so the GEMM's rows past the batch may read earlier operands' values there: finite (the scratch
// starts zeroed and only ever holds roundings of activations), and harmless, since GEMM rows are independent and
// nothing reads an activation's rows past the batch (every kernel stops at META_TOKENS or the batch's offsets).
extern "C" __global__ void to_bf16(const float* x, int ld, int cols, const int* meta, unsigned short* out) {
    const int r = blockIdx.x, c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= cols) {
        return;
    }
    const float v = r < META_TOKENS(meta) ? x[(size_t)r * ld + c] : 0.0f;
    out[(size_t)r * cols + c] = f32_to_bf16(v);
}
