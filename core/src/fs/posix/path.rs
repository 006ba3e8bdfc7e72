//! Paths resolved as a caller: search permission on every directory a
//! path passes through, as the kernel's path walk checks it
//! (`may_lookup`). The mount never needs this (the kernel walks paths
//! itself); libpollfs, whose callers pass whole paths, does.

use super::{Creds, Want};
use crate::dev::BlockDevice;
use crate::error::{NameError, NamespaceError, Result};
use crate::fs::Fs;
use crate::persist::record::Kind;
use crate::units::InodeId;

impl<D: BlockDevice> Fs<D> {
    /// The directory `path` (`/`-separated, from the root; `.`, `..` and
    /// symbolic links not followed) puts its last name in, and that name,
    /// if `creds` may search every directory on the way, that one too.
    /// The root has no last name ([`NameError::Empty`]).
    pub fn parent_by<'p>(&self, path: &'p str, creds: &Creds) -> Result<(InodeId, &'p str)> {
        let mut parts = path.split('/').filter(|c| !c.is_empty()).peekable();
        let mut dir = InodeId::ROOT;
        while let Some(part) = parts.next() {
            self.check_access(dir, creds, Want::EXEC)?;
            if parts.peek().is_none() {
                return Ok((dir, part));
            }
            dir = self.lookup_in(dir, part)?;
            match self.attr(dir)?.kind {
                Kind::Dir => {}
                Kind::Symlink => return Err(NamespaceError::IsASymlink.into()),
                _ => return Err(NamespaceError::NotADirectory.into()),
            }
        }
        Err(NameError::Empty.into())
    }

    /// The inode `path` names (`/` or `""` is the root), if `creds` may
    /// search every directory on the way.
    pub fn lookup_by(&self, path: &str, creds: &Creds) -> Result<InodeId> {
        if path.split('/').all(str::is_empty) {
            return Ok(InodeId::ROOT);
        }
        let (dir, name) = self.parent_by(path, creds)?;
        self.lookup_in(dir, name)
    }
}
