//! The report's HTML page: the run's settings, its findings with the rules that decided them, the plots and the
//! step table.

use super::Chart;
use crate::results::{config_table, table, RunResult};

pub(crate) fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

pub(super) fn html(result: &RunResult, charts: &[Chart]) -> String {
    let mut out = String::new();
    let title = format!(
        "bench {} {} — {}",
        result.command, result.workload.kind, result.run_id
    );
    out.push_str(&format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>{t}</title><style>\
         body{{font-family:sans-serif;margin:2em;max-width:1400px}}table{{border-collapse:collapse;font-size:13px}}\
         td,th{{border:1px solid #ccc;padding:3px 6px;text-align:right}}th{{background:#f0f0f0}}\
         td:first-child,th:first-child{{text-align:left}}.fail{{color:#b00}}img{{max-width:100%;border:1px solid #ddd}}\
         .finding{{background:#f7f7f7;padding:.6em 1em;margin:.5em 0}}</style></head><body><h1>{t}</h1>",
        t = escape(&title)
    ));
    let m = &result.machine;
    let facts = [
        ("command", format!("bench {}", result.args.join(" "))),
        ("target", result.target.clone()),
        ("model", result.model.clone().unwrap_or_else(|| "-".into())),
        (
            "machine",
            format!(
                "{} ({} cores, {} GiB), {}, Linux {}",
                m.cpu, m.cores, m.memory_gib, m.os, m.kernel
            ),
        ),
        (
            "revision",
            result.git.as_ref().map_or("-".into(), |g| {
                format!("{}{}", g.revision, if g.dirty { " (dirty)" } else { "" })
            }),
        ),
        (
            "started",
            format!("{} ({:.0} s)", result.started_at, result.wall_s),
        ),
    ];
    out.push_str("<table>");
    for (k, v) in facts {
        out.push_str(&format!(
            "<tr><th>{k}</th><td style=\"text-align:left\">{}</td></tr>",
            escape(&v)
        ));
    }
    for c in &result.workload.classes {
        out.push_str(&format!(
            "<tr><th>class {}</th><td style=\"text-align:left\">{}; corpus {}{}; SLO {}; timeout {} s</td></tr>",
            escape(&c.name),
            escape(&c.load),
            escape(&c.corpus),
            c.prompt_name
                .as_ref()
                .map_or_else(String::new, |p| format!(", prompt_name {}", escape(p))),
            escape(&c.slo.describe()),
            c.timeout_s
        ));
    }
    out.push_str("</table><h2>Findings</h2>");
    let (headers, rows) = config_table(result);
    html_table(&mut out, &headers, &rows);
    if let Some(w) = crate::results::behind_warning(result) {
        out.push_str(&format!("<p class=\"finding fail\">{}</p>", escape(&w)));
    }
    if let Some(best) = &result.best {
        out.push_str(&format!(
            "<p class=\"finding\"><b>Best setting for the SLO: {}</b> — {:.1} {} within the SLO.</p>",
            escape(&best.label),
            best.throughput_within_slo,
            escape(&best.unit)
        ));
    }
    for c in &result.configs {
        out.push_str(&format!(
            "<div class=\"finding\"><b>{}</b>: saturation point <b>{}</b>, knee <b>{}</b>.<br>\
             <small>Saturation: {}<br>Knee: {}<br>Search: {}</small></div>",
            escape(&c.label),
            c.saturation.show(crate::search::unit_of(&c.steps)),
            c.knee.show(crate::search::unit_of(&c.steps)),
            escape(&c.saturation.how),
            escape(&c.knee.how),
            escape(&c.search_end)
        ));
    }
    for chart in charts {
        out.push_str(&format!(
            "<h2>{}</h2><img src=\"{f}.svg\" alt=\"{}\"><p><a href=\"{f}.png\">PNG</a></p>",
            escape(&chart.title),
            escape(&chart.title),
            f = chart.file
        ));
    }
    out.push_str("<h2>Steps</h2><p>Latency counts from each request's scheduled time; the warm-up of each step is \
                  excluded. <i>behind</i>: the generator's dispatch delay exceeded its bound.</p>");
    let (headers, rows) = table(result);
    html_table(&mut out, &headers, &rows);
    out.push_str("</body></html>\n");
    out
}

/// A table whose rows ending in FAIL are marked.
fn html_table(out: &mut String, headers: &[String], rows: &[Vec<String>]) {
    out.push_str("<table><tr>");
    for h in headers {
        out.push_str(&format!("<th>{}</th>", escape(h)));
    }
    out.push_str("</tr>");
    for row in rows {
        let fail = row.last().is_some_and(|v| v == "FAIL");
        out.push_str(if fail { "<tr class=\"fail\">" } else { "<tr>" });
        for v in row {
            out.push_str(&format!("<td>{}</td>", escape(v)));
        }
        out.push_str("</tr>");
    }
    out.push_str("</table>");
}
