//! Live administration: the process that has a mirror open (a mount
//! always; the bench and a library user when they set
//! [`OpenOptions::control`](crate::OpenOptions::control)) serves a Unix
//! socket, and `pollfs mirror` talks to it instead of opening the volume,
//! which the device lock would refuse. A mount also serves its
//! filesystem's figures ([`Op::Stats`]) on a socket of its own, named
//! after the mount ([`mount_socket_path`]), for `pollfs stat`.
//!
//! - this file: the protocol (both ends use it) and where the sockets are;
//! - [`stats`]: a filesystem's figures on the wire;
//! - [`server`]: the thread that serves a socket;
//! - [`client`]: one connection, a request at a time;
//! - `sys`: the system calls std lacks (the peer's uid, `poll(2)`).
//!
//! **Protocol.** One JSON object per line each way: a [`Request`], then
//! its [`Reply`], as many times as the client likes. Both carry
//! [`VERSION`]; a server refuses a request of another version, and a
//! client a reply of another, each saying which version it speaks. A new
//! field or operation is a new version.
//!
//! **Where.** The socket is named after the mirror's identity (its
//! uuid): `/run/pollfs/<uuid>.sock`, or, when that directory cannot be
//! made or written (not root), `.pollfs-<uuid>.sock` beside the first
//! `file:` leg, where the device lock is. `POLLFS_CONTROL_DIR` names
//! another directory instead of `/run/pollfs` (tests). A client finds the
//! uuid in the header of a `file:` leg, which it reads without opening
//! the volume. A mount's socket is `mount-MAJ:MIN.sock` in the same
//! directory, after the mount's device number in
//! `/proc/self/mountinfo`, which a client finds from the mount point.
//!
//! **Who.** The socket is made mode 0600, and the server also checks every
//! peer's uid (`SO_PEERCRED`): only root and the uid of the serving
//! process are answered, on either kind of socket.

pub mod client;
pub mod server;
pub mod stats;
mod sys;

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use pollfs_core::volume::header::{self, Header};
use pollfs_core::volume::{LegState, MirrorStatus};
use serde::{Deserialize, Serialize};

use crate::spec::Leaf;

/// The protocol's version (2: [`Op::Stats`] and [`Reply::stats`]; 3:
/// each device's and leg's figures, [`stats::FsStats::devices`]).
pub const VERSION: u32 = 3;

/// Where sockets go when that directory can be written.
pub const RUN_DIR: &str = "/run/pollfs";

/// Names another directory than [`RUN_DIR`].
pub const DIR_VARIABLE: &str = "POLLFS_CONTROL_DIR";

/// One request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    /// [`VERSION`] of the client.
    pub version: u32,
    /// What to do.
    pub op: Op,
}

/// What a request asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Op {
    /// The mirror's state.
    Status,
    /// Drop a leg.
    Fail {
        /// The leg's position.
        leg: usize,
    },
    /// Take a failed or stale leg back; returns at once, the copy runs
    /// on (watch it with [`Op::Status`]).
    Rejoin {
        /// The leg's position.
        leg: usize,
    },
    /// The filesystem's figures ([`stats::FsStats`]); a mount's socket
    /// answers it, a mirror's refuses it.
    Stats,
}

/// The answer to one request: the mirror's state after it (or the
/// filesystem's figures, for [`Op::Stats`]), or why it was not done.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reply {
    /// [`VERSION`] of the server.
    pub version: u32,
    /// The state after the request, if it was done.
    pub status: Option<Status>,
    /// Why it was not, if it was not.
    pub error: Option<String>,
    /// The figures asked for by [`Op::Stats`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stats: Option<stats::FsStats>,
}

/// A mirror's state, as the server (or the headers, offline) tell it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Status {
    /// The mirror's identity.
    pub uuid: u64,
    /// Generation of the membership state.
    pub generation: u64,
    /// Generation on every leg that takes writes.
    pub durable_generation: u64,
    /// Capacity in blocks.
    pub data_blocks: u64,
    /// Block size in bytes.
    pub block_size: u32,
    /// Opened for writing and not closed since.
    pub dirty: bool,
    /// A change of membership could not be recorded: writes fail.
    pub broken: bool,
    /// Each leg, by position.
    pub legs: Vec<LegStatus>,
    /// The write-intent bitmap: bytes per region.
    #[serde(default)]
    pub region_bytes: u64,
    /// Regions in the mirror.
    #[serde(default)]
    pub regions: u32,
    /// Regions marked (a returning leg is copied there only).
    #[serde(default)]
    pub dirty_regions: u32,
    /// Blocks resyncs have written to legs since the mirror was opened.
    #[serde(default)]
    pub resync_copied: u64,
}

/// One leg's state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LegStatus {
    /// What it is, as the spec names it.
    pub name: String,
    /// Its state.
    pub state: LegWire,
    /// Reads that failed on it.
    pub read_errors: u64,
    /// Writes, flushes and header writes that failed on it.
    pub write_errors: u64,
}

/// A leg's state on the wire ([`LegState`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LegWire {
    /// Holds every write; serves reads.
    InSync,
    /// Waits to be copied.
    Stale,
    /// Being copied: `copied_blocks` of the mirror's blocks so far.
    Resyncing {
        /// Blocks copied from the start of the mirror.
        copied_blocks: u64,
    },
    /// Dropped.
    Failed,
}

impl Status {
    /// The state `s` of a mirror of blocks of `block_size` bytes whose
    /// legs are `names`.
    pub fn new(s: &MirrorStatus, block_size: u32, names: &[String]) -> Status {
        let legs = s
            .legs
            .iter()
            .enumerate()
            .map(|(i, (state, errors))| LegStatus {
                name: names.get(i).cloned().unwrap_or_default(),
                state: match *state {
                    LegState::InSync => LegWire::InSync,
                    LegState::Stale => LegWire::Stale,
                    LegState::Resyncing { copied } => LegWire::Resyncing {
                        copied_blocks: copied,
                    },
                    LegState::Failed => LegWire::Failed,
                },
                read_errors: errors.reads,
                write_errors: errors.writes,
            })
            .collect();
        Status {
            uuid: s.uuid,
            generation: s.generation,
            durable_generation: s.durable_generation,
            data_blocks: s.data_blocks,
            block_size,
            dirty: s.dirty,
            broken: s.broken,
            legs,
            region_bytes: s.region_bytes,
            regions: s.regions,
            dirty_regions: s.dirty_regions,
            resync_copied: s.resync_copied,
        }
    }

    /// True once no leg waits for or is in a copy.
    pub fn settled(&self) -> bool {
        !self
            .legs
            .iter()
            .any(|l| matches!(l.state, LegWire::Stale | LegWire::Resyncing { .. }))
    }
}

/// Where the socket of mirror `uuid` over `legs` may be, in the order a
/// server tries them: the run directory, then beside each `file:` leg.
pub fn socket_paths(uuid: u64, legs: &[Leaf]) -> Vec<PathBuf> {
    let mut paths = vec![run_dir().join(format!("{uuid:016x}.sock"))];
    for leg in legs {
        if let Leaf::File(path) = leg {
            let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
            let dir = dir.unwrap_or(Path::new("."));
            paths.push(dir.join(format!(".pollfs-{uuid:016x}.sock")));
        }
    }
    paths
}

/// Where the socket of the mount whose device number is `mount_id`
/// ("MAJ:MIN", as `/proc/self/mountinfo` shows it) is.
pub fn mount_socket_path(mount_id: &str) -> PathBuf {
    run_dir().join(format!("mount-{mount_id}.sock"))
}

/// The directory sockets go to first.
fn run_dir() -> PathBuf {
    std::env::var_os(DIR_VARIABLE).map_or_else(|| PathBuf::from(RUN_DIR), PathBuf::from)
}

/// The mirror's uuid, from the newest intact header on its `file:` legs
/// (read directly, so it works while another process holds the volume);
/// `None` if no `file:` leg carries one.
pub fn mirror_uuid(legs: &[Leaf]) -> Option<u64> {
    legs.iter()
        .filter_map(|l| match l {
            Leaf::File(path) => newest_header(path),
            _ => None,
        })
        .max_by_key(|h| h.generation)
        .map(|h| h.uuid)
}

/// The newest intact header in the last pages of the file at `path`.
fn newest_header(path: &Path) -> Option<Header> {
    let len = crate::file::inspect(path).ok()??.len;
    let page = pollfs_core::units::PAGE_SIZE as u64;
    let at = (len / page).checked_sub(header::PAGES)? * page;
    let mut file = std::fs::File::open(path).ok()?;
    file.seek(SeekFrom::Start(at)).ok()?;
    let mut block = vec![0u8; (header::PAGES * page) as usize];
    file.read_exact(&mut block).ok()?;
    block
        .chunks(page as usize)
        .filter_map(|c| Header::decode(c).ok())
        .max_by_key(|h| h.generation)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_and_replies_are_one_json_line_each() {
        let r = Request {
            version: VERSION,
            op: Op::Rejoin { leg: 1 },
        };
        let line = serde_json::to_string(&r).unwrap();
        assert_eq!(line, r#"{"version":3,"op":{"rejoin":{"leg":1}}}"#);
        assert_eq!(serde_json::from_str::<Request>(&line).unwrap(), r);
        let status = serde_json::to_string(&Request {
            version: VERSION,
            op: Op::Status,
        })
        .unwrap();
        assert_eq!(status, r#"{"version":3,"op":"status"}"#);
        let reply = Reply {
            version: VERSION,
            status: None,
            error: Some("no".into()),
            stats: None,
        };
        assert!(!serde_json::to_string(&reply).unwrap().contains("stats"));
        let line = serde_json::to_string(&reply).unwrap();
        assert!(!line.contains('\n'));
        assert_eq!(serde_json::from_str::<Reply>(&line).unwrap(), reply);
    }

    #[test]
    fn the_socket_is_named_after_the_mirror_in_the_run_dir_then_beside_file_legs() {
        let legs = [Leaf::File("/data/a.img".into()), Leaf::Ram];
        let paths = socket_paths(0xAB, &legs);
        assert_eq!(paths.len(), 2);
        assert!(paths[0].ends_with("00000000000000ab.sock"), "{paths:?}");
        assert_eq!(paths[1], Path::new("/data/.pollfs-00000000000000ab.sock"));
    }
}
