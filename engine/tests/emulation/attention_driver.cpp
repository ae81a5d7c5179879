// Launches one attention kernel (KERNEL: `attention` or `attention_mma`, same signature) under the host emulation,
// for engine/tests/kernels_on_host.rs. Compiled after cuda_host.h and the kernel's NVRTC program text.
//
// argv[1], the input, all 32-bit little-endian: ints {heads, kv_heads, head_dim, causal, threads, smem_bytes,
// grid_x, seqs, tokens, ld_qkv, ld_ctx}, meta[3], offsets[seqs + 1], tiles[2 * grid_x], then floats {scale,
// qkv[tokens * ld_qkv]}. argv[2], the output: ctx[tokens * ld_ctx] floats, NaN where the kernel wrote nothing.

#include <fstream>
#include <iterator>
#include <string>

namespace {

struct Reader {
    std::vector<char> bytes;
    size_t at = 0;
    template <class T>
    T next() {
        if (at + sizeof(T) > bytes.size()) {
            std::fprintf(stderr, "attention_driver: input too short\n");
            std::exit(2);
        }
        T v;
        std::memcpy(&v, bytes.data() + at, sizeof(T));
        at += sizeof(T);
        return v;
    }
    template <class T>
    std::vector<T> many(size_t n) {
        std::vector<T> v(n);
        for (auto& x : v) {
            x = next<T>();
        }
        return v;
    }
};

}  // namespace

int main(int argc, char** argv) {
    if (argc != 3) {
        std::fprintf(stderr, "usage: %s INPUT OUTPUT\n", argv[0]);
        return 2;
    }
    std::ifstream in(argv[1], std::ios::binary);
    Reader r{std::vector<char>(std::istreambuf_iterator<char>(in), {})};
    const int heads = r.next<int>(), kv_heads = r.next<int>(), d = r.next<int>(), causal = r.next<int>();
    const int threads = r.next<int>(), smem = r.next<int>(), grid_x = r.next<int>(), seqs = r.next<int>();
    const int tokens = r.next<int>(), ld_qkv = r.next<int>(), ld_ctx = r.next<int>();
    const auto meta = r.many<int>(3);
    const auto offsets = r.many<int>(seqs + 1);
    const auto tiles = r.many<int>(2 * grid_x);
    const float scale = r.next<float>();
    const auto qkv = r.many<float>((size_t)tokens * ld_qkv);
    std::vector<float> ctx((size_t)tokens * ld_ctx, std::numeric_limits<float>::quiet_NaN());

    emu::launch(dim3{(unsigned)grid_x, (unsigned)heads, 1}, (unsigned)threads, (size_t)smem, [&] {
        KERNEL(qkv.data(), ld_qkv, ctx.data(), ld_ctx, offsets.data(), tiles.data(), meta.data(), heads, kv_heads, d,
               causal, scale);
    });

    std::ofstream out(argv[2], std::ios::binary);
    out.write(reinterpret_cast<const char*>(ctx.data()), (std::streamsize)(ctx.size() * sizeof(float)));
    return out ? 0 : 1;
}
