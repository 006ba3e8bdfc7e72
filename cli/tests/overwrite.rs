//! `mkfs` and `bench` never write over a device that holds anything unless
//! told to, and `mkfs` never resizes a file it did not create.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{image, pollfs, spec, Scratch};

const MIB: usize = 1 << 20;

/// Bytes written at an offset of an otherwise zeroed image.
type Patch = (usize, &'static [u8]);

/// Each signature the tools know: the name they report, and where it is.
fn signatures() -> Vec<(&'static str, Vec<Patch>)> {
    vec![
        // ext4: the magic, and the extents feature in s_feature_incompat.
        (
            "an ext4 filesystem",
            vec![(1080, b"\x53\xef"), (1120, b"\x40")],
        ),
        (
            "an ext3 filesystem",
            vec![(1080, b"\x53\xef"), (1116, b"\x04")],
        ),
        ("an XFS filesystem", vec![(0, b"XFSB")]),
        ("a btrfs filesystem", vec![(65_536 + 64, b"_BHRfS_M")]),
        ("swap space", vec![(4086, b"SWAPSPACE2")]),
        ("swap space", vec![(4086, b"SWAP-SPACE")]),
        // One partition of type 0x83 (Linux).
        (
            "an MBR partition table",
            vec![(446 + 4, b"\x83"), (510, b"\x55\xaa")],
        ),
        ("a GPT partition table", vec![(512, b"EFI PART")]),
        ("a GPT partition table", vec![(4096, b"EFI PART")]),
        ("a pollfs filesystem", vec![(0, b"POLLFSv1")]),
        ("a pollfs filesystem", vec![(4096, b"POLLFSv1")]),
        (
            "data (a non-zero byte at offset 60000)",
            vec![(60_000, b"x")],
        ),
    ]
}

#[test]
fn bench_refuses_a_text_file_and_leaves_it_alone() {
    let dir = Scratch::new("text");
    let path = dir.path("notes.txt");
    std::fs::write(&path, "remember the milk\n").unwrap();
    let (ok, _, err) = pollfs(&[
        "bench",
        "--device",
        &spec(&path),
        "--size",
        "1m",
        "--runtime",
        "0.1",
    ]);
    assert!(!ok, "the bench overwrote a text file");
    assert!(
        err.contains(&format!(
            "{}: holds data (a non-zero byte at offset 0); pass --force to overwrite it",
            spec(&path)
        )),
        "{err}"
    );
    assert_eq!(std::fs::read(&path).unwrap(), b"remember the milk\n");
}

#[test]
fn every_known_signature_is_named_and_refused_by_both_tools() {
    let dir = Scratch::new("signatures");
    let path = dir.path("dev.img");
    for (name, patches) in signatures() {
        image(&path, 2 * MIB, &patches);
        let before = std::fs::read(&path).unwrap();
        let want = format!(
            "{}: holds {name}; pass --force to overwrite it",
            spec(&path)
        );
        let (ok, _, err) = pollfs(&["mkfs", &spec(&path)]);
        assert!(!ok && err.contains(&want), "mkfs on {name}: {err}");
        let (ok, _, err) = pollfs(&[
            "bench",
            "--device",
            &spec(&path),
            "--size",
            "1m",
            "--runtime",
            "0.1",
        ]);
        assert!(!ok && err.contains(&want), "bench on {name}: {err}");
        assert!(
            std::fs::read(&path).unwrap() == before,
            "{name} was changed"
        );
    }
}

#[test]
fn force_overwrites_and_a_second_mkfs_needs_it() {
    let dir = Scratch::new("force");
    let path = dir.path("dev.img");
    let (ok, _, err) = pollfs(&["mkfs", &spec(&path), "--size", "16m"]);
    assert!(ok, "{err}");
    let (ok, _, err) = pollfs(&["mkfs", &spec(&path)]);
    assert!(!ok && err.contains("holds a pollfs filesystem"), "{err}");
    let (ok, _, err) = pollfs(&["mkfs", &spec(&path), "--force"]);
    assert!(
        ok && err.contains("overwriting a pollfs filesystem"),
        "{err}"
    );
    let (ok, out, err) = pollfs(&["fsck", &spec(&path)]);
    assert!(ok && out.contains("0 problems"), "{out}{err}");
    // The bench, told to, formats over it too.
    let (ok, _, err) = pollfs(&[
        "bench",
        "--device",
        &spec(&path),
        "--size",
        "1m",
        "--runtime",
        "0.1",
        "--force",
    ]);
    assert!(ok, "{err}");
}

#[test]
fn a_file_of_zeros_is_empty_and_keeps_its_size() {
    let dir = Scratch::new("zeros");
    let path = dir.path("dev.img");
    image(&path, 2 * MIB, &[]);
    let (ok, out, err) = pollfs(&["mkfs", &spec(&path)]);
    assert!(ok && out.contains("data blocks"), "{out}{err}");
    // Not grown to the 256 MiB default: an existing file keeps its size.
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 2 * MIB as u64);
    let (ok, out, err) = pollfs(&["fsck", &spec(&path)]);
    assert!(ok && out.contains("0 problems"), "{out}{err}");
}

#[test]
fn mkfs_refuses_a_file_too_small_without_touching_it() {
    let dir = Scratch::new("small");
    for (name, len) in [("four-k", 4096usize), ("empty", 0)] {
        let path = dir.path(name);
        image(&path, len, &[]);
        let (ok, _, err) = pollfs(&["mkfs", &spec(&path)]);
        assert!(
            !ok && err.contains("too small for a pollfs filesystem, which needs at least")
                && err.contains("blocks of 4 KiB"),
            "{err}"
        );
        assert_eq!(std::fs::metadata(&path).unwrap().len(), len as u64);
    }
}

#[test]
fn mkfs_creates_a_missing_file_at_size_and_leaves_nothing_when_refused() {
    let dir = Scratch::new("create");
    let path = dir.path("new.img");
    let (ok, _, err) = pollfs(&["mkfs", &spec(&path), "--size", "1.5m"]);
    assert!(ok, "{err}");
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 1536 * 1024);
    std::fs::remove_file(&path).unwrap();
    for size in ["100k", "0", "1.3k", "lots"] {
        let (ok, _, err) = pollfs(&["mkfs", &spec(&path), "--size", size]);
        assert!(
            !ok && (err.contains("--size") || err.contains("too small")),
            "{err}"
        );
        assert!(dir.is_empty(), "--size {size} left a file behind");
    }
}

#[test]
fn mkfs_does_not_resize_an_existing_file() {
    let dir = Scratch::new("resize");
    let path = dir.path("dev.img");
    image(&path, MIB, &[]);
    let (ok, _, err) = pollfs(&["mkfs", &spec(&path), "--size", "2m"]);
    assert!(
        !ok && err.contains("an existing device keeps its size"),
        "{err}"
    );
    assert_eq!(std::fs::metadata(&path).unwrap().len(), MIB as u64);
    let (ok, _, err) = pollfs(&["mkfs", &spec(&path), "--size", "1m"]);
    assert!(ok, "the file's own size is a valid --size: {err}");
}
