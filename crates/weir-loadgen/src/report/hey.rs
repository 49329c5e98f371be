//! hey's summary: totals, a response-time histogram, the latency distribution, status codes and
//! errors. Times in seconds, as hey prints them. "Total data" and "Size/request" count body bytes,
//! as hey does.

use std::fmt::Write;

use crate::run::RunResult;

pub fn render(r: &RunResult) -> String {
    let h = &r.stats.latency;
    let secs = |us: f64| us / 1_000_000.0;
    let mut s = String::new();
    let _ = writeln!(s, "\nSummary:");
    let _ = writeln!(s, "  Total:\t{:.4} secs", r.elapsed.as_secs_f64());
    let _ = writeln!(s, "  Slowest:\t{:.4} secs", secs(h.max() as f64));
    let _ = writeln!(s, "  Fastest:\t{:.4} secs", secs(h.min() as f64));
    let _ = writeln!(s, "  Average:\t{:.4} secs", secs(h.mean()));
    let _ = writeln!(s, "  Requests/sec:\t{:.4}", r.requests_per_sec());
    let _ = writeln!(s, "  ");
    let _ = writeln!(s, "  Total data:\t{} bytes", r.stats.body_bytes);
    let per = r
        .stats
        .body_bytes
        .checked_div(r.stats.responses)
        .unwrap_or(0);
    let _ = writeln!(s, "  Size/request:\t{per} bytes");
    let _ = writeln!(s, "\nResponse time histogram:");
    if !h.is_empty() {
        let (lo, hi) = (h.min() as f64, h.max() as f64);
        let step = ((hi - lo) / 10.0).max(1.0);
        let mut buckets = [0u64; 11];
        for v in h.iter_recorded() {
            let i = (((v.value_iterated_to() as f64 - lo) / step) as usize).min(10);
            buckets[i] += v.count_at_value();
        }
        let most = *buckets.iter().max().unwrap_or(&1);
        for (i, n) in buckets.iter().enumerate() {
            let bar = "■".repeat((n * 40 / most.max(1)) as usize);
            let _ = writeln!(s, "  {:.3} [{n}]\t|{bar}", secs(lo + step * i as f64));
        }
    }
    let _ = writeln!(s, "\nLatency distribution:");
    for q in [10.0, 25.0, 50.0, 75.0, 90.0, 95.0, 99.0] {
        let _ = writeln!(
            s,
            "  {q:.0}% in {:.4} secs",
            secs(h.value_at_quantile(q / 100.0) as f64)
        );
    }
    let _ = writeln!(s, "\nStatus code distribution:");
    for (code, n) in &r.stats.statuses {
        let _ = writeln!(s, "  [{code}]\t{n} responses");
    }
    let e = &r.stats.errors;
    if e.connect + e.read + e.write + e.timeout > 0 {
        let _ = writeln!(s, "\nError distribution:");
        for (n, what) in [
            (e.connect, "connect"),
            (e.read, "read"),
            (e.write, "write"),
            (e.timeout, "timeout"),
        ] {
            if n > 0 {
                let _ = writeln!(s, "  [{n}]\t{what} errors");
            }
        }
    }
    s
}
