//! Report formats. Each takes finished runs and returns text; none does IO.

pub mod hey;
pub mod json;
pub mod table;
pub mod wrk;

use hdrhistogram::Histogram;

/// Mean, standard deviation (µs) and the share of values within one deviation of the mean.
pub fn spread(h: &Histogram<u64>) -> (f64, f64, f64) {
    let (mean, sd) = (h.mean(), h.stdev());
    if h.is_empty() {
        return (0.0, 0.0, 0.0);
    }
    let (lo, hi) = (mean - sd, mean + sd);
    let within: u64 = h
        .iter_recorded()
        .filter(|v| {
            let x = v.value_iterated_to() as f64;
            x >= lo && x <= hi
        })
        .map(|v| v.count_at_value())
        .sum();
    (mean, sd, within as f64 * 100.0 / h.len() as f64)
}

/// Percentage of responses faster than the mean (the seed 004 table's "perc averg").
pub fn percent_below_mean(h: &Histogram<u64>) -> f64 {
    if h.is_empty() {
        return 0.0;
    }
    let mean = h.mean();
    let below: u64 = h
        .iter_recorded()
        .filter(|v| (v.value_iterated_to() as f64) < mean)
        .map(|v| v.count_at_value())
        .sum();
    below as f64 * 100.0 / h.len() as f64
}

/// wrk's duration style: `812.00us`, `1.23ms`, `2.50s`.
pub fn wrk_time(us: f64) -> String {
    if us < 1000.0 {
        format!("{us:.2}us")
    } else if us < 1_000_000.0 {
        format!("{:.2}ms", us / 1000.0)
    } else {
        format!("{:.2}s", us / 1_000_000.0)
    }
}

/// wrk's size style: `1.23MB`.
pub fn wrk_bytes(b: f64) -> String {
    let units = ["B", "KB", "MB", "GB", "TB"];
    let mut v = b;
    let mut i = 0;
    while v >= 1024.0 && i < units.len() - 1 {
        v /= 1024.0;
        i += 1;
    }
    format!("{v:.2}{}", units[i])
}

/// wrk's count style: `180.00k`.
pub fn wrk_count(n: f64) -> String {
    if n >= 1_000_000.0 {
        format!("{:.2}M", n / 1_000_000.0)
    } else if n >= 1000.0 {
        format!("{:.2}k", n / 1000.0)
    } else {
        format!("{n:.2}")
    }
}
