//! A task: one session, the files opened through it, and a list of
//! operations run in order, each timed on the executor's clock.

use std::cell::RefCell;
use std::rc::Rc;

use pollfs_core::Fs;

use super::device::HeldDevice;
use super::exec::{Clock, Task};
use super::oracle::Record;
use super::scenario::{stamped, Op};

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

/// The future of task `t`, running `ops` (with their ids) in order.
pub fn spawn(
    fs: &Fs<HeldDevice>,
    names: &[String],
    t: usize,
    ops: Vec<(usize, Op)>,
    log: &Rc<RefCell<Log>>,
    clock: &Clock,
) -> Task {
    let (fs, names, log, clock) = (fs.clone(), names.to_vec(), log.clone(), clock.clone());
    Box::pin(async move {
        let Ok(session) = fs.session() else {
            return;
        };
        let mut files = Vec::new();
        for name in &names {
            match fs.open(name) {
                Ok(f) => files.push(f),
                Err(_) => return,
            }
        }
        for (id, op) in ops {
            let start = clock.tick();
            log.borrow_mut().running[t] = Some((id, op, start));
            let f = &files[op.file()];
            let mut data = Vec::new();
            let result = match op {
                Op::Write { off, len, .. } => {
                    session.write_at_async(f, &stamped(id, off, len), off).await
                }
                Op::Read { off, len, .. } => {
                    data = vec![0u8; len as usize];
                    session.read_at_async(f, &mut data, off).await
                }
                Op::SetLen { size, .. } => session.set_len_async(f, size).await.map(|()| 0),
                Op::Punch { off, len, .. } => {
                    session.punch_hole_async(f, off, len).await.map(|()| 0)
                }
                Op::Sync { .. } => session.sync_data_async(f).await.map(|()| 0),
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
