//! POSIX policy below every front end: who owns a new inode and with
//! which bits and ACLs, who may read, write, search, chmod, chown and set
//! times, and when set-user-id and set-group-id go. The FUSE mount and
//! libpollfs both call these; neither has rules of its own.
//!
//! What Linux does in its VFS (`inode_init_owner`, `posix_acl_create`,
//! `generic_permission`, `setattr_should_drop_suidgid`, `chown_ok`) is
//! done here, and the parts that decide what a new inode gets run under
//! the namespace lock with the create itself
//! ([`Fs::create_or_open_by`](crate::Fs::create_or_open_by) and its siblings): the directory's
//! set-group-id bit and default ACL are read and the inode, its ACLs and
//! its entry staged as one group of records, so no crash or concurrent
//! sync leaves a named inode without what it inherited.
//!
//! Capabilities are reduced to one question: is the caller root (uid 0)?
//! A caller that has a capability without being root (the kernel knows;
//! the engine does not) is served by the kernel's own checks, which a
//! mount leaves on (`default_permissions`).
//!
//! - `acl`: the ACL attribute's encoding and arithmetic;
//! - `make`: creating inodes with what a caller's creation gives them;
//! - `attrs`: chmod, chown, times, ACL attributes and set-id clearing;
//! - `path`: paths resolved with search permission checked.

mod acl;
mod attrs;
mod make;
mod path;

use alloc::string::String;
use alloc::vec::Vec;

pub use acl::{inherit, Acl, Entry, Inherited, Tag, ACL_ACCESS, ACL_DEFAULT, NO_ID};
pub use attrs::{is_acl, XATTR_NAME_CAPS};
pub(crate) use make::Who;

use super::Metadata;
use crate::error::PosixError;
use crate::persist::record::Kind;

/// Set-user-id.
pub const S_ISUID: u16 = 0o4000;
/// Set-group-id: on a directory, new entries take its group, and new
/// directories the bit too (as ext4 does without `grpid`).
pub const S_ISGID: u16 = 0o2000;
/// Sticky.
pub const S_ISVTX: u16 = 0o1000;
/// Execute by the group.
const S_IXGRP: u16 = 0o0010;
/// Execute by anyone.
const S_IXUGO: u16 = 0o0111;

/// Who asks: the ids an access is checked for and a new inode is owned
/// by, and the umask a new inode's bits are masked with when its
/// directory has no default ACL.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Creds {
    /// File-system user id.
    pub uid: u32,
    /// File-system group id.
    pub gid: u32,
    /// Supplementary groups.
    pub groups: Vec<u32>,
    /// The umask (`0o777` bits).
    pub umask: u16,
    /// The caller's kernel has applied to the mode of what it creates
    /// the rules that need what these credentials do not carry (its
    /// capabilities, and for the FUSE mount its supplementary groups):
    /// Linux's `mode_strip_sgid`. The mount sets this; a library caller
    /// leaves it false and the engine applies the rule.
    pub kernel_checked: bool,
}

impl Creds {
    /// Root, with no umask: every check passes (but execute of a file
    /// nobody may execute).
    pub fn root() -> Creds {
        Creds::default()
    }

    /// `uid`/`gid` with no supplementary group and no umask.
    pub fn new(uid: u32, gid: u32) -> Creds {
        Creds {
            uid,
            gid,
            ..Creds::default()
        }
    }

    /// Whether this is root: the one privilege the engine knows (it
    /// stands for CAP_DAC_OVERRIDE, CAP_FOWNER, CAP_CHOWN, CAP_FSETID).
    pub fn is_root(&self) -> bool {
        self.uid == 0
    }

    /// Whether `gid` is the caller's group or one of its supplementary
    /// groups (`in_group_p`).
    pub fn in_group(&self, gid: u32) -> bool {
        self.gid == gid || self.groups.contains(&gid)
    }

    /// Whether a file of group `gid` keeps set-group-id when this caller
    /// changes it (`in_group_or_capable`).
    pub fn keeps_sgid(&self, gid: u32) -> bool {
        self.is_root() || self.in_group(gid)
    }
}

/// What an access asks for, as `access(2)`'s mode: read 4, write 2,
/// execute (search, for a directory) 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Want(u16);

impl Want {
    /// Read.
    pub const READ: Want = Want(4);
    /// Write.
    pub const WRITE: Want = Want(2);
    /// Execute, or search a directory.
    pub const EXEC: Want = Want(1);
    /// Write and search: what a change to a directory's entries needs.
    pub const WRITE_EXEC: Want = Want(3);
    /// Nothing (`F_OK`).
    pub const NONE: Want = Want(0);

    /// From `access(2)`'s bits (`R_OK` 4, `W_OK` 2, `X_OK` 1); other
    /// bits are ignored.
    pub fn from_bits(bits: u16) -> Want {
        Want(bits & 7)
    }

    /// Both.
    pub fn and(self, other: Want) -> Want {
        Want(self.0 | other.0)
    }

    fn within(self, perm: u16) -> bool {
        self.0 & !perm == 0
    }
}

/// Whether `creds` may do `want` to the inode `m` describes, whose access
/// ACL is `acl` (`generic_permission`: the owner's bits, else the ACL or
/// the group's bits, else the others'; root may do all but execute a
/// file no one may execute).
pub fn may_access(creds: &Creds, m: &Metadata, acl: Option<&Acl>, want: Want) -> bool {
    if creds.is_root() {
        return m.kind == Kind::Dir || want.within(!Want::EXEC.0) || m.perm & S_IXUGO != 0;
    }
    let perm = m.perm;
    if creds.uid == m.uid {
        return want.within((perm >> 6) & 7);
    }
    if let Some(acl) = acl.filter(|a| !a.is_minimal()) {
        return acl_allows(creds, m, acl, want);
    }
    if creds.in_group(m.gid) {
        return want.within((perm >> 3) & 7);
    }
    want.within(perm & 7)
}

/// `posix_acl_permission` for a caller who is not the owner: a named
/// user's entry, else any group entry of the caller's that grants all,
/// each bounded by the mask; the others' entry only if no group matched.
fn acl_allows(creds: &Creds, m: &Metadata, acl: &Acl, want: Want) -> bool {
    let masked = |perm: u16| want.within(perm & acl.mask().unwrap_or(7));
    let mut group_matched = false;
    for e in acl.entries() {
        match e.tag {
            Tag::UserObj | Tag::Mask => {}
            Tag::User if e.id == creds.uid => return masked(e.perm),
            Tag::User => {}
            Tag::GroupObj | Tag::Group => {
                let gid = if e.tag == Tag::GroupObj { m.gid } else { e.id };
                if creds.in_group(gid) {
                    group_matched = true;
                    if want.within(e.perm) {
                        return masked(e.perm);
                    }
                }
            }
            Tag::Other => return !group_matched && want.within(e.perm),
        }
    }
    false
}

/// The permission bits a write or truncate by a caller without
/// CAP_FSETID, or a chown, leaves, if it changes them: Linux
/// (`setattr_should_drop_suidgid`, `chown_common`) takes set-user-id
/// away, and set-group-id when the group may execute or the caller is
/// neither in the file's group nor has CAP_FSETID (`keeps_sgid`, asked
/// only then).
pub fn without_privs(perm: u16, keeps_sgid: impl FnOnce() -> bool) -> Option<u16> {
    let mut kept = perm & !S_ISUID;
    if perm & S_ISGID != 0 && (perm & S_IXGRP != 0 || !keeps_sgid()) {
        kept &= !S_ISGID;
    }
    (kept != perm).then_some(kept)
}

/// The directory a new inode is made in, as the policy reads it under
/// the namespace lock.
pub(crate) struct Parent<'a> {
    /// Its permission bits.
    pub(crate) perm: u16,
    /// Its group.
    pub(crate) gid: u32,
    /// Its default ACL's value, if it has one.
    pub(crate) default: Option<&'a [u8]>,
}

/// What a caller's creation gives a new inode: its owner and bits, and
/// the attributes (ACLs) it is made with.
pub(crate) struct Born {
    pub(crate) perm: u16,
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    pub(crate) xattrs: Vec<(String, Vec<u8>)>,
}

/// `inode_init_owner` and `posix_acl_create` for an inode of `kind`
/// asked for with `mode` by `creds` in `parent`: the caller's user, the
/// directory's group if it is set-group-id (and, for a directory, the bit
/// too), else the caller's; the bits masked by the default ACL, which
/// gives the ACLs, or else by the umask. A symbolic link is 0777 with
/// neither. A directory's mode keeps only its permission and sticky bits
/// before that, as mkdir(2).
pub(crate) fn born(
    parent: &Parent<'_>,
    creds: &Creds,
    kind: Kind,
    mode: u16,
) -> Result<Born, PosixError> {
    let setgid_dir = parent.perm & S_ISGID != 0;
    let gid = if setgid_dir { parent.gid } else { creds.gid };
    let mut out = Born {
        perm: 0o777,
        uid: creds.uid,
        gid,
        xattrs: Vec::new(),
    };
    if kind == Kind::Symlink {
        return Ok(out);
    }
    let dir = kind == Kind::Dir;
    let mut mode = if dir { mode & 0o1777 } else { mode & 0o7777 };
    // `mode_strip_sgid`: a group-executable set-group-id file in a group
    // the caller is not in keeps no set-group-id (a directory's bit comes
    // from its parent below).
    let sgid_exec = S_ISGID | S_IXGRP;
    if !dir && !creds.kernel_checked && mode & sgid_exec == sgid_exec && !creds.keeps_sgid(gid) {
        mode &= !S_ISGID;
    }
    let default = match parent.default {
        Some(v) => Acl::parse(v)?,
        None => None,
    };
    let inherited = inherit(default.as_ref(), mode, creds.umask, dir);
    out.perm = inherited.perm;
    if dir && setgid_dir {
        out.perm |= S_ISGID;
    }
    if let Some(a) = inherited.access {
        out.xattrs.push((String::from(ACL_ACCESS), a));
    }
    if let Some(d) = inherited.default {
        out.xattrs.push((String::from(ACL_DEFAULT), d));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::acl::tests::{acl, G, GO, M, O, U, UO};
    use super::*;

    fn meta(kind: Kind, perm: u16, uid: u32, gid: u32) -> Metadata {
        Metadata {
            ino: crate::units::InodeId(2),
            kind,
            rdev: 0,
            perm,
            uid,
            gid,
            nlink: 1,
            len: 0,
            blocks: 0,
            atime: 0,
            mtime: 0,
            ctime: 0,
        }
    }

    #[test]
    fn access_follows_owner_then_group_then_other() {
        let f = meta(Kind::File, 0o640, 1000, 100);
        let owner = Creds::new(1000, 5);
        let member = Creds {
            groups: alloc::vec![100],
            ..Creds::new(2000, 5)
        };
        let other = Creds::new(3000, 5);
        assert!(may_access(&owner, &f, None, Want::READ.and(Want::WRITE)));
        assert!(!may_access(&owner, &f, None, Want::EXEC));
        assert!(may_access(&member, &f, None, Want::READ));
        assert!(!may_access(&member, &f, None, Want::WRITE));
        assert!(!may_access(&other, &f, None, Want::READ));
        assert!(may_access(&other, &f, None, Want::NONE));
        // The owner's bits decide for the owner, even when the others'
        // give more.
        let odd = meta(Kind::File, 0o047, 1000, 100);
        assert!(!may_access(&owner, &odd, None, Want::READ));
        assert!(may_access(&other, &odd, None, Want::READ));
    }

    #[test]
    fn root_may_all_but_execute_what_no_one_may() {
        let root = Creds::root();
        let f = meta(Kind::File, 0o000, 1000, 100);
        assert!(may_access(&root, &f, None, Want::READ.and(Want::WRITE)));
        assert!(!may_access(&root, &f, None, Want::EXEC));
        let x = meta(Kind::File, 0o001, 1000, 100);
        assert!(may_access(&root, &x, None, Want::EXEC));
        let d = meta(Kind::Dir, 0o000, 1000, 100);
        assert!(may_access(&root, &d, None, Want::WRITE_EXEC));
    }

    #[test]
    fn an_acl_grants_named_users_and_groups_within_its_mask() {
        // u::rw-, u:2000:rwx, g::r--, g:300:rw-, m::r--, o::---
        let a = acl(&[
            (UO, 6, 0),
            (U, 7, 2000),
            (GO, 4, 0),
            (G, 6, 300),
            (M, 4, 0),
            (O, 0, 0),
        ]);
        let f = meta(Kind::File, 0o640, 1000, 100);
        let named = Creds::new(2000, 5);
        assert!(may_access(&named, &f, Some(&a), Want::READ));
        assert!(!may_access(&named, &f, Some(&a), Want::WRITE), "the mask");
        let in_300 = Creds::new(4000, 300);
        assert!(may_access(&in_300, &f, Some(&a), Want::READ));
        assert!(!may_access(&in_300, &f, Some(&a), Want::WRITE));
        let other = Creds::new(5000, 5);
        assert!(!may_access(&other, &f, Some(&a), Want::READ));
        // A matched group that grants too little denies, though the
        // others' entry would grant.
        let b = acl(&[(UO, 6, 0), (GO, 0, 0), (M, 7, 0), (O, 4, 0)]);
        let member = Creds::new(6000, 100);
        assert!(!may_access(&member, &f, Some(&b), Want::READ));
        assert!(may_access(&other, &f, Some(&b), Want::READ));
    }

    #[test]
    fn set_id_bits_go_as_linux_takes_them() {
        assert_eq!(without_privs(0o4755, || true), Some(0o755));
        // Group-executable: set-group-id goes even for a group member.
        assert_eq!(without_privs(0o2775, || true), Some(0o775));
        // Not group-executable: kept by a member, taken from others.
        assert_eq!(without_privs(0o2745, || true), None);
        assert_eq!(without_privs(0o2745, || false), Some(0o745));
        assert_eq!(without_privs(0o644, || false), None);
        assert_eq!(without_privs(0o6775, || false), Some(0o775));
        assert_eq!(without_privs(0o6745, || true), Some(0o2745));
        assert_eq!(without_privs(0o1777, || unreachable!()), None);
    }

    #[test]
    fn a_new_inode_takes_a_set_group_id_directorys_group() {
        let parent = Parent {
            perm: 0o2775,
            gid: 50,
            default: None,
        };
        let who = Creds {
            umask: 0o022,
            ..Creds::new(1000, 100)
        };
        let f = born(&parent, &who, Kind::File, 0o666).unwrap();
        assert_eq!((f.perm, f.uid, f.gid), (0o644, 1000, 50));
        let d = born(&parent, &who, Kind::Dir, 0o777).unwrap();
        assert_eq!((d.perm, d.gid), (0o2755, 50), "a directory takes the bit");
        let d = born(&parent, &who, Kind::Dir, 0o6777).unwrap();
        assert_eq!(d.perm, 0o2755, "mkdir keeps no set-user-id");
        // Set-group-id asked for in a group the caller is not in goes,
        // unless the caller's kernel has already decided.
        let f = born(&parent, &who, Kind::File, 0o2775).unwrap();
        assert_eq!(f.perm, 0o755);
        let member = Creds {
            groups: alloc::vec![50],
            ..who.clone()
        };
        assert_eq!(
            born(&parent, &member, Kind::File, 0o2775).unwrap().perm,
            0o2755
        );
        let kernel = Creds {
            kernel_checked: true,
            ..who.clone()
        };
        assert_eq!(
            born(&parent, &kernel, Kind::File, 0o2775).unwrap().perm,
            0o2755
        );
        let l = born(&parent, &who, Kind::Symlink, 0).unwrap();
        assert_eq!((l.perm, l.gid), (0o777, 50));
        let plain = Parent {
            perm: 0o755,
            ..parent
        };
        let d = born(&plain, &who, Kind::Dir, 0o777).unwrap();
        assert_eq!((d.perm, d.gid), (0o755, 100));
    }

    #[test]
    fn a_new_inode_takes_the_default_acl_instead_of_the_umask() {
        let d = acl(&[(UO, 7, 0), (U, 7, 1000), (GO, 5, 0), (M, 7, 0), (O, 5, 0)]);
        let bytes = d.to_bytes();
        let parent = Parent {
            perm: 0o755,
            gid: 0,
            default: Some(&bytes),
        };
        let who = Creds {
            umask: 0o077,
            ..Creds::new(1000, 100)
        };
        let f = born(&parent, &who, Kind::File, 0o666).unwrap();
        assert_eq!(f.perm, 0o664);
        let names: Vec<&str> = f.xattrs.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, [ACL_ACCESS]);
        let sub = born(&parent, &who, Kind::Dir, 0o777).unwrap();
        let names: Vec<&str> = sub.xattrs.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, [ACL_ACCESS, ACL_DEFAULT]);
        let broken = Parent {
            default: Some(&[1, 2]),
            ..parent
        };
        assert_eq!(
            born(&broken, &who, Kind::File, 0o666).err(),
            Some(PosixError::BadAcl)
        );
    }
}
