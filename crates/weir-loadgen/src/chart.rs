//! An SVG chart of a sweep: requests/s (top panel) and p99 latency (bottom panel) against the
//! connection count, one coloured series per target, with axes, ticks, units and a legend
//! (the shape of seed 003's charts). Hand-written SVG: a few dozen lines, no plotting stack.

use std::fmt::Write;

use crate::run::RunResult;

const W: f64 = 900.0;
const PANEL_H: f64 = 300.0;
const LEFT: f64 = 90.0;
const RIGHT: f64 = 40.0;
const TOP: f64 = 70.0;
const GAP: f64 = 80.0;
const COLORS: [&str; 6] = [
    "#d62728", "#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
];

/// `series`: (target name, runs in connection order).
pub fn render(title: &str, series: &[(String, Vec<RunResult>)]) -> String {
    let conns: Vec<usize> = {
        let mut c: Vec<usize> = series
            .iter()
            .flat_map(|(_, runs)| runs.iter().map(|r| r.options.connections))
            .collect();
        c.sort_unstable();
        c.dedup();
        c
    };
    let h = TOP + 2.0 * PANEL_H + GAP + 90.0;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{h}" viewBox="0 0 {W} {h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="25" text-anchor="middle" font-size="16" font-weight="bold">{}</text>"#,
        W / 2.0,
        escape(title)
    );
    let rps = |r: &RunResult| r.requests_per_sec();
    let p99 = |r: &RunResult| r.stats.latency.value_at_quantile(0.99) as f64 / 1000.0;
    panel(
        &mut s,
        TOP,
        "Requests per second",
        "requests/s",
        &conns,
        series,
        &rps,
    );
    panel(
        &mut s,
        TOP + PANEL_H + GAP,
        "p99 latency",
        "p99 (ms)",
        &conns,
        series,
        &p99,
    );
    // Legend.
    let ly = TOP + 2.0 * PANEL_H + GAP + 55.0;
    for (i, (name, _)) in series.iter().enumerate() {
        let x = LEFT + i as f64 * 160.0;
        let c = COLORS[i % COLORS.len()];
        let _ = writeln!(
            s,
            r#"<line x1="{x}" y1="{ly}" x2="{}" y2="{ly}" stroke="{c}" stroke-width="3"/>"#,
            x + 30.0
        );
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}">{}</text>"#,
            x + 38.0,
            ly + 4.0,
            escape(name)
        );
    }
    s.push_str("</svg>\n");
    s
}

fn panel(
    s: &mut String,
    y0: f64,
    title: &str,
    unit: &str,
    conns: &[usize],
    series: &[(String, Vec<RunResult>)],
    value: &dyn Fn(&RunResult) -> f64,
) {
    let (x0, x1, y1) = (LEFT, W - RIGHT, y0 + PANEL_H);
    let max = series
        .iter()
        .flat_map(|(_, r)| r.iter().map(value))
        .fold(0.0_f64, f64::max);
    let top = nice_ceiling(max * 1.1);
    let xpos = |c: usize| {
        let i = conns.iter().position(|x| *x == c).unwrap_or(0) as f64;
        if conns.len() <= 1 {
            (x0 + x1) / 2.0
        } else {
            x0 + 20.0 + i * (x1 - x0 - 40.0) / (conns.len() - 1) as f64
        }
    };
    let ypos = |v: f64| y1 - (v / top) * PANEL_H;
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle" font-weight="bold">{title}</text>"#,
        (x0 + x1) / 2.0,
        y0 - 10.0
    );
    // Axes, grid and ticks.
    let _ = writeln!(
        s,
        r#"<line x1="{x0}" y1="{y1}" x2="{x1}" y2="{y1}" stroke="black"/>"#
    );
    let _ = writeln!(
        s,
        r#"<line x1="{x0}" y1="{y0}" x2="{x0}" y2="{y1}" stroke="black"/>"#
    );
    for k in 0..=5 {
        let v = top * k as f64 / 5.0;
        let y = ypos(v);
        let _ = writeln!(
            s,
            r##"<line x1="{x0}" y1="{y}" x2="{x1}" y2="{y}" stroke="#ddd"/>"##
        );
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" text-anchor="end">{}</text>"#,
            x0 - 6.0,
            y + 4.0,
            tick_label(v)
        );
    }
    for &c in conns {
        let x = xpos(c);
        let _ = writeln!(
            s,
            r#"<line x1="{x}" y1="{y1}" x2="{x}" y2="{}" stroke="black"/>"#,
            y1 + 5.0
        );
        let _ = writeln!(
            s,
            r#"<text x="{x}" y="{}" text-anchor="middle">{c}</text>"#,
            y1 + 18.0
        );
    }
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">connections</text>"#,
        (x0 + x1) / 2.0,
        y1 + 36.0
    );
    let _ = writeln!(
        s,
        r#"<text x="20" y="{}" text-anchor="middle" transform="rotate(-90 20 {})">{unit}</text>"#,
        (y0 + y1) / 2.0,
        (y0 + y1) / 2.0
    );
    // Series.
    for (i, (_, runs)) in series.iter().enumerate() {
        let c = COLORS[i % COLORS.len()];
        let pts: Vec<String> = runs
            .iter()
            .map(|r| format!("{:.1},{:.1}", xpos(r.options.connections), ypos(value(r))))
            .collect();
        let _ = writeln!(
            s,
            r#"<polyline fill="none" stroke="{c}" stroke-width="2.5" points="{}"/>"#,
            pts.join(" ")
        );
        for r in runs {
            let _ = writeln!(
                s,
                r#"<circle cx="{:.1}" cy="{:.1}" r="4" fill="{c}"/>"#,
                xpos(r.options.connections),
                ypos(value(r))
            );
        }
    }
}

/// 1, 2 or 5 times a power of ten, at least `v`.
fn nice_ceiling(v: f64) -> f64 {
    if v <= 0.0 {
        return 1.0;
    }
    let p = 10f64.powf(v.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * p)
        .find(|x| *x >= v)
        .unwrap_or(10.0 * p)
}

fn tick_label(v: f64) -> String {
    if v >= 1_000_000.0 {
        format!("{:.1}M", v / 1_000_000.0)
    } else if v >= 1000.0 {
        format!("{:.0}k", v / 1000.0)
    } else if v >= 10.0 || v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    #[test]
    fn nice_ceilings() {
        assert_eq!(super::nice_ceiling(0.7), 1.0);
        assert_eq!(super::nice_ceiling(130.0), 200.0);
        assert_eq!(super::nice_ceiling(181_000.0), 200_000.0);
        assert_eq!(super::nice_ceiling(450.0), 500.0);
    }
}
