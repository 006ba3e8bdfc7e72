//! The asynchronous interface: a queue of operations a thread submits and
//! then polls for completions, as fio's and databases' event loops drive
//! io_uring or SPDK. No wakers, no threads of its own: each submitted
//! operation is an engine future that `pollfs_submit` polls once (a read
//! of cached pages completes right there; a miss has its device command
//! issued) and `pollfs_complete` polls again, reaping the queue's device
//! completions as it goes. Many operations may be in flight at once on the
//! one device queue, which gives a real queue depth.
//!
//! A queue is one engine session with its own device queue: make one per
//! thread. Not thread-safe: use a queue from one thread at a time.

use core::ffi::{c_int, c_void};
use core::future::Future;
use core::pin::Pin;
use core::task::{Context, Poll, Waker};
use std::collections::VecDeque;
use std::rc::Rc;

use pollfs_core::fs::Session;

use crate::device::Dev;
use crate::error::{int, remember, Fail};
use crate::file::file_of;
use crate::fs::{fs_of, PollfsFs};
use crate::raw;

/// Read `len` bytes at `offset` into `buf` (fewer at the end of the file).
pub const POLLFS_OP_READ: u32 = 0;
/// Write `len` bytes of `buf` at `offset`.
pub const POLLFS_OP_WRITE: u32 = 1;
/// `fsync` the file (`buf`, `len` and `offset` are ignored).
pub const POLLFS_OP_FSYNC: u32 = 2;
/// `fdatasync` the file.
pub const POLLFS_OP_FDATASYNC: u32 = 3;

/// One operation to submit.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct PollfsIo {
    /// `POLLFS_OP_READ`, `_WRITE`, `_FSYNC` or `_FDATASYNC`.
    pub opcode: u32,
    /// The file; it must stay open until the operation completes.
    pub file: *const crate::file::PollfsFile,
    /// The data; it must stay valid, and untouched by the caller, until
    /// the operation completes.
    pub buf: *mut c_void,
    /// Bytes.
    pub len: usize,
    /// Byte offset in the file.
    pub offset: u64,
    /// Returned with the completion.
    pub user_data: u64,
}

/// One completed operation.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct PollfsCompletion {
    /// The submitted operation's `user_data`.
    pub user_data: u64,
    /// Bytes read or written (0 for syncs), or a negative errno.
    pub result: i64,
}

type Op = Pin<Box<dyn Future<Output = pollfs_core::Result<usize>>>>;

/// A thread's submission and completion queue. Not thread-safe.
pub struct PollfsQueue {
    session: Rc<Session<Dev>>,
    depth: usize,
    running: Vec<(u64, Op)>,
    done: VecDeque<PollfsCompletion>,
}

impl core::fmt::Debug for PollfsQueue {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("PollfsQueue")
            .field("depth", &self.depth)
            .field("running", &self.running.len())
            .field("done", &self.done.len())
            .finish_non_exhaustive()
    }
}

fn completion(user_data: u64, r: pollfs_core::Result<usize>) -> PollfsCompletion {
    let result = match r {
        Ok(n) => i64::try_from(n).unwrap_or(i64::MAX),
        Err(e) => {
            remember("pollfs_complete", &e.to_string());
            -i64::from(crate::error::errno(&e))
        }
    };
    PollfsCompletion { user_data, result }
}

impl PollfsQueue {
    fn in_flight(&self) -> usize {
        self.running.len() + self.done.len()
    }

    /// The future of `io`.
    ///
    /// # Safety
    /// `io.file` is a live handle and `io.buf` valid for `io.len` bytes
    /// until the operation completes.
    unsafe fn start(&self, io: &PollfsIo) -> Result<Op, Fail> {
        // SAFETY: the caller's contract.
        let handle = unsafe { file_of(io.file) }?;
        let file = handle.file.clone();
        let direct = handle.direct;
        let s = self.session.clone();
        let offset = io.offset;
        Ok(match io.opcode {
            POLLFS_OP_READ => {
                handle.check_read()?;
                // SAFETY: the caller's contract: the buffer outlives the
                // operation, which holds the only reference to it.
                let buf: &'static mut [u8] = unsafe { raw::bytes_mut(io.buf, io.len) }?;
                Box::pin(async move {
                    if direct {
                        s.read_direct_async(&file, buf, offset).await
                    } else {
                        s.read_at_async(&file, buf, offset).await
                    }
                })
            }
            POLLFS_OP_WRITE => {
                handle.before_write()?;
                // SAFETY: as for a read.
                let buf: &'static [u8] = unsafe { raw::bytes(io.buf, io.len) }?;
                Box::pin(async move {
                    if direct {
                        s.write_direct_async(&file, buf, offset).await
                    } else {
                        s.write_all_at_async(&file, buf, offset)
                            .await
                            .map(|()| buf.len())
                    }
                })
            }
            POLLFS_OP_FSYNC => Box::pin(async move { s.sync_all_async(&file).await.map(|()| 0) }),
            POLLFS_OP_FDATASYNC => {
                Box::pin(async move { s.sync_data_async(&file).await.map(|()| 0) })
            }
            other => {
                return Err(Fail::inval(format!(
                    "opcode {other} is none of POLLFS_OP_*"
                )))
            }
        })
    }

    /// Polls the operations from index `from` on once; moves the finished
    /// ones to `done`.
    fn poll_from(&mut self, from: usize) {
        let mut cx = Context::from_waker(Waker::noop());
        let mut i = from;
        while i < self.running.len() {
            let (user_data, op) = &mut self.running[i];
            if let Poll::Ready(r) = op.as_mut().poll(&mut cx) {
                let c = completion(*user_data, r);
                self.done.push_back(c);
                // Order among running operations does not matter.
                drop(self.running.swap_remove(i));
            } else {
                i += 1;
            }
        }
    }
}

/// Makes a queue of `fs` for up to `depth` operations in flight (submitted
/// and not yet returned by `pollfs_complete`), with a device queue of its
/// own, and stores it in `*out`. Thread-safe (the new queue is not).
///
/// # Safety
/// `fs` is a live handle that outlives the queue; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn pollfs_queue_new(
    fs: *const PollfsFs,
    depth: u32,
    out: *mut *mut PollfsQueue,
) -> c_int {
    int("pollfs_queue_new", || {
        // SAFETY: the caller's contract.
        let fs = unsafe { fs_of(fs) }?;
        if depth == 0 {
            return Err(Fail::inval("depth is 0"));
        }
        let depth = depth as usize;
        let q = PollfsQueue {
            session: Rc::new(fs.session()?),
            depth,
            running: Vec::with_capacity(depth),
            done: VecDeque::with_capacity(depth),
        };
        // SAFETY: the caller's contract: `out` is writable.
        unsafe { raw::put(out, Box::into_raw(Box::new(q))) }?;
        Ok(0)
    })
}

/// Frees a queue with nothing in flight; `-EBUSY` (and the queue stays)
/// if operations have not all been returned by `pollfs_complete`. Not
/// thread-safe.
///
/// # Safety
/// `q` came from `pollfs_queue_new`; after a 0 return it is not used again.
#[no_mangle]
pub unsafe extern "C" fn pollfs_queue_free(q: *mut PollfsQueue) -> c_int {
    int("pollfs_queue_free", || {
        // SAFETY: the caller's contract.
        let busy = unsafe { raw::obj(q, "the queue") }?.in_flight();
        if busy > 0 {
            return Err(Fail::new(
                libc::EBUSY,
                format!("{busy} operations in flight: reap them with pollfs_complete first"),
            ));
        }
        // SAFETY: the caller's contract: a live queue of ours, given up.
        drop(unsafe { raw::take(q, "the queue") }?);
        Ok(0)
    })
}

/// Submits up to `n` operations from `ios`, in order, and starts each
/// (cached reads and writes may complete at once); returns how many were
/// accepted (fewer than `n` when the queue is full: reap completions and
/// submit the rest), or a negative errno if the first could not be (an
/// unknown opcode, a NULL file or buffer: `-EINVAL`, `-EBADF`). Not
/// thread-safe.
///
/// # Safety
/// `q` is a live queue; `ios` has `n` entries; each entry's file and
/// buffer stay valid until its completion is returned.
#[no_mangle]
pub unsafe extern "C" fn pollfs_submit(q: *mut PollfsQueue, ios: *const PollfsIo, n: u32) -> c_int {
    int("pollfs_submit", || {
        // SAFETY: the caller's contract.
        let q = unsafe { raw::obj_mut(q, "the queue") }?;
        // SAFETY: the caller's contract.
        let ios = unsafe { raw::slice(ios, n as usize) }?;
        let first = q.running.len();
        let mut accepted = 0i64;
        for io in ios {
            if q.in_flight() >= q.depth {
                break;
            }
            // SAFETY: the caller's contract, passed on.
            match unsafe { q.start(io) } {
                Ok(op) => q.running.push((io.user_data, op)),
                Err(e) if accepted == 0 => return Err(e),
                Err(_) => break,
            }
            accepted += 1;
        }
        q.poll_from(first);
        Ok(accepted)
    })
}

/// Polls the operations in flight once (no blocking: the device queue is
/// reaped and each waiting operation moves on if it can) and writes up to
/// `max` completions to `out`; returns how many, or a negative errno. Call
/// it in a loop to wait. Not thread-safe.
///
/// # Safety
/// `q` is a live queue; `out` has room for `max` completions.
#[no_mangle]
pub unsafe extern "C" fn pollfs_complete(
    q: *mut PollfsQueue,
    out: *mut PollfsCompletion,
    max: u32,
) -> c_int {
    int("pollfs_complete", || {
        // SAFETY: the caller's contract.
        let q = unsafe { raw::obj_mut(q, "the queue") }?;
        // SAFETY: the caller's contract.
        let out = unsafe { raw::slice_mut(out, max as usize) }?;
        if q.done.len() < out.len() {
            q.poll_from(0);
        }
        let mut n = 0i64;
        for slot in out.iter_mut() {
            let Some(c) = q.done.pop_front() else { break };
            *slot = c;
            n += 1;
        }
        Ok(n)
    })
}

/// Operations submitted and not yet returned by `pollfs_complete`. Not
/// thread-safe.
///
/// # Safety
/// `q` is a live queue.
#[no_mangle]
pub unsafe extern "C" fn pollfs_queue_in_flight(q: *const PollfsQueue) -> c_int {
    int("pollfs_queue_in_flight", || {
        // SAFETY: the caller's contract.
        let q = unsafe { raw::obj(q, "the queue") }?;
        Ok(i64::try_from(q.in_flight()).unwrap_or(i64::MAX))
    })
}
