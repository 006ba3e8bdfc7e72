//! A nearly full filesystem (docs/design/format.md, "Space for metadata"):
//! writers that fill the device get `DeviceFull` only when the free space
//! really is gone, and the unmount that follows always completes and keeps
//! everything written before it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use pollfs_core::dev::ram::RamDevice;
use pollfs_core::error::SpaceError;
use pollfs_core::{Error, Fs};
use pollfs_host_tests::setup::{config, fsck_clean};

const PIECE: u64 = 512;

/// The byte writer `w` puts in round `round` of its file `f` at `off`.
fn byte(w: u64, round: u64, f: u64, off: u64) -> u8 {
    ((w * 7 + round * 3 + f + off / PIECE) % 251) as u8
}

/// Each of `writers` threads, in each round, truncates its `files` files
/// and writes 512-byte pieces with a hole between each two (so every
/// block is written four times and the writers' blocks interleave: files
/// of thousands of one-block extents, as xfstests' fstest -F does), until
/// the file is `file_bytes` long or the device is full. Nothing is synced:
/// the blocks the truncations free wait for a commit, which a write that
/// finds the device full makes itself. Returns, per writer and file, the
/// round and length whose bytes the file holds.
fn fill(
    fs: &Arc<Fs<RamDevice>>,
    writers: u64,
    files: u64,
    file_bytes: u64,
) -> Vec<(u64, u64, u64, u64)> {
    let threads: Vec<_> = (0..writers)
        .map(|w| {
            let fs = fs.clone();
            std::thread::spawn(move || {
                let mut done = Vec::new();
                'rounds: for round in 0..3u64 {
                    for f in 0..files {
                        let name = format!("w{w}f{f}");
                        let file = match fs.open(&name) {
                            Ok(file) => {
                                file.set_len(0).unwrap();
                                file
                            }
                            Err(_) => fs.create(&name).unwrap(),
                        };
                        done.retain(|&(_, ff, _, _)| ff != f);
                        let mut off = 0;
                        while off < file_bytes {
                            let piece = [byte(w, round, f, off); PIECE as usize];
                            match file.write_all_at(&piece, off) {
                                Ok(()) => off += 2 * PIECE,
                                Err(Error::Space(SpaceError::DeviceFull)) => {
                                    done.push((w, f, round, off));
                                    break 'rounds;
                                }
                                Err(e) => panic!("writer {w} file {f} at {off}: {e:?}"),
                            }
                        }
                        done.push((w, f, round, off));
                    }
                }
                done
            })
        })
        .collect();
    threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect()
}

/// Unmounts `fs`, checks the image, mounts it again and reads back what
/// `fill` says each file holds, then unmounts once more: the checkpoint
/// of that second unmount must find room beside the first one's chain.
fn unmount_and_read_back(fs: Arc<Fs<RamDevice>>, dev: &RamDevice, done: &[(u64, u64, u64, u64)]) {
    Arc::try_unwrap(fs).ok().unwrap().unmount().unwrap();
    fsck_clean(dev);
    let fs = Fs::mount(dev.clone(), config(512)).unwrap();
    for &(w, f, round, len) in done {
        let file = fs.open(&format!("w{w}f{f}")).unwrap();
        // The last piece written ends one piece before `len`.
        assert_eq!(file.len(), len.saturating_sub(PIECE), "w{w}f{f}'s length");
        let mut buf = vec![0u8; file.len() as usize];
        file.read_exact_at(&mut buf, 0).unwrap();
        for (i, chunk) in buf.chunks(PIECE as usize).enumerate() {
            let off = i as u64 * PIECE;
            let want = if (off / PIECE) % 2 == 0 {
                byte(w, round, f, off)
            } else {
                0
            };
            assert!(
                chunk.iter().all(|&b| b == want),
                "w{w}f{f} round {round}: bytes at {off} are not what was written"
            );
        }
    }
    fs.unmount().unwrap();
    fsck_clean(dev);
}

fn device() -> RamDevice {
    RamDevice::new(64 << 20, 4096, 512 + pollfs_core::persist::META_FRAMES).unwrap()
}

#[test]
fn rounds_of_truncate_and_rewrite_at_two_thirds_full_never_run_out() {
    // Each round holds 36 MiB of a 60 MiB data area; the next round's
    // truncations free it, held until a commit: the second round finds
    // the device full of held blocks and its writes commit to free them.
    let dev = device();
    let fs = Arc::new(Fs::format(dev.clone(), config(512), 9).unwrap());
    let done = fill(&fs, 3, 4, 3 << 20);
    assert!(
        done.iter()
            .all(|&(_, _, round, len)| round == 2 && len == 3 << 20),
        "a writer was refused before its three rounds ended: {done:?}"
    );
    unmount_and_read_back(fs, &dev, &done);
}

#[test]
fn writers_fill_the_device_and_the_unmount_keeps_every_byte() {
    // Three writers of four 8 MiB files want 96 MiB in a round: the
    // device fills in the first.
    let dev = device();
    let fs = Arc::new(Fs::format(dev.clone(), config(512), 9).unwrap());
    let data_blocks = fs.statfs().blocks;
    let done = fill(&fs, 3, 4, 8 << 20);
    let st = fs.statfs();
    assert!(
        st.available * 100 <= data_blocks,
        "a writer was refused with {} of {} blocks available",
        st.available,
        data_blocks
    );
    unmount_and_read_back(fs, &dev, &done);
}

/// A power cut with the log as full as commits let it get (three
/// quarters: they leave checkpoints to a background step, and none runs
/// here) leaves an image that mounts: the mount replays the whole log,
/// says so, and every synced file is there; the unmount after it
/// checkpoints and fsck finds nothing.
#[test]
fn an_image_whose_log_is_full_mounts() {
    let dev = device();
    let cfg = pollfs_core::Config {
        cache_pages: 512,
        ..pollfs_core::hosted::config()
    };
    let fs = Fs::format(dev.clone(), cfg, 9).unwrap();
    fs.set_background_steps(true);
    let mut made = 0u64;
    let mut fullest = 0;
    while made < 2000 {
        let f = fs.create(&format!("f{made}")).unwrap();
        f.write_all_at(&[made as u8 + 1; 4096], 0).unwrap();
        f.sync_data().unwrap();
        made += 1;
        let (used, blocks) = fs.log_fill();
        fullest = fullest.max(used * 100 / blocks);
        if used * 100 >= blocks * 70 {
            break;
        }
    }
    assert!(fullest >= 70, "the log never filled: {fullest}% at most");
    // A power cut: no unmount, no checkpoint.
    drop(fs);
    let fs = Fs::mount(dev.clone(), cfg).unwrap();
    // Every sync's log write, counted by the mount that replayed them
    // (before it retired their live data and checkpointed them away).
    assert!(fs.stats().replayed_log_writes >= made, "{:?}", fs.stats());
    for i in 0..made {
        let f = fs.open(&format!("f{i}")).unwrap();
        let mut b = [0u8; 4096];
        f.read_exact_at(&mut b, 0).unwrap();
        assert!(b.iter().all(|&x| x == i as u8 + 1), "file f{i}");
    }
    fs.unmount().unwrap();
    fsck_clean(&dev);
}
