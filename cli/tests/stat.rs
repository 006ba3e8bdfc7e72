//! `pollfs stat` against a live mount: its figures move with what is done
//! on the mount, found by mount point and by device, as a snapshot, per
//! interval, and scraped in Prometheus's text format. Needs root and
//! /dev/fuse, and says it was skipped (and passes) without them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use common::{can_mount, is_mounted, spec, Scratch};

/// `pollfs ARGS` with the control sockets in `run`.
fn pollfs(run: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pollfs"))
        .env("POLLFS_CONTROL_DIR", run)
        .args(args)
        .output()
        .unwrap()
}

fn ok(out: &Output) -> String {
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

/// `pollfs stat TARGET --json`.
fn snapshot(run: &Path, target: &str) -> serde_json::Value {
    serde_json::from_str(&ok(&pollfs(run, &["stat", target, "--json"]))).unwrap()
}

fn counter(v: &serde_json::Value, name: &str) -> u64 {
    v["counters"][name]
        .as_u64()
        .unwrap_or_else(|| panic!("no counter {name} in {v}"))
}

/// GET `path` from `addr`: the status line and the body.
fn http_get(addr: &str, path: &str) -> (String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").unwrap();
    let mut reply = String::new();
    s.read_to_string(&mut reply).unwrap();
    let (head, body) = reply.split_once("\r\n\r\n").unwrap();
    (head.lines().next().unwrap().to_string(), body.to_string())
}

#[test]
fn the_figures_of_a_live_mount_move_with_its_writes_and_syncs() {
    if !can_mount() {
        return;
    }
    let s = Scratch::new("stat");
    let image = s.path("img");
    let dir = s.path("mnt");
    let run = s.path("run");
    std::fs::create_dir_all(&dir).unwrap();
    let dir = dir.canonicalize().unwrap();
    let mount = dir.to_str().unwrap();
    let device = spec(&image);
    ok(&pollfs(&run, &["mkfs", &device, "--size", "64m"]));
    // In the background: it returns once mounted, and its control socket
    // is served by then.
    ok(&pollfs(&run, &["mount", "--cache", "32m", &device, mount]));
    assert!(is_mounted(&dir));

    let before = snapshot(&run, mount);
    assert_eq!(before["mountpoint"], mount);
    let data = vec![7u8; 1 << 20];
    let mut f = std::fs::File::create(dir.join("f")).unwrap();
    f.write_all(&data).unwrap();
    f.sync_all().unwrap();
    drop(f);
    // Found by its device too.
    let after = snapshot(&run, &device);
    let grew = |name: &str| counter(&after, name) - counter(&before, name);
    assert!(grew("writes") > 0, "{after}");
    assert!(grew("write_bytes") >= data.len() as u64, "{after}");
    assert!(grew("syncs") > 0, "{after}");
    assert!(grew("log_writes") + grew("checkpoints") > 0, "{after}");
    assert!(grew("dev_write_bytes") >= data.len() as u64, "{after}");
    assert_eq!(grew("dev_errors"), 0);
    // The device, by its name, with the engine's commands to it.
    let dev = &after["devices"][0];
    assert_eq!(dev["name"], device.as_str(), "{after}");
    assert_eq!(dev["role"], "device", "{after}");
    assert_eq!(
        dev["counters"]["write_bytes"],
        after["counters"]["dev_write_bytes"]
    );
    assert_eq!(dev["counters"]["resets"], 0, "{after}");
    // The requests' times: the fsync and the writes were timed.
    let timed = |v: &serde_json::Value, kind: &str| -> u64 {
        v["latency"][kind]
            .as_array()
            .map_or(0, |b| b.iter().map(|b| b[1].as_u64().unwrap()).sum())
    };
    assert!(timed(&after, "sync") > timed(&before, "sync"), "{after}");
    assert!(timed(&after, "write") > timed(&before, "write"), "{after}");
    let inodes = |v: &serde_json::Value| v["gauges"]["inodes"].as_u64().unwrap();
    assert_eq!(inodes(&after), inodes(&before) + 1);

    let text = ok(&pollfs(&run, &["stat", mount]));
    assert!(
        text.contains(&format!("writes {}", counter(&after, "writes"))),
        "{text}"
    );

    let lines = ok(&pollfs(
        &run,
        &["stat", mount, "-i", "0.1", "-c", "2", "--json"],
    ));
    let intervals: Vec<serde_json::Value> = lines
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(intervals.len(), 2, "{lines}");
    for i in &intervals {
        assert!(i["seconds"].as_f64().unwrap() > 0.0, "{i}");
        assert!(i["counters"]["writes"].is_u64(), "{i}");
    }

    let mut scraper = Command::new(env!("CARGO_BIN_EXE_pollfs"))
        .env("POLLFS_CONTROL_DIR", &run)
        .args(["stat", mount, "--prometheus", "127.0.0.1:0"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut said = String::new();
    BufReader::new(scraper.stderr.take().unwrap())
        .read_line(&mut said)
        .unwrap();
    let addr = said
        .split("http://")
        .nth(1)
        .and_then(|r| r.strip_suffix("/metrics\n"))
        .unwrap_or_else(|| panic!("no address in {said:?}"))
        .to_string();
    let (status, body) = http_get(&addr, "/metrics");
    assert!(status.contains("200"), "{status}");
    let mut samples = 0;
    for l in body.lines().filter(|l| !l.starts_with('#')) {
        let (name, value) = l.rsplit_once(' ').unwrap();
        value.parse::<f64>().unwrap();
        assert!(
            name.starts_with("pollfs_") && name.contains("{mount="),
            "{l}"
        );
        samples += 1;
    }
    assert!(
        samples >= before["counters"].as_object().unwrap().len(),
        "{body}"
    );
    let writes = format!("pollfs_writes_total{{mount=\"{mount}\"}} ");
    let scraped: u64 = body
        .lines()
        .find_map(|l| l.strip_prefix(&writes))
        .unwrap()
        .parse()
        .unwrap();
    assert!(scraped >= counter(&after, "writes"));
    assert!(http_get(&addr, "/").0.contains("404"));
    scraper.kill().unwrap();
    scraper.wait().unwrap();

    ok(&pollfs(&run, &["umount", mount]));
    let gone = pollfs(&run, &["stat", mount]);
    assert!(!gone.status.success());
    assert!(
        String::from_utf8_lossy(&gone.stderr).contains("no pollfs filesystem is mounted"),
        "{gone:?}"
    );
}
