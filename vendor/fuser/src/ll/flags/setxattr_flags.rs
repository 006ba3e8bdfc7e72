use bitflags::bitflags;

bitflags! {
    /// The flags of an extended setxattr request (`setxattr_flags` of
    /// `fuse_setxattr_in`, sent only once the server asked for
    /// `FUSE_SETXATTR_EXT` at init; ABI 7.33).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct SetxattrFlags: u32 {
        /// Clear set-group-id when `system.posix_acl_access` is set: the
        /// caller is neither in the file's group nor has CAP_FSETID.
        const FUSE_SETXATTR_ACL_KILL_SGID = 1 << 0;
    }
}
