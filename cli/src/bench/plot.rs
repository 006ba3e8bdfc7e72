//! An SVG of each job: latency by percentile and IOPS over time, one line per
//! engine. Two line charts need no plotting library: this is plain SVG text.

use std::fmt::Write;

use super::report::JobResult;

const W: f64 = 420.0;
const H: f64 = 220.0;
const PAD: f64 = 50.0;
const COLORS: [&str; 4] = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e"];

/// Renders every job as a row of two charts.
pub fn svg(results: &[JobResult]) -> String {
    let rows = results.len().max(1) as f64;
    let (width, height) = (2.0 * (W + PAD) + PAD, rows * (H + 2.0 * PAD));
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    for (row, r) in results.iter().enumerate() {
        let top = row as f64 * (H + 2.0 * PAD) + PAD;
        let lat: Vec<(String, Vec<(f64, f64)>)> = r
            .samples
            .iter()
            .map(|smp| {
                // x: -log10(1 - p) spreads the tail (p50 -> 0.3, p99.99 -> 4).
                let pts = smp
                    .latency
                    .curve
                    .iter()
                    .map(|&(p, us)| (-(1.0 - p / 100.0).log10(), us))
                    .collect();
                (smp.engine.clone(), pts)
            })
            .collect();
        chart(
            &mut s,
            PAD,
            top,
            &format!("{}: latency (us) by percentile", r.job.name),
            "p50 … p99.99",
            &lat,
        );
        let tput: Vec<(String, Vec<(f64, f64)>)> = r
            .samples
            .iter()
            .map(|smp| {
                let pts = smp
                    .iops_over_time
                    .iter()
                    .enumerate()
                    .map(|(i, &v)| (i as f64 * 0.1, v))
                    .collect();
                (smp.engine.clone(), pts)
            })
            .collect();
        chart(
            &mut s,
            2.0 * PAD + W,
            top,
            &format!("{}: IOPS over time", r.job.name),
            "seconds",
            &tput,
        );
    }
    s.push_str("</svg>\n");
    s
}

fn chart(
    s: &mut String,
    x0: f64,
    y0: f64,
    title: &str,
    xlabel: &str,
    series: &[(String, Vec<(f64, f64)>)],
) {
    let all = series.iter().flat_map(|(_, p)| p.iter());
    let (mut xmax, mut ymax) = (0.0f64, 0.0f64);
    for &(x, y) in all {
        xmax = xmax.max(x);
        ymax = ymax.max(y);
    }
    let (xmax, ymax) = (xmax.max(1e-9), ymax.max(1e-9) * 1.1);
    let _ = writeln!(
        s,
        r#"<text x="{x0}" y="{}" font-weight="bold">{}</text>"#,
        y0 - 8.0,
        escape(title)
    );
    let _ = writeln!(
        s,
        r#"<rect x="{x0}" y="{y0}" width="{W}" height="{H}" fill="none" stroke="gray"/>"#
    );
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="end">{xlabel}</text>"#,
        x0 + W,
        y0 + H + 14.0
    );
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="end">{}</text>"#,
        x0 - 4.0,
        y0 + 10.0,
        fmt(ymax)
    );
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="end">0</text>"#,
        x0 - 4.0,
        y0 + H
    );
    for (i, (name, pts)) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let path: Vec<String> = pts
            .iter()
            .map(|&(x, y)| format!("{:.1},{:.1}", x0 + x / xmax * W, y0 + H - y / ymax * H))
            .collect();
        let _ = writeln!(
            s,
            r#"<polyline fill="none" stroke="{color}" stroke-width="1.5" points="{}"/>"#,
            path.join(" ")
        );
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" fill="{color}">{}</text>"#,
            x0 + 8.0,
            y0 + 16.0 + 13.0 * i as f64,
            escape(name)
        );
    }
}

fn fmt(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.1}k", v / 1e3)
    } else {
        format!("{v:.1}")
    }
}

fn escape(t: &str) -> String {
    t.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
