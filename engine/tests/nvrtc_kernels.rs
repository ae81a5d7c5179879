//! Every kernel of `kernels/*.cu` compiles through NVRTC for sm_80 (A100) and sm_90 (H100/H200) with no error and
//! no warning, and ptxas reports no register spill or stack frame for any of them. Needs the feature `cuda` and NVRTC on the library path (`.ci/run` installs PyPI's
//! nvidia-cuda-nvrtc and points `LD_LIBRARY_PATH` at it); without NVRTC the test says it skipped, on standard error
//! and in the run's skip ledger (`target/tmp/skipped-tests.txt`), and never passes silently (under `EW_REQUIRE_NVRTC` it fails instead).
#![cfg(feature = "cuda")]

use engine::backend::cuda::nvrtc::{self, Arch};

#[path = "common/skip.rs"]
mod skip;

/// Skips (or, under `EW_REQUIRE_NVRTC`, as `.ci/run` sets, fails) a test that needs NVRTC.
fn skipped(test: &str, reason: &str) {
    assert!(
        std::env::var_os("EW_REQUIRE_NVRTC").is_none(),
        "{test}: {reason}, and EW_REQUIRE_NVRTC says it must run"
    );
    skip::skipped(env!("CARGO_TARGET_TMPDIR"), test, reason);
}

#[test]
fn nvrtc_compiles_every_kernel_for_sm80_and_sm90_without_warnings() {
    if !nvrtc::available() {
        skipped(
            "nvrtc_kernels",
            "NVRTC not found on the library path (pip install nvidia-cuda-nvrtc; LD_LIBRARY_PATH=.../nvidia/cu13/lib)",
        );
        return;
    }
    let version = nvrtc::version().unwrap();
    let mut failures = Vec::new();
    for arch in [Arch { major: 8, minor: 0 }, Arch { major: 9, minor: 0 }] {
        for source in nvrtc::SOURCES {
            match nvrtc::compile(source, arch) {
                Ok(cubin) => {
                    // An ELF image, and every function the backend loads is in it.
                    assert!(
                        cubin.starts_with(b"\x7fELF"),
                        "{} for {arch}: not a CUBIN",
                        source.file
                    );
                    for f in source.functions {
                        assert!(
                            cubin
                                .windows(f.len() + 1)
                                .any(|w| &w[..f.len()] == f.as_bytes() && w[f.len()] == 0),
                            "{} for {arch}: no symbol {f}",
                            source.file
                        );
                    }
                }
                Err(e) => failures.push(e.to_string()),
            }
        }
    }
    assert!(
        failures.is_empty(),
        "NVRTC {version:?}:\n{}",
        failures.join("\n\n")
    );
    eprintln!(
        "NVRTC {version:?}: {} kernel files compiled for sm_80 and sm_90",
        nvrtc::SOURCES.len()
    );
}

/// The disk cache end to end on the real compiler: a first load compiles, a second reads the same bytes back.
#[test]
fn the_disk_cache_returns_what_nvrtc_compiled() {
    if !nvrtc::available() {
        skipped("nvrtc_disk_cache", "NVRTC not found on the library path");
        return;
    }
    let version = nvrtc::version().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cache = nvrtc::DiskCache::new(dir.path());
    let arch = Arch { major: 9, minor: 0 };
    let (first, compiled) = cache
        .load_or_compile(&nvrtc::SOURCES[0], arch, version)
        .unwrap();
    assert!(compiled);
    let (again, compiled) = cache
        .load_or_compile(&nvrtc::SOURCES[0], arch, version)
        .unwrap();
    assert!(!compiled, "the second load is a cache hit");
    assert_eq!(first, again);
}

/// No kernel keeps anything in local memory on sm_80 or sm_90: no register spills and no stack frame (an array
/// indexed by a value the compiler cannot unroll lands there), each a trip to memory in the innermost loops. The
/// tensor-core attention holds a head's Q fragments and output accumulators in registers (161 on sm_90 at the
/// time of writing; its wide entry point, heads of 256, its accumulators alone: 224 on sm_90, 249 on sm_80), so
/// this is where a change to its tile sizes shows first. Checked on ptxas's own report.
#[test]
fn nvrtc_kernels_neither_spill_registers_nor_use_a_stack_frame() {
    if !nvrtc::available() {
        skipped("nvrtc_spills", "NVRTC not found on the library path");
        return;
    }
    let mut entries = 0;
    for arch in [Arch { major: 8, minor: 0 }, Arch { major: 9, minor: 0 }] {
        for source in nvrtc::SOURCES {
            let report = nvrtc::ptxas_report(source, arch).unwrap();
            // Per entry function: "Compiling entry function 'f' for 'sm_XY'", then
            // "N bytes stack frame, N bytes spill stores, N bytes spill loads", then "Used N registers, ...".
            let frames: Vec<&str> = report
                .lines()
                .filter(|l| l.contains("bytes stack frame"))
                .collect();
            assert_eq!(
                frames.len(),
                source.functions.len(),
                "{} for {arch}: one report per kernel expected:\n{report}",
                source.file
            );
            for line in frames {
                assert!(
                    line.contains(
                        " 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads"
                    ),
                    "{} for {arch}: {}\n{report}",
                    source.file,
                    line.trim()
                );
                entries += 1;
            }
            for line in report.lines().filter(|l| l.contains("Used")) {
                eprintln!("{} {arch}: {}", source.file, line.trim());
            }
        }
    }
    assert!(entries > 0);
}
