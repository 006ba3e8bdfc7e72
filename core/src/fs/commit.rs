//! Sync on a filesystem with a log: the session's side of a commit.
//!
//! A sync writes back its file's dirty pages (keeping them pinned until the
//! commit says whether they are durable), then, only if the file's size or
//! extents changed since they were last logged, captures one record from
//! the in-memory inode while writers are held off, so every block the
//! record maps has had its data written. The journal's group commit makes
//! it durable (see `persist::journal`): an overwrite inside EOF costs its
//! data writes and one flush; an append, one flush and one log write.

use alloc::sync::Arc;
use alloc::vec::Vec;
use core::ops::Range;
use core::sync::atomic::Ordering;

use super::inode::Inode;
use super::Session;
use crate::dev::{BlockDevice, Command, FrameArena};
use crate::error::Result;
use crate::lock::{Held, Mode};
use crate::persist::record::Record;
use crate::persist::{chunks, CommitEnv, Journal, MetaIo, PendingFree};
use crate::stats::Counter;
use crate::units::{BlockNo, FrameId, InodeId, Lba, PAGE_SIZE};

/// Pages a sync wrote and keeps pinned until its commit ends.
type Kept = (Arc<Inode>, Vec<u32>);

impl<D: BlockDevice> Session<D> {
    /// `sync_data`/`sync_all` with a log.
    pub(crate) async fn sync_logged(&self, inode: &Inode, j: &Journal) -> Result<()> {
        let (kept, ticket) = self.capture(inode, j).await?;
        let committed = j.commit(&self.meta_env(), ticket).await;
        self.release_kept(inode, &kept, committed.is_ok());
        committed
    }

    /// Writes back `inode`'s dirty pages (kept pinned, returned) and, if
    /// its metadata changed since it was last logged, stages its record
    /// with writers held off. Returns the ticket to commit for.
    async fn capture(&self, inode: &Inode, j: &Journal) -> Result<(Vec<u32>, u64)> {
        if !inode.meta_dirty() {
            let kept = self.writeback(inode, true).await?;
            return Ok((kept, j.ticket()));
        }
        let held = Held::new();
        let _inode_lock = self.inode_lock(inode, Mode::Exclusive, &held).await;
        let _unblock = self.drain_writers(inode).await;
        let kept = self.writeback(inode, true).await?;
        let seq = inode.meta_seq.load(Ordering::Acquire);
        // Under the namespace lock, so the link count and parent it carries
        // agree with the namespace records staged before it.
        let ticket = {
            let _tree = self.fs.tree.read();
            let record = Record::Inode {
                ino: inode.id.0,
                meta: inode.meta(),
            };
            j.stage(record, Some(seq))
        };
        Ok((kept, ticket))
    }

    /// Makes every file's written data, and every change to sizes, extents,
    /// attributes and names, durable: each inode with dirty pages or
    /// changed metadata is written back and captured, and one commit covers
    /// them all.
    pub async fn sync_all_files_async(&self) -> Result<()> {
        let inodes = self.fs.open_inodes();
        let mut kept: Vec<Kept> = Vec::new();
        let mut first_err = None;
        for inode in &inodes {
            // The dirty count never undercounts: zero means no dirty page.
            if inode.dirty.load(Ordering::Acquire) == 0 && !inode.meta_dirty() {
                continue;
            }
            let c = match &self.fs.journal {
                Some(j) => self.capture(inode, j).await.map(|(k, _)| k),
                None => self.writeback(inode, true).await,
            };
            match c {
                Ok(k) => kept.push((inode.clone(), k)),
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        let committed = match &self.fs.journal {
            Some(j) => j.commit(&self.meta_env(), j.ticket()).await,
            None => self.run(&Command::Flush).await.map_err(Into::into),
        };
        for (inode, k) in &kept {
            self.release_kept(inode, k, committed.is_ok());
        }
        for inode in &inodes {
            self.fs.close(inode);
        }
        match first_err {
            Some(e) => Err(e),
            None => committed,
        }
    }

    /// Makes directory `dir`'s entries durable: a commit of every record
    /// staged so far (namespace changes are staged as they are made), with
    /// the directory's own record if its attributes changed.
    pub async fn sync_dir_async(&self, dir: u64) -> Result<()> {
        let inode = self
            .fs
            .inode(crate::units::InodeId(dir))
            .ok_or(crate::error::NamespaceError::NotFound)?;
        if inode.kind != crate::persist::record::Kind::Dir {
            return Err(crate::error::NamespaceError::NotADirectory.into());
        }
        match &self.fs.journal {
            Some(j) => {
                let (_, ticket) = self.capture(&inode, j).await?;
                j.commit(&self.meta_env(), ticket).await
            }
            None => Ok(()),
        }
    }

    /// Synchronous [`Session::sync_dir_async`].
    pub fn sync_dir(&self, dir: u64) -> Result<()> {
        self.block_on(self.sync_dir_async(dir))
    }

    /// Synchronous [`Session::sync_all_files_async`].
    pub fn sync_all_files(&self) -> Result<()> {
        self.block_on(self.sync_all_files_async())
    }

    /// Writes a checkpoint of everything durable (for unmount).
    pub(crate) fn checkpoint(&self) -> Result<()> {
        match &self.fs.journal {
            Some(j) => self.block_on(j.checkpoint_now(&self.meta_env())),
            None => Ok(()),
        }
    }

    fn meta_env(&self) -> SessionEnv<'_, D> {
        SessionEnv {
            session: self,
            frames: self.fs.meta_frames.clone(),
        }
    }
}

/// A session lending its queue and the metadata frames to the journal.
struct SessionEnv<'a, D: BlockDevice> {
    session: &'a Session<D>,
    frames: Range<u32>,
}

impl<D: BlockDevice> SessionEnv<'_, D> {
    fn per_command(&self) -> usize {
        self.frames
            .len()
            .min(self.session.fs.geometry.max_frames_per_command())
    }

    fn lba(&self, block: u64) -> Lba {
        Lba(block * self.session.fs.geometry.blocks_per_page())
    }
}

impl<D: BlockDevice> MetaIo for SessionEnv<'_, D> {
    async fn read(&self, block: u64, n: usize) -> Result<Vec<u8>> {
        let arena = self.session.fs.frames();
        let mut out = alloc::vec![0u8; n * PAGE_SIZE];
        for (at, k, done) in chunks(block, n, self.per_command()) {
            let frames: Vec<FrameId> = (0..k as u32)
                .map(|i| FrameId(self.frames.start + i))
                .collect();
            self.session
                .run(&Command::Read {
                    lba: self.lba(at),
                    frames: &frames,
                })
                .await?;
            for (i, f) in frames.iter().enumerate() {
                let off = (done + i) * PAGE_SIZE;
                arena.read(*f, 0, &mut out[off..off + PAGE_SIZE])?;
            }
        }
        Ok(out)
    }

    async fn write(&self, block: u64, bytes: &[u8], fua: bool) -> Result<()> {
        let arena = self.session.fs.frames();
        for (at, k, done) in chunks(block, bytes.len() / PAGE_SIZE, self.per_command()) {
            let frames: Vec<FrameId> = (0..k as u32)
                .map(|i| FrameId(self.frames.start + i))
                .collect();
            for (i, f) in frames.iter().enumerate() {
                let off = (done + i) * PAGE_SIZE;
                arena.write(*f, 0, &bytes[off..off + PAGE_SIZE])?;
            }
            self.session
                .run(&Command::Write {
                    lba: self.lba(at),
                    frames: &frames,
                    fua,
                })
                .await?;
        }
        Ok(())
    }

    async fn flush(&self) -> Result<()> {
        Ok(self.session.run(&Command::Flush).await?)
    }
}

impl<D: BlockDevice> CommitEnv for SessionEnv<'_, D> {
    fn alloc_meta(&self, hint: u64, max: u64) -> Option<(u64, u64)> {
        self.session
            .fs
            .space
            .lock()
            .alloc(BlockNo(hint), max)
            .map(|(b, n)| (b.0, n))
    }

    fn free_meta(&self, runs: &[(u64, u64)]) {
        let mut space = self.session.fs.space.lock();
        for &(b, n) in runs {
            // A failure means the maps disagree; the invariant checker
            // reports it.
            let _ = space.free(BlockNo(b), n);
        }
    }

    async fn release(&self, frees: Vec<PendingFree>) {
        let bpp = self.session.fs.geometry.blocks_per_page();
        for f in &frees {
            // Trim is advice: the blocks are free whatever the device says.
            let _ = self
                .session
                .run(&Command::Deallocate {
                    lba: Lba(f.dev.0 * bpp),
                    blocks: f.len * bpp,
                })
                .await;
        }
        let mut space = self.session.fs.space.lock();
        for f in frees {
            let _ = space.free(f.dev, f.len);
        }
    }

    fn logged(&self, ino: u64, seq: u64) {
        if let Some(inode) = self.session.fs.inode(InodeId(ino)) {
            inode.logged_seq.fetch_max(seq, Ordering::AcqRel);
        }
    }

    fn counted(&self, checkpoint: bool) {
        let c = if checkpoint {
            Counter::checkpoints
        } else {
            Counter::log_writes
        };
        self.session.counters.add(c, 1);
    }
}
