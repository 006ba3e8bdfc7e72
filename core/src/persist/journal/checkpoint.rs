//! Checkpoint writing, a second `impl Log` beside the log's: when one is
//! due, the view of the durable metadata it is written from, the inodes
//! that changed written into the metadata index (copy-on-write pages in
//! free data blocks) with any records it carries as a chain of frames,
//! the flush, and the FUA superblock write that names the new root and
//! moves the log's head; only then do the pages it replaced become free.
//! Also the room checkpoints take: the blocks they occupy and the free
//! blocks held back for the next one.

use alloc::collections::BTreeSet;
use alloc::vec::Vec;
use core::sync::atomic::Ordering;

use super::{CommitEnv, Log, Written};
use crate::error::{Result, SpaceError};
use crate::lock::{Held, Mode};
use crate::persist::format::{
    Frame, Location, Superblock, CKPT_FRAME_MAX_BLOCKS, FRAME_CKPT, MAX_SEQUENCE,
};
use crate::persist::index::{page::PAYLOAD, Commit, Index, PageDamage, Root};
use crate::persist::pages::{self, Applied, Changes, CACHE_PAGES};
use crate::persist::recover::{first_location, Recovered};
use crate::units::{ByteRange, PAGE_SIZE_U64};

/// What a checkpoint writes, taken under the journal's lock
/// ([`Log::take_view`]).
struct View {
    /// The inodes that changed since the last view, as items.
    changes: Changes,
    /// The last sequence number the image covers.
    lsn: u64,
    /// The log's append position when it was taken: the new head.
    pos: u64,
    generation: u64,
    /// A failed log write's sequence number is covered (`lsn`).
    skip: bool,
}

/// What a checkpoint took for its writing: the blocks to give back if it
/// does not land, to free the old ones for if it does.
struct Taken {
    /// The changes applied: live pages' copies, and the old copies.
    applied: Applied,
    /// The carried chain.
    carry: Vec<(u64, u64)>,
    /// The blocks of the changed pages.
    pages: Vec<u64>,
}

impl Taken {
    /// Every block it took: live pages' copies, changed pages, the
    /// carried chain.
    fn blocks(&self) -> impl Iterator<Item = u64> + '_ {
        self.applied
            .copies
            .iter()
            .map(|c| c.0)
            .chain(self.pages.iter().copied())
            .chain(self.carry.iter().flat_map(|&(b, n)| b..b + n))
    }

    /// The same, as runs in block order.
    fn runs(&self) -> Vec<(u64, u64)> {
        let mut blocks: Vec<u64> = self.blocks().collect();
        blocks.sort_unstable();
        pages::runs(blocks)
    }
}

/// The checkpoint the superblock names.
#[derive(Clone, Debug)]
pub(super) struct Checkpoint {
    /// The index's root.
    root: Root,
    /// Every block it occupies: the index's pages, live pages' copies,
    /// the carried records' chain.
    blocks: BTreeSet<u64>,
    /// The carried records' chain (freed by the next checkpoint).
    carry: Vec<(u64, u64)>,
}

impl Checkpoint {
    /// The checkpoint recovery found: the superblock's root, with the
    /// blocks of the chain recovery read (the index's pages, live pages'
    /// copies, the carried records' chain).
    pub(super) fn recovered(rec: &Recovered) -> Checkpoint {
        Checkpoint {
            root: rec.superblock.root,
            blocks: rec
                .chain
                .iter()
                .flat_map(|&(b, n)| b..b.saturating_add(n))
                .collect(),
            carry: rec.carry.clone(),
        }
    }

    /// How many blocks it occupies.
    pub(super) fn block_count(&self) -> u64 {
        self.blocks.len() as u64
    }
}

impl Log {
    /// Runs of blocks the journal's checkpoints occupy.
    pub(crate) fn meta_runs(&self) -> Vec<(u64, u64)> {
        let st = self.st.lock();
        let mut runs = pages::runs(st.ckpt.blocks.iter().copied());
        runs.extend_from_slice(&st.limbo);
        runs
    }

    /// Free blocks data may not take: room for a checkpoint of the durable
    /// image, every record queued (a commit whose records do not fit a log
    /// write folds them all in after the image), and `more_bytes` (what
    /// may be staged yet: each live inode's record).
    ///
    /// Room for one checkpoint is not enough: the chain it writes takes
    /// the room, and only the chain it replaces comes back. If the image
    /// grew since that one was written, what comes back is less than the
    /// checkpoint after it will need, and an unmount of a full device
    /// after a remount failed for want of it. So the reserve is the next
    /// chain plus what the chain after it needs beyond the one now on
    /// disk: after a checkpoint of `n` blocks replaces one of `c`, the
    /// free blocks are at least `2n - c - n + c = n`, the room for the
    /// next.
    ///
    /// The next checkpoint writes at most every page of the index again
    /// (the chain, if every leaf changed) or a tree of the whole view:
    /// the image's bytes as items (keys and offsets cost about what a
    /// record's header does) in pages at least half full, as splits leave
    /// them (a tree made fresh by a repair fills its pages), the branches
    /// above them, and the queued records carried in frames of one block
    /// each if free space is that fragmented.
    pub(super) fn reserve(&self, more_bytes: u64) -> u64 {
        let image = self.durable_image_len() + more_bytes;
        let leaves = (image * 2).div_ceil(PAYLOAD as u64);
        let chain = self.chain_blocks.load(Ordering::Acquire);
        let carried = self
            .queued
            .load(Ordering::Acquire)
            .div_ceil(Frame::capacity(1) as u64);
        let next = leaves.max(chain) + leaves / 8 + carried + 4;
        next + next.saturating_sub(chain)
    }

    /// True if more than half the log is in use: time for a checkpoint,
    /// which frees the log up to the append position.
    pub(crate) fn checkpoint_due(&self) -> bool {
        self.log_used() * 2 > self.layout.log_blocks
    }

    /// Says whether a background worker checkpoints when
    /// [`Log::checkpoint_due`] (see [`Log::checkpoint_background`]).
    pub(crate) fn set_background(&self, on: bool) {
        self.background.store(on, Ordering::Relaxed);
    }

    /// After a commit: checkpoints when more than half the log is in use,
    /// or, with a background worker that does that, only past three
    /// quarters (the worker fell behind).
    pub(super) async fn checkpoint_if_needed<E: CommitEnv>(&self, env: &E) -> Result<()> {
        let needed = if self.background.load(Ordering::Relaxed) {
            self.log_used() * 4 > self.layout.log_blocks * 3
        } else {
            self.checkpoint_due()
        };
        if needed {
            self.checkpoint(env, &[]).await?;
        }
        Ok(())
    }

    /// Writes a checkpoint now (for unmount, so the next mount replays
    /// nothing).
    pub(crate) async fn checkpoint_now<E: CommitEnv>(&self, env: &E) -> Result<()> {
        let held = Held::new();
        let _leader = self
            .commit_lock
            .lock(ByteRange::from(0), Mode::Exclusive, &held)
            .await;
        self.checkpoint(env, &[]).await
    }

    /// A checkpoint off the sync path, if [`Log::checkpoint_due`]: the
    /// durable view is taken under the commit lock, between two commits,
    /// and written with only the checkpoint lock held, while commits go
    /// on appending to the log after the position it was taken at. The
    /// superblock then moves the log's head to that position: every
    /// record before it is in the image, every one after it is replayed.
    /// Until the superblock lands, the old checkpoint and the whole log
    /// stay valid, and appends never pass the old head. `env` writes
    /// through frames of its own: commits use theirs meanwhile. True if
    /// it wrote one.
    pub(crate) async fn checkpoint_background<E: CommitEnv>(&self, env: &E) -> Result<bool> {
        if !self.checkpoint_due() {
            return Ok(false);
        }
        let held = Held::new();
        let leader = self
            .commit_lock
            .lock(ByteRange::from(0), Mode::Exclusive, &held)
            .await;
        let ckpt_held = Held::new();
        let _ckpt = self
            .ckpt_lock
            .lock(ByteRange::from(0), Mode::Exclusive, &ckpt_held)
            .await;
        // A commit may have checkpointed while this waited.
        if !self.checkpoint_due() {
            return Ok(false);
        }
        let view = self.take_view()?;
        drop(leader);
        // Commits queued behind the view go first: on a reactor that
        // drives this step and the syncs on one thread, too.
        crate::sync::yield_now().await;
        self.write_checkpoint(env, view, &[]).await?;
        Ok(true)
    }

    /// Writes a checkpoint with `extra` (encoded records being made
    /// durable by this checkpoint) folded in. The caller holds the commit
    /// lock, so the view taken is everything durable.
    pub(super) async fn checkpoint<E: CommitEnv>(&self, env: &E, extra: &[u8]) -> Result<()> {
        // Waits for a background checkpoint, which holds no commit lock
        // while it writes.
        let held = Held::new();
        let _ckpt = self
            .ckpt_lock
            .lock(ByteRange::from(0), Mode::Exclusive, &held)
            .await;
        let view = self.take_view()?;
        self.write_checkpoint(env, view, extra).await
    }

    /// The durable view and where the log stands, for a checkpoint: with
    /// no commit running, the records up to `lsn` are all applied to the
    /// view and the log after them starts at `pos`. The data's pages are
    /// shared, not copied.
    fn take_view(&self) -> Result<View> {
        let mut st = self.st.lock();
        Ok(View {
            changes: Changes::take(&mut st.shadow, self.hash_key)?,
            // After a failed log write, the checkpoint covers its sequence
            // number too, so that write can never be replayed.
            lsn: if st.skip_lsn {
                st.next_lsn
            } else {
                st.next_lsn - 1
            },
            pos: st.pos,
            generation: st.generation + 1,
            skip: st.skip_lsn,
        })
    }

    /// Writes `view`'s changes into the index (and `extra`, records this
    /// checkpoint makes durable besides, as a carried chain); flushes;
    /// then points the superblock at the new root with the log's head
    /// moved to the view's position. Until that superblock write, the old
    /// root, every page under it and the log stay valid: new pages go to
    /// free blocks, and replaced ones are freed only after it. The caller
    /// holds the checkpoint lock.
    async fn write_checkpoint<E: CommitEnv>(
        &self,
        env: &E,
        view: View,
        extra: &[u8],
    ) -> Result<()> {
        let View {
            changes,
            lsn,
            pos,
            generation,
            skip,
        } = view;
        // A superblock the decoder would refuse is never written.
        if lsn > MAX_SEQUENCE || generation > MAX_SEQUENCE {
            self.st.lock().shadow.retouch(changes.inos());
            return Err(SpaceError::SequenceExhausted.into());
        }
        let started = env.now();
        let (mut index, old_root) = {
            let mut st = self.st.lock();
            let root = st.ckpt.root;
            let index = st
                .index
                .take()
                .unwrap_or_else(|| Index::open(self.uuid, root, CACHE_PAGES));
            (index, root)
        };
        let written = self
            .write_tree(env, &mut index, &changes, extra, lsn, generation)
            .await;
        let (taken, commit, bytes) = match written {
            Ok(done) => done,
            Err((e, taken)) => {
                // Nothing the old root reaches was touched: forget the
                // changed pages, give back the blocks, mark the inodes
                // for the next checkpoint.
                env.free_meta(&taken.runs());
                let mut st = self.st.lock();
                st.index = Some(Index::open(self.uuid, old_root, CACHE_PAGES));
                st.shadow.retouch(changes.inos());
                return Err(e);
            }
        };
        let sb = Superblock {
            uuid: self.uuid,
            generation,
            lba_size: self.lba_size,
            layout: self.layout,
            root: commit.root,
            carry: first_location(&taken.carry),
            carry_total: taken.carry.iter().map(|r| r.1).sum(),
            ckpt_lsn: lsn,
            log_head: pos,
            hash_key: self.hash_key,
        };
        if let Err(e) = env.write(generation % 2, &sb.encode(), true).await {
            // The superblock may or may not have landed: keep both trees.
            // The next checkpoint starts again from the old root, with the
            // same generation, into the same superblock slot.
            let mut st = self.st.lock();
            st.limbo.extend_from_slice(&taken.runs());
            st.index = Some(Index::open(self.uuid, old_root, CACHE_PAGES));
            st.shadow.retouch(changes.inos());
            return Err(e);
        }
        env.counted(Written::Checkpoint {
            bytes,
            nanos: env.now().0.saturating_sub(started.0),
        });
        index.trim();
        let old = {
            let mut st = self.st.lock();
            st.generation = generation;
            st.head = pos;
            if skip {
                st.next_lsn = lsn + 1;
                st.skip_lsn = false;
            }
            let mut gone: Vec<u64> = commit.freed;
            gone.extend_from_slice(&taken.applied.old_copies);
            let old_carry = core::mem::take(&mut st.ckpt.carry);
            gone.extend(old_carry.iter().flat_map(|&(b, n)| b..b + n));
            for b in &gone {
                st.ckpt.blocks.remove(b);
            }
            st.ckpt.blocks.extend(taken.blocks());
            st.ckpt.root = commit.root;
            st.ckpt.carry = taken.carry;
            st.index = Some(index);
            self.chain_blocks
                .store(st.ckpt.block_count(), Ordering::Release);
            gone.sort_unstable();
            let mut old = pages::runs(gone);
            old.append(&mut st.limbo);
            old
        };
        env.free_meta(&old);
        Ok(())
    }

    /// The writing of a checkpoint up to its superblock: the changes
    /// applied to `index`, the carried chain, the live pages' copies and
    /// the changed pages written, then a flush. On an error, what it took
    /// (for the caller to give back).
    async fn write_tree<E: CommitEnv>(
        &self,
        env: &E,
        index: &mut Index,
        changes: &Changes,
        extra: &[u8],
        lsn: u64,
        generation: u64,
    ) -> core::result::Result<(Taken, Commit, u64), (crate::error::Error, Taken)> {
        let mut applied = Applied::default();
        let mut hint = self.layout.data_start;
        let mut alloc_one = || {
            let got = env.alloc_meta(hint, 1).map(|(b, _)| b);
            if let Some(b) = got {
                hint = b + 1;
            }
            got
        };
        let taken = |applied, carry, pages| Taken {
            applied,
            carry,
            pages,
        };
        if let Err(e) = pages::apply(env, index, changes, &mut alloc_one, &mut applied).await {
            return Err((e, taken(applied, Vec::new(), Vec::new())));
        }
        let carry = if extra.is_empty() {
            Vec::new()
        } else {
            match self.alloc_chain(env, extra.len()) {
                Ok(runs) => runs,
                Err(e) => return Err((e, taken(applied, Vec::new(), Vec::new()))),
            }
        };
        let mut pages = Vec::with_capacity(index.dirty_pages());
        while pages.len() < index.dirty_pages() {
            let want = (index.dirty_pages() - pages.len()) as u64;
            match env.alloc_meta(hint, want.min(CKPT_FRAME_MAX_BLOCKS)) {
                Some((b, n)) => {
                    pages.extend(b..b + n);
                    hint = b + n;
                }
                None => {
                    let e = SpaceError::MetadataFull.into();
                    return Err((e, taken(applied, carry, pages)));
                }
            }
        }
        let commit = match index.commit(generation, &pages) {
            Ok(c) => c,
            Err(_) => {
                let e = crate::error::Error::Corrupt {
                    block: 0,
                    damage: crate::error::Damage::Index(crate::error::IndexDamage::Page(
                        PageDamage::Header,
                    )),
                };
                return Err((e, taken(applied, carry, pages)));
            }
        };
        match self
            .write_pages(env, &carry, extra, lsn, &applied, &commit)
            .await
        {
            Ok(bytes) => Ok((taken(applied, carry, pages), commit, bytes)),
            Err(e) => Err((e, taken(applied, carry, pages))),
        }
    }

    /// Writes the carried chain, the live pages' copies and the changed
    /// pages (children before parents), then flushes; the bytes written.
    async fn write_pages<E: CommitEnv>(
        &self,
        env: &E,
        carry: &[(u64, u64)],
        extra: &[u8],
        lsn: u64,
        applied: &Applied,
        commit: &Commit,
    ) -> Result<u64> {
        let mut bytes = 0u64;
        if !extra.is_empty() {
            self.write_chain(env, carry, extra, lsn).await?;
            bytes += carry.iter().map(|r| r.1).sum::<u64>() * PAGE_SIZE_U64;
        }
        for (block, page) in applied.copies.iter() {
            env.write(*block, page, false).await?;
            bytes += PAGE_SIZE_U64;
        }
        for (block, page) in &commit.writes {
            env.write(*block, page, false).await?;
            bytes += PAGE_SIZE_U64;
        }
        env.flush().await?;
        Ok(bytes)
    }

    /// Allocates runs of data blocks for a checkpoint of `len` bytes.
    fn alloc_chain<E: CommitEnv>(&self, env: &E, len: usize) -> Result<Vec<(u64, u64)>> {
        let mut runs: Vec<(u64, u64)> = Vec::new();
        let mut room = 0usize;
        let mut hint = self.layout.data_start;
        while runs.is_empty() || room < len {
            let want = Frame::blocks_for(len - room).min(CKPT_FRAME_MAX_BLOCKS);
            let Some((block, n)) = env.alloc_meta(hint, want) else {
                env.free_meta(&runs);
                return Err(SpaceError::MetadataFull.into());
            };
            runs.push((block, n));
            room += Frame::capacity(n);
            hint = block + n;
        }
        Ok(runs)
    }

    /// Writes `stream` as checkpoint frames into `runs` (the caller flushes).
    async fn write_chain<E: CommitEnv>(
        &self,
        env: &E,
        runs: &[(u64, u64)],
        stream: &[u8],
        lsn: u64,
    ) -> Result<()> {
        let mut at = 0;
        for (i, &(block, n)) in runs.iter().enumerate() {
            let take = Frame::capacity(n).min(stream.len() - at);
            let next = runs
                .get(i + 1)
                .map_or(Location::default(), |&(b, m)| Location {
                    block: b,
                    blocks: m as u32,
                });
            let frame = Frame {
                kind: FRAME_CKPT,
                uuid: self.uuid,
                lsn,
                blocks: 0,
                payload_len: 0,
                next,
                index: i as u32,
            };
            env.write(block, &frame.encode(&stream[at..at + take]), false)
                .await?;
            at += take;
        }
        Ok(())
    }
}
