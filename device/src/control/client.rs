//! A connection to a control server: a mirror's, or a mount's.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::stats::FsStats;
use super::{Op, Reply, Request, Status, VERSION};
use crate::spec::Leaf;

/// Why a request got no answer, or was refused.
#[derive(Debug)]
#[non_exhaustive]
pub enum ClientError {
    /// Nobody serves the mirror: it is not open, or the process that has
    /// it open serves no socket.
    NotServed,
    /// The socket is there but this user may not connect to it.
    Denied(PathBuf),
    /// The server did not do it, and said why.
    Refused(String),
    /// The conversation broke off.
    Io(std::io::Error),
    /// The server's answer could not be read.
    Protocol(String),
}

impl std::fmt::Display for ClientError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClientError::NotServed => write!(f, "no process serves this mirror's control socket"),
            ClientError::Denied(p) => write!(
                f,
                "{}: permission denied: only root and the owner of the process serving it may \
                 use this control socket",
                p.display()
            ),
            ClientError::Refused(why) => write!(f, "{why}"),
            ClientError::Io(e) => write!(f, "the control connection broke off: {e}"),
            ClientError::Protocol(why) => write!(f, "the control server's answer: {why}"),
        }
    }
}

impl std::error::Error for ClientError {}

/// A connection.
#[derive(Debug)]
pub struct Client {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
    path: PathBuf,
}

/// How long a reply may take.
const PATIENCE: Duration = Duration::from_secs(30);

impl Client {
    /// Connects to the server of the mirror over `legs`, if one answers.
    /// (A socket nobody listens on is a stale one: not served.)
    pub fn connect(legs: &[Leaf]) -> Result<Client, ClientError> {
        let uuid = super::mirror_uuid(legs).ok_or(ClientError::NotServed)?;
        for path in super::socket_paths(uuid, legs) {
            match Client::at(&path) {
                Err(ClientError::NotServed) => {}
                found => return found,
            }
        }
        Err(ClientError::NotServed)
    }

    /// Connects to the server at `path`.
    pub fn at(path: &Path) -> Result<Client, ClientError> {
        match UnixStream::connect(path) {
            Ok(s) => Client::over(s, path.to_path_buf()),
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                Err(ClientError::Denied(path.to_path_buf()))
            }
            Err(_) => Err(ClientError::NotServed),
        }
    }

    fn over(stream: UnixStream, path: PathBuf) -> Result<Client, ClientError> {
        stream
            .set_read_timeout(Some(PATIENCE))
            .map_err(ClientError::Io)?;
        let writer = stream.try_clone().map_err(ClientError::Io)?;
        Ok(Client {
            reader: BufReader::new(stream),
            writer,
            path,
        })
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Sends `op`; the mirror's state after it.
    pub fn call(&mut self, op: Op) -> Result<Status, ClientError> {
        let reply = self.exchange(op)?;
        match (reply.status, reply.error) {
            (_, Some(why)) => Err(ClientError::Refused(why)),
            (Some(status), None) => Ok(status),
            (None, None) => Err(ClientError::Protocol("neither a state nor an error".into())),
        }
    }

    /// The filesystem's figures, from a mount's socket.
    pub fn stats(&mut self) -> Result<FsStats, ClientError> {
        let reply = self.exchange(Op::Stats)?;
        match (reply.stats, reply.error) {
            (_, Some(why)) => Err(ClientError::Refused(why)),
            (Some(stats), None) => Ok(stats),
            (None, None) => Err(ClientError::Protocol(
                "neither statistics nor an error".into(),
            )),
        }
    }

    /// Sends `op` and reads the reply, of this protocol's version.
    fn exchange(&mut self, op: Op) -> Result<Reply, ClientError> {
        let request = Request {
            version: VERSION,
            op,
        };
        let mut line =
            serde_json::to_string(&request).map_err(|e| ClientError::Protocol(e.to_string()))?;
        line.push('\n');
        self.writer
            .write_all(line.as_bytes())
            .map_err(ClientError::Io)?;
        line.clear();
        if self.reader.read_line(&mut line).map_err(ClientError::Io)? == 0 {
            return Err(ClientError::Io(std::io::ErrorKind::UnexpectedEof.into()));
        }
        let reply: Reply =
            serde_json::from_str(&line).map_err(|e| ClientError::Protocol(e.to_string()))?;
        if reply.version != VERSION {
            return Err(ClientError::Protocol(format!(
                "it speaks protocol version {}, this pollfs {VERSION}: use the pollfs that \
                 serves the socket",
                reply.version
            )));
        }
        Ok(reply)
    }
}
