//! The seed 004 table: one row per run (per connection count in a sweep). Latencies in ms.

use std::fmt::Write;

use super::percent_below_mean;
use crate::run::RunResult;

/// Column keys, in order, as the JSON report names them too.
pub const COLUMNS: [&str; 23] = [
    "conns",
    "requests_total",
    "kbytes_total",
    "requests_second",
    "kbytes_second",
    "latency_min",
    "latency_max",
    "latency_average",
    "latency_stddev",
    "latency_30",
    "latency_50",
    "latency_75",
    "latency_90",
    "latency_99",
    "latency_99_99",
    "kbytes_req",
    "time_total",
    "errors_conns",
    "errors_reads",
    "errors_writes",
    "errors_timeouts",
    "errors_status",
    "perc_averg",
];

/// The row values of one run, in `COLUMNS` order.
pub fn row(r: &RunResult) -> Vec<f64> {
    let h = &r.stats.latency;
    let ms = |us: f64| us / 1000.0;
    let q = |p: f64| ms(h.value_at_quantile(p) as f64);
    let secs = r.elapsed.as_secs_f64().max(1e-9);
    let kb = r.stats.bytes as f64 / 1024.0;
    let e = &r.stats.errors;
    vec![
        r.options.connections as f64,
        r.stats.responses as f64,
        kb,
        r.stats.responses as f64 / secs,
        kb / secs,
        ms(h.min() as f64),
        ms(h.max() as f64),
        ms(h.mean()),
        ms(h.stdev()),
        q(0.30),
        q(0.50),
        q(0.75),
        q(0.90),
        q(0.99),
        q(0.9999),
        if r.stats.responses > 0 {
            kb / r.stats.responses as f64
        } else {
            0.0
        },
        secs,
        e.connect as f64,
        e.read as f64,
        e.write as f64,
        e.timeout as f64,
        e.status as f64,
        percent_below_mean(h).round(),
    ]
}

/// The table, in the seed's reStructuredText shape.
pub fn render(runs: &[RunResult]) -> String {
    // Full words, over two lines: what is measured, then its unit or statistic.
    const H1: [&str; 23] = [
        "connections",
        "requests",
        "kilobytes",
        "requests",
        "kilobytes",
        "latency",
        "latency",
        "latency",
        "latency",
        "latency",
        "latency",
        "latency",
        "latency",
        "latency",
        "latency",
        "kilobytes",
        "time",
        "errors",
        "errors",
        "errors",
        "errors",
        "errors",
        "percent",
    ];
    const H2: [&str; 23] = [
        "",
        "total",
        "total",
        "per second",
        "per second",
        "min ms",
        "max ms",
        "average ms",
        "stddev ms",
        "30% ms",
        "50% ms",
        "75% ms",
        "90% ms",
        "99% ms",
        "99.99% ms",
        "per request",
        "total s",
        "connect",
        "read",
        "write",
        "timeout",
        "status",
        "below average",
    ];
    let rows: Vec<Vec<String>> = runs
        .iter()
        .map(|r| {
            row(r)
                .iter()
                .enumerate()
                .map(|(i, v)| match i {
                    0 | 1 | 17..=21 | 22 => format!("{v:.0}"),
                    _ => format!("{v:.2}"),
                })
                .collect()
        })
        .collect();
    let widths: Vec<usize> = (0..23)
        .map(|i| {
            rows.iter()
                .map(|r| r[i].len())
                .chain([H1[i].len(), H2[i].len()])
                .max()
                .unwrap_or(5)
        })
        .collect();
    let rule = widths
        .iter()
        .map(|w| "=".repeat(*w))
        .collect::<Vec<_>>()
        .join(" ");
    let line = |cells: &[String]| {
        cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let mut s = String::new();
    let _ = writeln!(s, "{rule}");
    let _ = writeln!(s, "{}", line(&H1.map(String::from)));
    let _ = writeln!(s, "{}", line(&H2.map(String::from)));
    let _ = writeln!(s, "{rule}");
    for r in &rows {
        let _ = writeln!(s, "{}", line(r));
    }
    let _ = writeln!(s, "{rule}");
    s
}
