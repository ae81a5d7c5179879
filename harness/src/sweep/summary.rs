//! The summary on stderr at the end of a run (and of `bench report`): the step and configuration tables, the
//! findings and the best setting.

use crate::results::{self, RunResult};

/// The summary table on stderr: the columns that fit a terminal.
pub fn print_summary(result: &RunResult) {
    let (headers, rows) = results::table(result);
    let cols: Vec<usize> = (0..headers.len())
        .filter(|&i| results::COLUMNS[i].1)
        .collect();
    let pick = |r: &Vec<String>| cols.iter().map(|&i| r[i].clone()).collect::<Vec<_>>();
    eprintln!();
    print_table(&pick(&headers), &rows.iter().map(pick).collect::<Vec<_>>());
    eprintln!();
    let (headers, rows) = results::config_table(result);
    print_table(&headers, &rows);
    eprintln!();
    for c in &result.configs {
        eprintln!(
            "{}: saturation point {} — {}",
            c.label,
            c.saturation.show(crate::search::unit_of(&c.steps)),
            c.saturation.how
        );
        let unit = crate::search::unit_of(&c.steps);
        eprintln!("{}: knee {} — {}", c.label, c.knee.show(unit), c.knee.how);
    }
    if let Some(b) = &result.best {
        eprintln!(
            "best setting for the SLO: {} ({:.1} {})",
            b.label, b.throughput_within_slo, b.unit
        );
    }
    if let Some(w) = results::behind_warning(result) {
        eprintln!("{w}");
    }
    if let Some(h) = &result.host {
        eprintln!("host while it ran: {}", h.describe());
        if h.busy {
            eprintln!(
                "warning: measured on a busy host (other processes took CPU time the engine and the generator \
                 needed): rerun on a quiet machine before trusting these figures"
            );
        }
    }
}

/// Right-aligned columns on stderr.
fn print_table(headers: &[String], rows: &[Vec<String>]) {
    let headers = headers.to_vec();
    let all: Vec<&Vec<String>> = std::iter::once(&headers).chain(rows).collect();
    let widths: Vec<usize> = (0..headers.len())
        .map(|j| all.iter().map(|r| r[j].chars().count()).max().unwrap_or(0))
        .collect();
    for row in all {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(v, w)| format!("{v:>w$}"))
            .collect();
        eprintln!("{}", line.join("  "));
    }
}
