//! Creating inodes as a caller: the engine's create, mkdir, mknod,
//! symlink and unnamed-file calls with [`Creds`] and a mode instead of a
//! finished owner and mode, so the owner, group, bits and ACLs a new
//! inode gets are decided under the namespace lock from what its
//! directory is at that moment, and staged with it.

use alloc::collections::BTreeMap;
use alloc::string::String;
use alloc::vec::Vec;

use super::{born, Born, Creds, Parent, ACL_DEFAULT};
use crate::dev::BlockDevice;
use crate::error::{Error, NamespaceError, Result};
use crate::fs::inode::Inode;
use crate::fs::{Created, File, Fs, NewInode};
use crate::persist::record::Kind;
use crate::units::InodeId;

/// Who a new inode is made for, as the engine's make takes it.
pub(crate) enum Who<'a> {
    /// The owner and bits as given, nothing inherited (the engine's own
    /// calls, and callers that decided themselves).
    Given(NewInode),
    /// A caller asking for `mode`: the policy decides.
    Caller {
        /// The caller.
        creds: &'a Creds,
        /// The mode it asked for (`mode & 0o7777`).
        mode: u16,
    },
}

impl Who<'_> {
    /// Whether what the new inode gets depends on its directory's
    /// attributes (which the caller then locks: given owner and bits
    /// leave creates that need none of this free of that lock).
    pub(crate) fn reads_parent(&self) -> bool {
        matches!(self, Who::Caller { .. })
    }

    /// What the new inode of `kind` in `dir` (whose attributes are
    /// `dir_xattrs`, locked by the caller if [`Who::reads_parent`]) gets.
    pub(crate) fn born(
        &self,
        dir: &Inode,
        dir_xattrs: Option<&BTreeMap<String, Vec<u8>>>,
        kind: Kind,
    ) -> Result<Born> {
        match self {
            Who::Given(n) => Ok(Born {
                perm: n.perm & 0o7777,
                uid: n.uid,
                gid: n.gid,
                xattrs: Vec::new(),
            }),
            Who::Caller { creds, mode } => {
                let owner = *dir.owner.lock();
                let parent = Parent {
                    perm: owner.perm,
                    gid: owner.gid,
                    default: dir_xattrs
                        .and_then(|x| x.get(ACL_DEFAULT))
                        .map(Vec::as_slice),
                };
                Ok(born(&parent, creds, kind, *mode)?)
            }
        }
    }
}

impl<D: BlockDevice> Fs<D> {
    /// Creates the regular file `name` in `parent` for `creds`, asked for
    /// with `mode`, or, unless `exclusive`, opens the one there: what
    /// [`Fs::create_or_open_in`] does, with the owner, group, bits and
    /// ACLs the POSIX rules give (see [the module](super)). Access to
    /// `parent` is not checked here: see [`Fs::check_access`].
    pub fn create_or_open_by(
        &self,
        parent: InodeId,
        name: &str,
        mode: u16,
        creds: &Creds,
        exclusive: bool,
    ) -> Result<(File<D>, Created)> {
        self.create_or_open_with(parent, name, &Who::Caller { creds, mode }, exclusive)
    }

    /// Creates the directory `name` in `parent` for `creds`, asked for
    /// with `mode`; returns its inode number.
    pub fn mkdir_by(
        &self,
        parent: InodeId,
        name: &str,
        mode: u16,
        creds: &Creds,
    ) -> Result<InodeId> {
        let who = Who::Caller { creds, mode };
        Ok(self.make(parent, name, Kind::Dir, &who, "", 0)?.id)
    }

    /// `mknod(2)` for `creds` (see [`Fs::mknod_in`]).
    pub fn mknod_by(
        &self,
        parent: InodeId,
        name: &str,
        kind: Kind,
        rdev: u64,
        mode: u16,
        creds: &Creds,
    ) -> Result<InodeId> {
        self.make_node(parent, name, kind, rdev, &Who::Caller { creds, mode })
    }

    /// A symbolic link for `creds`: bits 0777 as on Linux, the group of a
    /// set-group-id directory.
    pub fn symlink_by(
        &self,
        parent: InodeId,
        name: &str,
        target: &str,
        creds: &Creds,
    ) -> Result<InodeId> {
        let who = Who::Caller { creds, mode: 0o777 };
        self.make_symlink(parent, name, target, &who)
    }

    /// An unnamed file (`O_TMPFILE`) for `creds` (see
    /// [`Fs::create_unnamed`]).
    pub fn create_unnamed_by(
        &self,
        parent: InodeId,
        mode: u16,
        creds: &Creds,
        linkable: bool,
    ) -> Result<File<D>> {
        let who = Who::Caller { creds, mode };
        let inode = self.with_room(|| self.shared.make_unnamed(parent, &who, linkable))?;
        Ok(File::new(self.clone(), inode))
    }

    /// Creates the file, or opens the one there (see
    /// [`Fs::create_or_open_in`]). Two callers making one name both
    /// succeed with the same file: the one that finds it made opens it,
    /// and if it is removed between the two steps, tries again (a bounded
    /// number of times, then [`NamespaceError::NotFound`]).
    pub(crate) fn create_or_open_with(
        &self,
        parent: InodeId,
        name: &str,
        who: &Who<'_>,
        exclusive: bool,
    ) -> Result<(File<D>, Created)> {
        /// Rounds of create-then-open lost to a remove in between before
        /// giving up: each one lost means another caller made progress.
        const ROUNDS: usize = 8;
        let mut last: Error = NamespaceError::NotFound.into();
        for _ in 0..ROUNDS {
            match self.make(parent, name, Kind::File, who, "", 0) {
                Ok(inode) => return Ok((File::new(self.clone(), inode), Created::Made)),
                Err(Error::Namespace(NamespaceError::Exists)) if !exclusive => {}
                Err(e) => return Err(e),
            }
            match self
                .lookup_in(parent, name)
                .and_then(|ino| self.open_ino(ino))
            {
                Ok(f) => return Ok((f, Created::Found)),
                Err(e @ Error::Namespace(NamespaceError::NotFound)) => last = e,
                Err(e) => return Err(e),
            }
        }
        Err(last)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use alloc::vec::Vec;

    use super::super::acl::tests::{acl, GO, M, O, U, UO};
    use super::*;
    use crate::dev::ram::RamDevice;
    use crate::fs::posix::ACL_ACCESS;
    use crate::fs::{Config, XattrMode};

    #[test]
    fn a_create_by_a_caller_is_staged_as_one_group() {
        let config = Config {
            cache_pages: 64,
            ..Config::default()
        };
        let dev = RamDevice::new(8 << 20, 4096, 96).unwrap();
        let fs = Fs::format(dev, config, 7).unwrap();
        let root = Creds::root();
        let d = fs.mkdir_by(InodeId::ROOT, "d", 0o777, &root).unwrap();
        let default = acl(&[(UO, 7, 0), (U, 7, 1000), (GO, 5, 0), (M, 7, 0), (O, 5, 0)]);
        fs.posix_setxattr(d, ACL_DEFAULT, &default.to_bytes(), XattrMode::Any, false)
            .unwrap();
        let me = Creds::new(1000, 100);
        // Each stage takes a ticket, and so does asking for one: one
        // group per create (its inode, its ACLs, its entry) leaves
        // exactly one ticket between each ask.
        let journal = &fs.shared.journal;
        let before = journal.ticket();
        let (f, made) = fs.create_or_open_by(d, "f", 0o666, &me, true).unwrap();
        let middle = journal.ticket();
        let sub = fs.mkdir_by(d, "s", 0o777, &me).unwrap();
        let after = journal.ticket();
        assert_eq!(made, Created::Made);
        assert_eq!((middle - before, after - middle), (2, 2));
        let names = |ino| fs.list_xattr(ino).unwrap();
        assert_eq!(names(f.ino()), [ACL_ACCESS]);
        let both: Vec<&str> = alloc::vec![ACL_ACCESS, ACL_DEFAULT];
        assert_eq!(names(sub), both);
    }
}
