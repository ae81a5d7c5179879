//! A skipped test says so: one line on the real standard error (the test harness captures only `print!`s) and one
//! in the run's skip ledger, `skipped-tests.txt` in the target's tmp folder (`.ci/run` prints it). Shared by the
//! engine's and the harness's integration tests (`#[path]`-included: `CARGO_TARGET_TMPDIR` is each test's own).

use std::io::Write;
use std::path::Path;

/// Reports `test` as skipped for `reason`; `tmp` is the caller's `env!("CARGO_TARGET_TMPDIR")`.
pub fn skipped(tmp: &str, test: &str, reason: &str) {
    let line = format!("SKIPPED: {test}: {reason}");
    let _ = writeln!(std::io::stderr().lock(), "{line}");
    let ledger = Path::new(tmp).join("skipped-tests.txt");
    let appended = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&ledger)
        .and_then(|mut f| writeln!(f, "{line}"));
    if let Err(e) = appended {
        let _ = writeln!(
            std::io::stderr().lock(),
            "(could not count it in {}: {e})",
            ledger.display()
        );
    }
}
