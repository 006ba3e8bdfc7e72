//! The `pollfs bench` command end to end (short runs).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::pollfs;

#[test]
fn compare_prints_every_engine_and_the_targets() {
    let (ok, out, err) = pollfs(&[
        "bench",
        "--rw",
        "randread",
        "--size",
        "1m",
        "--runtime",
        "0.2",
        "--compare",
    ]);
    assert!(ok, "{err}");
    for engine in ["pollfs ", "pollfs-locked", "kernel", "memcpy"] {
        assert!(out.contains(engine), "no {engine} row in:\n{out}");
    }
    assert!(out.contains("targets"), "{out}");
}

#[test]
fn json_output_has_fios_fields_and_counts_syncs() {
    let (ok, out, err) = pollfs(&[
        "bench",
        "--rw",
        "randwrite",
        "--size",
        "1m",
        "--runtime",
        "0.2",
        "--fdatasync",
        "1",
        "--output-format=json",
    ]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let j = &v["jobs"][0];
    assert_eq!(j["jobname"], "job");
    assert_eq!(j["pollfs"]["engine"], "pollfs");
    let writes = j["write"]["total_ios"].as_u64().unwrap();
    let syncs = j["sync"]["total_ios"].as_u64().unwrap();
    assert!(writes > 0);
    // fdatasync=1: one sync after every write (the last write's sync may
    // still be running when the time is up).
    assert!(syncs == writes || syncs + 1 == writes, "{writes} {syncs}");
    assert_eq!(j["read"]["total_ios"], 0);
    // Overwrites inside EOF: a sync puts the page in its log write, with
    // no flush; once the log's share for data is used up, a sync writes
    // the logged pages to their blocks, flushes, and logs that.
    let counters = &j["pollfs"]["counters"];
    let logs = counters["log_writes"].as_u64().unwrap();
    let flushes = counters["dev_flushes"].as_u64().unwrap();
    assert!(
        logs <= syncs && logs * 4 > syncs * 3,
        "{logs} log writes, {syncs} syncs"
    );
    assert!(flushes * 4 < syncs, "{flushes} flushes, {syncs} syncs");
}

#[test]
fn job_files_and_plots_work() {
    let dir = std::env::temp_dir().join(format!("pollfs-cli-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let job = dir.join("t.fio");
    std::fs::write(&job, "[global]\nsize=1m\nruntime=0.2\n[seq]\nrw=read\nbs=64k\ncold=1\n[mix]\nrw=randrw\niodepth=4\n").unwrap();
    let svg = dir.join("t.svg");
    let (ok, out, err) = pollfs(&[
        "bench",
        job.to_str().unwrap(),
        "--plot",
        svg.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    assert!(
        out.contains("seq (groupid=0): rw=read") && out.contains("mix (groupid=0): rw=randrw"),
        "{out}"
    );
    let drawn = std::fs::read_to_string(&svg).unwrap();
    assert!(drawn.starts_with("<svg"), "{drawn}");
    // Both charts of both jobs, the nines axis and the legend.
    for text in [
        "seq: latency by percentile",
        "mix: throughput",
        "90%",
        "99%",
        "latency (µs, log)",
        "\npollfs\n",
    ] {
        assert!(drawn.contains(text), "no '{text}' in the plot");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn mkfs_then_fsck_is_clean_and_damage_is_reported() {
    let dir = std::env::temp_dir().join(format!("pollfs-mkfs-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let img = dir.join("dev.img");
    let spec = format!("file:{}", img.display());
    let (ok, out, err) = pollfs(&["mkfs", &spec, "--size", "16m"]);
    assert!(ok, "{err}");
    assert!(out.contains("data blocks"), "{out}");
    let (ok, out, err) = pollfs(&["fsck", &spec]);
    assert!(ok && out.contains("0 problems"), "{out}{err}");
    // Its progress is drawn on a terminal only: stderr here is a pipe.
    assert!(err.is_empty(), "{err}");
    // mkfs writes both superblock copies: a fresh image has nothing to note.
    assert!(!out.contains("note"), "{out}");
    // One copy damaged: fsck notes it, --repair rewrites it.
    let pristine = std::fs::read(&img).unwrap();
    let mut bytes = pristine.clone();
    bytes[..4096].fill(0x5a);
    std::fs::write(&img, &bytes).unwrap();
    let (ok, out, err) = pollfs(&["fsck", &spec]);
    assert!(ok && out.contains("note: superblock copy 0"), "{out}{err}");
    let (ok, out, err) = pollfs(&["fsck", "--repair", &spec]);
    assert!(
        ok && out.contains("repaired: superblock copy 0"),
        "{out}{err}"
    );
    assert!(err.is_empty(), "{err}");
    let (ok, out, err) = pollfs(&["fsck", &spec]);
    assert!(ok && !out.contains("note"), "{out}{err}");
    // A truncated image: fsck says the device is shorter than the
    // filesystem, and mentions no magic.
    std::fs::write(&img, &pristine[..pristine.len() / 2]).unwrap();
    let (ok, out, err) = pollfs(&["fsck", &spec]);
    assert!(
        !ok && out.contains("device has only") && !out.contains("magic"),
        "{out}{err}"
    );
    std::fs::write(&img, &pristine).unwrap();
    // Damage both superblocks.
    let mut bytes = std::fs::read(&img).unwrap();
    bytes[..8192].fill(0xff);
    std::fs::write(&img, &bytes).unwrap();
    let (ok, out, err) = pollfs(&["fsck", &spec]);
    assert!(!ok && out.contains("PROBLEM"), "{out}{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_kernel_engine_keeps_iodepth_in_flight_and_counts_like_the_others() {
    // iodepth > 1: the kernel baseline runs an io_uring; number_ios stops
    // every engine at exactly that many measured I/Os, and fdatasync=4
    // syncs after every fourth completed write.
    for (rw, direct) in [("randwrite", "0"), ("randwrite", "1"), ("randread", "1")] {
        let (ok, out, err) = pollfs(&[
            "bench",
            "--rw",
            rw,
            "--direct",
            direct,
            "--size",
            "2m",
            "--iodepth",
            "16",
            "--number_ios",
            "400",
            "--fdatasync",
            "4",
            "--runtime",
            "30",
            "--compare",
            "--output-format=json",
        ]);
        assert!(ok, "{rw} direct={direct}: {err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        let jobs = v["jobs"].as_array().unwrap();
        let engine = |name: &str| {
            jobs.iter()
                .find(|j| j["pollfs"]["engine"].as_str().unwrap().split(' ').next() == Some(name))
                .unwrap_or_else(|| panic!("no {name} entry in {out}"))
        };
        let kernel = engine("kernel");
        let side = if rw == "randread" { "read" } else { "write" };
        assert_eq!(
            kernel[side]["total_ios"], 400,
            "{rw} direct={direct}: {kernel}"
        );
        let syncs = if rw == "randread" { 0 } else { 100 };
        assert_eq!(
            kernel["sync"]["total_ios"], syncs,
            "{rw} direct={direct}: {kernel}"
        );
        // The engine counts what it keeps in flight as it submits, so
        // this holds however busy the machine is (a figure derived from
        // latencies, by Little's law, did not). One at a time (psync) it
        // would be 1.
        assert_eq!(
            kernel["pollfs"]["max_in_flight"], 16,
            "{rw} direct={direct}: {kernel}"
        );
        // pollfs counts the same way (a buffered write may complete as it
        // is first polled, so its figure can be lower).
        let max = engine("pollfs")["pollfs"]["max_in_flight"]
            .as_u64()
            .unwrap();
        assert!((1..=16).contains(&max), "{rw} direct={direct}: {max}");
    }
}
