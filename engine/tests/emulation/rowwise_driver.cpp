// Runs the row-wise kernels of one program under the host emulation, for engine/tests/kernels_on_host.rs: with
// EW_PROGRAM_NORM (norm.cu) layer_norm and rms_norm, with EW_PROGRAM_ELEMENTWISE (elementwise.cu) bias_act (bias,
// GELU and residual), silu_gate and to_bf16. Compiled after cuda_host.h and the program's NVRTC text. Launches
// as the backend's (engine/src/backend/cuda/ops.rs): one block of 256 threads per row for the norms, rows x
// 256-column blocks for the element-wise kernels, over `rows` bucket rows of which `tokens` are the batch's.
//
// argv[1], the input (32-bit little-endian): ints {rows, tokens, cols, ld, group}, float eps, floats x[rows * ld],
// y[rows * ld], a[cols], b[cols]. x's first `cols` columns are the norms' input, y's bias_act's; silu_gate's input
// is x's first 2 * (cols / 2) columns (f = cols / 2). argv[2], the outputs, each f32 matrix rows * ld (NaN where
// not written) followed by its shadow rows * its columns (bf16 bits, 0xffff where not written):
//   norm: layer_norm(x, gamma a, beta b) in place, rms_norm(x, weight a[..group]) into a fresh matrix;
//   elementwise: bias_act(y, bias a, GELU, residual x) in place, silu_gate(x) into a fresh matrix, then
//   to_bf16(x)'s rows * cols bf16 matrix.

#include "driver_io.h"

namespace {
constexpr unsigned THREADS = 256;
}

int main(int argc, char** argv) {
    std::ofstream out;
    Reader r = Reader::from_args(argc, argv, out);
    const int rows = r.next<int>(), tokens = r.next<int>(), cols = r.next<int>(), ld = r.next<int>();
    const int group = r.next<int>();
    const float eps = r.next<float>();
    auto x = r.many<float>((size_t)rows * ld);
    auto y = r.many<float>((size_t)rows * ld);
    const auto a = r.many<float>(cols), b = r.many<float>(cols);
    const int meta[3] = {tokens, 1, 0};
    const size_t n = (size_t)rows * ld;
    const unsigned col_blocks = (unsigned)((cols + THREADS - 1) / THREADS);
    (void)eps, (void)group, (void)col_blocks, (void)b, (void)y;

#ifdef EW_PROGRAM_NORM
    auto sh1 = unwritten((size_t)rows * cols);
    emu::launch(dim3{(unsigned)rows, 1, 1}, THREADS, 0,
                [&] { layer_norm(x.data(), ld, cols, meta, a.data(), b.data(), eps, sh1.data()); });
    put(out, x);
    put(out, sh1);
    // rms_norm reads the LayerNorm's output: any finite input serves.
    auto o2 = nans(n);
    auto sh2 = unwritten((size_t)rows * cols);
    emu::launch(dim3{(unsigned)rows, 1, 1}, THREADS, 0,
                [&] { rms_norm(x.data(), ld, o2.data(), ld, cols, group, meta, a.data(), eps, sh2.data()); });
    put(out, o2);
    put(out, sh2);
#endif

#ifdef EW_PROGRAM_ELEMENTWISE
    auto sh1 = unwritten((size_t)rows * cols);
    emu::launch(dim3{(unsigned)rows, col_blocks, 1}, THREADS, 0,
                [&] { bias_act(y.data(), ld, cols, meta, a.data(), 1, x.data(), ld, sh1.data()); });
    put(out, y);
    put(out, sh1);
    const int f = cols / 2;
    auto o2 = nans(n);
    auto sh2 = unwritten((size_t)rows * f);
    emu::launch(dim3{(unsigned)rows, (unsigned)((f + THREADS - 1) / THREADS), 1}, THREADS, 0,
                [&] { silu_gate(x.data(), ld, o2.data(), ld, f, meta, sh2.data()); });
    put(out, o2);
    put(out, sh2);
    auto o3 = unwritten((size_t)rows * cols);
    emu::launch(dim3{(unsigned)rows, col_blocks, 1}, THREADS, 0,
                [&] { to_bf16(x.data(), ld, cols, meta, o3.data()); });
    put(out, o3);
#endif
    return out ? 0 : 1;
}
