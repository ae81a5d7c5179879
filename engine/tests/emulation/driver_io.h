// Input and output of the emulation drivers (*_driver.cpp): little-endian 32-bit ints and floats, 16-bit bf16s,
// read in the order the test (engine/tests/kernels_on_host/) wrote them.
#pragma once

#include <fstream>
#include <iterator>
#include <string>

struct Reader {
    std::vector<char> bytes;
    size_t at = 0;

    // A driver's input, from `DRIVER INPUT OUTPUT`; its output goes to `output`.
    static Reader from_args(int argc, char** argv, std::ofstream& output) {
        if (argc != 3) {
            std::fprintf(stderr, "usage: %s INPUT OUTPUT\n", argv[0]);
            std::exit(2);
        }
        std::ifstream in(argv[1], std::ios::binary);
        output.open(argv[2], std::ios::binary);
        return Reader{std::vector<char>(std::istreambuf_iterator<char>(in), {})};
    }
    template <class T>
    T next() {
        if (at + sizeof(T) > bytes.size()) {
            std::fprintf(stderr, "driver: input too short\n");
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

template <class T>
void put(std::ofstream& out, const std::vector<T>& v) {
    out.write(reinterpret_cast<const char*>(v.data()), (std::streamsize)(v.size() * sizeof(T)));
}

inline std::vector<float> nans(size_t n) { return std::vector<float>(n, std::numeric_limits<float>::quiet_NaN()); }
// bf16 NaN bits: what a shadow holds where its kernel wrote nothing.
inline std::vector<unsigned short> unwritten(size_t n) { return std::vector<unsigned short>(n, 0xffff); }
