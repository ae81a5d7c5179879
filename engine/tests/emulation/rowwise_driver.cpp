// Runs the row-wise kernels of one program under the host emulation, for engine/tests/kernels_on_host/, launched
// as the backend launches them (engine/src/backend/cuda/ops.rs: 256 threads; a block per row for the norms, per
// sequence for pooling; rows x 256-column blocks for the element-wise kernels) over `rows` bucket rows of which
// `tokens` are the batch's, and a grid of two sequences more than the batch's. The program is picked by a define:
//   EW_PROGRAM_NORM (norm.cu): layer_norm(x + y, gamma a, beta b) into a fresh matrix, layer_norm(x) in place, then
//     rms_norm(x, weight a) into a fresh matrix, then accumulating into y;
//   EW_PROGRAM_ELEMENTWISE (elementwise.cu): bias_act(y, bias a, GELU, residual x) in place, bias_act(y, bias a,
//     tanh) on a copy of y, the same with ReLU, GELU's tanh approximation and SPLADE's log(1 + ReLU) once and
//     twice on others, glu(x) (f = cols / 2)
//     with SiLU, GELU and GELU's tanh approximation, each into a fresh matrix, to_bf16(x), bias_act_bf16 (bias a, GELU) and glu_bf16
//     (SiLU, GELU, tanh GELU) on x rounded to bf16 in rows of 2 ld (0xffff past ld), then rotary(x) in place (heads of `group`, table rows by pos),
//     then rotary with per-head RMSNorm (weight a) on copies of bias_act's output, heads of `group` and of
//     `group / 4` (the table read as rows of that width); rotary's blocks are 4 warps, one per head, as the
//     backend's;
//   EW_PROGRAM_POOL (pool.cu): pool(x) with modes 0 (mean), 1 (first), 2 (last), 3 (max), 4 (mean over sqrt len),
//     5 (position-weighted mean), then mode 0 normalising;
//   EW_PROGRAM_QUANTIZE (quantize.cu): quantize_int8(x) over the batch's rows with modes 0 (tanh) and 1 (per row);
//   EW_PROGRAM_EMBED (embed.cu): embed with token ids pos[t] into y read as a dense table of `cols`-wide rows,
//     positions (pos[t] + 1) % 8 into x read the same way and the row a, then with neither (as Qwen3), then with
//     all three and LayerNorm (gamma a, beta b) with its shadow (as BERT), then with all three and no norm at
//     RoBERTa's positions after pad ids 0 and 5 (tok_pos then each token's index in its sequence), then with all
//     three and no norm, each sequence a pair whose tokens of type 1 (row b) start at its sequence index modulo 3
//     (tok_pos each token's index in its sequence).
//
// argv[1], the input (32-bit little-endian): ints {rows, tokens, cols, ld, group, seqs}, pos[rows],
// offsets[seqs + 1], out_offsets[seqs + 1], readouts[seqs], floats {eps, x[rows * ld], y[rows * ld], a[cols],
// b[cols], table[8 * group]}. argv[2], the outputs in the order above: an f32 matrix of rows x ld (NaN where not
// written; pooled: out_offsets[seqs] rows), each norm's, bias_act's and glu's followed by its shadow (rows
// x its columns, bf16 bits, 0xffff where not written); to_bf16's rows x cols bf16; the bf16 kernels' rows x 2 ld
// bf16; the normalising pool's
// norms[seqs]; int8 matrices of tokens x cols and the scales[tokens].

#include "driver_io.h"

namespace {
constexpr unsigned THREADS = 256;
}

int main(int argc, char** argv) {
    std::ofstream out;
    Reader r = Reader::from_args(argc, argv, out);
    const int rows = r.next<int>(), tokens = r.next<int>(), cols = r.next<int>(), ld = r.next<int>();
    const int group = r.next<int>(), seqs = r.next<int>();
    const auto pos = r.many<int>(rows);
    const auto offsets = r.many<int>(seqs + 1), out_offsets = r.many<int>(seqs + 1);
    const auto readouts = r.many<int>(seqs);
    const float eps = r.next<float>();
    auto x = r.many<float>((size_t)rows * ld);
    auto y = r.many<float>((size_t)rows * ld);
    const auto a = r.many<float>(cols), b = r.many<float>(cols);
    const auto table = r.many<float>((size_t)8 * group);
    const int meta[3] = {tokens, seqs, 0};
    const size_t n = (size_t)rows * ld;
    const unsigned col_blocks = (unsigned)((cols + THREADS - 1) / THREADS);
    const unsigned seq_blocks = (unsigned)seqs + 2;
    (void)eps, (void)group, (void)col_blocks, (void)seq_blocks, (void)b, (void)y, (void)n, (void)pos, (void)table;

#ifdef EW_PROGRAM_NORM
    auto o0 = nans(n);
    auto sh0 = unwritten((size_t)rows * cols);
    emu::launch(dim3{(unsigned)rows, 1, 1}, THREADS, 0, [&] {
        layer_norm(x.data(), ld, y.data(), ld, o0.data(), ld, cols, meta, a.data(), b.data(), eps, sh0.data());
    });
    put(out, o0);
    put(out, sh0);
    auto sh1 = unwritten((size_t)rows * cols);
    emu::launch(dim3{(unsigned)rows, 1, 1}, THREADS, 0, [&] {
        layer_norm(x.data(), ld, nullptr, 0, x.data(), ld, cols, meta, a.data(), b.data(), eps, sh1.data());
    });
    put(out, x);
    put(out, sh1);
    // rms_norm reads the LayerNorm's output: any finite input serves.
    auto o2 = nans(n);
    auto sh2 = unwritten((size_t)rows * cols);
    emu::launch(dim3{(unsigned)rows, 1, 1}, THREADS, 0,
                [&] { rms_norm(x.data(), ld, o2.data(), ld, cols, meta, a.data(), eps, 0, sh2.data()); });
    put(out, o2);
    put(out, sh2);
    // Accumulating into y: y + rms_norm(x).
    auto sh3 = unwritten((size_t)rows * cols);
    emu::launch(dim3{(unsigned)rows, 1, 1}, THREADS, 0,
                [&] { rms_norm(x.data(), ld, y.data(), ld, cols, meta, a.data(), eps, 1, sh3.data()); });
    put(out, y);
    put(out, sh3);
#endif

#ifdef EW_PROGRAM_ELEMENTWISE
    const auto y0 = y;
    auto sh1 = unwritten((size_t)rows * cols);
    emu::launch(dim3{(unsigned)rows, col_blocks, 1}, THREADS, 0,
                [&] { bias_act(y.data(), ld, cols, meta, a.data(), 1, x.data(), ld, sh1.data()); });
    put(out, y);
    put(out, sh1);
    for (int act : {2, 3, 4, 5, 6}) {
        auto ya = y0;
        auto sha = unwritten((size_t)rows * cols);
        emu::launch(dim3{(unsigned)rows, col_blocks, 1}, THREADS, 0,
                    [&] { bias_act(ya.data(), ld, cols, meta, a.data(), act, nullptr, 0, sha.data()); });
        put(out, ya);
        put(out, sha);
    }
    const int f = cols / 2;
    for (int act : {0, 1, 2}) {
        auto o2 = nans(n);
        auto sh2 = unwritten((size_t)rows * f);
        emu::launch(dim3{(unsigned)rows, (unsigned)((f + THREADS - 1) / THREADS), 1}, THREADS, 0,
                    [&] { glu(x.data(), ld, o2.data(), ld, f, meta, act, sh2.data()); });
        put(out, o2);
        put(out, sh2);
    }
    auto o3 = unwritten((size_t)rows * cols);
    emu::launch(dim3{(unsigned)rows, col_blocks, 1}, THREADS, 0,
                [&] { to_bf16(x.data(), ld, cols, meta, o3.data()); });
    put(out, o3);
    // The bf16 operand-slot kernels on x rounded to bf16 in rows of twice ld elements (as an operand slot's bf16
    // view of an f32 slot), the rest of each row 0xffff.
    const size_t ld2 = 2 * (size_t)ld;
    auto xb = unwritten(rows * ld2);
    for (int r = 0; r < rows; r++) {
        for (int c = 0; c < ld; c++) {
            xb[r * ld2 + c] = f32_to_bf16(x[(size_t)r * ld + c]);
        }
    }
    auto ab = xb;
    emu::launch(dim3{(unsigned)rows, col_blocks, 1}, THREADS, 0,
                [&] { bias_act_bf16(ab.data(), (int)ld2, cols, meta, a.data(), 1); });
    put(out, ab);
    for (int act : {0, 1, 2}) {
        auto gb = unwritten(rows * ld2);
        emu::launch(dim3{(unsigned)rows, (unsigned)((f + THREADS - 1) / THREADS), 1}, THREADS, 0,
                    [&] { glu_bf16(xb.data(), (int)ld2, gb.data(), (int)ld2, f, meta, act); });
        put(out, gb);
    }
    const auto rotate = [&](float* m, int head_dim, const float* weight) {
        const unsigned warps = 4, heads = (unsigned)(cols / head_dim);
        emu::launch(dim3{(unsigned)rows, (heads + warps - 1) / warps, 1}, warps * 32, 0, [&] {
            rotary(m, ld, cols, head_dim, pos.data(), meta, table.data(), weight, eps);
        });
    };
    rotate(x.data(), group, nullptr);
    put(out, x);
    for (int head_dim : {group, group / 4}) {
        auto m = y;
        rotate(m.data(), head_dim, a.data());
        put(out, m);
    }
#endif

#ifdef EW_PROGRAM_POOL
    const size_t pooled_rows = (size_t)out_offsets[seqs];
    std::vector<std::vector<float>> pooled;
    for (int mode = 0; mode < 6; mode++) {
        pooled.push_back(nans(pooled_rows * ld));
        emu::launch(dim3{seq_blocks, 1, 1}, THREADS, 0, [&] {
            pool(x.data(), ld, pooled.back().data(), ld, cols, offsets.data(), out_offsets.data(), readouts.data(),
                 meta, mode, nullptr);
        });
        put(out, pooled.back());
    }
    auto normalized = nans(pooled_rows * ld);
    auto norms = nans(seqs);
    emu::launch(dim3{seq_blocks, 1, 1}, THREADS, 0, [&] {
        pool(x.data(), ld, normalized.data(), ld, cols, offsets.data(), out_offsets.data(), readouts.data(), meta,
             0, norms.data());
    });
    put(out, normalized);
    put(out, norms);
#endif

#ifdef EW_PROGRAM_EMBED
    std::vector<unsigned> ids(pos.begin(), pos.end());
    std::vector<int> positions(rows);
    for (int t = 0; t < rows; t++) {
        positions[t] = (pos[t] + 1) % 8;
    }
    for (int full = 1; full >= 0; full--) {
        auto e = nans(n);
        emu::launch(dim3{(unsigned)rows, 1, 1}, THREADS, 0, [&] {
            embed(ids.data(), positions.data(), meta, offsets.data(), nullptr, y.data(), full ? x.data() : nullptr,
                  full ? a.data() : nullptr, nullptr, cols, e.data(), ld, -1, nullptr, nullptr, 0.0f, nullptr);
        });
        put(out, e);
    }
    auto e = nans(n);
    auto sh = unwritten((size_t)rows * cols);
    emu::launch(dim3{(unsigned)rows, 1, 1}, THREADS, 0, [&] {
        embed(ids.data(), positions.data(), meta, offsets.data(), nullptr, y.data(), x.data(), a.data(), nullptr,
              cols, e.data(), ld, -1, a.data(), b.data(), eps, sh.data());
    });
    put(out, e);
    put(out, sh);
    // RoBERTa's positions: tok_pos the index in the sequence, the kernel numbering after pad ids 0 then 5.
    std::vector<int> index(rows, 0);
    for (int s = 0; s < seqs; s++) {
        for (int t = offsets[s]; t < offsets[s + 1]; t++) {
            index[t] = t - offsets[s];
        }
    }
    for (int pad : {0, 5}) {
        auto e = nans(n);
        emu::launch(dim3{(unsigned)rows, 1, 1}, THREADS, 0, [&] {
            embed(ids.data(), index.data(), meta, offsets.data(), nullptr, y.data(), x.data(), a.data(), nullptr,
                  cols, e.data(), ld, pad, nullptr, nullptr, 0.0f, nullptr);
        });
        put(out, e);
    }
    std::vector<int> type1_from(seqs);
    for (int s = 0; s < seqs; s++) {
        type1_from[s] = s % 3;
    }
    auto pairs = nans(n);
    emu::launch(dim3{(unsigned)rows, 1, 1}, THREADS, 0, [&] {
        embed(ids.data(), index.data(), meta, offsets.data(), type1_from.data(), y.data(), x.data(), a.data(),
              b.data(), cols, pairs.data(), ld, -1, nullptr, nullptr, 0.0f, nullptr);
    });
    put(out, pairs);
#endif

#ifdef EW_PROGRAM_QUANTIZE
    auto scales = nans(tokens);
    for (int mode = 0; mode < 2; mode++) {
        std::vector<signed char> q((size_t)tokens * cols, (signed char)-128);
        emu::launch(dim3{(unsigned)rows, 1, 1}, THREADS, 0,
                    [&] { quantize_int8(x.data(), ld, cols, tokens, mode, q.data(), scales.data()); });
        put(out, q);
    }
    put(out, scales);
#endif
    return out ? 0 : 1;
}
