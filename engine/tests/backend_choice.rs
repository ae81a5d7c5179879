//! `--backend cuda` fails clearly where it cannot run: a build without the feature `cuda` says to rebuild with it,
//! a build with it on a machine without an NVIDIA driver says there is none (CI and this project's machines have
//! no GPU). On a machine with a driver, the cuda-feature test records itself as skipped: the GPU is checked by
//! scripts/gpu_check.sh instead.

use std::path::Path;

use engine::backend::BackendKind;
use engine::{Engine, EngineConfig};

fn tiny() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    engine::model::tiny::write_tiny_bert(dir.path(), Default::default()).unwrap();
    dir
}

fn load_cuda(dir: &Path) -> engine::Result<Engine> {
    let config = EngineConfig {
        backend: BackendKind::Cuda,
        ..EngineConfig::default()
    };
    Engine::load(dir, config)
}

#[cfg(feature = "cuda")]
#[path = "common/skip.rs"]
mod skip;

#[cfg(not(feature = "cuda"))]
#[test]
fn cuda_without_the_feature_says_to_build_with_it() {
    let dir = tiny();
    let err = load_cuda(dir.path())
        .err()
        .expect("no CUDA backend in this build");
    assert!(err.to_string().contains("--features cuda"), "{err}");
}

#[cfg(feature = "cuda")]
#[test]
fn cuda_without_a_driver_says_there_is_none() {
    if Path::new("/proc/driver/nvidia").exists() {
        skip::skipped(
            env!("CARGO_TARGET_TMPDIR"),
            "cuda_without_a_driver",
            "this machine has an NVIDIA driver",
        );
        return;
    }
    let dir = tiny();
    let err = load_cuda(dir.path()).err().expect("no GPU here");
    assert!(err.to_string().contains("driver"), "{err}");
}

#[test]
fn the_backend_is_a_config_knob_with_cpu_by_default() {
    let c = EngineConfig::default();
    assert_eq!((c.backend, c.device), (BackendKind::Cpu, 0));
    let toml = "backend = \"cuda\"\ndevice = 1\n";
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("e.toml");
    std::fs::write(&path, toml).unwrap();
    let c = EngineConfig::from_toml_file(&path).unwrap();
    assert_eq!((c.backend, c.device), (BackendKind::Cuda, 1));
}
