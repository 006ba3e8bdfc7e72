//! The extended-attribute requests: set, get, list and remove, each one
//! engine call. The kernel checks who may (`default_permissions` and the
//! VFS's namespace rules: `trusted.` needs CAP_SYS_ADMIN, `user.` only on
//! files and directories) and the value's 64 KiB before it asks; the
//! engine keeps the names and the limits (`persist::xattr`), and its
//! POSIX layer (`pollfs_core::fs::posix`) checks ACLs
//! (`system.posix_acl_*`) and keeps the permission bits in step.

use std::ffi::OsStr;

use fuser::Errno;
use pollfs_core::dev::BlockDevice;
use pollfs_core::XattrMode;

use super::attr::FuseIno;
use super::server::{errno, Res, Server};

/// What a get or list answers: the length alone (the caller asked with
/// size 0), or the bytes, if they fit in `size` (ERANGE if not).
#[derive(Debug, PartialEq, Eq)]
pub enum Sized {
    /// The length the caller needs.
    Len(u32),
    /// The bytes.
    Bytes(Vec<u8>),
}

fn sized(bytes: Vec<u8>, size: u32) -> Res<Sized> {
    let len = u32::try_from(bytes.len()).map_err(|_| Errno::E2BIG)?;
    if size == 0 {
        Ok(Sized::Len(len))
    } else if len > size {
        Err(Errno::ERANGE)
    } else {
        Ok(Sized::Bytes(bytes))
    }
}

/// A name the engine could hold: UTF-8 (others are in no namespace it
/// keeps).
fn xname(name: &OsStr) -> Res<&str> {
    name.to_str().ok_or(Errno::EOPNOTSUPP)
}

impl<D: BlockDevice> Server<D> {
    /// `setxattr`: `flags` are XATTR_CREATE and XATTR_REPLACE (both at
    /// once, or any other bit, is EINVAL as Linux answers). `kill_sgid`:
    /// the kernel's FUSE_SETXATTR_ACL_KILL_SGID, which an access ACL obeys
    /// (see `Fs::set_acl`).
    pub fn setxattr(
        &self,
        ino: FuseIno,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        kill_sgid: bool,
    ) -> Res<()> {
        let mode = match flags {
            0 => XattrMode::Any,
            libc::XATTR_CREATE => XattrMode::Create,
            libc::XATTR_REPLACE => XattrMode::Replace,
            _ => return Err(Errno::EINVAL),
        };
        let name = xname(name)?;
        self.fs
            .posix_setxattr(ino.engine(), name, value, mode, kill_sgid)
            .map_err(errno)
    }

    /// `getxattr`.
    pub fn getxattr(&self, ino: FuseIno, name: &OsStr, size: u32) -> Res<Sized> {
        let name = name.to_str().ok_or(Errno::ENODATA)?;
        let value = self.fs.posix_getxattr(ino.engine(), name).map_err(errno)?;
        sized(value, size)
    }

    /// `listxattr`: every name, each ended by a NUL.
    pub fn listxattr(&self, ino: FuseIno, size: u32) -> Res<Sized> {
        let mut out = Vec::new();
        for n in self.fs.list_xattr(ino.engine()).map_err(errno)? {
            out.extend_from_slice(n.as_bytes());
            out.push(0);
        }
        sized(out, size)
    }

    /// `removexattr`.
    pub fn removexattr(&self, ino: FuseIno, name: &OsStr) -> Res<()> {
        let name = name.to_str().ok_or(Errno::ENODATA)?;
        self.fs.posix_removexattr(ino.engine(), name).map_err(errno)
    }
}
