//! Extended attributes' rules, in one place: which names there are, how
//! long a name and a value may be, and how much one inode may hold. The
//! engine checks a request against them ([`Fs::set_xattr`]), the record
//! decoder checks what it reads, and fsck checks what replay built.
//!
//! The limits are Linux's where Linux has one: a name of at most 255 bytes
//! (`XATTR_NAME_MAX`, ERANGE past it), a value of at most 64 KiB
//! (`XATTR_SIZE_MAX`, E2BIG past it). Linux leaves the total to the
//! filesystem (ext4: one block; btrfs: one leaf item); pollfs holds every
//! inode's attributes in memory and in each checkpoint image, so it bounds
//! an inode's to [`INODE_TOTAL_MAX`] (names and values together), ENOSPC
//! past it as ext4 answers: four full-size values, room for every ACL and
//! security label in use, and a bound on what one inode costs in RAM.
//!
//! [`Fs::set_xattr`]: crate::Fs::set_xattr

use crate::error::XattrError;

/// Longest name, in bytes (with its namespace prefix).
pub const NAME_MAX: usize = 255;
/// Largest value, in bytes.
pub const VALUE_MAX: usize = 64 << 10;
/// Most bytes of names and values one inode holds.
pub const INODE_TOTAL_MAX: usize = 256 << 10;

/// Namespaces a name may start with (the rest must not be empty).
const PREFIXES: [&str; 3] = ["user.", "trusted.", "security."];
/// The `system.` names there are: POSIX ACLs.
const SYSTEM_NAMES: [&str; 2] = ["system.posix_acl_access", "system.posix_acl_default"];

/// Checks `name`: a known namespace, and not too long.
pub fn check_name(name: &str) -> Result<(), XattrError> {
    if name.is_empty() || name.len() > NAME_MAX {
        return Err(XattrError::NameLength);
    }
    let known = SYSTEM_NAMES.contains(&name)
        || PREFIXES
            .iter()
            .any(|p| name.len() > p.len() && name.starts_with(p));
    if !known || name.bytes().any(|b| b == 0) {
        return Err(XattrError::Namespace);
    }
    Ok(())
}

/// Checks a value's length.
pub fn check_value(value: &[u8]) -> Result<(), XattrError> {
    if value.len() > VALUE_MAX {
        return Err(XattrError::ValueTooLarge);
    }
    Ok(())
}

/// What one attribute counts against [`INODE_TOTAL_MAX`].
pub fn cost(name: &str, value: &[u8]) -> usize {
    name.len() + value.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    #[test]
    fn names_and_values_at_and_past_their_limits() {
        assert_eq!(check_name("user.a"), Ok(()));
        assert_eq!(check_name("system.posix_acl_access"), Ok(()));
        assert_eq!(check_name("system.other"), Err(XattrError::Namespace));
        assert_eq!(check_name("user."), Err(XattrError::Namespace));
        assert_eq!(check_name("other.a"), Err(XattrError::Namespace));
        assert_eq!(check_name(""), Err(XattrError::NameLength));
        let long = alloc::format!("user.{}", "n".repeat(NAME_MAX - 5));
        assert_eq!(check_name(&long), Ok(()));
        assert_eq!(check_name(&(long + "n")), Err(XattrError::NameLength));
        assert_eq!(check_value(&vec![0; VALUE_MAX]), Ok(()));
        assert_eq!(
            check_value(&vec![0; VALUE_MAX + 1]),
            Err(XattrError::ValueTooLarge)
        );
    }
}
