//! A task: one session, the files opened through it, and a list of
//! operations run in order, each timed on the executor's clock.

use std::cell::RefCell;
use std::rc::Rc;

use pollfs_core::{File, Fs};

use super::device::HeldDevice;
use super::exec::{Clock, Task};
use super::oracle::Record;
use super::scenario::{special_rdev, stamped, Op, NAMES, SPECIAL};

/// What the tasks did, and what each is doing now.
#[derive(Debug, Default)]
pub struct Log {
    pub records: Vec<Record>,
    running: Vec<Option<(usize, Op, u64)>>,
}

impl Log {
    pub fn new(tasks: usize) -> Log {
        Log {
            records: Vec::new(),
            running: vec![None; tasks],
        }
    }

    /// The operations started and not finished, for a hang report.
    pub fn running_ops(&self) -> String {
        let v: Vec<String> = self
            .running
            .iter()
            .enumerate()
            .filter_map(|(t, r)| r.map(|(id, op, s)| format!("t{t} op #{id} {op} (since {s})")))
            .collect();
        if v.is_empty() {
            "none started".to_string()
        } else {
            v.join("; ")
        }
    }
}

/// The future of task `t`, running `ops` (with their ids) in order on
/// `files` (handles opened before the run, so renames and unlinks of their
/// names do not take them away).
pub fn spawn(
    fs: &Fs<HeldDevice>,
    files: &[File<HeldDevice>],
    t: usize,
    ops: Vec<(usize, Op)>,
    log: &Rc<RefCell<Log>>,
    clock: &Clock,
) -> Task {
    let (fs, files, log, clock) = (fs.clone(), files.to_vec(), log.clone(), clock.clone());
    Box::pin(async move {
        let Ok(session) = fs.session() else {
            return;
        };
        for (id, op) in ops {
            let start = clock.tick();
            log.borrow_mut().running[t] = Some((id, op, start));
            let mut data = Vec::new();
            let f = files.get(op.file());
            let result = match (op, f) {
                (Op::Rename { from, to }, _) => fs.rename(NAMES[from], NAMES[to]).map(|()| 0),
                (Op::Unlink { name }, _) => fs.remove(NAMES[name]).map(|()| 0),
                (Op::Create { name }, _) => fs.create(NAMES[name]).map(|f| f.ino().get() as usize),
                (Op::Lookup { name }, _) => fs.lookup(NAMES[name]).map(|i| i.get() as usize),
                (Op::Mknod { name, kind }, _) => {
                    let who = pollfs_core::NewInode::new(0o640, 0, 0);
                    let (kind, rdev) = (SPECIAL[kind], special_rdev(kind));
                    fs.mknod_in(pollfs_core::InodeId::ROOT, NAMES[name], kind, rdev, who)
                        .map(|i| i.get() as usize)
                }
                (Op::Background, _) => session.background_step_async().await,
                (_, None) => Ok(0),
                (op, Some(f)) => match op {
                    Op::Write { off, len, .. } => {
                        session.write_at_async(f, &stamped(id, off, len), off).await
                    }
                    Op::Read { off, len, .. } => {
                        data = vec![0u8; len as usize];
                        session.read_at_async(f, &mut data, off).await
                    }
                    Op::DirectWrite { off, len, .. } => {
                        session
                            .write_direct_async(f, &stamped(id, off, len), off)
                            .await
                    }
                    Op::DirectRead { off, len, .. } => {
                        data = vec![0u8; len as usize];
                        session.read_direct_async(f, &mut data, off).await
                    }
                    Op::SetLen { size, .. } => session.set_len_async(f, size).await.map(|()| 0),
                    Op::Punch { off, len, .. } => {
                        session.punch_hole_async(f, off, len).await.map(|()| 0)
                    }
                    Op::Sync { .. } => session.sync_data_async(f).await.map(|()| 0),
                    _ => Ok(0),
                },
            };
            let end = clock.tick();
            let mut l = log.borrow_mut();
            l.running[t] = None;
            l.records.push(Record {
                id,
                task: t,
                op,
                start,
                end,
                result: result.map_err(|e| format!("{e:?}")),
                data,
            });
        }
    })
}
