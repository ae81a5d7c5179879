//! Kernels of kernels/*.cu, run on the CPU under a host emulation of CUDA (tests/emulation/: threads as fibers,
//! barriers and shuffles between them, the tensor-core instruction from the PTX ISA's fragment layouts), against
//! f64 references. Attention (both kernels): ragged batches, bidirectional and causal, sliding windows, grouped key/value heads,
//! heads of 32 to 256 (narrow and wide entry points), strided views, and a bucket's grid larger than its batch. The norms, element-wise kernels
//! (GELU epilogue, SwiGLU and GeGLU gates, rotary, bf16 rounding), pooling with Normalize, and int8 quantisation: rows past the
//! batch left alone, strided views, Tokens readouts. Every kernel that writes a GEMM's operand beside its output
//! (its *shadow*) is checked to write exactly what `to_bf16` makes of that output. The embedding gather too:
//! every kernel the backend launches runs here. The program compiled is exactly what NVRTC compiles
//! (`Source::program`: the host's constants, common.cuh, the kernel file), with the tile list the backend uploads
//! (`InputLayout::fill`) and the shared memory the backend asks for. A GPU run (scripts/gpu_check.sh) is still the
//! last word on timing and on anything the emulation cannot see; see tests/emulation/cuda_host.h.
//!
//! Needs a C++20 compiler (`c++`); without one the tests say they skipped (ledger: `target/tmp/skipped-tests.txt`).
#![cfg(feature = "cuda")]

use std::path::{Path, PathBuf};
use std::process::Command;

use engine::backend::cuda::nvrtc::SOURCES;

#[path = "../common/skip.rs"]
mod skip;

mod attention;
mod rowwise;

/// Compiles `file`'s NVRTC program with the emulation and `driver` (tests/emulation/) into the binary `name`,
/// with `define` set; `None` (and a skip) without `c++`.
pub fn build(file: &str, driver: &str, name: &str, define: &str) -> Option<PathBuf> {
    let here = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/emulation");
    let source = SOURCES
        .iter()
        .find(|s| s.file == file)
        .expect("the kernel file is one of the backend's sources");
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("kernels_on_host");
    std::fs::create_dir_all(&dir).unwrap();
    let unit = dir.join(format!("{name}.cpp"));
    let text = format!(
        "#include \"{}\"\n{}\n#line 1 \"{driver}\"\n#include \"{}\"\n",
        here.join("cuda_host.h").display(),
        source.program(),
        here.join(driver).display()
    );
    std::fs::write(&unit, text).unwrap();
    let binary = dir.join(name);
    let compiled = Command::new("c++")
        // The kernels read 16-bit shared memory as 32-bit words, as CUDA code does; g++ must not assume otherwise.
        .args(["-std=c++20", "-O2", "-w", "-fno-strict-aliasing"])
        .arg(format!("-D{define}"))
        .arg(&unit)
        .arg("-o")
        .arg(&binary)
        .output();
    match compiled {
        Err(e) => {
            skip::skipped(
                env!("CARGO_TARGET_TMPDIR"),
                "kernels_on_host",
                &format!("no C++ compiler (`c++`: {e}); apt install g++"),
            );
            None
        }
        Ok(out) => {
            assert!(
                out.status.success(),
                "{file} under the emulation did not compile:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
            Some(binary)
        }
    }
}

/// Runs a driver on `input` (written to a file named after the binary and `tag`); its output's bytes.
pub fn execute(binary: &Path, tag: &str, input: &[u8]) -> Vec<u8> {
    let base = binary.with_extension(tag);
    let (inp, outp) = (base.with_extension("in"), base.with_extension("out"));
    std::fs::write(&inp, input).unwrap();
    let run = Command::new(binary).arg(&inp).arg(&outp).output().unwrap();
    assert!(
        run.status.success(),
        "{} under the emulation failed: {}",
        binary.display(),
        String::from_utf8_lossy(&run.stderr)
    );
    std::fs::read(&outp).unwrap()
}

/// Splits a driver's output into f32 and bf16-bit matrices, in the order it wrote them.
pub struct Output(pub Vec<u8>);

impl Output {
    /// The next `n` values of `N` bytes each.
    pub fn take<T, const N: usize>(&mut self, n: usize, from: fn([u8; N]) -> T) -> Vec<T> {
        let rest = self.0.split_off(N * n);
        let head = std::mem::replace(&mut self.0, rest);
        head.chunks_exact(N)
            .map(|b| from(b.try_into().unwrap()))
            .collect()
    }

    pub fn f32s(&mut self, n: usize) -> Vec<f32> {
        self.take(n, f32::from_le_bytes)
    }

    pub fn bf16s(&mut self, n: usize) -> Vec<u16> {
        self.take(n, u16::from_le_bytes)
    }
}

/// Round to nearest even, as `f32_to_bf16` in kernels/common.cuh (no NaNs here).
pub fn bf16(x: f32) -> f32 {
    let u = x.to_bits();
    f32::from_bits((u + 0x7fff + ((u >> 16) & 1)) & 0xffff_0000)
}

pub fn bf16_bits(x: f32) -> u16 {
    (bf16(x).to_bits() >> 16) as u16
}
