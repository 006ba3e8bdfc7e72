//! What must hold for a changed image (see the module above), run by a
//! [`Checker`]. Every failed check panics.
//!
//! Engine bugs this target found on format 3, now fixed (host-tests keeps
//! an input of each under `tests/corpus/regressions`):
//!
//! - `repair-root-parent`: repair could not fix a root directory whose
//!   `..` was not itself, reported success, and the image never mounted.
//! - `orphan-directory-with-entries`: a directory with no links that
//!   still held entries checked clean and mounted; mount reclaimed it and
//!   left its entries dangling, and the next mount failed.
//! - `repair-without-root`: repair of an image with no root directory
//!   panicked (the new root was put past the view's image-length count).

use std::collections::BTreeSet;

use pollfs_core::dev::ram::RamDevice;
use pollfs_core::error::Error;
use pollfs_core::fs::{Kind, Session};
use pollfs_core::persist::format::Superblock;
use pollfs_core::persist::xattr;
use pollfs_core::persist::CheckReport;
use pollfs_core::units::{PAGE_SIZE, PAGE_SIZE_U64};
use pollfs_core::{Fs, InodeId, XattrMode, MAX_FILE_SIZE};
use pollfs_host_tests::model::pattern;

use super::base;

/// The file every mounted image gets, in the root.
const NEW: &str = "fuzz.new";
/// The directory every mounted image gets, in the root; an entry of the
/// root is moved into it and back.
const DIR: &str = "fuzz.dir";
/// The attribute set on the new file.
const XATTR: &str = "user.fuzz";
/// Files up to this size are read whole.
const READ_WHOLE: u64 = 256 << 10;
/// Entries asked of `read_dir` at a time.
const LISTING: usize = 64;

/// Checks one changed image.
pub struct Checker<'a> {
    dev: &'a RamDevice,
    /// File offsets worth reading.
    offsets: Vec<u64>,
}

fn superblock_block(dev: &RamDevice, copy: u64) -> Vec<u8> {
    let mut b = vec![0u8; PAGE_SIZE];
    dev.read_raw(copy * PAGE_SIZE_U64, &mut b);
    b
}

/// Errors a write, a sync, a namespace change or an unmount may give on a
/// full or crafted filesystem (the device full, inode or sequence numbers
/// used up).
fn acceptable(e: &Error) -> bool {
    matches!(e, Error::Space(_))
}

/// What a mounted image got that a remount must show.
#[derive(Debug, Default)]
struct Wrote {
    /// The new file's data, if it was synced.
    data: Option<Vec<u8>>,
    /// The directory, if it was made and synced.
    dir: bool,
    /// A root entry and its inode, moved into the directory and back.
    moved: Option<(String, InodeId)>,
    /// An extended attribute of the new file, if it was set and synced.
    xattr: Option<Vec<u8>>,
}

impl<'a> Checker<'a> {
    /// A checker of the image now on `dev`.
    pub fn new(dev: &'a RamDevice, offsets: Vec<u64>) -> Checker<'a> {
        Checker { dev, offsets }
    }

    /// Every check, in order.
    pub fn verify(&self) {
        if let Err(report) = self.agree() {
            self.repair(&report);
        }
    }

    /// Check and mount agree on the image; a mounted one is exercised.
    /// Returns the report of an image neither accepts.
    fn agree(&self) -> Result<(), CheckReport> {
        let report = self.fsck();
        match Fs::mount(self.dev.clone(), base::config()) {
            Ok(fs) => {
                assert!(
                    report.problems.is_empty(),
                    "mount accepted an image check finds problems in: {:?}",
                    report.problems
                );
                self.exercise(fs);
                Ok(())
            }
            Err(e) => {
                assert!(
                    !report.problems.is_empty(),
                    "mount refused an image check calls clean: {e:?}"
                );
                Err(report)
            }
        }
    }

    /// `persist::check`, which answers a RAM device with a report.
    fn fsck(&self) -> CheckReport {
        let config = base::config();
        pollfs_core::persist::check(self.dev, config.clock, config.idle)
            .unwrap_or_else(|e| panic!("check failed instead of reporting: {e:?}"))
    }

    /// Repairs an image check finds problems in: an error (then check and
    /// mount still agree on what is left), or an image check calls clean,
    /// that mounts and is exercised.
    fn repair(&self, before: &CheckReport) {
        let config = base::config();
        let rep = match pollfs_core::persist::repair(self.dev, config.clock, config.idle) {
            Ok(rep) => rep,
            Err(_) => {
                let _ = self.agree();
                return;
            }
        };
        assert!(
            rep.after.problems.is_empty(),
            "repair left problems: {:?} (before: {:?}; repairs: {:?})",
            rep.after.problems,
            before.problems,
            rep.repaired
        );
        let again = self.fsck();
        assert!(
            again.problems.is_empty(),
            "check after repair: {:?}",
            again.problems
        );
        match Fs::mount(self.dev.clone(), config) {
            Ok(fs) => self.exercise(fs),
            Err(e) => panic!(
                "a repaired image does not mount: {e:?} (before: {:?}; repairs: {:?})",
                before.problems, rep.repaired
            ),
        }
    }

    /// Reads everything, checks the invariants, writes, syncs, remounts
    /// (replaying the log), unmounts and remounts (from the checkpoint, or
    /// from what the unmount left if it failed).
    fn exercise(&self, fs: Fs<RamDevice>) {
        self.read_all(&fs);
        if let Err(e) = fs.check_invariants() {
            panic!("invariants after mount: {e:?}");
        }
        let wrote = self.write_and_sync(&fs);
        if let Err(e) = fs.check_invariants() {
            panic!("invariants after a write and a sync: {e:?}");
        }
        drop(fs);
        let fs = self.remount(&wrote, "a write and a sync");
        let before = self.newest_generation();
        match fs.unmount() {
            Ok(()) => {
                let after = self.newest_generation();
                assert!(
                    after > before,
                    "the superblock an unmount wrote does not decode \
                     (newest generation {before:?}, then {after:?})"
                );
                drop(self.remount(&wrote, "an unmount"));
            }
            Err(e) if acceptable(&e) => drop(self.remount(&wrote, "a failed unmount")),
            Err(e) => panic!("unmount: {e:?}"),
        }
    }

    /// Writes a new file and a page of an existing one, makes a directory
    /// and moves an entry of the root into it and back, and syncs.
    fn write_and_sync(&self, fs: &Fs<RamDevice>) -> Wrote {
        let s = fs.session().expect("a session");
        let data = pattern(7, 0, 8192);
        let written = match fs
            .open_or_create(NEW)
            .and_then(|f| s.write_all_at(&f, &data, 0))
        {
            Ok(()) => true,
            Err(e) if acceptable(&e) => false,
            Err(e) => panic!("writing a new file: {e:?}"),
        };
        // An existing file (not the one just written), inside its size.
        let new = fs.lookup(NEW).ok();
        if let Some(f) = self
            .files(fs)
            .into_iter()
            .filter(|&i| Some(i) != new)
            .find_map(|i| fs.open_ino(i).ok())
        {
            let at = f.len().min(MAX_FILE_SIZE - 4096) / 2;
            match s.write_all_at(&f, &data[..4096], at) {
                Ok(()) => {}
                Err(e) if acceptable(&e) => {}
                Err(e) => panic!("writing at {at} of a file of {} bytes: {e:?}", f.len()),
            }
        }
        let xattr = data[..300].to_vec();
        let xattr_set = match fs
            .lookup(NEW)
            .and_then(|f| fs.set_xattr(f, XATTR, &xattr, XattrMode::Any))
        {
            Ok(()) => true,
            Err(e) if acceptable(&e) => false,
            Err(e) => panic!("setting an attribute of a new file: {e:?}"),
        };
        let dir = match fs.mkdir(DIR) {
            Ok(ino) => Some(ino),
            Err(e) if acceptable(&e) => None,
            Err(e) => panic!("mkdir: {e:?}"),
        };
        let moved = dir.and_then(|dir| {
            let (name, ino) = fs
                .entries()
                .into_iter()
                .find(|(n, _)| n != NEW && n != DIR)?;
            let there = fs.rename_in(InodeId::ROOT, &name, dir, &name, Default::default());
            let back = there
                .and_then(|()| fs.rename_in(dir, &name, InodeId::ROOT, &name, Default::default()));
            if let Err(e) = back {
                panic!("moving {name:?} into a new directory and back: {e:?}");
            }
            Some((name, ino))
        });
        match fs.sync() {
            Ok(()) => Wrote {
                data: written.then_some(data),
                dir: dir.is_some(),
                moved,
                xattr: xattr_set.then_some(xattr),
            },
            Err(e) if acceptable(&e) => Wrote::default(),
            Err(e) => panic!("sync: {e:?}"),
        }
    }

    /// The highest generation of a superblock copy that decodes.
    fn newest_generation(&self) -> Option<u64> {
        (0..2)
            .filter_map(|copy| Superblock::decode(&superblock_block(self.dev, copy)).ok())
            .map(|sb| sb.generation)
            .max()
    }

    /// Mounts again after `what`: it must mount, read, pass the
    /// invariants, and hold what was synced.
    fn remount(&self, wrote: &Wrote, what: &str) -> Fs<RamDevice> {
        let fs = Fs::mount(self.dev.clone(), base::config()).unwrap_or_else(|e| {
            panic!(
                "remount after {what}: {e:?} (check: {:?})",
                self.fsck().problems
            )
        });
        self.read_all(&fs);
        if let Err(e) = fs.check_invariants() {
            panic!("invariants after a remount after {what}: {e:?}");
        }
        if let Some(data) = &wrote.data {
            let mut back = vec![0u8; data.len()];
            let s = fs.session().expect("a session");
            let read = fs.open(NEW).and_then(|f| s.read_at(&f, &mut back, 0));
            assert!(
                read.as_ref().ok() == Some(&data.len()) && back == *data,
                "a synced write did not survive {what}: {read:?}"
            );
        }
        if let Some(value) = &wrote.xattr {
            let got = fs.lookup(NEW).and_then(|f| fs.get_xattr(f, XATTR));
            assert!(
                got.as_ref().ok() == Some(value),
                "a synced attribute did not survive {what}: {got:?}"
            );
        }
        if wrote.dir {
            let kind = fs.lookup(DIR).and_then(|i| fs.attr(i)).map(|m| m.kind);
            assert!(
                matches!(kind, Ok(Kind::Dir)),
                "a synced directory did not survive {what}: {kind:?}"
            );
        }
        if let Some((name, ino)) = &wrote.moved {
            let found = fs.lookup_in(InodeId::ROOT, name);
            assert!(
                found.as_ref().ok() == Some(ino),
                "{name:?} ({ino}) moved and back is {found:?} after {what}"
            );
        }
        fs
    }

    /// Every regular file the tree reaches.
    fn files(&self, fs: &Fs<RamDevice>) -> Vec<InodeId> {
        let mut out = Vec::new();
        self.walk(fs, |ino, kind| {
            if kind == Kind::File {
                out.push(ino);
            }
        });
        out
    }

    /// Visits every entry of the tree (a directory once: the tree has no
    /// cycle), checking that each names an inode of the kind it says, that
    /// looking its name up finds it, and that a directory's `..` is the
    /// directory listing it.
    fn walk(&self, fs: &Fs<RamDevice>, mut visit: impl FnMut(InodeId, Kind)) {
        let mut todo = vec![InodeId::ROOT];
        let mut seen = BTreeSet::new();
        while let Some(dir) = todo.pop() {
            assert!(seen.insert(dir), "directory {dir} is reached twice");
            let mut after = 0;
            loop {
                let page = fs
                    .read_dir(dir, after, LISTING)
                    .unwrap_or_else(|e| panic!("read_dir of {dir}: {e:?}"));
                for e in &page {
                    after = e.cookie;
                    let meta = fs
                        .attr(e.ino)
                        .unwrap_or_else(|err| panic!("attr of {e:?} in {dir}: {err:?}"));
                    let found = fs.lookup_in(dir, &e.name);
                    assert!(
                        meta.kind == e.kind && found.as_ref().ok() == Some(&e.ino),
                        "{e:?} in {dir}: {meta:?}, lookup {found:?}"
                    );
                    if e.kind == Kind::Dir {
                        todo.push(e.ino);
                    }
                    visit(e.ino, e.kind);
                }
                if page.len() < LISTING {
                    break;
                }
            }
        }
    }

    /// Reads every file: whole if small, else around the offsets and its
    /// ends; every read returns exactly the bytes the file has there. A
    /// symbolic link's target is as long as its size. Every inode's
    /// extended attributes read back, within `persist::xattr`'s rules.
    fn read_all(&self, fs: &Fs<RamDevice>) {
        let s = fs.session().expect("a session");
        let mut found = Vec::new();
        self.walk(fs, |ino, kind| found.push((ino, kind)));
        let mut buf = vec![0u8; 64 << 10];
        for (ino, kind) in found {
            self.read_xattrs(fs, ino);
            match kind {
                Kind::File => self.read_file(fs, &s, ino, &mut buf),
                Kind::Symlink => {
                    let target = fs.readlink(ino);
                    let len = fs.attr(ino).map(|m| m.len);
                    assert!(
                        target.as_ref().map(|t| t.len() as u64).ok() == len.as_ref().ok().copied(),
                        "symbolic link {ino}: {target:?}, size {len:?}"
                    );
                }
                Kind::Dir => {}
                Kind::Fifo | Kind::Socket | Kind::CharDev | Kind::BlockDev => {
                    let m = fs.attr(ino).expect("attributes of a special file");
                    assert!(
                        m.len == 0 && (kind.is_device() || m.rdev == 0),
                        "special file {ino}: {m:?}"
                    );
                }
            }
        }
    }

    fn read_xattrs(&self, fs: &Fs<RamDevice>, ino: InodeId) {
        let names = fs
            .list_xattr(ino)
            .unwrap_or_else(|e| panic!("attributes of inode {ino}: {e:?}"));
        let mut total = 0;
        for name in names {
            let value = fs
                .get_xattr(ino, &name)
                .unwrap_or_else(|e| panic!("attribute {name:?} of inode {ino}: {e:?}"));
            assert!(
                xattr::check_name(&name).is_ok() && xattr::check_value(&value).is_ok(),
                "inode {ino} holds attribute {name:?} of {} bytes",
                value.len()
            );
            total += xattr::cost(&name, &value);
        }
        assert!(
            total <= xattr::INODE_TOTAL_MAX,
            "inode {ino} holds {total} bytes of attributes"
        );
    }

    fn read_file(&self, fs: &Fs<RamDevice>, s: &Session<RamDevice>, ino: InodeId, buf: &mut [u8]) {
        let f = fs
            .open_ino(ino)
            .unwrap_or_else(|e| panic!("open inode {ino}: {e:?}"));
        let len = f.len();
        let mut at: Vec<u64> = if len <= READ_WHOLE {
            (0..len).step_by(buf.len()).collect()
        } else {
            let mut v: Vec<u64> = self.offsets.iter().map(|o| o / 4096 * 4096).collect();
            v.extend([0, len / 2, len - 1]);
            v
        };
        at.push(len);
        for off in at {
            let want = len.saturating_sub(off).min(buf.len() as u64) as usize;
            match s.read_at(&f, buf, off) {
                Ok(n) if n == want => {}
                other => {
                    panic!("read of inode {ino} ({len} bytes) at {off}: {other:?}, not {want}")
                }
            }
        }
    }
}
