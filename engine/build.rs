//! Two build-time jobs:
//! - A fact the tests select on: whether this machine's CPU runs the bf16 kernels. A test that needs them is
//!   `#[ignore]`d with the reason where it does not, so a run reports it as skipped instead of passing it without
//!   having checked anything.
//! - The replica protocol's Rust code, generated from `proto/` at the workspace root. protox parses the .proto
//!   files in Rust, so building needs no `protoc` binary (nothing to install on a CI machine, nothing fetched at
//!   build time, the same descriptor on every platform).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rustc-check-cfg=cfg(bf16_cpu)");
    println!("cargo:rerun-if-changed=build.rs");
    if bf16_cpu() {
        println!("cargo:rustc-cfg=bf16_cpu");
    }
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../proto");
    println!("cargo:rerun-if-changed={}", root.display());
    let descriptors = protox::compile([root.join("embedding/v1/replica.proto")], [&root])?;
    tonic_prost_build::configure().compile_fds(descriptors)?;
    Ok(())
}

/// The CPU this builds on has AVX512-BF16 (as `backend::cpu::gemm::bf16_supported` checks at run time), and the
/// build is for this machine, so the tests run where it was detected.
fn bf16_cpu() -> bool {
    if std::env::var("HOST").ok() != std::env::var("TARGET").ok() {
        return false;
    }
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("avx512f")
            && std::is_x86_feature_detected!("avx512bw")
            && std::is_x86_feature_detected!("avx512bf16")
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}
