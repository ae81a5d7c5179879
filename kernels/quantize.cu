// int8 output formats of the gateway (engine/src/gateway/format.rs), one block per row of `cols` floats:
// mode 0: round(127 tanh(x)) (pplx-embed's int8); mode 1: symmetric per-row int8, round(x / s) with
// s = max|x| / 127 (0 for the zero row, whose values are all 0), `scales[r] = s`. Rounding is to nearest even, as
// torch.round and Rust's round_ties_even.
extern "C" __global__ void quantize_int8(const float* x, int ld, int cols, int rows, int mode, signed char* q,
                                         float* scales) {
    __shared__ float scratch[32];
    const int r = blockIdx.x;
    if (r >= rows) {
        return;
    }
    const float* in = x + (size_t)r * ld;
    signed char* o = q + (size_t)r * cols;
    if (mode == 0) {
        for (int c = threadIdx.x; c < cols; c += blockDim.x) {
            o[c] = (signed char)rintf(127.0f * tanhf(in[c]));
        }
        return;
    }
    // The row's max |x|: per warp, then over the warps' maxima.
    float mx = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        mx = fmaxf(mx, fabsf(in[c]));
    }
    mx = warp_max(mx);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    if (lane == 0) {
        scratch[warp] = mx;
    }
    __syncthreads();
    mx = warp_max(lane < warps ? scratch[lane] : 0.0f);
    const float scale = mx / 127.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        o[c] = scale == 0.0f ? 0 : (signed char)fminf(127.0f, fmaxf(-127.0f, rintf(in[c] / scale)));
    }
    if (threadIdx.x == 0) {
        scales[r] = scale;
    }
}
