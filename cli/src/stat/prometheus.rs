//! Prometheus's text exposition format (version 0.0.4): one
//! `pollfs_<name>{mount="..."} <value>` line per figure, counters named
//! `_total` as the format's conventions ask, each with its `# TYPE`; and
//! a small HTTP/1.0 endpoint that answers `GET /metrics` with a fresh
//! sample per scrape. It is served only when asked for
//! (`pollfs stat --prometheus ADDR`), by that command, not by the mount.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use pollfs_device::control::stats::{FsStats, Role};
use pollfs_device::control::{LegWire, Status};

use super::show::{Percentiles, TIMED};
use super::Target;

/// The figures of the filesystem mounted on `mount` in the text format,
/// with the legs of the mirror under it (`mirror`) if it is on one.
pub fn render(mount: &str, s: &FsStats, mirror: Option<&Status>) -> String {
    let label = format!("{{mount=\"{}\"}}", escape(mount));
    let mut out = String::new();
    for (name, v) in &s.counters {
        out += &format!("# TYPE pollfs_{name}_total counter\npollfs_{name}_total{label} {v}\n");
    }
    let g = &s.gauges;
    let gauges = [
        ("dirty_pages", g.dirty_pages),
        ("cache_pages", g.cache_pages),
        ("log_used_blocks", g.log_used_blocks),
        ("log_blocks", g.log_blocks),
        ("data_blocks", g.data_blocks),
        ("free_blocks", g.free_blocks),
        ("inodes", g.inodes),
    ];
    for (name, v) in gauges {
        out += &format!("# TYPE pollfs_{name} gauge\npollfs_{name}{label} {v}\n");
    }
    // The requests' times since the mount, as gauges of a quantile each
    // (the server keeps histograms, not the exact sum a summary needs).
    let m = escape(mount);
    out += "# TYPE pollfs_latency_seconds gauge\n";
    for kind in TIMED {
        let p = Percentiles::of(s, kind);
        for (q, ns) in [
            ("0.5", p.p50_ns),
            ("0.9", p.p90_ns),
            ("0.99", p.p99_ns),
            ("0.999", p.p999_ns),
            ("1", p.max_ns),
        ] {
            out += &format!(
                "pollfs_latency_seconds{{mount=\"{m}\",op=\"{kind}\",quantile=\"{q}\"}} {}\n",
                ns as f64 / 1e9
            );
        }
    }
    out += "# TYPE pollfs_latency_count_total counter\n";
    for kind in TIMED {
        let n = Percentiles::of(s, kind).count;
        out += &format!("pollfs_latency_count_total{{mount=\"{m}\",op=\"{kind}\"}} {n}\n");
    }
    // Each device's and leg's counters, one family per counter.
    let labels: Vec<String> = s
        .devices
        .iter()
        .map(|d| {
            let leg = d.leg.map_or(String::new(), |i| format!(",leg=\"{i}\""));
            format!(
                "mount=\"{m}\",device=\"{}\",role=\"{}\"{leg}",
                escape(&d.name),
                role(d.role)
            )
        })
        .collect();
    let names: std::collections::BTreeSet<&String> =
        s.devices.iter().flat_map(|d| d.counters.keys()).collect();
    for name in names {
        out += &format!("# TYPE pollfs_device_{name}_total counter\n");
        for (d, labels) in s.devices.iter().zip(&labels) {
            out += &format!(
                "pollfs_device_{name}_total{{{labels}}} {}\n",
                d.counter(name)
            );
        }
    }
    if let Some(status) = mirror {
        let legs: Vec<String> = status
            .legs
            .iter()
            .enumerate()
            .map(|(i, l)| format!("mount=\"{m}\",leg=\"{i}\",name=\"{}\"", escape(&l.name)))
            .collect();
        out += "# TYPE pollfs_mirror_leg_in_sync gauge\n";
        for (l, labels) in status.legs.iter().zip(&legs) {
            let in_sync = u8::from(l.state == LegWire::InSync);
            out += &format!("pollfs_mirror_leg_in_sync{{{labels}}} {in_sync}\n");
        }
        out += "# TYPE pollfs_mirror_leg_read_errors_total counter\n";
        for (l, labels) in status.legs.iter().zip(&legs) {
            out += &format!(
                "pollfs_mirror_leg_read_errors_total{{{labels}}} {}\n",
                l.read_errors
            );
        }
        out += "# TYPE pollfs_mirror_leg_write_errors_total counter\n";
        for (l, labels) in status.legs.iter().zip(&legs) {
            out += &format!(
                "pollfs_mirror_leg_write_errors_total{{{labels}}} {}\n",
                l.write_errors
            );
        }
    }
    out
}

/// A device's role as a label value.
fn role(r: Role) -> &'static str {
    match r {
        Role::Device => "device",
        Role::MirrorLeg => "mirror_leg",
        Role::StripeLeg => "stripe_leg",
        Role::Leg => "leg",
    }
}

/// A label value as the format writes it: backslash, double quote and
/// newline escaped.
fn escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// How long a scraper may take to send its request.
const PATIENCE: Duration = Duration::from_secs(10);

/// Serves `/metrics` on `addr` until the process is ended.
pub fn serve(addr: SocketAddr, target: &Target) -> anyhow::Result<()> {
    let listener = TcpListener::bind(addr)
        .map_err(|e| anyhow::anyhow!("--prometheus {addr}: cannot listen: {e}"))?;
    let bound = listener.local_addr()?;
    eprintln!(
        "pollfs: serving the figures of {} at http://{bound}/metrics",
        target.mountpoint.display()
    );
    for stream in listener.incoming() {
        // A scraper that breaks off costs its own request only.
        let _ = stream.map(|s| answer(s, target));
    }
    Ok(())
}

/// Answers one HTTP request.
fn answer(stream: TcpStream, target: &Target) -> std::io::Result<()> {
    stream.set_read_timeout(Some(PATIENCE))?;
    stream.set_write_timeout(Some(PATIENCE))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut request = String::new();
    reader.read_line(&mut request)?;
    // The rest of the head, unread, would reset the connection on close.
    let mut header = String::new();
    while reader.read_line(&mut header)? > 2 {
        header.clear();
    }
    let path = request.split(' ').nth(1).unwrap_or("");
    let (status, body) = if !request.starts_with("GET ") {
        ("405 Method Not Allowed", "GET only\n".to_string())
    } else if path != "/metrics" {
        ("404 Not Found", "the figures are at /metrics\n".to_string())
    } else {
        match target.sample_all() {
            Ok((s, mirror)) => (
                "200 OK",
                render(
                    &target.mountpoint.display().to_string(),
                    &s,
                    mirror.as_ref().and_then(|m| m.as_ref().ok()),
                ),
            ),
            Err(e) => ("503 Service Unavailable", format!("{e:#}\n")),
        }
    };
    let mut w = stream;
    write!(
        w,
        "HTTP/1.0 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    )?;
    w.flush()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// Parses the text format as a scraper does: comments, or
    /// `name{labels} value` with a metric name of `[a-zA-Z_:][a-zA-Z0-9_:]*`
    /// and a number for the value.
    fn parse(text: &str) -> Vec<(String, String, f64)> {
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| {
                let open = l.find('{').unwrap();
                let close = l.rfind('}').unwrap();
                let name = &l[..open];
                assert!(
                    name.chars()
                        .enumerate()
                        .all(|(i, c)| c.is_ascii_alphabetic()
                            || c == '_'
                            || c == ':'
                            || (i > 0 && c.is_ascii_digit())),
                    "{name}"
                );
                let value = l[close + 1..].trim().parse::<f64>().unwrap();
                (name.to_string(), l[open + 1..close].to_string(), value)
            })
            .collect()
    }

    #[test]
    fn every_figure_is_one_typed_line_that_parses() {
        let mut s = FsStats::default();
        s.counters.insert("reads".into(), 12);
        s.counters.insert("dev_errors".into(), 0);
        s.gauges.dirty_pages = 3;
        let text = render("/mnt/a \"b\"\\", &s, None);
        let lines = parse(&text);
        assert!(lines.len() > s.counters.len(), "counters and gauges");
        let reads = lines.iter().find(|l| l.0 == "pollfs_reads_total").unwrap();
        assert_eq!(reads.1, r#"mount="/mnt/a \"b\"\\""#);
        assert_eq!(reads.2, 12.0);
        let dirty = lines.iter().find(|l| l.0 == "pollfs_dirty_pages").unwrap();
        assert_eq!(dirty.2, 3.0);
        for (name, _, _) in &lines {
            let kind = if name.ends_with("_total") {
                "counter"
            } else {
                "gauge"
            };
            assert!(text.contains(&format!("# TYPE {name} {kind}\n")), "{name}");
        }
    }

    #[test]
    fn a_mirrors_legs_are_labelled_lines_of_their_own() {
        use pollfs_device::control::LegStatus;
        let leg = |name: &str, state, write_errors| LegStatus {
            name: name.into(),
            state,
            read_errors: 0,
            write_errors,
        };
        let status = Status {
            uuid: 1,
            generation: 2,
            durable_generation: 2,
            data_blocks: 8,
            block_size: 4096,
            dirty: true,
            broken: false,
            legs: vec![
                leg("file:/a", LegWire::InSync, 0),
                leg("file:/b", LegWire::Failed, 3),
            ],
            region_bytes: 0,
            regions: 0,
            dirty_regions: 0,
            resync_copied: 0,
        };
        let text = render("/m", &FsStats::default(), Some(&status));
        let lines = parse(&text);
        let find = |name: &str, leg: &str| {
            lines
                .iter()
                .find(|l| l.0 == name && l.1.contains(&format!("leg=\"{leg}\"")))
                .unwrap()
                .clone()
        };
        assert_eq!(find("pollfs_mirror_leg_in_sync", "0").2, 1.0);
        assert_eq!(find("pollfs_mirror_leg_in_sync", "1").2, 0.0);
        let errors = find("pollfs_mirror_leg_write_errors_total", "1");
        assert_eq!(errors.2, 3.0);
        assert!(errors.1.contains(r#"name="file:/b""#), "{}", errors.1);
    }

    #[test]
    fn each_device_and_leg_is_a_labelled_line_of_every_device_counter() {
        use pollfs_device::control::stats::DeviceStats;
        let dev = |name: &str, role, leg, errors| DeviceStats {
            name: name.into(),
            role,
            leg,
            counters: [("writes".to_string(), 5), ("errors".to_string(), errors)]
                .into_iter()
                .collect(),
        };
        let s = FsStats {
            devices: vec![
                dev("mirror:(file:/a,file:/b)", Role::Device, None, 0),
                dev("file:/a", Role::MirrorLeg, Some(0), 0),
                dev("file:/b", Role::MirrorLeg, Some(1), 2),
            ],
            ..FsStats::default()
        };
        let text = render("/m", &s, None);
        let lines = parse(&text);
        let errors: Vec<_> = lines
            .iter()
            .filter(|l| l.0 == "pollfs_device_errors_total")
            .collect();
        assert_eq!(errors.len(), 3, "{text}");
        assert_eq!(
            errors[2].1,
            r#"mount="/m",device="file:/b",role="mirror_leg",leg="1""#
        );
        assert_eq!(errors[2].2, 2.0);
        assert_eq!(
            errors[0].1,
            r#"mount="/m",device="mirror:(file:/a,file:/b)",role="device""#
        );
        assert!(text.contains("# TYPE pollfs_device_writes_total counter\n"));
    }
}
