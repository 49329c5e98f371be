//! wrk's summary, with its latency distribution (`--latency`).

use std::fmt::Write;

use super::{spread, wrk_bytes, wrk_count, wrk_time};
use crate::run::RunResult;

pub fn render(r: &RunResult) -> String {
    let o = &r.options;
    let h = &r.stats.latency;
    let mut s = String::new();
    let secs = match o.stop {
        crate::options::Stop::After(d) => format!("{}s", d.as_secs_f64()),
        crate::options::Stop::Requests(n) => format!("{n} requests"),
    };
    let _ = writeln!(s, "Running {secs} test @ {}", o.target.url);
    let _ = writeln!(
        s,
        "  {} threads and {} connections",
        o.threads.min(o.connections),
        o.connections
    );
    let _ = writeln!(s, "  Thread Stats   Avg      Stdev     Max   +/- Stdev");
    let (mean, sd, within) = spread(h);
    let _ = writeln!(
        s,
        "    Latency {:>9} {:>9} {:>9} {:>8.2}%",
        wrk_time(mean),
        wrk_time(sd),
        wrk_time(h.max() as f64),
        within
    );
    // Req/Sec: per-thread rates over 100 ms intervals, as wrk samples them.
    let samples: Vec<f64> = r
        .per_thread_ticks
        .iter()
        .flat_map(|t| t.iter().map(|c| *c as f64 * 10.0))
        .collect();
    if !samples.is_empty() {
        let n = samples.len() as f64;
        let m = samples.iter().sum::<f64>() / n;
        let sdv = (samples.iter().map(|x| (x - m).powi(2)).sum::<f64>() / n).sqrt();
        let max = samples.iter().cloned().fold(0.0, f64::max);
        let inside = samples.iter().filter(|x| (**x - m).abs() <= sdv).count() as f64 * 100.0 / n;
        let _ = writeln!(
            s,
            "    Req/Sec {:>9} {:>9} {:>9} {:>8.2}%",
            wrk_count(m),
            wrk_count(sdv),
            wrk_count(max),
            inside
        );
    }
    let _ = writeln!(s, "  Latency Distribution");
    for q in [50.0, 75.0, 90.0, 99.0] {
        let _ = writeln!(
            s,
            "     {q:.0}% {:>9}",
            wrk_time(h.value_at_quantile(q / 100.0) as f64)
        );
    }
    let _ = writeln!(
        s,
        "  {} requests in {:.2}s, {} read",
        r.stats.responses,
        r.elapsed.as_secs_f64(),
        wrk_bytes(r.stats.bytes as f64)
    );
    let e = &r.stats.errors;
    if e.connect + e.read + e.write + e.timeout > 0 {
        let _ = writeln!(
            s,
            "  Socket errors: connect {}, read {}, write {}, timeout {}",
            e.connect, e.read, e.write, e.timeout
        );
    }
    if e.status > 0 {
        let _ = writeln!(s, "  Non-2xx or 3xx responses: {}", e.status);
    }
    let _ = writeln!(s, "Requests/sec: {:>10.2}", r.requests_per_sec());
    let _ = writeln!(
        s,
        "Transfer/sec: {:>10}",
        wrk_bytes(r.stats.bytes as f64 / r.elapsed.as_secs_f64().max(1e-9))
    );
    if r.stats.handshakes > 0 {
        let _ = writeln!(
            s,
            "TLS handshakes/sec: {:>10.2} ({} in all, {} resumed)",
            r.handshakes_per_sec(),
            r.stats.handshakes,
            r.stats.resumed
        );
    }
    s
}
