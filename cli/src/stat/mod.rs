//! `pollfs stat MOUNTPOINT|DEVICE`: the figures of a running filesystem,
//! from the control socket its mount serves
//! ([`pollfs_device::control::Op::Stats`]): a snapshot, or with `-i` the
//! growth in each interval, as `iostat` prints it; `--json` for programs;
//! `--prometheus ADDR` serves them in Prometheus's text format instead.
//!
//! - this file: the command, finding the socket, the sampling loop;
//! - [`show`]: the text and JSON forms of a snapshot and of an interval;
//! - [`prometheus`]: the text exposition format and its HTTP endpoint.
//!
//! Each sample is a connection of its own: the server answers one
//! connection at a time, and a watcher holding one would keep every
//! other client (a second watcher, a scrape) waiting.

mod prometheus;
mod show;

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use pollfs_device::control::client::{Client, ClientError};
use pollfs_device::control::stats::FsStats;
use pollfs_device::control::{mount_socket_path, Op, Status};

use crate::mount::umount;

/// Why a mirror's socket did not tell its legs.
#[derive(Debug)]
pub struct MirrorUnanswered {
    socket: PathBuf,
    error: ClientError,
}

impl std::fmt::Display for MirrorUnanswered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.socket.display(), self.error)
    }
}

/// A mirror's state, or why its socket did not answer.
pub type MirrorAnswer = Result<Status, MirrorUnanswered>;

/// Options of `pollfs stat`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// A pollfs mount point, or the device a `pollfs mount` serves, as
    /// the mount names it (the source /proc/mounts shows, e.g.
    /// `file:/srv/db.img`).
    target: String,
    /// Print the growth of every counter in each interval of SECS seconds
    /// (per second, like `iostat -x SECS`), until interrupted or COUNT
    /// intervals.
    #[arg(short, long, value_name = "SECS")]
    interval: Option<f64>,
    /// With --interval: stop after this many intervals.
    #[arg(short, long, requires = "interval")]
    count: Option<u64>,
    /// One JSON object a line: the snapshot, or each interval.
    #[arg(long)]
    json: bool,
    /// Serve the figures in Prometheus's text format at
    /// http://ADDR/metrics (e.g. `127.0.0.1:9437`; port 0 picks one and
    /// says which on stderr) until interrupted, instead of printing them.
    /// Off unless asked for.
    #[arg(long, value_name = "ADDR", conflicts_with_all = ["interval", "json"])]
    prometheus: Option<SocketAddr>,
}

/// Where a mount's figures are served.
#[derive(Debug, Clone)]
struct Target {
    /// The mount point, for headers and labels.
    mountpoint: PathBuf,
    /// Its control socket.
    socket: PathBuf,
}

impl Target {
    /// The mount `target` names: a pollfs mount point, or the source of
    /// a pollfs mount.
    fn find(target: &str) -> anyhow::Result<Target> {
        let path = Path::new(target);
        // A mount point as mountinfo names it: found even by a user the
        // mount does not let in (who cannot resolve the path), so that
        // the socket's own rule answers them.
        if let Some(id) = path.is_absolute().then(|| umount::mount_id(path)).flatten() {
            return Ok(Target {
                socket: mount_socket_path(&id),
                mountpoint: path.to_path_buf(),
            });
        }
        if path.is_dir() {
            let dir = path
                .canonicalize()
                .with_context(|| format!("{target}: cannot resolve"))?;
            let id = umount::mount_id(&dir)
                .ok_or_else(|| anyhow!("{target}: no pollfs filesystem is mounted there"))?;
            return Ok(Target {
                socket: mount_socket_path(&id),
                mountpoint: dir,
            });
        }
        let (id, mountpoint) = umount::mount_of_source(target).ok_or_else(|| {
            anyhow!(
                "{target}: neither a pollfs mount point nor the device of one (name the device \
                 as the mount does: /proc/mounts shows it)"
            )
        })?;
        Ok(Target {
            socket: mount_socket_path(&id),
            mountpoint,
        })
    }

    /// The filesystem's figures and, when it is on a mirror, the mirror's
    /// legs (or why its socket did not tell them).
    fn sample_all(&self) -> anyhow::Result<(FsStats, Option<MirrorAnswer>)> {
        let stats = self.sample()?;
        let mirror = stats.mirror_socket.as_deref().map(|socket| {
            Client::at(socket)
                .and_then(|mut c| c.call(Op::Status))
                .map_err(|error| MirrorUnanswered {
                    socket: socket.to_path_buf(),
                    error,
                })
        });
        Ok((stats, mirror))
    }

    /// One snapshot, over a connection of its own.
    fn sample(&self) -> anyhow::Result<FsStats> {
        let shown = self.mountpoint.display();
        let mut client = Client::at(&self.socket).map_err(|e| match e {
            ClientError::NotServed => anyhow!(
                "{shown}: its server serves no control socket at {} (a pollfs older than `pollfs \
                 stat`, or one that could not make the socket: see its log)",
                self.socket.display()
            ),
            e => anyhow!("{shown}: {e}"),
        })?;
        client.stats().map_err(|e| anyhow!("{shown}: {e}"))
    }
}

/// `pollfs stat`.
pub fn run(args: &Args) -> anyhow::Result<()> {
    let target = Target::find(&args.target)?;
    if let Some(addr) = args.prometheus {
        return prometheus::serve(addr, &target);
    }
    let Some(secs) = args.interval else {
        let (now, mirror) = target.sample_all()?;
        let text = if args.json {
            show::snapshot_json(&target.mountpoint, &now, mirror.as_ref())?
        } else {
            show::snapshot(&target.mountpoint, &now, mirror.as_ref())
        };
        return say(&text);
    };
    if !(secs.is_finite() && secs > 0.0) {
        bail!("--interval {secs}: give a number of seconds above 0");
    }
    let period = Duration::from_secs_f64(secs);
    let mut earlier = target.sample()?;
    let mut done = 0u64;
    if !args.json {
        say(&show::interval_header(&target.mountpoint))?;
    }
    while args.count.is_none_or(|c| done < c) {
        std::thread::sleep(period);
        let now = target.sample()?;
        let interval = show::Interval::between(&earlier, &now);
        say(&if args.json {
            interval.json()?
        } else {
            interval.line()
        })?;
        earlier = now;
        done += 1;
    }
    Ok(())
}

/// Prints `text` and a newline, at once (a watcher reads line by line).
fn say(text: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{text}")?;
    out.flush()?;
    Ok(())
}
