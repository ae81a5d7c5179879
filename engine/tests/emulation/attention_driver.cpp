// Launches one attention kernel (KERNEL: `attention`, `attention_mma` or their `_wide` entry points, same signature)
// under the host emulation, for engine/tests/kernels_on_host/. Compiled after cuda_host.h and the kernel's NVRTC program text.
//
// argv[1], the input, all 32-bit little-endian: ints {heads, kv_heads, head_dim, causal, window (-1: none),
// threads, smem_bytes, grid_x, seqs, tokens, ld_qkv, ld_ctx}, meta[3], offsets[seqs + 1], keys[seqs], tiles[2 * grid_x], then
// floats {scale, softcap (0: none)}, int reach (0: no relative bias), floats {bias[heads * (2 reach - 1)],
// qkv[tokens * ld_qkv]}. argv[2], the output: ctx[tokens * ld_ctx] floats, NaN where the kernel wrote nothing, then
// the shadow (ctx's bf16 rounding, dense: tokens * heads * head_dim 16-bit values, 0xffff where not written).

#include "driver_io.h"

int main(int argc, char** argv) {
    std::ofstream out;
    Reader r = Reader::from_args(argc, argv, out);
    const int heads = r.next<int>(), kv_heads = r.next<int>(), d = r.next<int>(), causal = r.next<int>();
    const int window = r.next<int>();
    const int threads = r.next<int>(), smem = r.next<int>(), grid_x = r.next<int>(), seqs = r.next<int>();
    const int tokens = r.next<int>(), ld_qkv = r.next<int>(), ld_ctx = r.next<int>();
    const auto meta = r.many<int>(3);
    const auto offsets = r.many<int>(seqs + 1);
    const auto keys = r.many<int>(seqs);
    const auto tiles = r.many<int>(2 * grid_x);
    const float scale = r.next<float>(), softcap = r.next<float>();
    const int reach = r.next<int>();
    const auto bias = r.many<float>(reach > 0 ? (size_t)heads * (2 * reach - 1) : 0);
    const auto qkv = r.many<float>((size_t)tokens * ld_qkv);
    auto ctx = nans((size_t)tokens * ld_ctx);
    auto shadow = unwritten((size_t)tokens * heads * d);

    emu::launch(dim3{(unsigned)grid_x, (unsigned)heads, 1}, (unsigned)threads, (size_t)smem, [&] {
        KERNEL(qkv.data(), ld_qkv, ctx.data(), ld_ctx, offsets.data(), keys.data(), tiles.data(), meta.data(), heads, kv_heads, d,
               causal, window, scale, softcap, reach > 0 ? bias.data() : nullptr, reach, shadow.data());
    });

    put(out, ctx);
    put(out, shadow);
    return out ? 0 : 1;
}
