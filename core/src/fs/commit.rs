//! Sync on a filesystem with a log: capture the inode, group-commit, and
//! checkpoint when the log fills.
//!
//! A sync writes back its file's dirty pages, then (only if the file's size
//! or extents changed since they were last logged) captures one record from
//! the in-memory inode while writers are held off, so every block the
//! record maps has had its data written. Then it joins a group commit: the
//! first syncer to get the commit lock flushes the device once, for every
//! syncer queued so far, and writes one FUA log write with every queued
//! record and pending namespace change. The rest find their ticket covered
//! and return. An overwrite inside EOF therefore costs its data writes and
//! one flush; an append, one flush and one log write.

use alloc::vec::Vec;
use core::sync::atomic::Ordering;

use super::inode::Inode;
use super::Session;
use crate::dev::{BlockDevice, Command, FrameArena};
use crate::error::{Result, SpaceError};
use crate::lock::{Held, Mode};
use crate::persist::format::{Frame, Superblock, FRAME_CKPT, FRAME_LOG};
use crate::persist::record::Record;
use crate::persist::{Captured, Journal, PendingFree, META_FRAMES};
use crate::units::{ByteRange, FrameId, InodeId, Lba, PAGE_SIZE};

impl<D: BlockDevice> Session<D> {
    /// `sync_data`/`sync_all` with a log.
    pub(crate) async fn sync_logged(&self, inode: &Inode, j: &Journal) -> Result<()> {
        let (kept, captured) = if inode.meta_dirty() {
            let held = Held::new();
            let _inode_lock = self.inode_lock(inode, Mode::Exclusive, &held).await;
            let _unblock = self.drain_writers(inode).await;
            let kept = self.writeback(inode, true).await?;
            let seq = inode.meta_seq.load(Ordering::Acquire);
            let record = Record::State {
                ino: inode.id.0,
                size: inode.size(),
                extents: inode.extents.read().extents().collect(),
            };
            (kept, Some(Captured { seq, record }))
        } else {
            (self.writeback(inode, true).await?, None)
        };
        let committed = self.commit(j, captured).await;
        self.release_kept(inode, &kept, committed.is_ok());
        committed
    }

    /// Joins a group commit; returns when a flush (and a log write, if any
    /// record is queued) covering this call is durable.
    async fn commit(&self, j: &Journal, captured: Option<Captured>) -> Result<()> {
        let ticket = {
            let mut st = j.st.lock();
            let t = st.next_ticket;
            st.next_ticket += 1;
            st.queue.push((t, captured));
            t
        };
        // Let other syncers that are ready reach the queue before a leader
        // takes it: then one flush and one log write serve them all.
        crate::sync::yield_now().await;
        let held = Held::new();
        let _leader = self
            .lock(&j.commit_lock, ByteRange::from(0), Mode::Exclusive, &held)
            .await;
        if j.st.lock().durable_ticket >= ticket {
            return Ok(());
        }
        let (batch, mut records, last) = {
            let mut st = j.st.lock();
            let batch = core::mem::take(&mut st.queue);
            let last = batch.iter().map(|(t, _)| *t).max().unwrap_or(ticket);
            let mut records: Vec<(Record, Option<u64>)> = core::mem::take(&mut st.pending_ns)
                .into_iter()
                .map(|r| (r, None))
                .collect();
            records.extend(
                batch
                    .iter()
                    .filter_map(|(_, c)| c.as_ref())
                    .map(|c| (c.record.clone(), Some(c.seq))),
            );
            (batch, records, last)
        };
        // One flush makes every queued syncer's data durable: each took its
        // ticket after its writeback completed.
        let flushed = self.run(&Command::Flush).await;
        let written = match flushed {
            Ok(()) => self.log_records(j, &records).await,
            Err(e) => Err((0, e.into())),
        };
        match written {
            Ok(()) => {
                j.st.lock().durable_ticket = last;
                self.release_frees(j).await;
                // A failed checkpoint leaves the old one valid and the log
                // intact; the next commit tries again.
                let _ = self.checkpoint_if_needed(j).await;
                Ok(())
            }
            Err((done, e)) => {
                // Put back what did not reach the log, in order, for the next
                // leader; what did is durable and applied.
                let mut st = j.st.lock();
                let rest_ns: Vec<Record> = records
                    .drain(done..)
                    .filter(|(_, s)| s.is_none())
                    .map(|(r, _)| r)
                    .collect();
                let mut ns = rest_ns;
                ns.append(&mut st.pending_ns);
                st.pending_ns = ns;
                let mut queue: Vec<_> = batch.into_iter().filter(|(_, c)| c.is_some()).collect();
                queue.append(&mut st.queue);
                st.queue = queue;
                Err(e)
            }
        }
    }

    /// Writes `records` to the log in as few FUA writes as fit the metadata
    /// frames, applying each write's records to the durable view once it
    /// completes. On failure returns how many records were made durable.
    async fn log_records(
        &self,
        j: &Journal,
        records: &[(Record, Option<u64>)],
    ) -> core::result::Result<(), (usize, crate::Error)> {
        let max_payload = META_FRAMES as usize * PAGE_SIZE - crate::persist::format::FRAME_HEADER;
        let mut done = 0;
        while done < records.len() {
            // Greedily take records while they fit one log write.
            let mut payload = Vec::new();
            let mut take = 0;
            for (r, _) in &records[done..] {
                let mut e = crate::persist::format::Enc::default();
                r.encode(&mut e);
                if !payload.is_empty() && payload.len() + e.0.len() > max_payload {
                    break;
                }
                payload.extend_from_slice(&e.0);
                take += 1;
            }
            if payload.len() > max_payload {
                return Err((done, SpaceError::MetadataFull.into()));
            }
            self.log_write(j, &payload).await.map_err(|e| (done, e))?;
            self.apply_durable(j, &records[done..done + take]);
            done += take;
        }
        Ok(())
    }

    /// One FUA log write at the append position, checkpointing first if the
    /// log has no room.
    async fn log_write(&self, j: &Journal, payload: &[u8]) -> Result<()> {
        let lsn = j.st.lock().next_lsn;
        let bytes = Frame::encode(FRAME_LOG, j.uuid, lsn, payload);
        let n = (bytes.len() / PAGE_SIZE) as u64;
        let blocks = j.layout.log_blocks;
        let place = |head: u64, pos: u64| -> Option<u64> {
            let at = if pos + n <= blocks { pos } else { 0 };
            // Blocks from `pos` (wrapping) through the end of this write must
            // not reach the live head, unless the log is empty (head == pos).
            let used = (pos + blocks - head) % blocks;
            let skip = if at == pos { 0 } else { blocks - pos };
            (head == pos && n < blocks || used + skip + n < blocks).then_some(at)
        };
        let at = {
            let st = j.st.lock();
            place(st.head, st.pos)
        };
        let at = match at {
            Some(at) => at,
            None => {
                self.checkpoint(j).await?;
                let st = j.st.lock();
                place(st.head, st.pos).ok_or(SpaceError::MetadataFull)?
            }
        };
        self.write_meta(j, j.layout.log_start + at, &bytes, true)
            .await?;
        self.counters.add(crate::stats::Counter::log_writes, 1);
        let mut st = j.st.lock();
        st.pos = (at + n) % blocks;
        st.next_lsn = lsn + 1;
        Ok(())
    }

    /// Writes whole blocks through the metadata frames.
    async fn write_meta(&self, j: &Journal, block: u64, bytes: &[u8], fua: bool) -> Result<()> {
        let arena = self.fs.frames();
        let bpp = self.fs.geometry.blocks_per_page();
        let per = (META_FRAMES as usize).min(self.fs.geometry.max_frames_per_command());
        let total = bytes.len() / PAGE_SIZE;
        let mut done = 0;
        while done < total {
            let k = per.min(total - done);
            let frames: Vec<FrameId> = (0..k as u32).map(|i| FrameId(j.meta_frame + i)).collect();
            for (i, f) in frames.iter().enumerate() {
                let at = (done + i) * PAGE_SIZE;
                arena.write(*f, 0, &bytes[at..at + PAGE_SIZE]);
            }
            let cmd = Command::Write {
                lba: Lba((block + done as u64) * bpp),
                frames: &frames,
                fua,
            };
            self.run(&cmd).await?;
            done += k;
        }
        Ok(())
    }

    /// Records that `records` are durable: the durable view, the inodes'
    /// logged sequences, durable removals.
    fn apply_durable(&self, j: &Journal, records: &[(Record, Option<u64>)]) {
        let mut st = j.st.lock();
        for (r, seq) in records {
            // The durable view was built by these same rules; a record that
            // does not apply is dropped rather than poisoning the view.
            let _ = st.shadow.apply(r);
            match (r, seq) {
                (Record::State { ino, .. }, Some(seq)) => {
                    let e = st.durable_seq.entry(*ino).or_insert(0);
                    *e = (*e).max(*seq);
                    if let Some(inode) = self.fs.inodes.read().get(&InodeId(*ino)) {
                        inode.logged_seq.fetch_max(*seq, Ordering::AcqRel);
                    }
                }
                (Record::Remove { ino }, _) => {
                    st.removed.insert(*ino);
                }
                _ => {}
            }
        }
    }

    /// Trims and returns to the allocator every held block that no durable
    /// record references any more.
    async fn release_frees(&self, j: &Journal) {
        let ready: Vec<PendingFree> = {
            let mut st = j.st.lock();
            let (ready, keep): (Vec<PendingFree>, Vec<PendingFree>) =
                core::mem::take(&mut st.pending_frees)
                    .into_iter()
                    .partition(|f| st.releasable(f));
            st.pending_frees = keep;
            ready
        };
        let bpp = self.fs.geometry.blocks_per_page();
        for f in &ready {
            let _ = self
                .run(&Command::Deallocate {
                    lba: Lba(f.dev.0 * bpp),
                    blocks: f.len * bpp,
                })
                .await;
        }
        let mut space = self.fs.space.lock();
        for f in ready {
            let _ = space.free(f.dev, f.len);
        }
    }

    /// Checkpoints when more than half the log is in use.
    async fn checkpoint_if_needed(&self, j: &Journal) -> Result<()> {
        let used = {
            let st = j.st.lock();
            (st.pos + j.layout.log_blocks - st.head) % j.layout.log_blocks
        };
        if used * 2 > j.layout.log_blocks {
            self.checkpoint(j).await?;
        }
        Ok(())
    }

    /// Writes the durable view to the idle checkpoint slot, flushes, then
    /// points the superblock at it with the log's head moved to the append
    /// position. Until that superblock write, the old checkpoint and log
    /// stay valid. The caller holds the commit lock.
    async fn checkpoint(&self, j: &Journal) -> Result<()> {
        let (bytes, slot, lsn, pos, generation) = {
            let st = j.st.lock();
            let records = st.shadow.image();
            let lsn = st.next_lsn - 1;
            let bytes = Frame::encode(FRAME_CKPT, j.uuid, lsn, &Record::encode_all(&records));
            (bytes, 1 - st.ckpt_slot, lsn, st.pos, st.generation + 1)
        };
        if (bytes.len() / PAGE_SIZE) as u64 > j.layout.ckpt_blocks {
            return Err(SpaceError::MetadataFull.into());
        }
        self.write_meta(j, j.layout.ckpt_slot(slot), &bytes, false)
            .await?;
        self.run(&Command::Flush).await?;
        let sb = Superblock {
            uuid: j.uuid,
            generation,
            lba_size: j.lba_size,
            layout: j.layout,
            ckpt_slot: slot,
            ckpt_lsn: lsn,
            log_head: pos,
        };
        self.write_meta(j, generation % 2, &sb.encode(), true)
            .await?;
        self.counters.add(crate::stats::Counter::checkpoints, 1);
        let mut st = j.st.lock();
        st.generation = generation;
        st.ckpt_slot = slot;
        st.head = pos;
        Ok(())
    }
}
