//! pollfs extension (see `PATCHES.md`): requests that reach the server
//! other than by a read of `/dev/fuse`.
//!
//! FUSE over io_uring hands the server each request in a ring entry's
//! buffers and takes the reply back in them. The server lays the request
//! out as a read of `/dev/fuse` would have (`fuse_in_header`, then the
//! arguments) and calls [`Dispatcher::dispatch`], which decodes it and
//! calls the [`Filesystem`] exactly as the `/dev/fuse` threads do; the
//! reply goes to the [`ReplySink`] given, not to `/dev/fuse`.

use std::io;
use std::io::IoSlice;
use std::os::fd::AsFd;
use std::os::fd::BorrowedFd;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;

use crate::Filesystem;
use crate::ReplyEmpty;
use crate::ll::Operation;
use crate::request::RequestWithSender;
use crate::session::SessionEventLoop;

/// Where the reply to a request given to [`Dispatcher::dispatch`] goes.
pub trait ReplySink: std::fmt::Debug + Send + Sync + 'static {
    /// Takes one whole reply, as it would be written to `/dev/fuse`: a
    /// `fuse_out_header`, then the reply's arguments. Called at most once
    /// per request, from whichever thread replies.
    /// # Errors
    /// The reply could not be taken (it is then logged and dropped).
    fn send(&self, reply: &[IoSlice<'_>]) -> io::Result<()>;
}

/// What [`Dispatcher::dispatch`] did with a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dispatched {
    /// The filesystem was called (it replies, or replied, to the sink).
    Served,
    /// `FUSE_DESTROY`: answered; the kernel sends nothing more.
    Destroy,
}

/// How many requests a session's `/dev/fuse` threads have read (after
/// `FUSE_INIT`).
#[derive(Debug, Clone, Default)]
pub struct RequestCount(Arc<AtomicU64>);

impl RequestCount {
    /// The count so far.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }

    pub(crate) fn add(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

/// Decodes requests and calls the session's filesystem, with the
/// session's access rule (`SessionACL`); given by [`crate::Session::run_with`].
pub struct Dispatcher<FS: Filesystem> {
    event_loop: SessionEventLoop<FS>,
}

impl<FS: Filesystem> std::fmt::Debug for Dispatcher<FS> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dispatcher").finish_non_exhaustive()
    }
}

impl<FS: Filesystem> Clone for Dispatcher<FS> {
    fn clone(&self) -> Self {
        let e = &self.event_loop;
        Dispatcher::new(SessionEventLoop {
            thread_name: e.thread_name.clone(),
            filesystem: e.filesystem.clone(),
            ch: e.ch.clone(),
            allowed: e.allowed,
            session_owner: e.session_owner,
            received: e.received.clone(),
            setxattr_ext: e.setxattr_ext,
        })
    }
}

impl<FS: Filesystem> Dispatcher<FS> {
    pub(crate) fn new(event_loop: SessionEventLoop<FS>) -> Self {
        Dispatcher { event_loop }
    }

    /// Decodes `request` (a `fuse_in_header` and the arguments after it,
    /// 8-byte aligned, as a read of `/dev/fuse` returns them) and serves
    /// it; the reply goes to `sink`.
    /// # Errors
    /// `InvalidData` if `request` is not a FUSE request (too short, or
    /// shorter than its header says); nothing is sent to `sink` then.
    pub fn dispatch(&self, request: &[u8], sink: Arc<dyn ReplySink>) -> io::Result<Dispatched> {
        if request.as_ptr().align_offset(8) != 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a FUSE request must start 8-byte aligned",
            ));
        }
        let Some(req) = RequestWithSender::with_sink(
            self.event_loop.ch.sender(),
            sink,
            request,
            self.event_loop.setxattr_ext,
        ) else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "not a FUSE request",
            ));
        };
        if let Ok(Operation::Destroy(_)) = req.request.operation() {
            req.reply::<ReplyEmpty>().ok();
            return Ok(Dispatched::Destroy);
        }
        req.dispatch(&self.event_loop);
        Ok(Dispatched::Served)
    }

    /// Requests the session's `/dev/fuse` threads have read so far.
    pub fn dev_fuse_requests(&self) -> RequestCount {
        self.event_loop.received.clone()
    }
}

impl<FS: Filesystem> AsFd for Dispatcher<FS> {
    /// The session's `/dev/fuse` descriptor.
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.event_loop.ch.as_fd()
    }
}
