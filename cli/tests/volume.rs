//! Mirrors and stripes of file legs through the `pollfs` command: mkfs,
//! fsck, bench, identify and `pollfs mirror` (status, fail, rejoin).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{pollfs, Scratch};

/// The part of a leg file the mirror's data lives in (the last two pages
/// are its headers).
fn data(path: &std::path::Path) -> Vec<u8> {
    let mut v = std::fs::read(path).unwrap();
    v.truncate(v.len() - 2 * 4096);
    v
}

#[test]
fn a_mirror_is_made_checked_and_a_dropped_leg_rejoins_resynced() {
    let s = Scratch::new("mirror");
    let (a, b) = (s.path("a"), s.path("b"));
    let dev = format!("mirror:(file:{},file:{})", a.display(), b.display());
    let (ok, out, err) = pollfs(&["mkfs", "--size", "16m", &dev]);
    assert!(ok, "{err}");
    assert!(out.contains("pollfs filesystem"), "{out}");
    assert_eq!(std::fs::metadata(&a).unwrap().len(), 16 << 20);
    assert!(data(&a) == data(&b), "mkfs wrote the same to both legs");

    let (ok, out, err) = pollfs(&["mirror", "status", &dev]);
    assert!(ok, "{err}");
    assert!(out.contains("2 legs") && out.contains("clean"), "{out}");
    assert_eq!(out.matches(": in sync").count(), 2, "{out}");
    let (ok, out, err) = pollfs(&["fsck", &dev]);
    assert!(ok, "{out}{err}");
    assert!(out.contains("0 problems"), "{out}");
    let (ok, _, err) = pollfs(&["mkfs", &dev]);
    assert!(
        !ok && err.contains("pollfs filesystem") && err.contains("--force"),
        "{err}"
    );

    // Leg 1 is dropped, and nothing is written while it is out: the
    // write-intent bitmap has no region marked, so the rejoin copies
    // nothing (a device changed outside the mirror is a new leg: copied
    // whole, `Mirror::rejoin_whole`).
    let (ok, out, err) = pollfs(&["mirror", "fail", &dev, "1"]);
    assert!(ok, "{err}");
    assert!(out.contains("leg 1") && out.contains("failed"), "{out}");
    assert!(err.contains("leg 1 was dropped"), "{err}");
    let (ok, out, _) = pollfs(&["mirror", "status", &dev]);
    assert!(ok && out.contains("failed"), "{out}");
    assert!(
        out.contains("bitmap: 0 of 16 regions of 1 MiB dirty"),
        "{out}"
    );
    let (ok, _, err) = pollfs(&["mirror", "fail", &dev, "0"]);
    assert!(
        !ok && err.contains("no leg"),
        "the last leg in sync stays: {err}"
    );
    let (ok, out, err) = pollfs(&["mirror", "rejoin", &dev, "1"]);
    assert!(ok, "{err}");
    assert!(err.contains("resync of leg 1 from leg 0 started"), "{err}");
    assert!(err.contains("leg 1 is resynced"), "{err}");
    assert_eq!(out.matches(": in sync").count(), 2, "{out}");
    assert!(out.contains("clean"), "{out}");
    assert!(data(&a) == data(&b), "the legs agree after the rejoin");
    let (ok, out, err) = pollfs(&["fsck", &dev]);
    assert!(ok, "{out}{err}");

    // Each leg alone holds the filesystem, at the same addresses.
    let (ok, out, err) = pollfs(&["fsck", &format!("file:{}", b.display())]);
    assert!(ok, "{out}{err}");
    let (ok, _, err) = pollfs(&["mirror", "rejoin", &dev, "0"]);
    assert!(!ok && err.contains("leg 0 is in sync"), "{err}");
    let (ok, _, err) = pollfs(&["mirror", "status", "mirror:(emu,emu)"]);
    assert!(!ok && err.contains("keeps nothing"), "{err}");
}

#[test]
fn a_stripe_is_made_and_checked_and_its_legs_carry_no_label_so_order_matters() {
    let s = Scratch::new("stripe");
    let (c, d) = (s.path("c"), s.path("d"));
    let dev = format!("stripe:64k:(file:{},file:{})", c.display(), d.display());
    let (ok, out, err) = pollfs(&["mkfs", "--size", "8m", &dev]);
    assert!(ok, "{err}");
    assert!(out.contains("pollfs filesystem"), "{out}");
    let (ok, out, err) = pollfs(&["fsck", &dev]);
    assert!(ok, "{out}{err}");
    let swapped = format!("stripe:64k:(file:{},file:{})", d.display(), c.display());
    let (ok, out, _) = pollfs(&["fsck", &swapped]);
    assert!(!ok && out.contains("PROBLEM"), "{out}");
}

#[test]
fn volume_names_that_cannot_work_are_refused_with_a_reason() {
    let s = Scratch::new("names");
    let leg = |n: &str| format!("file:{}", s.path(n).display());
    let cases = [
        (format!("mirror:({})", leg("a")), "at least two legs"),
        (format!("mirror:({},{}", leg("a"), leg("b")), "parentheses"),
        (
            format!("stripe:6k:({},{})", leg("a"), leg("b")),
            "multiple of 4k",
        ),
        ("mirror:(emu,emu)".to_string(), "keeps nothing"),
        (
            format!("mirror:(stripe:({},{}),{})", leg("a"), leg("b"), leg("c")),
            "single device",
        ),
        (format!("mirror:({},tape)", leg("a")), "unknown device"),
    ];
    for (dev, why) in cases {
        let (ok, _, err) = pollfs(&["mkfs", "--size", "8m", &dev]);
        assert!(!ok && err.contains(why), "{dev}: {err}");
    }
    assert!(s.is_empty(), "nothing was created");
    // A comma in a leg's name is escaped.
    let odd = s.path("x,y");
    let dev = format!(
        "mirror:(file:{},{})",
        odd.display().to_string().replace(',', "\\,"),
        leg("z")
    );
    let (ok, _, err) = pollfs(&["mkfs", "--size", "8m", &dev]);
    assert!(ok, "{err}");
    assert!(odd.exists());
}

#[test]
fn bench_and_identify_run_on_volumes() {
    let s = Scratch::new("bench");
    let dev = format!(
        "stripe:16k:(file:{},file:{})",
        s.path("p").display(),
        s.path("q").display()
    );
    let (ok, out, err) = pollfs(&[
        "bench",
        "--device",
        &dev,
        "--rw",
        "randwrite",
        "--size",
        "2m",
        "--runtime",
        "0.2",
        "--fdatasync",
        "8",
    ]);
    assert!(ok, "{err}");
    assert!(out.contains("pollfs"), "{out}");
    let mirror = "mirror:(emu,ram)";
    let (ok, out, err) = pollfs(&[
        "bench",
        "--device",
        mirror,
        "--rw",
        "randrw",
        "--size",
        "2m",
        "--runtime",
        "0.2",
        "--fsync",
        "4",
    ]);
    assert!(ok, "{err}");
    assert!(out.contains("pollfs"), "{out}");
    let (ok, out, err) = pollfs(&["identify", "stripe:64k:(emu,emu,ram)"]);
    assert!(ok, "{err}");
    assert!(out.contains("3 legs") && out.contains("leg 2:"), "{out}");
    assert!(
        out.contains(&format!("capacity:          {} blocks", 3 * 65536)),
        "{out}"
    );
}
