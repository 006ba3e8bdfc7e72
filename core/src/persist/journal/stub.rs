//! A commit's environment for the journal's unit tests, shared by the
//! log's and the in-memory journal's.

use alloc::vec::Vec;
use core::cell::{Cell, RefCell};
use core::future::Future;

use super::{CommitEnv, Log, PendingFree, Written};
use crate::dev::DevError;
use crate::error::Result;
use crate::persist::metaio::MetaIo;
use crate::persist::record::Record;
use crate::units::Nanos;

/// A commit's environment that records what it is asked to do and
/// fails writes or flushes on demand; a write can stage a record, as
/// another syncer would while the commit is in flight.
#[derive(Default)]
pub(super) struct Stub<'a> {
    pub(super) fail_writes: Cell<bool>,
    pub(super) fail_flush: Cell<bool>,
    /// (block, blocks, fua) of every write that succeeded.
    pub(super) writes: RefCell<Vec<(u64, usize, bool)>>,
    pub(super) flushes: Cell<u32>,
    pub(super) logged: RefCell<Vec<(u64, u64)>>,
    pub(super) unflushed: Cell<u32>,
    /// Staged on `journal` by the next write, before it completes.
    pub(super) stage_on_write: RefCell<Option<(&'a Log, Record)>>,
}

impl MetaIo for Stub<'_> {
    async fn read(&self, _block: u64, n: usize) -> Result<Vec<u8>> {
        Ok(alloc::vec![0; n * crate::units::PAGE_SIZE])
    }
    async fn write(&self, block: u64, bytes: &[u8], fua: bool) -> Result<()> {
        if let Some((j, r)) = self.stage_on_write.borrow_mut().take() {
            j.stage_all([(r, None)]);
        }
        if self.fail_writes.get() {
            return Err(DevError::Media.into());
        }
        let n = bytes.len() / crate::units::PAGE_SIZE;
        self.writes.borrow_mut().push((block, n, fua));
        Ok(())
    }
    async fn flush(&self) -> Result<()> {
        if self.fail_flush.get() {
            return Err(DevError::Media.into());
        }
        self.flushes.set(self.flushes.get() + 1);
        Ok(())
    }
}

impl CommitEnv for Stub<'_> {
    fn alloc_meta(&self, hint: u64, max: u64) -> Option<(u64, u64)> {
        Some((hint, max))
    }
    fn free_meta(&self, _runs: &[(u64, u64)]) {}
    async fn release(&self, _frees: Vec<PendingFree>) {}
    fn logged(&self, ino: u64, seq: u64) {
        self.logged.borrow_mut().push((ino, seq));
    }
    fn counted(&self, _written: Written) {}
    fn now(&self) -> Nanos {
        Nanos(0)
    }
    fn take_unflushed(&self) -> bool {
        self.unflushed.replace(0) > 0
    }
    fn unflushed_again(&self) {
        self.unflushed.set(self.unflushed.get() + 1);
    }
}

pub(super) fn run<F: Future>(f: F) -> F::Output {
    crate::sync::block_on(f, || {})
}
