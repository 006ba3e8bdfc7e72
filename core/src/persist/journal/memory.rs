//! The journal of a filesystem with no log, `Fs::new`'s ([`Memory`]):
//! the other kind of [`Journal`](super::Journal), so that the engine
//! stages, commits and frees the same way whichever it has.

use alloc::vec::Vec;

use super::CommitEnv;
use crate::error::Result;
use crate::persist::record::Record;
use crate::sync::Mutex;

/// The journal of a filesystem with no log: nothing it stages outlives
/// the filesystem, so staged records are dropped, no free waits for a
/// commit, no block is held back for checkpoints, and a commit is one
/// flush (every write before it is then durable), after which the inodes
/// whose records it covered count as durable up to their sequence.
#[derive(Debug, Default)]
pub(crate) struct Memory {
    st: Mutex<MemoryState>,
}

#[derive(Debug, Default)]
struct MemoryState {
    next_ticket: u64,
    /// (inode, metadata sequence) of the inode records staged since the
    /// last commit that succeeded.
    pending: Vec<(u64, u64)>,
}

impl Memory {
    pub(super) fn stage_all(
        &self,
        records: impl IntoIterator<Item = (Record, Option<u64>)>,
    ) -> u64 {
        let mut st = self.st.lock();
        st.next_ticket += 1;
        for (record, seq) in records {
            if let (Record::Inode { ino, .. }, Some(seq)) = (record, seq) {
                st.pending.push((ino, seq));
            }
        }
        st.next_ticket
    }

    pub(super) fn ticket(&self) -> u64 {
        self.stage_all([])
    }

    /// One flush; on success the inodes staged before it are durable up to
    /// their sequence. A failed flush puts them back, in order, ahead of
    /// what was staged meanwhile.
    pub(super) async fn commit<E: CommitEnv>(&self, env: &E) -> Result<()> {
        let batch = core::mem::take(&mut self.st.lock().pending);
        // Taken so the counter does not grow: this flush covers every write.
        let _ = env.take_unflushed();
        match env.flush().await {
            Ok(()) => {
                for &(ino, seq) in &batch {
                    env.logged(ino, seq);
                }
                Ok(())
            }
            Err(e) => {
                env.unflushed_again();
                let mut st = self.st.lock();
                let mut pending = batch;
                pending.append(&mut st.pending);
                st.pending = pending;
                Err(e)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::stub::{run, Stub};
    use super::super::{Journal, PendingFree};
    use crate::persist::record::{InodeMeta, Kind, Record};
    use crate::units::BlockNo;

    #[test]
    fn the_memory_journal_commits_with_a_flush_and_holds_nothing() {
        let j = Journal::in_memory();
        let env = Stub::default();
        let meta = InodeMeta::new(Kind::File, 0o644, 0, 0, 1);
        let f = PendingFree {
            ino: 4,
            dev: BlockNo(100),
            len: 3,
            seq: 2,
        };
        assert!(!j.hold_free(f), "frees at once");
        assert_eq!((j.held_blocks(), j.reserve(1 << 20)), (0, 0));
        assert!(j.meta_runs().is_empty() && !j.data_room(0) && j.trims_frees());
        let t = j.stage(
            Record::Inode {
                ino: 4,
                meta: meta.clone(),
            },
            Some(2),
        );
        // A failed flush keeps the inode owed, ahead of later ones.
        env.fail_flush.set(true);
        assert!(run(j.commit(&env, t)).is_err());
        j.stage(Record::Inode { ino: 6, meta }, Some(1));
        env.fail_flush.set(false);
        run(j.commit(&env, j.ticket())).unwrap();
        assert_eq!(*env.logged.borrow(), [(4, 2), (6, 1)]);
        assert_eq!(env.flushes.get(), 1);
        assert!(env.writes.borrow().is_empty(), "nothing is written");
        run(j.checkpoint_now(&env)).unwrap();
        assert!(env.writes.borrow().is_empty());
    }
}
