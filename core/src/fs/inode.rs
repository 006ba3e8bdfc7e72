//! In-memory inodes: attributes, size, page index, extent map and the
//! per-file locks.

use alloc::boxed::Box;
use alloc::collections::BTreeMap;
use alloc::string::String;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use spin::Once;

use crate::cache::Radix;
use crate::lock::{Level, RangeLock, StripedLock};
use crate::persist::record::{InodeMeta, Kind};
use crate::persist::{DurableInode, LiveInode};
use crate::space::ExtentMap;
use crate::sync::{Mutex, RwLock, WaitQueue};
use crate::units::{InodeId, PAGE_SIZE_U64};

/// Counts writers that hold no inode lock, and lets truncate and
/// punch-hole shut the door on new ones and wait for the rest (btrfs's
/// `inode_dio_wait`, for buffered writes).
///
/// The count is split over padded slots, one picked per session, so two
/// threads writing the same file do not bounce one cache line. Each slot is
/// one word: its count in the low bits and `BLOCKED` in the top bit, so a
/// writer's increment and its check of `BLOCKED` are one atomic step.
#[derive(Debug, Default)]
pub(crate) struct WriteDrain {
    slots: [DrainSlot; DRAIN_SLOTS],
    drained: WaitQueue,
}

const DRAIN_SLOTS: usize = 8;
const BLOCKED: u64 = 1 << 63;

#[derive(Debug, Default)]
#[repr(align(128))]
struct DrainSlot(crate::sync::atomic::AtomicU64);

impl WriteDrain {
    /// Registers a writer in the slot for `hint`; `None` (and nothing
    /// registered) if new writers are blocked.
    pub(crate) fn try_enter(&self, hint: usize) -> Option<usize> {
        let slot = hint % DRAIN_SLOTS;
        let prev = self.slots[slot].0.fetch_add(1, Ordering::AcqRel);
        if prev & BLOCKED != 0 {
            self.exit(slot);
            return None;
        }
        Some(slot)
    }
    /// Unregisters a writer from `slot`.
    pub(crate) fn exit(&self, slot: usize) {
        let prev = self.slots[slot % DRAIN_SLOTS]
            .0
            .fetch_sub(1, Ordering::AcqRel);
        if prev & BLOCKED != 0 {
            self.drained.wake_all();
        }
    }
    /// Stops new writers from entering.
    pub(crate) fn block(&self) {
        for s in &self.slots {
            s.0.fetch_or(BLOCKED, Ordering::AcqRel);
        }
    }
    /// Lets writers enter again.
    pub(crate) fn unblock(&self) {
        for s in &self.slots {
            s.0.fetch_and(!BLOCKED, Ordering::AcqRel);
        }
    }
    /// Resolves when no writer is registered.
    pub(crate) async fn drained(&self) {
        self.drained
            .wait_until(|| {
                let busy = self
                    .slots
                    .iter()
                    .any(|s| s.0.load(Ordering::Acquire) & !BLOCKED != 0);
                (!busy).then_some(())
            })
            .await
    }
}

/// Re-opens a [`WriteDrain`] when dropped, on every exit path.
pub(crate) struct Unblock<'a>(pub(crate) &'a WriteDrain);

impl Drop for Unblock<'_> {
    fn drop(&mut self) {
        self.0.unblock();
    }
}

/// The lowest and highest dirty page in one word (32 bits each; page
/// indices are below [`crate::cache::radix::MAX_PAGES`] = 2^32), so that
/// widening it and taking it are each one atomic step. Two separate words
/// let a take interleave with a widen and lose a dirty page from both the
/// range taken and the range left: writeback then never found that page.
struct DirtyRange;

impl DirtyRange {
    const EMPTY: u64 = 0xffff_ffff << 32;

    /// `range` widened to include page `index`.
    fn with(range: u64, index: u64) -> u64 {
        let index = index.min(0xffff_ffff);
        let lo = (range >> 32).min(index);
        let hi = if range == Self::EMPTY {
            index
        } else {
            (range & 0xffff_ffff).max(index)
        };
        (lo << 32) | hi
    }

    /// `[start, end)` of a range word.
    fn bounds(range: u64) -> (u64, u64) {
        let (lo, hi) = (range >> 32, range & 0xffff_ffff);
        if range == Self::EMPTY || lo > hi {
            (0, 0)
        } else {
            (lo, hi + 1)
        }
    }
}

/// Owner and permission bits, changed together by `set_attr`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Owner {
    pub(crate) perm: u16,
    pub(crate) uid: u32,
    pub(crate) gid: u32,
}

/// A file, directory, symbolic link, FIFO, socket or device node.
#[derive(Debug)]
pub(crate) struct Inode {
    pub(crate) id: InodeId,
    pub(crate) kind: Kind,
    /// Permission bits and owner. A leaf lock.
    pub(crate) owner: Mutex<Owner>,
    /// Links (entries, and for a directory its `.` and its subdirectories'
    /// `..`): a copy of the namespace tree's count, written only from a
    /// record's effects under the namespace lock, so `stat` reads it
    /// without the lock. Zero: unlinked, its data kept until the last open
    /// handle closes.
    pub(crate) nlink: AtomicU32,
    /// A directory's parent: a copy of the tree's, written as `nlink` is.
    pub(crate) parent: AtomicU64,
    /// Times in nanoseconds since the Unix epoch. A write sets `mtime` and
    /// `ctime` without marking the inode for logging (lazytime): they reach
    /// the log with the inode's next record, or a checkpoint.
    pub(crate) atime: AtomicU64,
    pub(crate) mtime: AtomicU64,
    pub(crate) ctime: AtomicU64,
    /// A symbolic link's target.
    pub(crate) target: String,
    /// A device node's device number (0 for anything else).
    pub(crate) rdev: u64,
    /// Extended attributes: name -> value. Taken before the namespace
    /// lock when changed (the change is staged under it).
    pub(crate) xattrs: Mutex<BTreeMap<String, Vec<u8>>>,
    /// Bytes of its extended attributes' records in a checkpoint image
    /// (part of `meta_len`).
    pub(crate) xattr_len: AtomicU64,
    /// Size in bytes. Stored with Release after the data it covers is in the
    /// cache; readers load it with Acquire.
    pub(crate) size: AtomicU64,
    /// Cached pages.
    pub(crate) pages: Radix,
    /// File block -> device block. A leaf spin lock: held for lookups and
    /// updates only, never across an await; taken before the allocator's.
    pub(crate) extents: RwLock<ExtentMap>,
    /// Level 1: size changes (extending writes, truncate, punch-hole), and
    /// everything in file-lock mode.
    pub(crate) inode_lock: RangeLock,
    /// Level 2: shared by readers that instantiate pages (misses), taken
    /// exclusively by truncate and punch-hole over the range they drop.
    /// Writers do not take it: truncate and punch-hole drain them instead.
    pub(crate) gate: RangeLock,
    /// Level 3: exclusive over the bytes a write changes; striped so that
    /// writers to different parts of the file share no lock word. Made at
    /// the first write ([`Inode::extent_lock`]): its 16 padded stripes
    /// are 2 KiB, and most inodes of a large filesystem are never written
    /// while it is mounted.
    extent_lock: Once<Box<StripedLock>>,
    /// Writers that hold no inode lock (writes inside EOF).
    /// Made at the first write inside EOF or truncate ([`Inode::writers`]):
    /// its padded slots are over 1 KiB.
    writers: Once<Box<WriteDrain>>,
    /// Dirty pages of this file.
    pub(crate) dirty: AtomicU64,
    /// The pages made dirty since the last writeback scan, as one
    /// [`DirtyRange`] word: writeback scans only this range (an
    /// append-and-sync of a large file must not walk its whole page index).
    dirty_range: AtomicU64,
    /// The pages given new bytes since the last small sync looked, as a
    /// [`DirtyRange`] word: a small sync logs the dirty pages no data
    /// record holds, and those are in this range (logged pages stay dirty,
    /// in `dirty_range`, until written to their blocks).
    log_range: AtomicU64,
    /// Open handles plus writebacks in progress.
    pub(crate) open: AtomicU32,
    /// The name is gone (or, made unnamed, it never had one); free
    /// everything when `open` drops to zero.
    pub(crate) unlinked: AtomicBool,
    /// Made unnamed to be named later (O_TMPFILE without O_EXCL, Linux's
    /// `I_LINKABLE`): while open and still unnamed it may take a link.
    /// Cleared by that link, so a file unlinked again stays unlinked.
    pub(crate) linkable: AtomicBool,
    /// Pages and blocks have been released.
    pub(crate) reclaimed: AtomicBool,
    /// Bumped on every size or extent change (the log's "needs a record").
    pub(crate) meta_seq: AtomicU64,
    /// `meta_seq` of the newest state made durable.
    pub(crate) logged_seq: AtomicU64,
    /// `meta_seq` of the newest record staged (durable or still queued).
    /// A sync that finds `meta_seq` no newer stages nothing: the queued
    /// record already says it, and its own later ticket covers that
    /// record. Without this, every retry of a commit that failed (a
    /// device full of blocks held for it) queued every dirty inode's
    /// record again behind the first, and the checkpoint that had to
    /// carry them all outgrew the space held back for it.
    pub(crate) staged_seq: AtomicU64,
    /// This inode's record's share of the filesystem's metadata size
    /// estimate.
    pub(crate) meta_len: AtomicU64,
    /// Writebacks of this inode's pages with writes in flight, so a sync
    /// can wait for the writes others started on pages it found clean.
    writing: Mutex<InFlight>,
}

/// The share of the metadata size estimate of an inode the durable view
/// has as `m`, with `xattr_len` bytes of extended attributes: what mount
/// counts for it and what its live inode starts with.
pub(crate) fn durable_meta_len(m: &InodeMeta, xattr_len: u64) -> u64 {
    crate::persist::record::inode_record_len(m.kind, m.extents.len(), m.target.len()) + xattr_len
}

/// Writebacks in flight: ids are handed out in order.
#[derive(Debug, Default)]
struct InFlight {
    next: u64,
    running: alloc::vec::Vec<u64>,
}

impl Inode {
    /// The level-3 lock of the bytes a write changes, made on first use.
    pub(crate) fn extent_lock(&self) -> &StripedLock {
        self.extent_lock
            .call_once(|| Box::new(StripedLock::new(Level::Extent)))
    }

    /// Writers that hold no inode lock, counted so truncate can drain
    /// them; made on first use.
    pub(crate) fn writers(&self) -> &WriteDrain {
        self.writers.call_once(|| Box::new(WriteDrain::default()))
    }

    /// Frees what only a file in use needs: its write lock, its count of
    /// writers, the list of writebacks in flight, and, unless some of its
    /// pages are `cached`, its page index's nodes. Each is made again on
    /// next use. `&mut`: the caller holds the only reference to the inode,
    /// so no operation is inside any of them. Returns true if its page
    /// index still has nodes.
    pub(crate) fn shrink(&mut self, cached: bool) -> bool {
        self.extent_lock = Once::new();
        self.writers = Once::new();
        self.writing.lock().running = Vec::new();
        if !cached {
            self.pages.drop_nodes();
        }
        self.pages.has_nodes()
    }

    /// True if nothing about this inode lives only in memory but what the
    /// durable view may also say: not open, named, not reclaimed, no dirty
    /// page, every change logged and nothing staged. With no cached page
    /// and a record equal to the view's ([`Inode::live_view`]), it may
    /// leave memory. The caller holds the only reference.
    pub(crate) fn idle_and_logged(&self) -> bool {
        let logged = self.logged_seq.load(Ordering::Acquire);
        self.open.load(Ordering::Acquire) == 0
            && !self.unlinked.load(Ordering::Acquire)
            && !self.linkable.load(Ordering::Acquire)
            && !self.reclaimed.load(Ordering::Acquire)
            && self.dirty.load(Ordering::Acquire) == 0
            && self.meta_seq.load(Ordering::Acquire) == logged
            && self.staged_seq.load(Ordering::Acquire) <= logged
    }

    /// This inode as [`Journal::durable_matches`] compares it with the
    /// durable view.
    ///
    /// [`Journal::durable_matches`]: crate::persist::Journal::durable_matches
    pub(crate) fn live_view(&self) -> LiveInode {
        let xattrs = self
            .xattrs
            .lock()
            .iter()
            .map(|(n, v)| (n.clone(), v.clone()))
            .collect();
        (self.id.0, self.meta(), xattrs)
    }

    /// True if the parts [`Inode::shrink`] frees exist.
    pub(crate) fn is_warm(&self) -> bool {
        self.extent_lock.get().is_some() || self.writers.get().is_some() || self.pages.has_nodes()
    }

    /// True if no write holds or waits for any of its bytes.
    pub(crate) fn extent_lock_idle(&self) -> bool {
        self.extent_lock.get().is_none_or(|l| l.is_idle())
    }

    /// A regular file with no attributes to speak of (tests of primitives).
    #[cfg(all(test, loom))]
    pub(crate) fn new(id: InodeId) -> Inode {
        let inode = Inode::from_meta(id, &InodeMeta::new(Kind::File, 0o644, 0, 0, 0));
        // Made now, before a model's threads start: loom does not see
        // inside `spin::Once`, so a thread spinning on another's
        // `call_once` would never let it finish.
        inode.writers();
        inode.extent_lock();
        inode
    }

    /// An inode with `meta`'s kind, attributes and size (not its extents).
    pub(crate) fn from_meta(id: InodeId, m: &InodeMeta) -> Inode {
        Inode {
            id,
            kind: m.kind,
            owner: Mutex::new(Owner {
                perm: m.perm,
                uid: m.uid,
                gid: m.gid,
            }),
            nlink: AtomicU32::new(m.nlink),
            parent: AtomicU64::new(m.parent),
            atime: AtomicU64::new(m.atime),
            mtime: AtomicU64::new(m.mtime),
            ctime: AtomicU64::new(m.ctime),
            target: m.target.clone(),
            rdev: m.rdev,
            xattrs: Mutex::new(BTreeMap::new()),
            xattr_len: AtomicU64::new(0),
            size: AtomicU64::new(m.size),
            pages: Radix::new(),
            extents: RwLock::new(ExtentMap::new()),
            inode_lock: RangeLock::new(Level::Inode),
            gate: RangeLock::new(Level::Gate),
            extent_lock: Once::new(),
            writers: Once::new(),
            dirty: AtomicU64::new(0),
            dirty_range: AtomicU64::new(DirtyRange::EMPTY),
            log_range: AtomicU64::new(DirtyRange::EMPTY),
            open: AtomicU32::new(0),
            unlinked: AtomicBool::new(false),
            reclaimed: AtomicBool::new(false),
            linkable: AtomicBool::new(false),
            meta_seq: AtomicU64::new(0),
            logged_seq: AtomicU64::new(0),
            staged_seq: AtomicU64::new(0),
            meta_len: AtomicU64::new(0),
            writing: Mutex::new(InFlight::default()),
        }
    }

    /// Inode `id` as the durable view has it: attributes, size, extents
    /// and extended attributes, with its share of the metadata size
    /// estimate as mount counted it (see `Fs::load`), and its sequences
    /// counting on from its newest durable record.
    pub(crate) fn from_durable(id: InodeId, d: &DurableInode) -> Inode {
        let inode = Inode::from_meta(id, &d.meta);
        inode.load_xattrs(d.xattrs.iter().map(|(n, v)| (n.as_str(), v.as_slice())));
        {
            let mut ext = inode.extents.write();
            for x in &d.meta.extents {
                // The record's extents are in file order and disjoint
                // (checked when it was decoded), so each insert succeeds.
                let _ = ext.insert(x.file_block, x.dev, x.len);
            }
        }
        inode.meta_len.store(
            durable_meta_len(&d.meta, inode.xattr_len.load(Ordering::Acquire)),
            Ordering::Release,
        );
        for seq in [&inode.meta_seq, &inode.logged_seq, &inode.staged_seq] {
            seq.store(d.seq, Ordering::Release);
        }
        inode
    }

    /// A writeback's writes are about to be submitted; returns its id.
    pub(crate) fn begin_io(&self) -> u64 {
        let mut w = self.writing.lock();
        let id = w.next;
        w.next += 1;
        w.running.push(id);
        id
    }

    /// Writeback `id`'s writes have completed (and its pages are ended).
    pub(crate) fn end_io(&self, id: u64) {
        self.writing.lock().running.retain(|&r| r != id);
    }

    /// The id the next writeback will get: every writeback started so far
    /// has a lower one.
    pub(crate) fn io_horizon(&self) -> u64 {
        self.writing.lock().next
    }

    /// True if every writeback with an id below `horizon` has completed.
    pub(crate) fn io_done_before(&self, horizon: u64) -> bool {
        self.writing.lock().running.iter().all(|&id| id >= horizon)
    }

    /// This inode as a record: attributes, size, and extents or target.
    /// The caller holds the namespace lock (link count and parent are
    /// consistent with the records staged before).
    pub(crate) fn meta(&self) -> InodeMeta {
        let owner = *self.owner.lock();
        InodeMeta {
            kind: self.kind,
            perm: owner.perm,
            uid: owner.uid,
            gid: owner.gid,
            nlink: self.nlink.load(Ordering::Acquire),
            parent: self.parent.load(Ordering::Acquire),
            size: self.size(),
            atime: self.atime.load(Ordering::Relaxed),
            mtime: self.mtime.load(Ordering::Relaxed),
            ctime: self.ctime.load(Ordering::Relaxed),
            extents: match self.kind {
                Kind::File => self.extents.read().extents().collect(),
                _ => alloc::vec::Vec::new(),
            },
            target: self.target.clone(),
            rdev: self.rdev,
        }
    }

    /// Records a change of contents at `now`: mtime and ctime.
    pub(crate) fn touch(&self, now: u64) {
        self.mtime.store(now, Ordering::Relaxed);
        self.ctime.store(now, Ordering::Relaxed);
    }

    /// [`Inode::touch`] for a data write: leaves both times alone if they
    /// are already within [`TIME_GRANULE`] before `now`, as Linux keeps
    /// them to its coarse clock's tick. Writers of one file then only read
    /// the times' cache line, instead of storing to it on every write.
    pub(crate) fn touch_data(&self, now: u64) {
        let recent = |t: &AtomicU64| {
            now.checked_sub(t.load(Ordering::Relaxed))
                .is_some_and(|d| d < TIME_GRANULE)
        };
        if !(recent(&self.mtime) && recent(&self.ctime)) {
            self.touch(now);
        }
    }

    #[inline]
    pub(crate) fn size(&self) -> u64 {
        self.size.load(Ordering::Acquire)
    }

    /// Takes an open reference unless the file is unlinked and already
    /// closed by everyone (then it is being or has been reclaimed).
    pub(crate) fn try_open(&self) -> bool {
        self.open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n > 0 || !self.unlinked.load(Ordering::Acquire)).then_some(n + 1)
            })
            .is_ok()
    }

    /// Records that the size or an extent changed; returns the new sequence.
    pub(crate) fn meta_changed(&self) -> u64 {
        self.meta_seq.fetch_add(1, Ordering::AcqRel) + 1
    }

    /// True if a size or extent change is not yet durable.
    pub(crate) fn meta_dirty(&self) -> bool {
        self.meta_seq.load(Ordering::Acquire) > self.logged_seq.load(Ordering::Acquire)
    }

    /// The sequence a sync's record for this inode would carry, or `None`
    /// if a record of that state (or a newer one) is already staged.
    /// Called with writers held off, so the sequence cannot move.
    pub(crate) fn seq_to_stage(&self) -> Option<u64> {
        let seq = self.meta_seq.load(Ordering::Acquire);
        (seq > self.logged_seq.load(Ordering::Acquire)
            && seq > self.staged_seq.load(Ordering::Acquire))
        .then_some(seq)
    }

    /// A record of this inode at `seq` was staged.
    pub(crate) fn staged(&self, seq: u64) {
        self.staged_seq.fetch_max(seq, Ordering::AcqRel);
    }

    /// Page `index` became dirty with new bytes.
    pub(crate) fn dirty_inc(&self, index: crate::units::PageIndex) {
        self.dirty_inc_logged(index);
        self.changed(index);
    }

    /// Page `index` became dirty, its bytes in a data record already.
    pub(crate) fn dirty_inc_logged(&self, index: crate::units::PageIndex) {
        self.dirty.fetch_add(1, Ordering::Relaxed);
        widen(&self.dirty_range, index.0);
    }

    /// Page `index`, dirty already, got new bytes.
    ///
    /// Most overwrites land inside the range already, so it is read before
    /// it is written: writers of one file then leave its cache line shared
    /// instead of taking turns owning it. Skipping the write is safe
    /// because the range is taken (by a small sync's `log_pages`) only with
    /// writers drained and the inode lock held: until this writer leaves
    /// the write drain (or drops the inode lock), nothing can take the
    /// range it has just seen cover `index`.
    pub(crate) fn changed(&self, index: crate::units::PageIndex) {
        let r = self.log_range.load(Ordering::Acquire);
        if DirtyRange::with(r, index.0) != r {
            widen(&self.log_range, index.0);
        }
    }

    /// Takes the range of pages given new bytes since the last call, as
    /// `[start, end)`; with `keep`, leaves it in place.
    pub(crate) fn log_range(&self, keep: bool) -> (u64, u64) {
        DirtyRange::bounds(if keep {
            self.log_range.load(Ordering::Acquire)
        } else {
            self.log_range.swap(DirtyRange::EMPTY, Ordering::AcqRel)
        })
    }

    /// Puts back a range [`Inode::log_range`] took.
    pub(crate) fn restore_log_range(&self, (lo, hi): (u64, u64)) {
        if lo < hi {
            widen(&self.log_range, lo);
            widen(&self.log_range, hi - 1);
        }
    }

    /// Takes the range of pages made dirty since the last call, as
    /// `[start, end)` (empty if none).
    pub(crate) fn take_dirty_range(&self) -> (u64, u64) {
        DirtyRange::bounds(self.dirty_range.swap(DirtyRange::EMPTY, Ordering::AcqRel))
    }

    pub(crate) fn dirty_dec(&self) {
        // Saturating: counts are advisory (they pick writeback victims).
        let _ = self
            .dirty
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                Some(n.saturating_sub(1))
            });
    }
}

/// Widens the [`DirtyRange`] word `range` to include page `index`.
fn widen(range: &AtomicU64, index: u64) {
    let _ = range.fetch_update(Ordering::AcqRel, Ordering::Acquire, |r| {
        Some(DirtyRange::with(r, index))
    });
}

/// How stale a data write may leave mtime and ctime, in nanoseconds (see
/// [`Inode::touch_data`]).
pub(crate) const TIME_GRANULE: u64 = 1_000_000;

/// Pages needed to hold `size` bytes.
pub(crate) fn pages_for(size: u64) -> u64 {
    size.div_ceil(PAGE_SIZE_U64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dirty_range_widens_and_empties() {
        let mut r = DirtyRange::EMPTY;
        assert_eq!(DirtyRange::bounds(r), (0, 0));
        r = DirtyRange::with(r, 7);
        assert_eq!(DirtyRange::bounds(r), (7, 8));
        r = DirtyRange::with(r, 0);
        r = DirtyRange::with(r, 3);
        assert_eq!(DirtyRange::bounds(r), (0, 8));
        let top = crate::cache::radix::MAX_PAGES - 1;
        assert_eq!(DirtyRange::bounds(DirtyRange::with(r, top)), (0, top + 1));
    }

    #[test]
    fn data_writes_move_times_only_past_the_granule() {
        let i = Inode::from_meta(InodeId(9), &InodeMeta::new(Kind::File, 0o644, 0, 0, 0));
        i.touch(5_000_000);
        i.touch_data(5_000_000 + TIME_GRANULE - 1);
        assert_eq!(
            i.mtime.load(Ordering::Relaxed),
            5_000_000,
            "within the granule"
        );
        i.touch_data(5_000_000 + TIME_GRANULE);
        assert_eq!(i.mtime.load(Ordering::Relaxed), 5_000_000 + TIME_GRANULE);
        assert_eq!(i.ctime.load(Ordering::Relaxed), 5_000_000 + TIME_GRANULE);
        i.touch(u64::MAX);
        i.touch_data(7);
        assert_eq!(
            i.mtime.load(Ordering::Relaxed),
            7,
            "a time in the future is replaced"
        );
        i.ctime.store(0, Ordering::Relaxed);
        i.touch_data(TIME_GRANULE);
        assert_eq!(
            i.ctime.load(Ordering::Relaxed),
            TIME_GRANULE,
            "either time out of date"
        );
    }
}
