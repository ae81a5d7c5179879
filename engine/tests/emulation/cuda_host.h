// Runs the CUDA C kernels of kernels/*.cu on a CPU, for tests on machines without a GPU (this one, CI).
//
// Each thread of a block is a fiber (ucontext), and the fibers of one block are scheduled cooperatively on one OS
// thread: __syncthreads, __syncwarp and the warp shuffles are barriers between fibers, and between barriers the
// fibers run in an order shuffled every round (seeded, so a run repeats), so a missing barrier shows as a value
// read before it was written more often than a fixed order would show it. Blocks run one after another. The
// tensor-core instruction (mma_bf16_16816) is computed from the fragment layouts the PTX ISA documents for
// mma.m16n8k16, read independently of the kernels that write them. Dynamic shared memory starts as all-ones bytes
// (NaN as f32 and as bf16), so a kernel that reads what it never wrote shows it in its output, and a guard zone
// after it fails the run if a kernel writes past what the host asked for. What this cannot show: timing,
// occupancy, bank conflicts, every interleaving, or a layout misread the same way here and in a kernel; a GPU run
// (scripts/gpu_check.sh, with compute-sanitizer) is still the last word.
//
// Written by hand: no CUDA emulator is packaged for this machine, and the kernels need only this much of CUDA.
#pragma once

#include <ucontext.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <vector>

#define EW_HOST_EMULATION 1
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(x)
// One block at a time: a function-local static is what every thread of the block shares.
#define __shared__ static

using std::max;
using std::min;

struct dim3 {
    unsigned x = 1, y = 1, z = 1;
};

namespace emu {

struct Barrier {
    int expected = 0, arrived = 0;
    long generation = 0;
};

struct Fiber {
    ucontext_t context;
    dim3 thread;
    bool done = false;
    std::unique_ptr<char[]> stack;
};

constexpr size_t STACK_BYTES = 256 << 10;
// Bytes after the dynamic shared memory that no kernel may write, and what they hold.
constexpr size_t GUARD_BYTES = 4096;
constexpr unsigned char GUARD = 0xa5;

inline dim3 block, block_dim, grid_dim;
inline std::vector<Fiber> fibers;
inline Fiber* current = nullptr;
inline ucontext_t scheduler;
inline Barrier block_barrier;
inline std::vector<Barrier> warp_barriers;
inline std::vector<uint32_t> exchange;   // a word per thread, for shuffles
inline std::vector<uint32_t> fragments;  // six words per thread (A's four, B's two), for mma
inline std::vector<float> dynamic_smem;
inline uint64_t schedule_seed = 0x9e3779b97f4a7c15ull;
inline bool progress = false;
inline std::function<void()> kernel;

inline void wait(Barrier& b) {
    const long generation = b.generation;
    progress = true;
    if (++b.arrived == b.expected) {
        b.arrived = 0;
        b.generation++;
        return;
    }
    while (b.generation == generation) {
        swapcontext(&current->context, &scheduler);
    }
}

inline int tid() { return (int)current->thread.x; }
inline Barrier& my_warp() { return warp_barriers[tid() / 32]; }

inline void entry(int i) {
    kernel();
    fibers[i].done = true;
    progress = true;
}

// Runs `body` (a call of the kernel with its arguments) over a grid of 1-D blocks, as <<<grid, threads, smem>>>.
inline void launch(dim3 grid, unsigned threads, size_t smem_bytes, std::function<void()> body) {
    if (threads == 0 || threads % 32 != 0 || threads > 1024) {
        std::fprintf(stderr, "emulation: %u threads per block: a multiple of 32 up to 1024\n", threads);
        std::exit(2);
    }
    kernel = std::move(body);
    grid_dim = grid;
    block_dim = dim3{threads, 1, 1};
    exchange.assign(threads, 0);
    fragments.assign(6 * threads, 0);
    for (unsigned z = 0; z < grid.z; z++) {
        for (unsigned y = 0; y < grid.y; y++) {
            for (unsigned x = 0; x < grid.x; x++) {
                block = dim3{x, y, z};
                dynamic_smem.assign((smem_bytes + GUARD_BYTES) / 4 + 1, 0.0f);
                std::memset(dynamic_smem.data(), 0xff, smem_bytes);
                std::memset((char*)dynamic_smem.data() + smem_bytes, GUARD, dynamic_smem.size() * 4 - smem_bytes);
                block_barrier = Barrier{(int)threads, 0, 0};
                warp_barriers.assign(threads / 32, Barrier{32, 0, 0});
                fibers.clear();
                fibers.resize(threads);
                for (unsigned i = 0; i < threads; i++) {
                    Fiber& f = fibers[i];
                    f.thread = dim3{i, 0, 0};
                    f.stack.reset(new char[STACK_BYTES]);
                    getcontext(&f.context);
                    f.context.uc_stack.ss_sp = f.stack.get();
                    f.context.uc_stack.ss_size = STACK_BYTES;
                    f.context.uc_link = &scheduler;
                    makecontext(&f.context, (void (*)())entry, 1, (int)i);
                }
                // Rounds, each resuming every live thread once in a shuffled order, until every thread has
                // returned; a round in which no thread reached a barrier or returned is a deadlock (a barrier
                // some thread never reaches), which a GPU would hang on.
                std::vector<unsigned> order(threads);
                for (unsigned i = 0; i < threads; i++) {
                    order[i] = i;
                }
                for (bool running = true; running;) {
                    running = false;
                    progress = false;
                    for (unsigned i = threads - 1; i > 0; i--) {
                        // xorshift64
                        schedule_seed ^= schedule_seed << 13;
                        schedule_seed ^= schedule_seed >> 7;
                        schedule_seed ^= schedule_seed << 17;
                        std::swap(order[i], order[schedule_seed % (i + 1)]);
                    }
                    for (unsigned i : order) {
                        if (!fibers[i].done) {
                            running = true;
                            current = &fibers[i];
                            swapcontext(&scheduler, &fibers[i].context);
                        }
                    }
                    if (running && !progress) {
                        std::fprintf(stderr, "emulation: block (%u, %u, %u) deadlocked at a barrier\n", x, y, z);
                        std::exit(3);
                    }
                }
                const unsigned char* guard = (const unsigned char*)dynamic_smem.data() + smem_bytes;
                for (size_t i = 0; i < GUARD_BYTES; i++) {
                    if (guard[i] != GUARD) {
                        std::fprintf(stderr, "emulation: block (%u, %u, %u) wrote %zu bytes past the %zu bytes of "
                                     "shared memory the host asked for\n", x, y, z, i + 1, smem_bytes);
                        std::exit(4);
                    }
                }
            }
        }
    }
}

inline uint32_t bits(float v) {
    uint32_t u;
    std::memcpy(&u, &v, 4);
    return u;
}

inline float from_bits(uint32_t u) {
    float v;
    std::memcpy(&v, &u, 4);
    return v;
}

// The value `src` lane of this warp passed in the same shuffle.
inline uint32_t shuffle(uint32_t v, int src) {
    const int base = tid() & ~31;
    exchange[tid()] = v;
    wait(my_warp());
    const uint32_t got = exchange[base + (src & 31)];
    wait(my_warp());
    return got;
}

inline float bf16_to_f32(uint32_t half) { return from_bits(half << 16); }

}  // namespace emu

#define threadIdx (emu::current->thread)
#define blockIdx (emu::block)
#define blockDim (emu::block_dim)
#define gridDim (emu::grid_dim)

#define DYNAMIC_SMEM(T, name) T* name = (T*)emu::dynamic_smem.data()

inline void __syncthreads() { emu::wait(emu::block_barrier); }
inline void __syncwarp(unsigned = 0xffffffffu) { emu::wait(emu::my_warp()); }
inline void __trap() { std::abort(); }

inline float __shfl_xor_sync(unsigned, float v, int mask) {
    return emu::from_bits(emu::shuffle(emu::bits(v), (emu::tid() & 31) ^ mask));
}
inline float __shfl_sync(unsigned, float v, int src) { return emu::from_bits(emu::shuffle(emu::bits(v), src)); }

inline float __int_as_float(int v) { return emu::from_bits((uint32_t)v); }
inline float __uint_as_float(unsigned v) { return emu::from_bits(v); }
inline unsigned __float_as_uint(float v) { return emu::bits(v); }
inline int __float_as_int(float v) { return (int)emu::bits(v); }

// c += a b over the warp, from the fragments every lane passes, laid out as the PTX ISA documents for
// mma.m16n8k16 .row.col with .bf16 inputs (g = lane / 4, t = lane % 4; the lower index in a register's low half):
//   A element (row, k):  lane (row % 8) * 4 + (k % 8) / 2, register (row >= 8) + 2 * (k >= 8)
//   B element (k, col):  lane col * 4 + (k % 8) / 2, register (k >= 8)
//   C element (row, col) of lane g * 4 + t: c[i] for row g + 8 * (i >= 2), col 2t + i % 2.
inline void mma_bf16_16816(float* c, const unsigned* a, unsigned b0, unsigned b1) {
    const int me = emu::tid(), base = me & ~31, lane = me & 31;
    uint32_t* mine = &emu::fragments[6 * me];
    for (int i = 0; i < 4; i++) {
        mine[i] = a[i];
    }
    mine[4] = b0;
    mine[5] = b1;
    emu::wait(emu::my_warp());
    auto half = [](uint32_t reg, int k) { return emu::bf16_to_f32(k % 2 ? reg >> 16 : reg & 0xffffu); };
    auto a_at = [&](int row, int k) {
        const uint32_t* f = &emu::fragments[6 * (base + (row % 8) * 4 + (k % 8) / 2)];
        return half(f[(row >= 8) + 2 * (k >= 8)], k);
    };
    auto b_at = [&](int k, int col) {
        const uint32_t* f = &emu::fragments[6 * (base + col * 4 + (k % 8) / 2)];
        return half(f[4 + (k >= 8)], k);
    };
    const int g = lane / 4, t = lane % 4;
    float out[4];
    for (int i = 0; i < 4; i++) {
        const int row = g + 8 * (i >= 2), col = 2 * t + i % 2;
        float sum = 0.0f;
        for (int k = 0; k < 16; k++) {
            sum += a_at(row, k) * b_at(k, col);
        }
        out[i] = c[i] + sum;
    }
    emu::wait(emu::my_warp());
    for (int i = 0; i < 4; i++) {
        c[i] = out[i];
    }
}
