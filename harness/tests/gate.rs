//! End to end: `bench gate timing` of a binary against itself passes; with the candidate on one compute thread
//! and the baseline on two, it fails and names the forward benchmarks. Each takes minutes of a quiet machine's
//! time with an optimised build, so they are ignored by default:
//! `cargo test --release -p harness --test gate -- --ignored`.

use std::process::Command;

fn gate(extra: &[&str]) -> (i32, String) {
    let bench = env!("CARGO_BIN_EXE_bench");
    let results = tempfile::tempdir().expect("temporary folder");
    let out = Command::new(bench)
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .args(["gate", "timing", "--against", bench, "--results-dir"])
        .arg(results.path())
        .args(extra)
        .output()
        .expect("running bench gate timing");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    eprintln!("{}\n{stdout}", String::from_utf8_lossy(&out.stderr));
    (out.status.code().unwrap_or(-1), stdout)
}

#[test]
#[ignore = "needs a release build and a quiet machine (minutes); run with --ignored"]
fn a_binary_against_itself_passes() {
    let (code, md) = gate(&[
        "--rounds",
        "8",
        "--only",
        "forward-1x12-f32,forward-32x128-f32",
    ]);
    assert_eq!(code, 0, "{md}");
    assert!(!md.contains("FAIL"));
}

#[test]
#[ignore = "needs a release build and two free cores (minutes); run with --ignored"]
fn one_thread_against_two_fails_on_the_forward_benchmarks() {
    let (code, md) = gate(&[
        "--rounds",
        "6",
        "--only",
        "forward-32x128-f32,bulk-f32",
        "--candidate-set",
        "threads=1",
        "--baseline-set",
        "threads=2",
        "--allow-busy",
    ]);
    assert_eq!(code, 1, "{md}");
    assert!(
        md.lines()
            .any(|l| l.starts_with("| forward-32x128-f32") && l.contains("**FAIL**")),
        "{md}"
    );
}
