//! The page cache: a fixed set of slots, one per DMA frame, shared by all
//! files, each file finding its pages through its own [`Radix`] index.
//!
//! Reads of cached pages take no lock: a reader loads the slot's state word,
//! checks the slot's key, copies the bytes out of the frame and then checks
//! that the state's version did not change (see [`state`]). Eviction, truncate
//! and punch-hole bump the version when a slot stops holding a page, so a
//! reader never returns bytes from a slot that was reused under it.
//!
//! Writers pin the page while they copy in, then mark it dirty. Pages are
//! filled (from the device, or zeroed for holes) while locked; anyone who
//! finds a locked page waits for it on a hashed wait queue.
//!
//! Replacement is CLOCK over all slots. Dirty, locked, pinned and
//! under-writeback pages are never evicted.

pub mod radix;
pub mod state;

use alloc::vec::Vec;
use core::sync::atomic::Ordering;

use crate::sync::atomic::{fence, AtomicU64, AtomicUsize};
use crate::sync::Mutex;

use crate::dev::FrameArena;
use crate::sync::WaitQueues;
use crate::units::{FrameId, InodeId, PageIndex};
pub use radix::Radix;
use state::*;

/// Waiters present: whoever clears a bit a waiter may wait on must wake the
/// slot's wait queue.
const WAITERS: u64 = 1 << 5;

/// The per-slot bookkeeping: 24 bytes plus 8 in the owning file's index.
#[derive(Debug, Default)]
struct Slot {
    state: AtomicU64,
    ino: AtomicU64,
    index: AtomicU64,
}

impl Slot {
    #[inline]
    fn holds(&self, ino: InodeId, index: PageIndex) -> bool {
        self.ino.load(Ordering::Acquire) == ino.0 && self.index.load(Ordering::Acquire) == index.0
    }
}

/// Outcome of an optimistic read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// The bytes were copied.
    Hit,
    /// The page is not cached.
    Miss,
    /// The page is being filled; wait on the slot and retry.
    Busy(u32),
    /// The copy out of the frame failed.
    Failed(crate::dev::DevError),
}

/// Outcome of inserting a page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Insert {
    /// A new locked slot now holds the page; the caller fills it and calls
    /// [`PageCache::finish_fill`]. `evicted` says a page was evicted for it.
    New {
        /// The slot.
        slot: u32,
        /// True if another page was evicted to make room.
        evicted: bool,
    },
    /// The page is already cached (possibly still being filled).
    Existing(u32),
    /// No slot could be freed: every page is dirty, locked or pinned.
    Full,
}

/// Outcome of a pin or invalidate attempt on a busy page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Claim {
    /// Done: for `pin`, the page is pinned in that slot; for `invalidate`,
    /// the page was dropped (`true` if it was dirty).
    Done(u32, bool),
    /// The page is not cached.
    Miss,
    /// The page is locked, under writeback or pinned: wait and retry.
    Busy(u32),
}

/// Which dirty pages a writeback claim takes, by whether a data record
/// holds their bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Logged {
    Either,
    Yes,
    No,
}

/// The page cache shared by every file of one mounted filesystem.
#[derive(Debug)]
pub struct PageCache {
    slots: Vec<Slot>,
    free: Mutex<Vec<u32>>,
    hand: AtomicUsize,
    dirty: AtomicU64,
    waits: WaitQueues,
}

impl PageCache {
    /// A cache of `capacity` pages, in frames `0..capacity`.
    pub fn new(capacity: u32) -> PageCache {
        PageCache {
            slots: (0..capacity).map(|_| Slot::default()).collect(),
            free: Mutex::new((0..capacity).rev().collect()),
            hand: AtomicUsize::new(0),
            dirty: AtomicU64::new(0),
            waits: WaitQueues::new(256),
        }
    }

    /// Number of slots.
    pub fn capacity(&self) -> u32 {
        self.slots.len() as u32
    }

    /// Dirty pages in the whole cache.
    pub fn dirty_pages(&self) -> u64 {
        self.dirty.load(Ordering::Relaxed)
    }

    /// Bytes of bookkeeping per cached page: the slot plus its index entry.
    pub const fn metadata_bytes_per_page() -> usize {
        core::mem::size_of::<Slot>() + core::mem::size_of::<u64>()
    }

    fn slot(&self, s: u32) -> Option<&Slot> {
        self.slots.get(s as usize)
    }

    /// Wakes the slot's waiters if `prev` says there were any.
    fn wake_if_waiting(&self, s: u32, prev: u64) {
        if prev & WAITERS != 0 {
            if let Some(slot) = self.slot(s) {
                slot.state.fetch_and(!WAITERS, Ordering::AcqRel);
            }
            self.waits.get(u64::from(s)).wake_all();
        }
    }

    /// Applies `f` to the slot's state with a CAS loop; returns the state
    /// before the change, or `None` if `f` declined.
    fn update(&self, s: u32, mut f: impl FnMut(u64) -> Option<u64>) -> Option<u64> {
        let slot = self.slot(s)?;
        slot.state
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, &mut f)
            .ok()
    }

    /// The slot the index names for `(ino, index)` and its state, if it
    /// really holds that page. The key is checked after the state is read,
    /// and keys change only after a version bump, so a later CAS that
    /// requires the same version also proves the identity.
    fn find(&self, map: &Radix, ino: InodeId, index: PageIndex) -> Option<(u32, &Slot, u64)> {
        let s = map.get(index)?;
        let slot = self.slot(s)?;
        let st = slot.state.load(Ordering::Acquire);
        slot.holds(ino, index).then_some((s, slot, st))
    }

    /// Copies `dst.len()` bytes of page `(ino, index)` from `offset` without
    /// taking any lock, trying again while the slot changes under the copy.
    #[inline]
    pub fn read<A: FrameArena>(
        &self,
        arena: &A,
        map: &Radix,
        ino: InodeId,
        index: PageIndex,
        offset: usize,
        dst: &mut [u8],
    ) -> Lookup {
        loop {
            if let Some(found) = self.try_read(arena, map, ino, index, offset, dst) {
                return found;
            }
        }
    }

    /// One attempt of [`read`](Self::read): `None` if the slot was locked
    /// or changed identity during the copy (the bytes copied may be
    /// another page's; try again). Always inlined and without a loop: a
    /// cached read's lookup is a few dozen instructions, a call would add
    /// a third of that again, and a retry loop around it lets the
    /// compiler hoist work for every lookup out of it, the rare ones'
    /// included.
    #[inline(always)]
    pub fn try_read<A: FrameArena>(
        &self,
        arena: &A,
        map: &Radix,
        ino: InodeId,
        index: PageIndex,
        offset: usize,
        dst: &mut [u8],
    ) -> Option<Lookup> {
        let Some(s) = map.get(index) else {
            return Some(Lookup::Miss);
        };
        let Some(slot) = self.slot(s) else {
            return Some(Lookup::Miss);
        };
        let before = slot.state.load(Ordering::Acquire);
        if !slot.holds(ino, index) {
            return Some(Lookup::Miss);
        }
        if before & LOCKED != 0 {
            return Some(Lookup::Busy(s));
        }
        if before & UPTODATE == 0 {
            return Some(Lookup::Miss);
        }
        if let Err(e) = arena.read(FrameId(s), offset, dst) {
            return Some(Lookup::Failed(e));
        }
        fence(Ordering::Acquire);
        let after = slot.state.load(Ordering::Relaxed);
        // `before` was not locked, so a version bump or a lock taken since
        // shows as a differing bit in one mask.
        if (after ^ before) & (VERSION_MASK | LOCKED) != 0 {
            #[cfg(pollfs_mutants)]
            if crate::mutants::active(crate::mutants::Mutant::ReadSkipsVersionCheck) {
                return Some(Lookup::Hit);
            }
            return None;
        }
        if before & REFERENCED == 0 {
            slot.state.fetch_or(REFERENCED, Ordering::Relaxed);
        }
        Some(Lookup::Hit)
    }

    /// Waits until slot `s` is neither locked nor under writeback nor
    /// pinned, or no longer holds the page it held.
    pub async fn wait_idle(&self, s: u32) {
        self.wait_clear(s, LOCKED | WRITEBACK | PIN_MASK).await
    }

    /// Waits until none of the `busy` bits are set in slot `s`, or the slot
    /// no longer holds the page it held.
    pub async fn wait_clear(&self, s: u32, busy: u64) {
        let Some(slot) = self.slot(s) else { return };
        let seen = slot.state.load(Ordering::Acquire);
        let idle = || {
            let st = slot.state.load(Ordering::Acquire);
            (st & busy == 0 || version(st) != version(seen)).then_some(())
        };
        let queue = self.waits.get(u64::from(s));
        queue
            .wait_until(|| {
                if idle().is_some() {
                    return Some(());
                }
                // Announce the waiter on every check: a wake-up may have
                // cleared the flag for another waiter's sake.
                slot.state.fetch_or(WAITERS, Ordering::AcqRel);
                idle()
            })
            .await;
    }

    /// Takes a slot for a new page: a free one, or a CLOCK victim. The slot
    /// comes back locked, with a new version and no key.
    fn take_slot(&self) -> Option<(u32, bool)> {
        let free = self.free.lock().pop();
        if let Some(s) = free {
            let prev = self.update(s, |st| Some(next_version(st, LOCKED) | (st & PIN_MASK)))?;
            self.wake_if_waiting(s, prev);
            return Some((s, false));
        }
        let n = self.slots.len();
        for _ in 0..2 * n {
            let s = (self.hand.fetch_add(1, Ordering::Relaxed) % n) as u32;
            let Some(slot) = self.slot(s) else { continue };
            let st = slot.state.load(Ordering::Acquire);
            if st & REFERENCED != 0 {
                slot.state.fetch_and(!REFERENCED, Ordering::Relaxed);
                continue;
            }
            if self.try_evict(s, st) {
                return Some((s, true));
            }
        }
        None
    }

    /// Takes slot `s` from its page if its state is still `seen` and the
    /// page may be evicted: the slot comes back locked, with a new version
    /// and no key.
    fn try_evict(&self, s: u32, seen: u64) -> bool {
        let Some(slot) = self.slot(s) else {
            return false;
        };
        let taken = evictable(seen)
            && slot
                .state
                .compare_exchange(
                    seen,
                    next_version(seen, LOCKED),
                    Ordering::AcqRel,
                    Ordering::Acquire,
                )
                .is_ok();
        if taken {
            slot.ino.store(0, Ordering::Release);
            self.wake_if_waiting(s, seen);
        }
        taken
    }

    /// Evicts every clean, unpinned, idle page; returns how many. Dirty
    /// pages and pages under I/O stay.
    pub fn evict_clean(&self) -> u64 {
        let mut n = 0;
        for (i, slot) in self.slots.iter().enumerate() {
            let s = i as u32;
            if self.try_evict(s, slot.state.load(Ordering::Acquire)) {
                self.release_slot(s);
                n += 1;
            }
        }
        n
    }

    /// Takes `n` slots for a caller's own transfers (direct I/O): each comes
    /// back locked and holding no page, so nothing else touches its frame
    /// until [`give_back`](Self::give_back). All or none: `None` if `n`
    /// could not be taken now (the caller waits for room holding none).
    pub fn borrow(&self, n: usize) -> Option<Vec<u32>> {
        let mut slots = Vec::with_capacity(n);
        while slots.len() < n {
            match self.take_slot() {
                Some((s, _)) => slots.push(s),
                None => {
                    self.give_back(&slots);
                    return None;
                }
            }
        }
        Some(slots)
    }

    /// Returns slots taken by [`borrow`](Self::borrow).
    pub fn give_back(&self, slots: &[u32]) {
        for &s in slots {
            self.release_slot(s);
        }
    }

    /// Returns a locked slot that holds nothing to the free list.
    fn release_slot(&self, s: u32) {
        if let Some(slot) = self.slot(s) {
            slot.ino.store(0, Ordering::Release);
            if let Some(prev) = self.update(s, |st| Some(next_version(st, 0) | (st & PIN_MASK))) {
                self.wake_if_waiting(s, prev);
            }
            self.free.lock().push(s);
        }
    }

    /// Makes page `(ino, index)` present: finds it, or inserts it in a new
    /// locked slot for the caller to fill.
    pub fn insert(&self, map: &Radix, ino: InodeId, index: PageIndex) -> Insert {
        loop {
            // Decide from one look at the entry, and replace exactly that
            // entry: if it changed meanwhile the CAS fails and we look again.
            let current = map.entry(index);
            if let Some(s) = current.slot() {
                if let Some(slot) = self.slot(s) {
                    let st = slot.state.load(Ordering::Acquire);
                    if slot.holds(ino, index) && st & (LOCKED | UPTODATE) != 0 {
                        return Insert::Existing(s);
                    }
                }
            }
            let Some((s, evicted)) = self.take_slot() else {
                return Insert::Full;
            };
            let Some(slot) = self.slot(s) else {
                return Insert::Full;
            };
            slot.index.store(index.0, Ordering::Release);
            slot.ino.store(ino.0, Ordering::Release);
            if map.replace(index, current, Some(s)) {
                return Insert::New { slot: s, evicted };
            }
            self.release_slot(s);
        }
    }

    /// Ends the fill of a slot returned by [`insert`](Self::insert). On
    /// success the page becomes uptodate (and dirty if `dirty`; returns true
    /// then); on failure it is dropped from the cache.
    pub fn finish_fill(
        &self,
        map: &Radix,
        index: PageIndex,
        s: u32,
        ok: bool,
        dirty: bool,
    ) -> bool {
        if !ok {
            map.remove(index, s);
            self.release_slot(s);
            return false;
        }
        let flags = UPTODATE | REFERENCED | if dirty { DIRTY } else { 0 };
        if let Some(prev) = self.update(s, |st| Some((st & !LOCKED & !WAITERS) | flags)) {
            if dirty {
                self.dirty.fetch_add(1, Ordering::Relaxed);
            }
            self.wake_if_waiting(s, prev);
        }
        dirty
    }

    /// The page index slot `s` holds (meaningful while the caller holds the
    /// page pinned, locked or under writeback).
    pub fn index_of(&self, s: u32) -> PageIndex {
        PageIndex(
            self.slot(s)
                .map_or(0, |slot| slot.index.load(Ordering::Acquire)),
        )
    }

    /// Records that the page in slot `s` (pinned or locked by the caller)
    /// has a device block.
    pub fn mark_mapped(&self, s: u32) {
        if let Some(slot) = self.slot(s) {
            slot.state.fetch_or(MAPPED, Ordering::AcqRel);
        }
    }

    /// Pins cached page `(ino, index)` so a writer can copy into it. The
    /// flag in `Claim::Done` says whether the page is known to be mapped.
    pub fn pin(&self, map: &Radix, ino: InodeId, index: PageIndex) -> Claim {
        let Some(s) = map.get(index) else {
            return Claim::Miss;
        };
        let Some(slot) = self.slot(s) else {
            return Claim::Miss;
        };
        let prev = slot.state.fetch_add(PIN, Ordering::AcqRel);
        let mine = slot.holds(ino, index);
        if mine && prev & (LOCKED | UPTODATE) == UPTODATE {
            return Claim::Done(s, prev & MAPPED != 0);
        }
        self.unpin(s, false);
        if mine && prev & LOCKED != 0 {
            Claim::Busy(s)
        } else {
            Claim::Miss
        }
    }

    /// Drops a pin, first marking the page dirty if `dirty`. Returns true if
    /// the page became dirty.
    pub fn unpin(&self, s: u32, dirty: bool) -> bool {
        let Some(slot) = self.slot(s) else {
            return false;
        };
        let mut newly_dirty = false;
        if dirty {
            // New bytes: no data record holds them.
            let prev = slot
                .state
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |st| {
                    Some((st | DIRTY) & !LOGGED)
                })
                .unwrap_or_else(|st| st);
            newly_dirty = prev & DIRTY == 0;
            if newly_dirty {
                self.dirty.fetch_add(1, Ordering::Relaxed);
            }
        }
        let prev = slot.state.fetch_sub(PIN, Ordering::AcqRel);
        self.wake_if_waiting(s, prev);
        newly_dirty
    }

    /// Claims a dirty page for writeback: clears dirty, sets writeback.
    /// `Busy` if the page is dirty but locked or still under an earlier
    /// writeback; `Miss` if it is not cached or not dirty.
    pub fn begin_writeback(&self, map: &Radix, ino: InodeId, index: PageIndex) -> Claim {
        self.claim_dirty(map, ino, index, Logged::Either)
    }

    /// Claims a dirty page whose bytes no data record holds yet, for a
    /// sync to log them (as [`begin_writeback`](Self::begin_writeback);
    /// `Miss` also for a logged page). End with
    /// [`end_logged`](Self::end_logged).
    pub fn begin_log(&self, map: &Radix, ino: InodeId, index: PageIndex) -> Claim {
        self.claim_dirty(map, ino, index, Logged::No)
    }

    /// Claims a dirty page whose bytes a data record holds (logged), to
    /// write it home off the sync path (as
    /// [`begin_writeback`](Self::begin_writeback); `Miss` also for a page
    /// that is not logged, `Busy` for one locked or under writeback). End
    /// with [`end_writeback`](Self::end_writeback).
    pub fn begin_home(&self, map: &Radix, ino: InodeId, index: PageIndex) -> Claim {
        self.claim_dirty(map, ino, index, Logged::Yes)
    }

    /// Ends a claim of [`begin_log`](Self::begin_log) once the page's
    /// data record is staged: the page stays dirty (its block is not
    /// written), logged unless a writer changed it meanwhile, and in the
    /// log. Returns true if the page became dirty again (as counted).
    pub fn end_logged(&self, s: u32) -> bool {
        let Some(prev) = self.update(s, |st| {
            let logged = if st & DIRTY == 0 { LOGGED } else { 0 };
            Some((st & !WRITEBACK & !WAITERS) | DIRTY | INLOG | logged)
        }) else {
            return false;
        };
        let newly = prev & DIRTY == 0;
        if newly {
            self.dirty.fetch_add(1, Ordering::Relaxed);
        }
        self.wake_if_waiting(s, prev);
        newly
    }

    /// True if the bytes of the page in slot `s` are in a data record.
    pub fn logged(&self, s: u32) -> bool {
        self.slot(s)
            .is_some_and(|slot| slot.state.load(Ordering::Acquire) & LOGGED != 0)
    }

    /// True if someone waits for slot `s` to be released (see
    /// [`PageCache::wait_clear`]).
    pub fn has_waiters(&self, s: u32) -> bool {
        self.slot(s)
            .is_some_and(|slot| slot.state.load(Ordering::Acquire) & WAITERS != 0)
    }

    /// True if a data record for the page in slot `s` is staged or live
    /// (the caller holds the page under writeback).
    pub fn in_log(&self, s: u32) -> bool {
        self.slot(s)
            .is_some_and(|slot| slot.state.load(Ordering::Acquire) & INLOG != 0)
    }

    fn claim_dirty(&self, map: &Radix, ino: InodeId, index: PageIndex, want: Logged) -> Claim {
        let Some((s, _, seen)) = self.find(map, ino, index) else {
            return Claim::Miss;
        };
        let mut busy = false;
        let claimed = self.update(s, |st| {
            busy = false;
            if version(st) != version(seen)
                || st & (DIRTY | UPTODATE) != DIRTY | UPTODATE
                || (want == Logged::No && st & LOGGED != 0)
                || (want == Logged::Yes && st & LOGGED == 0)
            {
                return None;
            }
            if st & (LOCKED | WRITEBACK) != 0 {
                busy = true;
                return None;
            }
            Some((st & !DIRTY) | WRITEBACK)
        });
        match claimed {
            Some(_) => {
                self.dirty.fetch_sub(1, Ordering::Relaxed);
                Claim::Done(s, true)
            }
            None if busy => Claim::Busy(s),
            None => Claim::Miss,
        }
    }

    /// Ends writeback of slot `s`. On failure the page is dirty again (and
    /// true is returned), so the data is never dropped. On success its
    /// block holds its bytes: it is no longer logged or in the log (the
    /// caller logged a home record if it was).
    pub fn end_writeback(&self, s: u32, ok: bool) -> bool {
        let redirty = !ok;
        if let Some(prev) = self.update(s, |st| {
            let st = st & !WRITEBACK & !WAITERS;
            Some(if redirty {
                st | DIRTY
            } else {
                st & !LOGGED & !INLOG
            })
        }) {
            if redirty && prev & DIRTY == 0 {
                self.dirty.fetch_add(1, Ordering::Relaxed);
            }
            self.wake_if_waiting(s, prev);
        }
        redirty
    }

    /// Ends a successful writeback of slot `s` but keeps the page pinned
    /// (so it stays cached, clean) until [`PageCache::release_kept`]: a sync
    /// keeps the pages it wrote until its flush says whether they are
    /// durable. Pinning instead of holding the writeback bit lets another
    /// writeback of the page (dirtied again meanwhile) start at once: two
    /// syncs of one file never wait for each other's pages.
    pub fn end_writeback_kept(&self, s: u32) {
        if let Some(prev) = self.update(s, |st| {
            Some((st & !WRITEBACK & !WAITERS & !LOGGED & !INLOG) + PIN)
        }) {
            self.wake_if_waiting(s, prev);
        }
    }

    /// Drops the pin of a page kept by [`PageCache::end_writeback_kept`].
    /// If its flush failed (`durable` false) the page is dirty again, so the
    /// data is written again and never dropped; returns true then if it was
    /// clean.
    pub fn release_kept(&self, s: u32, durable: bool) -> bool {
        self.unpin(s, !durable)
    }

    /// True if at least `n` slots are free or could be evicted now.
    pub fn has_room(&self, n: usize) -> bool {
        let free = self.free.lock().len();
        free >= n
            || self
                .slots
                .iter()
                .filter(|slot| evictable(slot.state.load(Ordering::Acquire)))
                .take(n - free)
                .count()
                >= n - free
    }

    /// A slot that is locked, under writeback or pinned, looking from the
    /// CLOCK hand: when no slot can be taken, waiting for one of these to
    /// go idle is how a caller waits for room.
    pub fn busy_slot(&self) -> Option<u32> {
        let n = self.slots.len();
        let start = self.hand.load(Ordering::Relaxed);
        (0..n).map(|i| ((start + i) % n) as u32).find(|&s| {
            self.slot(s).is_some_and(|slot| {
                slot.state.load(Ordering::Acquire) & (LOCKED | WRITEBACK | PIN_MASK) != 0
            })
        })
    }

    /// Drops page `(ino, index)` from the cache. The caller must hold the
    /// invalidate gate over the page so it cannot be re-instantiated.
    pub fn invalidate(&self, map: &Radix, ino: InodeId, index: PageIndex) -> Claim {
        let Some((s, slot, st)) = self.find(map, ino, index) else {
            return Claim::Miss;
        };
        if st & (LOCKED | WRITEBACK | PIN_MASK) != 0 {
            return Claim::Busy(s);
        }
        if slot
            .state
            .compare_exchange(
                st,
                next_version(st, LOCKED),
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_err()
        {
            return Claim::Busy(s);
        }
        let was_dirty = st & DIRTY != 0;
        if was_dirty {
            self.dirty.fetch_sub(1, Ordering::Relaxed);
        }
        map.remove(index, s);
        self.wake_if_waiting(s, st);
        self.release_slot(s);
        Claim::Done(s, was_dirty)
    }

    /// Calls `f(index, slot, dirty)` for every page of `ino` cached in
    /// `[start, end)`, in index order.
    pub fn scan(
        &self,
        map: &Radix,
        ino: InodeId,
        start: PageIndex,
        end: PageIndex,
        mut f: impl FnMut(PageIndex, u32, bool),
    ) {
        map.scan(start, end, |index, s| {
            if let Some(slot) = self.slot(s) {
                let st = slot.state.load(Ordering::Acquire);
                if slot.holds(ino, index) && st & (LOCKED | UPTODATE) != 0 {
                    f(index, s, st & DIRTY != 0);
                }
            }
        });
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    const INO: InodeId = InodeId(7);

    /// Inserts page `index` and finishes its fill; returns its slot.
    fn cached(cache: &PageCache, map: &Radix, index: u64, dirty: bool) -> u32 {
        let Insert::New { slot, .. } = cache.insert(map, INO, PageIndex(index)) else {
            panic!("page {index} not inserted");
        };
        cache.finish_fill(map, PageIndex(index), slot, true, dirty);
        slot
    }

    #[test]
    fn a_filled_page_is_found_pinned_and_counted_dirty_once() {
        let cache = PageCache::new(4);
        let map = Radix::new();
        assert_eq!(cache.pin(&map, INO, PageIndex(0)), Claim::Miss);
        let s = cached(&cache, &map, 0, false);
        assert_eq!(cache.insert(&map, INO, PageIndex(0)), Insert::Existing(s));
        assert_eq!(cache.index_of(s), PageIndex(0));
        assert_eq!(cache.pin(&map, INO, PageIndex(0)), Claim::Done(s, false));
        assert!(cache.unpin(s, true), "newly dirty");
        assert_eq!(cache.pin(&map, INO, PageIndex(0)), Claim::Done(s, false));
        assert!(!cache.unpin(s, true), "dirty already");
        assert_eq!(cache.dirty_pages(), 1);
        // Another file's page at the same index is not this one.
        assert_eq!(cache.pin(&map, InodeId(8), PageIndex(0)), Claim::Miss);
        cache.mark_mapped(s);
        assert_eq!(cache.pin(&map, INO, PageIndex(0)), Claim::Done(s, true));
        cache.unpin(s, false);
    }

    #[test]
    fn a_page_being_filled_is_busy_and_a_failed_fill_leaves_nothing() {
        let cache = PageCache::new(2);
        let map = Radix::new();
        let Insert::New { slot, .. } = cache.insert(&map, INO, PageIndex(3)) else {
            panic!("not inserted");
        };
        assert_eq!(cache.pin(&map, INO, PageIndex(3)), Claim::Busy(slot));
        assert_eq!(cache.invalidate(&map, INO, PageIndex(3)), Claim::Busy(slot));
        assert!(!cache.finish_fill(&map, PageIndex(3), slot, false, true));
        assert_eq!(cache.pin(&map, INO, PageIndex(3)), Claim::Miss);
        assert_eq!(cache.dirty_pages(), 0);
        assert!(cache.has_room(2), "the slot went back");
    }

    #[test]
    fn writeback_claims_dirty_pages_once_and_a_failure_redirties() {
        let cache = PageCache::new(4);
        let map = Radix::new();
        let s = cached(&cache, &map, 1, true);
        assert_eq!(cache.dirty_pages(), 1);
        assert_eq!(
            cache.begin_writeback(&map, INO, PageIndex(1)),
            Claim::Done(s, true)
        );
        assert_eq!(cache.dirty_pages(), 0);
        // Under writeback: not claimed twice, not dropped.
        assert_eq!(cache.begin_writeback(&map, INO, PageIndex(1)), Claim::Miss);
        assert_eq!(cache.invalidate(&map, INO, PageIndex(1)), Claim::Busy(s));
        assert!(cache.end_writeback(s, false), "a failed write redirties");
        assert_eq!(cache.dirty_pages(), 1);
        assert_eq!(
            cache.begin_writeback(&map, INO, PageIndex(1)),
            Claim::Done(s, true)
        );
        assert!(!cache.end_writeback(s, true));
        assert_eq!(cache.dirty_pages(), 0);
        assert_eq!(
            cache.begin_writeback(&map, INO, PageIndex(1)),
            Claim::Miss,
            "clean"
        );
    }

    #[test]
    fn a_kept_page_stays_pinned_until_its_commit_says_durable_or_not() {
        let cache = PageCache::new(2);
        let map = Radix::new();
        let s = cached(&cache, &map, 0, true);
        assert_eq!(
            cache.begin_writeback(&map, INO, PageIndex(0)),
            Claim::Done(s, true)
        );
        cache.end_writeback_kept(s);
        assert_eq!(cache.invalidate(&map, INO, PageIndex(0)), Claim::Busy(s));
        assert!(cache.release_kept(s, false), "not durable: dirty again");
        assert_eq!(cache.dirty_pages(), 1);
        assert_eq!(
            cache.begin_writeback(&map, INO, PageIndex(0)),
            Claim::Done(s, true)
        );
        cache.end_writeback_kept(s);
        assert!(!cache.release_kept(s, true));
        assert_eq!(cache.dirty_pages(), 0);
        assert_eq!(
            cache.invalidate(&map, INO, PageIndex(0)),
            Claim::Done(s, false)
        );
    }

    #[test]
    fn logged_pages_are_left_to_writeback_of_logged_pages() {
        let cache = PageCache::new(2);
        let map = Radix::new();
        let s = cached(&cache, &map, 0, true);
        assert_eq!(
            cache.begin_log(&map, INO, PageIndex(0)),
            Claim::Done(s, true)
        );
        // Logged: dirty still (its block is not written), and in the log.
        assert!(cache.end_logged(s));
        assert!(cache.logged(s) && cache.in_log(s));
        assert_eq!(cache.begin_log(&map, INO, PageIndex(0)), Claim::Miss);
        // Written home off the sync path: claimed while logged...
        assert_eq!(
            cache.begin_home(&map, INO, PageIndex(0)),
            Claim::Done(s, true)
        );
        assert_eq!(cache.begin_home(&map, INO, PageIndex(0)), Claim::Miss);
        assert!(cache.end_writeback(s, false), "a failed write: dirty again");
        // ...and not once a new write makes it unlogged (its bytes
        // changed), still in the log.
        cache.pin(&map, INO, PageIndex(0));
        assert!(!cache.unpin(s, true));
        assert!(!cache.logged(s) && cache.in_log(s));
        assert_eq!(cache.begin_home(&map, INO, PageIndex(0)), Claim::Miss);
        assert_eq!(
            cache.begin_writeback(&map, INO, PageIndex(0)),
            Claim::Done(s, true)
        );
        assert!(!cache.end_writeback(s, true));
        assert!(!cache.in_log(s), "its block holds it now");
    }

    #[test]
    fn eviction_takes_clean_pages_only_and_a_full_cache_says_so() {
        let cache = PageCache::new(2);
        let map = Radix::new();
        let dirty = cached(&cache, &map, 0, true);
        let clean = cached(&cache, &map, 1, false);
        // The clean page is evicted for a new one; then nothing can go.
        let Insert::New { slot, evicted } = cache.insert(&map, INO, PageIndex(2)) else {
            panic!("no room made");
        };
        assert!(evicted);
        assert_eq!(slot, clean);
        cache.finish_fill(&map, PageIndex(2), slot, true, true);
        assert_eq!(cache.insert(&map, INO, PageIndex(3)), Insert::Full);
        assert!(!cache.has_room(1));
        assert_eq!(cache.evict_clean(), 0);
        assert_eq!(cache.borrow(1), None);
        assert_eq!(
            cache.invalidate(&map, INO, PageIndex(0)),
            Claim::Done(dirty, true)
        );
        assert_eq!(cache.dirty_pages(), 1);
        let lent = cache.borrow(1).unwrap();
        assert_eq!(lent, [dirty]);
        assert_eq!(cache.insert(&map, INO, PageIndex(3)), Insert::Full);
        cache.give_back(&lent);
        assert!(cache.has_room(1));
    }

    #[test]
    fn scan_reports_the_files_pages_in_range_with_their_dirt() {
        let cache = PageCache::new(8);
        let map = Radix::new();
        for (i, dirty) in [(0, false), (2, true), (5, true), (9, false)] {
            cached(&cache, &map, i, dirty);
        }
        let mut seen = Vec::new();
        cache.scan(&map, INO, PageIndex(1), PageIndex(9), |i, _, d| {
            seen.push((i.0, d))
        });
        assert_eq!(seen, [(2, true), (5, true)]);
        let mut none = 0;
        cache.scan(&map, InodeId(8), PageIndex(0), PageIndex(10), |_, _, _| {
            none += 1
        });
        assert_eq!(none, 0, "another file's pages");
    }
}
