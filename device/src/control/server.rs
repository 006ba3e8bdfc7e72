//! The control server: one thread that accepts connections on a socket
//! and answers them, one connection at a time. On a mirror's socket it
//! also drives the mirror's control section (header writes, a resync)
//! while it has work, so a rejoin proceeds even when the filesystem is
//! idle; on a mount's it answers [`Op::Stats`] with the filesystem's
//! figures. It waits in `poll(2)` holding nothing; the mirror calls it
//! makes take the mirror's own short locks (`poll_control` only tries
//! them), and a snapshot of the figures takes the engine's counter lock
//! only to sum the sessions' blocks.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use pollfs_core::dev::BlockDevice;
use pollfs_core::hosted::monotonic_clock;
use pollfs_core::units::Nanos;
use pollfs_core::volume::{Mirror, MirrorStatus, VolumeError};
use pollfs_core::Fs;

use super::stats::FsStats;
use super::{sys, Op, Reply, Request, Status, VERSION};

/// What the server needs of a mirror, whatever its legs' type.
pub trait Administered: Send + Sync + 'static {
    /// Its state.
    fn status(&self) -> MirrorStatus;
    /// Its block size.
    fn block_size(&self) -> u32;
    /// Drops a leg.
    fn fail_leg(&self, leg: usize) -> Result<(), VolumeError>;
    /// Takes a leg back.
    fn rejoin(&self, leg: usize) -> Result<(), VolumeError>;
    /// Moves header writes and a resync on; true while work is left.
    fn poll_control(&self, now: Nanos) -> bool;
}

impl<L: BlockDevice> Administered for Mirror<L>
where
    Mirror<L>: Send + Sync + 'static,
{
    fn status(&self) -> MirrorStatus {
        Mirror::status(self)
    }
    fn block_size(&self) -> u32 {
        self.geometry().block_size
    }
    fn fail_leg(&self, leg: usize) -> Result<(), VolumeError> {
        Mirror::fail_leg(self, leg)
    }
    fn rejoin(&self, leg: usize) -> Result<(), VolumeError> {
        Mirror::rejoin(self, leg)
    }
    fn poll_control(&self, now: Nanos) -> bool {
        Mirror::poll_control(self, now)
    }
}

/// What the server needs of a filesystem: its figures now.
pub trait Reported: Send + Sync + 'static {
    /// A snapshot of its counters and gauges.
    fn report(&self) -> FsStats;
}

impl<D: BlockDevice> Reported for Fs<D>
where
    Fs<D>: Send + Sync + 'static,
{
    fn report(&self) -> FsStats {
        FsStats::of(self)
    }
}

/// What one server answers for.
enum Served {
    /// A mirror, its legs named.
    Mirror(Arc<dyn Administered>, Vec<String>),
    /// A mounted filesystem.
    Fs(Arc<dyn Reported>),
}

/// Why the server could not start.
#[derive(Debug)]
#[non_exhaustive]
pub enum ServeError {
    /// Another process answers on the socket: it is never taken over.
    Live(PathBuf),
    /// No place for the socket could be written (each with what it said).
    Nowhere(Vec<(PathBuf, std::io::Error)>),
}

impl std::fmt::Display for ServeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ServeError::Live(p) => write!(
                f,
                "another process serves the control socket {}: stop it first",
                p.display()
            ),
            ServeError::Nowhere(tried) => {
                write!(f, "no place for the control socket could be written:")?;
                for (p, e) in tried {
                    write!(f, " {} ({e});", p.display())?;
                }
                write!(f, " set {} to a writable directory", super::DIR_VARIABLE)
            }
        }
    }
}

impl std::error::Error for ServeError {}

/// A running server; stopped, and its socket removed, when dropped.
#[derive(Debug)]
pub struct ControlServer {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// How long the server waits for a connection between looks at the stop
/// flag when the mirror has no work.
const IDLE_WAIT: Duration = Duration::from_millis(50);
/// ... and when it has (a resync the server drives).
const BUSY_WAIT: Duration = Duration::from_millis(1);
/// How long a client may take to send a request or read a reply.
const CLIENT_PATIENCE: Duration = Duration::from_secs(10);
/// The longest request line read.
const MAX_LINE: u64 = 64 << 10;

impl ControlServer {
    /// Serves `mirror` (named `device`, legs `names`) at the first of
    /// `paths` (see [`super::socket_paths`]) where a socket can be made.
    pub fn start(
        mirror: Arc<dyn Administered>,
        names: Vec<String>,
        paths: &[PathBuf],
    ) -> Result<ControlServer, ServeError> {
        ControlServer::serve(Served::Mirror(mirror, names), paths)
    }

    /// Serves the figures of the filesystem `fs` at the first of `paths`
    /// (see [`super::mount_socket_path`]) where a socket can be made.
    pub fn start_fs(fs: Arc<dyn Reported>, paths: &[PathBuf]) -> Result<ControlServer, ServeError> {
        ControlServer::serve(Served::Fs(fs), paths)
    }

    fn serve(served: Served, paths: &[PathBuf]) -> Result<ControlServer, ServeError> {
        let mut tried = Vec::new();
        for path in paths {
            match bind(path) {
                Ok(listener) => {
                    let stop = Arc::new(AtomicBool::new(false));
                    let serving = Serving {
                        served,
                        owner: sys::euid(),
                    };
                    let flag = stop.clone();
                    let thread = std::thread::Builder::new()
                        .name("pollfs-control".into())
                        .spawn(move || serving.run(&listener, &flag))
                        .map_err(|e| ServeError::Nowhere(vec![(path.clone(), e)]))?;
                    return Ok(ControlServer {
                        path: path.clone(),
                        stop,
                        thread: Some(thread),
                    });
                }
                Err(Bind::Live) => return Err(ServeError::Live(path.clone())),
                Err(Bind::Io(e)) => tried.push((path.clone(), e)),
            }
        }
        Err(ServeError::Nowhere(tried))
    }

    /// Where the socket is.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for ControlServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            // A panic in the server thread has been reported by the
            // panic hook already; the socket is removed either way.
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

enum Bind {
    Live,
    Io(std::io::Error),
}

/// Makes the socket at `path`, replacing a stale one (nobody listening),
/// never a live one; owner-only.
fn bind(path: &Path) -> Result<UnixListener, Bind> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(Bind::Io)?;
    }
    let listener = match UnixListener::bind(path) {
        Ok(l) => l,
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
            if UnixStream::connect(path).is_ok() {
                return Err(Bind::Live);
            }
            std::fs::remove_file(path).map_err(Bind::Io)?;
            UnixListener::bind(path).map_err(Bind::Io)?
        }
        Err(e) => return Err(Bind::Io(e)),
    };
    // Between bind and here the socket has the umask's mode; a peer that
    // connects in between is still checked by uid.
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(Bind::Io)?;
    Ok(listener)
}

/// The server thread's state.
struct Serving {
    served: Served,
    owner: u32,
}

impl Serving {
    fn run(&self, listener: &UnixListener, stop: &AtomicBool) {
        while !stop.load(Ordering::SeqCst) {
            match self.wait(listener) {
                Ok(true) => {}
                Ok(false) => continue,
                // Nothing to tell and no one to tell it to: the volume
                // goes on without live administration.
                Err(_) => return,
            }
            if let Ok((stream, _)) = listener.accept() {
                // One client's I/O error ends its connection only.
                let _ = self.serve(stream, stop);
            }
        }
    }

    /// Drives the mirror's control section once, then waits for `socket`
    /// to be readable, briefly if the mirror has work: true if it is.
    fn wait(&self, socket: &impl AsRawFd) -> std::io::Result<bool> {
        let busy = match &self.served {
            Served::Mirror(mirror, _) => mirror.poll_control(monotonic_clock()),
            Served::Fs(_) => false,
        };
        sys::wait_readable(socket, if busy { BUSY_WAIT } else { IDLE_WAIT })
    }

    /// Answers requests on `stream` until the client closes it, or sends
    /// nothing for [`CLIENT_PATIENCE`]. The mirror is driven while the
    /// client thinks (a `rejoin --wait` asking how far the copy is).
    fn serve(&self, stream: UnixStream, stop: &AtomicBool) -> std::io::Result<()> {
        stream.set_read_timeout(Some(CLIENT_PATIENCE))?;
        stream.set_write_timeout(Some(CLIENT_PATIENCE))?;
        let mut writer = stream.try_clone()?;
        let uid = sys::peer_uid(&stream)?;
        let allowed = uid == 0 || uid == self.owner;
        let mut reader = BufReader::new(stream);
        let mut line = String::new();
        let mut quiet_since = Instant::now();
        while !stop.load(Ordering::SeqCst) {
            if reader.buffer().is_empty() && !self.wait(reader.get_ref())? {
                if quiet_since.elapsed() > CLIENT_PATIENCE {
                    return Ok(());
                }
                continue;
            }
            quiet_since = Instant::now();
            line.clear();
            if (&mut reader).take(MAX_LINE).read_line(&mut line)? == 0 {
                return Ok(());
            }
            if !allowed {
                // Told after its request is read, so the client's write
                // does not meet a closed socket.
                let refusal = format!(
                    "uid {uid} may not use this control socket: only root and uid {} (the \
                     process serving it) may",
                    self.owner
                );
                tracing::warn!(uid, "control request refused: not root or the owner");
                return send(&mut writer, &failed(refusal));
            }
            let reply = match serde_json::from_str::<Request>(&line) {
                Ok(r) if r.version != VERSION => failed(format!(
                    "protocol version {} is not served (this server speaks {VERSION}): use the \
                     pollfs that serves the mirror",
                    r.version
                )),
                Ok(r) => {
                    // Stats are asked every interval by a watcher: not
                    // worth a line at the default level.
                    if r.op == Op::Stats {
                        tracing::debug!(uid, op = ?r.op, "control request");
                    } else {
                        tracing::info!(uid, op = ?r.op, "control request");
                    }
                    self.answer(r.op)
                }
                Err(e) => failed(format!("not a request: {e}")),
            };
            send(&mut writer, &reply)?;
        }
        Ok(())
    }

    fn answer(&self, op: Op) -> Reply {
        match &self.served {
            Served::Mirror(mirror, names) => answer_mirror(&**mirror, names, op),
            Served::Fs(fs) => match op {
                Op::Stats => Reply {
                    version: VERSION,
                    status: None,
                    error: None,
                    stats: Some(fs.report()),
                },
                _ => failed(
                    "this is a mount's socket, which serves statistics only: administer a \
                     mirror with `pollfs mirror`"
                        .into(),
                ),
            },
        }
    }
}

fn answer_mirror(mirror: &dyn Administered, names: &[String], op: Op) -> Reply {
    let done = match op {
        Op::Status => Ok(()),
        Op::Fail { leg } => mirror.fail_leg(leg),
        Op::Rejoin { leg } => mirror.rejoin(leg),
        Op::Stats => {
            return failed(
                "this is a mirror's socket: ask the mount's for statistics (`pollfs stat \
                 MOUNTPOINT`)"
                    .into(),
            )
        }
    };
    // The change is on its way to the legs' headers; a step now starts
    // it before the reply.
    mirror.poll_control(monotonic_clock());
    match done {
        Ok(()) => Reply {
            version: VERSION,
            status: Some(Status::new(&mirror.status(), mirror.block_size(), names)),
            error: None,
            stats: None,
        },
        Err(e) => failed(e.to_string()),
    }
}

fn failed(error: String) -> Reply {
    Reply {
        version: VERSION,
        status: None,
        error: Some(error),
        stats: None,
    }
}

fn send(w: &mut UnixStream, reply: &Reply) -> std::io::Result<()> {
    let mut line = serde_json::to_string(reply).map_err(std::io::Error::other)?;
    line.push('\n');
    w.write_all(line.as_bytes())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use pollfs_core::dev::ram::{RamDevice, RamFrames};
    use pollfs_core::volume::OpenOptions;

    use super::super::client::{Client, ClientError};
    use super::super::LegWire;
    use super::*;

    fn idle() {}

    fn mirror() -> Mirror<RamDevice> {
        let arena = Arc::new(RamFrames::new(128));
        let legs = (0..2)
            .map(|_| RamDevice::with_arena(4 << 20, 4096, arena.clone()).unwrap())
            .collect();
        Mirror::create(legs, 9, OpenOptions::default(), monotonic_clock, idle).unwrap()
    }

    fn names() -> Vec<String> {
        vec!["ram".into(), "ram".into()]
    }

    #[test]
    fn a_live_socket_is_kept_a_stale_one_replaced_and_both_removed_at_the_end() {
        let dir = std::env::temp_dir().join(format!("pollfs-control-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("m.sock");
        // Stale: made by a listener that is gone.
        drop(UnixListener::bind(&path).unwrap());
        assert!(path.exists());
        let m = mirror();
        let server =
            ControlServer::start(Arc::new(m.clone()), names(), std::slice::from_ref(&path))
                .unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "owner only");
        let second =
            ControlServer::start(Arc::new(m.clone()), names(), std::slice::from_ref(&path));
        assert!(matches!(second, Err(ServeError::Live(_))), "{second:?}");

        let mut c = Client::at(&path).unwrap();
        let s = c.call(Op::Status).unwrap();
        assert_eq!(s.uuid, 9);
        assert!(s.legs.iter().all(|l| l.state == LegWire::InSync));
        let s = c.call(Op::Fail { leg: 1 }).unwrap();
        assert_eq!(s.legs[1].state, LegWire::Failed);
        let refused = c.call(Op::Fail { leg: 0 });
        assert!(
            matches!(&refused, Err(ClientError::Refused(why)) if why.contains("no leg")),
            "{refused:?}"
        );
        c.call(Op::Rejoin { leg: 1 }).unwrap();
        // The server drives the copy with nobody else polling the mirror.
        let start = std::time::Instant::now();
        while c.call(Op::Status).unwrap().legs[1].state != LegWire::InSync {
            assert!(start.elapsed() < Duration::from_secs(30), "the resync ends");
            std::thread::sleep(Duration::from_millis(10));
        }
        drop(c);
        drop(server);
        assert!(!path.exists(), "removed at close");
        assert!(matches!(Client::at(&path), Err(ClientError::NotServed)));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_mounts_socket_serves_statistics_only_and_a_mirrors_refuses_them() {
        let dir = std::env::temp_dir().join(format!("pollfs-control-s-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fs_path = dir.join("fs.sock");
        let fs = Fs::format(
            RamDevice::new(16 << 20, 4096, 64).unwrap(),
            pollfs_core::Config::default(),
            4,
        )
        .unwrap();
        let server =
            ControlServer::start_fs(Arc::new(fs.clone()), std::slice::from_ref(&fs_path)).unwrap();
        let mode = std::fs::metadata(&fs_path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "owner only");
        let mut c = Client::at(&fs_path).unwrap();
        let before = c.stats().unwrap();
        let f = fs.create("a").unwrap();
        f.write_all_at(&[3; 4096], 0).unwrap();
        let after = c.stats().unwrap();
        assert_eq!(after.since(&before).counter("writes"), 1);
        assert_eq!(after.gauges.dirty_pages, 1);
        let refused = c.call(Op::Status);
        assert!(
            matches!(&refused, Err(ClientError::Refused(why)) if why.contains("statistics only")),
            "{refused:?}"
        );
        drop((c, server));

        let m_path = dir.join("m.sock");
        let server =
            ControlServer::start(Arc::new(mirror()), names(), std::slice::from_ref(&m_path))
                .unwrap();
        let refused = Client::at(&m_path).unwrap().stats();
        assert!(
            matches!(&refused, Err(ClientError::Refused(why)) if why.contains("pollfs stat")),
            "{refused:?}"
        );
        drop(server);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_request_of_another_version_or_no_request_is_answered_with_why() {
        let dir = std::env::temp_dir().join(format!("pollfs-control-v-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("m.sock");
        let server =
            ControlServer::start(Arc::new(mirror()), names(), std::slice::from_ref(&path)).unwrap();
        let mut s = UnixStream::connect(&path).unwrap();
        s.write_all(b"{\"version\":99,\"op\":\"status\"}\nnonsense\n")
            .unwrap();
        let mut lines = BufReader::new(s).lines();
        let reply: Reply = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
        assert!(reply.error.unwrap().contains("version 99"));
        let reply: Reply = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
        assert!(reply.error.unwrap().contains("not a request"));
        drop(server);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
