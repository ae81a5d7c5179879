//! Only `backend/` knows a device: architectures, the scheduler, the gateway and the harness reach a backend
//! through the op set and the `Backend` trait, never through the CPU backend's own modules. This test fails the
//! build when a file outside `engine/src/backend/cpu/` names `backend::cpu` — with two exceptions that are part of
//! the backend layer: `engine/src/backend/mod.rs` (which declares and starts it) and the CPU kernels' own
//! benchmark.

use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn nothing_outside_the_cpu_backend_imports_it() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let cpu = root.join("engine/src/backend/cpu");
    let allowed = [
        root.join("engine/src/backend/mod.rs"),
        root.join("engine/benches/cpu_kernels.rs"),
    ];
    let mut files = Vec::new();
    for dir in [
        "engine/src",
        "engine/tests",
        "engine/benches",
        "harness",
        "tui",
        "fuzz",
    ] {
        rust_files(&root.join(dir), &mut files);
    }
    assert!(files.len() > 20, "found only {} source files", files.len());
    let offenders: Vec<String> = files
        .iter()
        .filter(|f| !f.starts_with(&cpu) && !allowed.contains(f) && !f.ends_with("layering.rs"))
        .filter(|f| !f.components().any(|c| c.as_os_str() == "target"))
        .filter_map(|f| {
            let text = std::fs::read_to_string(f).ok()?;
            let line = text.lines().position(|l| l.contains("backend::cpu"))?;
            Some(format!("{}:{}", f.display(), line + 1))
        })
        .collect();
    assert!(
        offenders.is_empty(),
        "outside backend/cpu, these name the CPU backend: {offenders:?}"
    );
}

/// The same for the CUDA backend (feature `cuda`): outside `engine/src/backend/cuda/`, only the backend's entry point
/// and the kernel tests (NVRTC's compile check, the host emulation's runs) name it.
#[test]
fn nothing_outside_the_cuda_backend_imports_it() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let cuda = root.join("engine/src/backend/cuda");
    let allowed = [
        root.join("engine/src/backend/mod.rs"),
        root.join("engine/tests/nvrtc_kernels.rs"),
    ];
    // The kernels' host-emulation test, every file of it.
    let kernel_tests = root.join("engine/tests/kernels_on_host");
    let mut files = Vec::new();
    for dir in [
        "engine/src",
        "engine/tests",
        "engine/benches",
        "harness",
        "tui",
    ] {
        rust_files(&root.join(dir), &mut files);
    }
    let offenders: Vec<String> = files
        .iter()
        .filter(|f| {
            !f.starts_with(&cuda)
                && !f.starts_with(&kernel_tests)
                && !allowed.contains(f)
                && !f.ends_with("layering.rs")
        })
        .filter(|f| !f.components().any(|c| c.as_os_str() == "target"))
        .filter_map(|f| {
            let text = std::fs::read_to_string(f).ok()?;
            let line = text.lines().position(|l| l.contains("backend::cuda"))?;
            Some(format!("{}:{}", f.display(), line + 1))
        })
        .collect();
    assert!(
        offenders.is_empty(),
        "outside backend/cuda, these name the CUDA backend: {offenders:?}"
    );
}
