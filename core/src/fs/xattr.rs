//! Extended attributes: set, get, list and remove one inode's, each
//! change a [`Record::Xattr`] staged under the namespace lock (so it is
//! durable with the next sync, in order with the namespace's records).
//! Every inode's attributes live in memory, as the tree does, and in each
//! checkpoint image; the limits are [`persist::xattr`]'s.
//!
//! [`persist::xattr`]: crate::persist::xattr

use alloc::string::String;
use alloc::vec::Vec;
use core::sync::atomic::Ordering;

use super::inode::Inode;
use super::Fs;
use crate::dev::BlockDevice;
use crate::error::{NamespaceError, Result, SpaceError, XattrError};
use crate::persist::record::{xattr_len, Record};
use crate::persist::xattr::{check_name, check_value, cost, INODE_TOTAL_MAX};
use crate::units::InodeId;

/// How [`Fs::set_xattr`] treats an attribute that exists, or does not
/// (`setxattr(2)`'s flags).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum XattrMode {
    /// Create it or replace it (no flag).
    Any,
    /// Only create it: [`XattrError::Exists`] if it exists
    /// (`XATTR_CREATE`).
    Create,
    /// Only replace it: [`XattrError::NotFound`] if it does not exist
    /// (`XATTR_REPLACE`).
    Replace,
}

impl Inode {
    /// Takes the attributes recovery found for this inode.
    pub(crate) fn load_xattrs<'a>(&self, xattrs: impl Iterator<Item = (&'a str, &'a [u8])>) {
        let mut map = self.xattrs.lock();
        let mut len = 0;
        for (name, value) in xattrs {
            len += xattr_len(name, Some(value));
            map.insert(String::from(name), value.to_vec());
        }
        self.xattr_len.store(len, Ordering::Release);
    }
}

impl<D: BlockDevice> Fs<D> {
    fn xattr_inode(&self, ino: InodeId) -> Result<alloc::sync::Arc<Inode>> {
        Ok(self.shared.inode(ino).ok_or(NamespaceError::NotFound)?)
    }

    /// Sets extended attribute `name` of `ino` to `value`, as `mode` allows.
    pub fn set_xattr(&self, ino: InodeId, name: &str, value: &[u8], mode: XattrMode) -> Result<()> {
        self.change_xattr(ino, name, Some(value), mode)
    }

    /// Removes extended attribute `name` of `ino`.
    pub fn remove_xattr(&self, ino: InodeId, name: &str) -> Result<()> {
        self.change_xattr(ino, name, None, XattrMode::Replace)
    }

    fn change_xattr(
        &self,
        ino: InodeId,
        name: &str,
        value: Option<&[u8]>,
        mode: XattrMode,
    ) -> Result<()> {
        check_name(name)?;
        if let Some(v) = value {
            check_value(v)?;
        }
        let inode = self.xattr_inode(ino)?;
        let shared = &self.shared;
        let mut xattrs = inode.xattrs.lock();
        let old = xattrs.get(name);
        match (mode, old) {
            (XattrMode::Create, Some(_)) => return Err(XattrError::Exists.into()),
            (XattrMode::Replace, None) => return Err(XattrError::NotFound.into()),
            _ => {}
        }
        let old_len = old.map_or(0, |o| xattr_len(name, Some(o)));
        let new_len = value.map_or(0, |v| xattr_len(name, Some(v)));
        if let Some(v) = value {
            let total: usize = xattrs
                .iter()
                .filter(|(n, _)| n.as_str() != name)
                .map(|(n, v)| cost(n, v))
                .sum();
            if total + cost(name, v) > INODE_TOTAL_MAX {
                return Err(XattrError::Full.into());
            }
            // A larger image needs room held back, as a new inode does.
            let grows = new_len.saturating_sub(old_len);
            if grows > 0 && shared.space.lock().free_blocks() < shared.meta_reserve(grows) {
                return Err(SpaceError::DeviceFull.into());
            }
        }
        let record = Record::Xattr {
            ino: ino.0,
            name: String::from(name),
            value: value.map(<[u8]>::to_vec),
        };
        let mut tree = shared.tree.write();
        if tree.node(ino.0).is_none() {
            return Err(NamespaceError::NotFound.into());
        }
        shared.change(&mut tree, record)?;
        match value {
            Some(v) => xattrs.insert(String::from(name), v.to_vec()),
            None => xattrs.remove(name),
        };
        let len = inode.xattr_len.load(Ordering::Acquire) + new_len - old_len;
        inode.xattr_len.store(len, Ordering::Release);
        shared.meta_len_changed(&inode, inode.extents.read().len(), false);
        inode
            .ctime
            .store((shared.config.wall_clock)(), Ordering::Relaxed);
        Ok(())
    }

    /// The value of extended attribute `name` of `ino`.
    pub fn get_xattr(&self, ino: InodeId, name: &str) -> Result<Vec<u8>> {
        check_name(name)?;
        let inode = self.xattr_inode(ino)?;
        let value = inode.xattrs.lock().get(name).cloned();
        Ok(value.ok_or(XattrError::NotFound)?)
    }

    /// The names of `ino`'s extended attributes, in byte order.
    pub fn list_xattr(&self, ino: InodeId) -> Result<Vec<String>> {
        let inode = self.xattr_inode(ino)?;
        let names = inode.xattrs.lock().keys().cloned().collect();
        Ok(names)
    }
}
