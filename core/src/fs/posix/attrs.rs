//! Changing an inode's attributes as POSIX says: chmod, chown and times
//! for a caller, set-id bits taken away by writes and chowns, capability
//! attributes taken away by writes, the ACL attributes and the bits they
//! imply, and who may touch which extended attribute.
//!
//! The order of the records a change makes is chosen so that a crash
//! never leaves more access than asked for (see docs/design/mount.md, "POSIX
//! ACLs").

use super::{
    may_access, without_privs, Acl, Creds, Want, ACL_ACCESS, ACL_DEFAULT, S_ISGID, S_ISVTX,
};
use crate::dev::BlockDevice;
use crate::error::{Error, PosixError, Result, XattrError};
use crate::fs::{File, Fs, Metadata, SetAttr, XattrMode};
use crate::persist::record::Kind;
use crate::units::InodeId;

/// True for the two ACL attributes.
pub fn is_acl(name: &str) -> bool {
    name == ACL_ACCESS || name == ACL_DEFAULT
}

/// The extended attribute holding a file's capabilities
/// (`XATTR_NAME_CAPS`).
pub const XATTR_NAME_CAPS: &str = "security.capability";

impl<D: BlockDevice> Fs<D> {
    /// The access ACL of `ino`, if it has one.
    pub fn access_acl(&self, ino: InodeId) -> Result<Option<Acl>> {
        self.acl_of(ino, ACL_ACCESS)
    }

    /// The default ACL of directory `ino`, if it has one.
    pub fn default_acl(&self, ino: InodeId) -> Result<Option<Acl>> {
        self.acl_of(ino, ACL_DEFAULT)
    }

    fn acl_of(&self, ino: InodeId, name: &str) -> Result<Option<Acl>> {
        match self.get_xattr(ino, name) {
            Ok(v) => Ok(Acl::parse(&v)?),
            Err(Error::Xattr(XattrError::NotFound)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Refuses unless `creds` may do `want` to `ino`, as its bits and
    /// access ACL say ([`may_access`]).
    pub fn check_access(&self, ino: InodeId, creds: &Creds, want: Want) -> Result<Metadata> {
        let m = self.attr(ino)?;
        let acl = if creds.is_root() || creds.uid == m.uid {
            None
        } else {
            self.access_acl(ino)?
        };
        if may_access(creds, &m, acl.as_ref(), want) {
            Ok(m)
        } else {
            Err(PosixError::AccessDenied.into())
        }
    }

    /// Refuses unless `creds` may remove the entry `name` of directory
    /// `dir`, or rename it away or over it (`may_delete`): write and
    /// search permission on `dir` (EACCES), and in a sticky directory
    /// only the owner of the entry or of the directory, or root (EPERM).
    pub fn check_remove_by(&self, dir: InodeId, name: &str, creds: &Creds) -> Result<()> {
        let d = self.check_access(dir, creds, Want::WRITE_EXEC)?;
        if d.perm & S_ISVTX == 0 || creds.is_root() || creds.uid == d.uid {
            return Ok(());
        }
        let victim = self.attr(self.lookup_in(dir, name)?)?;
        if victim.uid == creds.uid {
            Ok(())
        } else {
            Err(PosixError::NotOwner.into())
        }
    }

    /// chmod of `ino` to `perm` by `creds`: only the owner or root may
    /// (EPERM), and set-group-id goes if the caller is neither in the
    /// file's group nor root (as Linux's `setattr_copy`).
    pub fn chmod_by(&self, ino: InodeId, perm: u16, creds: &Creds) -> Result<Metadata> {
        let m = self.attr(ino)?;
        if !creds.is_root() && creds.uid != m.uid {
            return Err(PosixError::NotOwner.into());
        }
        let mut perm = perm & 0o7777;
        if !creds.keeps_sgid(m.gid) {
            perm &= !S_ISGID;
        }
        self.chmod(ino, perm)
    }

    /// chmod of `ino` to `perm`, unchecked: its access ACL follows
    /// ([`Fs::chmod_acl`]), then the bits.
    pub fn chmod(&self, ino: InodeId, perm: u16) -> Result<Metadata> {
        self.chmod_acl(ino, perm)?;
        let change = SetAttr {
            perm: Some(perm),
            ..SetAttr::default()
        };
        self.set_attr(ino, change)
    }

    /// The access ACL of `ino`, if it has one, follows a chmod to `perm`
    /// (`posix_acl_chmod`); called before the bits change, so a crash
    /// between leaves the ACL, which access checks read, saying the new
    /// bits.
    pub fn chmod_acl(&self, ino: InodeId, perm: u16) -> Result<()> {
        let Some(mut acl) = self.access_acl(ino)? else {
            return Ok(());
        };
        acl.chmod(perm);
        self.set_xattr(ino, ACL_ACCESS, &acl.to_bytes(), XattrMode::Any)
    }

    /// chown of `ino` by `creds` (`chown_ok`, `chgrp_ok`): root may give
    /// it to anyone; its owner may only change its group, to one of the
    /// owner's groups. Set-user-id and (as [`without_privs`] says)
    /// set-group-id go from anything but a directory, even for root.
    pub fn chown_by(
        &self,
        ino: InodeId,
        uid: Option<u32>,
        gid: Option<u32>,
        creds: &Creds,
    ) -> Result<Metadata> {
        let m = self.attr(ino)?;
        if !creds.is_root() {
            let uid_ok = uid.is_none_or(|u| u == m.uid && u == creds.uid);
            let owner = creds.uid == m.uid;
            let gid_ok = gid.is_none_or(|g| g == m.gid || (owner && creds.in_group(g)));
            if !uid_ok || !gid_ok || (gid.is_some() && !owner) {
                return Err(PosixError::NotOwner.into());
            }
        }
        let perm = if m.kind == Kind::Dir {
            None
        } else {
            without_privs(m.perm, || creds.keeps_sgid(m.gid))
        };
        self.set_attr(
            ino,
            SetAttr {
                perm,
                uid,
                gid,
                ..SetAttr::default()
            },
        )
    }

    /// utimensat(2) of `ino` by `creds`: times given explicitly
    /// (`explicit`) only by the owner or root (EPERM); both set to now
    /// also by a caller who may write it (EACCES).
    pub fn set_times_by(
        &self,
        ino: InodeId,
        atime: Option<u64>,
        mtime: Option<u64>,
        explicit: bool,
        creds: &Creds,
    ) -> Result<Metadata> {
        let m = self.attr(ino)?;
        if !creds.is_root() && creds.uid != m.uid {
            if explicit {
                return Err(PosixError::NotOwner.into());
            }
            self.check_access(ino, creds, Want::WRITE)?;
        }
        self.set_attr(
            ino,
            SetAttr {
                atime,
                mtime,
                ..SetAttr::default()
            },
        )
    }

    /// Takes set-user-id and set-group-id from `ino` as a write, truncate
    /// or fallocate by a caller without CAP_FSETID does ([`without_privs`];
    /// `keeps_sgid` is asked with the file's group). True if bits went.
    pub fn kill_setid(&self, ino: InodeId, keeps_sgid: impl FnOnce(u32) -> bool) -> Result<bool> {
        let m = self.attr(ino)?;
        if m.kind == Kind::Dir {
            return Ok(false);
        }
        let Some(perm) = without_privs(m.perm, || keeps_sgid(m.gid)) else {
            return Ok(false);
        };
        let change = SetAttr {
            perm: Some(perm),
            ..SetAttr::default()
        };
        self.set_attr(ino, change)?;
        Ok(true)
    }

    /// Takes `security.capability` away from `f`, as Linux's
    /// `file_remove_privs` does before every write and truncate whoever
    /// the writer is (`dentry_needs_remove_privs`, `cap_inode_killpriv`).
    /// True if there was one.
    pub fn remove_caps(&self, f: &File<D>) -> Result<bool> {
        if !f.has_xattrs() {
            return Ok(false);
        }
        match self.remove_xattr(f.ino(), XATTR_NAME_CAPS) {
            Ok(()) => Ok(true),
            Err(Error::Xattr(XattrError::NotFound)) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Refuses an ACL attribute where Linux has none: on a symbolic link
    /// (EOPNOTSUPP), and a default ACL on anything but a directory
    /// (EACCES). Returns the inode's bits.
    fn acl_target(&self, ino: InodeId, name: &str) -> Result<u16> {
        let m = self.attr(ino)?;
        if m.kind == Kind::Symlink {
            return Err(PosixError::NoAclHere.into());
        }
        if name == ACL_DEFAULT && m.kind != Kind::Dir {
            return Err(PosixError::DefaultAclNotDir.into());
        }
        Ok(m.perm)
    }

    /// Sets [`ACL_ACCESS`] or [`ACL_DEFAULT`]: the value checked, an
    /// access ACL's bits set on the inode, and one the bits say in full
    /// kept as the bits alone (its attribute removed). With `kill_sgid`
    /// (the setter is neither in the file's group nor root: Linux's
    /// `posix_acl_update_mode`) an access ACL takes set-group-id away
    /// too; a default ACL changes no bits. Linux ignores XATTR_CREATE and
    /// XATTR_REPLACE for ACLs, and so does this.
    pub fn set_acl(&self, ino: InodeId, name: &str, value: &[u8], kill_sgid: bool) -> Result<()> {
        let perm = self.acl_target(ino, name)?;
        let Some(acl) = Acl::parse(value)? else {
            return self.remove_acl(ino, name);
        };
        if name == ACL_DEFAULT {
            return self.set_xattr(ino, name, &acl.to_bytes(), XattrMode::Any);
        }
        let mut new = acl.mode(perm);
        if kill_sgid {
            new &= !S_ISGID;
        }
        let set_perm = |perm| {
            let change = SetAttr {
                perm: Some(perm),
                ..SetAttr::default()
            };
            self.set_attr(ino, change).map(|_| ())
        };
        if acl.is_minimal() {
            // The bits first, durable before the attribute goes: a crash
            // between must not leave the old mask as the group's bits.
            if new != perm {
                set_perm(new)?;
                self.sync()?;
            }
            return self.remove_acl(ino, name);
        }
        // The ACL first (staged now), the bits after (logged with the
        // inode's next record): while the bits are old, access checks
        // read the new ACL, or, if the old bits give the group nothing,
        // give the group class nothing.
        self.set_xattr(ino, name, &acl.to_bytes(), XattrMode::Any)?;
        if new != perm {
            set_perm(new)?;
        }
        Ok(())
    }

    /// Removes an ACL attribute: as Linux, removing one that is not there
    /// (a default ACL of anything but a directory among them) is no error,
    /// and the bits stay.
    pub fn remove_acl(&self, ino: InodeId, name: &str) -> Result<()> {
        match self.acl_target(ino, name) {
            Err(Error::Posix(PosixError::DefaultAclNotDir)) => return Ok(()),
            other => other?,
        };
        match self.remove_xattr(ino, name) {
            Err(Error::Xattr(XattrError::NotFound)) | Ok(()) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// `setxattr(2)`'s semantics: the ACL attributes through
    /// [`Fs::set_acl`] (`kill_sgid` as it says), any other as
    /// [`Fs::set_xattr`]. Who may is not checked here (see
    /// [`Fs::check_xattr_by`]).
    pub fn posix_setxattr(
        &self,
        ino: InodeId,
        name: &str,
        value: &[u8],
        mode: XattrMode,
        kill_sgid: bool,
    ) -> Result<()> {
        if is_acl(name) {
            return self.set_acl(ino, name, value, kill_sgid);
        }
        self.set_xattr(ino, name, value, mode)
    }

    /// `getxattr(2)`'s semantics: no ACL on a symbolic link.
    pub fn posix_getxattr(&self, ino: InodeId, name: &str) -> Result<alloc::vec::Vec<u8>> {
        if is_acl(name) && self.attr(ino)?.kind == Kind::Symlink {
            return Err(PosixError::NoAclHere.into());
        }
        self.get_xattr(ino, name)
    }

    /// `removexattr(2)`'s semantics: an ACL through [`Fs::remove_acl`].
    pub fn posix_removexattr(&self, ino: InodeId, name: &str) -> Result<()> {
        if is_acl(name) {
            return self.remove_acl(ino, name);
        }
        self.remove_xattr(ino, name)
    }

    /// Refuses unless `creds` may read (`write` false) or change
    /// extended attribute `name` of `ino` (`xattr_permission`): `trusted.`
    /// only root; an ACL is read by anyone and set only by the owner or
    /// root; `user.` and `security.` need read or write access, and
    /// `user.` exists only on files and directories (EPERM to set one
    /// elsewhere, as Linux says).
    pub fn check_xattr_by(
        &self,
        ino: InodeId,
        name: &str,
        write: bool,
        creds: &Creds,
    ) -> Result<()> {
        let m = self.attr(ino)?;
        if name.starts_with("trusted.") {
            return if creds.is_root() {
                Ok(())
            } else {
                Err(PosixError::NotOwner.into())
            };
        }
        if is_acl(name) {
            return if !write || creds.is_root() || creds.uid == m.uid {
                Ok(())
            } else {
                Err(PosixError::NotOwner.into())
            };
        }
        if name.starts_with("user.") && !matches!(m.kind, Kind::File | Kind::Dir) {
            return if write {
                Err(PosixError::NotOwner.into())
            } else {
                Err(XattrError::NotFound.into())
            };
        }
        let want = if write { Want::WRITE } else { Want::READ };
        self.check_access(ino, creds, want).map(|_| ())
    }
}
