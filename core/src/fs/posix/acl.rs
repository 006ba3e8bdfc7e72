//! POSIX ACLs (acl(5)) as Linux keeps them in the attributes
//! `system.posix_acl_access` and `system.posix_acl_default`: the value's
//! encoding, its checks, and the bit arithmetic of `fs/posix_acl.c`
//! (`posix_acl_valid`, `posix_acl_equiv_mode`, `posix_acl_chmod`,
//! `posix_acl_create_masq`). One home for every front end: the FUSE
//! mount and libpollfs parse, store and inherit ACLs through this.

use alloc::vec::Vec;

use crate::error::PosixError;

/// The access ACL's attribute.
pub const ACL_ACCESS: &str = "system.posix_acl_access";
/// The default ACL's attribute (directories only).
pub const ACL_DEFAULT: &str = "system.posix_acl_default";

/// `POSIX_ACL_XATTR_VERSION`: the one layout there is.
const VERSION: u32 = 2;
/// The header (the version, little-endian u32).
const HEADER: usize = 4;
/// One entry: tag u16, permissions u16, id u32, little-endian.
const ENTRY: usize = 8;
/// The id written for entries that have none (`ACL_UNDEFINED_ID`).
pub const NO_ID: u32 = u32::MAX;

/// Permission bits of the owner, group and other classes.
const RWX_USER: u16 = 0o700;
const RWX_GROUP: u16 = 0o070;
const RWX_OTHER: u16 = 0o007;

/// What an entry stands for, in the order entries must come.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tag {
    /// The owner (`ACL_USER_OBJ`).
    UserObj,
    /// A named user (`ACL_USER`).
    User,
    /// The owning group (`ACL_GROUP_OBJ`).
    GroupObj,
    /// A named group (`ACL_GROUP`).
    Group,
    /// The most the group class may have (`ACL_MASK`).
    Mask,
    /// Everyone else (`ACL_OTHER`).
    Other,
}

impl Tag {
    fn from_wire(t: u16) -> Option<Tag> {
        Some(match t {
            0x01 => Tag::UserObj,
            0x02 => Tag::User,
            0x04 => Tag::GroupObj,
            0x08 => Tag::Group,
            0x10 => Tag::Mask,
            0x20 => Tag::Other,
            _ => return None,
        })
    }

    fn wire(self) -> u16 {
        match self {
            Tag::UserObj => 0x01,
            Tag::User => 0x02,
            Tag::GroupObj => 0x04,
            Tag::Group => 0x08,
            Tag::Mask => 0x10,
            Tag::Other => 0x20,
        }
    }

    fn named(self) -> bool {
        matches!(self, Tag::User | Tag::Group)
    }
}

/// One entry: a tag, its permissions (read 4, write 2, execute 1) and, for
/// a named user or group, its id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    /// What it stands for.
    pub tag: Tag,
    /// Its permissions, at most 7.
    pub perm: u16,
    /// The user or group id ([`NO_ID`] for the other tags).
    pub id: u32,
}

/// A checked ACL: one owner, owning group and other entry, named entries
/// where Linux puts them, and a mask if there is a named entry. Only
/// [`Acl::parse`] makes one, so the methods below find what they need.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Acl {
    entries: Vec<Entry>,
}

impl Acl {
    /// Parses and checks an attribute's value. `None` for a header with
    /// no entry: Linux takes that as no ACL, and removes it.
    pub fn parse(value: &[u8]) -> Result<Option<Acl>, PosixError> {
        let (head, body) = value.split_at_checked(HEADER).ok_or(PosixError::BadAcl)?;
        let version = u32::from_le_bytes(head.try_into().map_err(|_| PosixError::BadAcl)?);
        if version != VERSION {
            return Err(PosixError::AclVersion);
        }
        if body.len() % ENTRY != 0 {
            return Err(PosixError::BadAcl);
        }
        if body.is_empty() {
            return Ok(None);
        }
        let mut entries = Vec::with_capacity(body.len() / ENTRY);
        for e in body.chunks_exact(ENTRY) {
            let tag = Tag::from_wire(u16::from_le_bytes([e[0], e[1]])).ok_or(PosixError::BadAcl)?;
            let perm = u16::from_le_bytes([e[2], e[3]]);
            let id = u32::from_le_bytes([e[4], e[5], e[6], e[7]]);
            if perm > 7 || (tag.named() && id == NO_ID) {
                return Err(PosixError::BadAcl);
            }
            let id = if tag.named() { id } else { NO_ID };
            entries.push(Entry { tag, perm, id });
        }
        check_order(&entries)?;
        Ok(Some(Acl { entries }))
    }

    /// The attribute's value.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER + ENTRY * self.entries.len());
        out.extend_from_slice(&VERSION.to_le_bytes());
        for e in &self.entries {
            out.extend_from_slice(&e.tag.wire().to_le_bytes());
            out.extend_from_slice(&e.perm.to_le_bytes());
            out.extend_from_slice(&e.id.to_le_bytes());
        }
        out
    }

    /// The entries, in order.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// True if the permission bits say all this ACL says: no named entry
    /// and no mask.
    pub fn is_minimal(&self) -> bool {
        self.entries
            .iter()
            .all(|e| !e.tag.named() && e.tag != Tag::Mask)
    }

    fn index(&self, tag: Tag) -> Option<usize> {
        self.entries.iter().position(|e| e.tag == tag)
    }

    /// Where the group class's bits live: the mask if there is one, else
    /// the owning group's entry.
    fn group_class(&self) -> usize {
        // A checked ACL has an owning-group entry.
        self.index(Tag::Mask)
            .or_else(|| self.index(Tag::GroupObj))
            .unwrap_or(0)
    }

    fn perm_of(&self, tag: Tag) -> u16 {
        self.index(tag).map_or(0, |i| self.entries[i].perm)
    }

    /// The mask's permissions, if there is a mask.
    pub(crate) fn mask(&self) -> Option<u16> {
        self.index(Tag::Mask).map(|i| self.entries[i].perm)
    }

    /// The permission bits an access ACL sets on `perm` (whose other bits,
    /// set-id and sticky, stay): the owner's, the group class's and the
    /// others' entries (`posix_acl_equiv_mode`).
    pub fn mode(&self, perm: u16) -> u16 {
        let group = self.perm_of_index(self.group_class());
        (perm & !0o777)
            | (self.perm_of(Tag::UserObj) << 6)
            | (group << 3)
            | self.perm_of(Tag::Other)
    }

    fn perm_of_index(&self, i: usize) -> u16 {
        self.entries.get(i).map_or(0, |e| e.perm)
    }

    /// chmod to `perm`: the owner's, the group class's and the others'
    /// entries take its bits (`posix_acl_chmod`).
    pub fn chmod(&mut self, perm: u16) {
        let g = self.group_class();
        for (i, e) in self.entries.iter_mut().enumerate() {
            e.perm = match e.tag {
                Tag::UserObj => (perm & RWX_USER) >> 6,
                Tag::Other => perm & RWX_OTHER,
                _ if i == g => (perm & RWX_GROUP) >> 3,
                _ => e.perm,
            };
        }
    }

    /// A default ACL made the access ACL of a new inode asked for with
    /// `perm`: each class's entry keeps only what `perm` grants, and
    /// `perm` only what the entries grant (`posix_acl_create_masq`).
    /// Returns the new inode's bits.
    pub fn create_masq(&mut self, perm: u16) -> u16 {
        let mut mode = perm;
        let g = self.group_class();
        for (i, e) in self.entries.iter_mut().enumerate() {
            let (shift, class) = match e.tag {
                Tag::UserObj => (6, RWX_USER),
                Tag::Other => (0, RWX_OTHER),
                _ if i == g => (3, RWX_GROUP),
                _ => continue,
            };
            e.perm &= (mode & class) >> shift;
            mode &= (e.perm << shift) | !class;
        }
        mode
    }
}

/// Linux's order: the owner, named users, the owning group, named groups,
/// the mask (required if there is a named entry), the others; one each but
/// for the named ones (`posix_acl_valid`'s states).
fn check_order(entries: &[Entry]) -> Result<(), PosixError> {
    #[derive(Clone, Copy, PartialEq)]
    enum Next {
        Owner,
        Users,
        Groups,
        Other,
        Done,
    }
    let mut next = Next::Owner;
    let mut named = false;
    for e in entries {
        next = match (e.tag, next) {
            (Tag::UserObj, Next::Owner) => Next::Users,
            (Tag::User, Next::Users) | (Tag::Group, Next::Groups) => {
                named = true;
                continue;
            }
            (Tag::GroupObj, Next::Users) => Next::Groups,
            (Tag::Mask, Next::Groups) => Next::Other,
            (Tag::Other, Next::Other) => Next::Done,
            (Tag::Other, Next::Groups) if !named => Next::Done,
            _ => return Err(PosixError::BadAcl),
        };
    }
    if next == Next::Done {
        Ok(())
    } else {
        Err(PosixError::BadAcl)
    }
}

/// What a new inode takes from its directory: its permission bits and
/// the ACLs it gets, all staged with its inode record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inherited {
    /// Its permission bits.
    pub perm: u16,
    /// Its access ACL, if the default ACL is not minimal.
    pub access: Option<Vec<u8>>,
    /// Its default ACL (a directory's).
    pub default: Option<Vec<u8>>,
}

/// What a new inode asked for with `perm` under a directory whose default
/// ACL is `default` gets, with `umask` applied if there is none
/// (`posix_acl_create`).
pub fn inherit(default: Option<&Acl>, perm: u16, umask: u16, dir: bool) -> Inherited {
    let Some(default) = default else {
        return Inherited {
            perm: perm & !(umask & 0o777),
            access: None,
            default: None,
        };
    };
    let mut access = default.clone();
    let perm = access.create_masq(perm);
    Inherited {
        perm,
        access: (!access.is_minimal()).then(|| access.to_bytes()),
        default: dir.then(|| default.to_bytes()),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    #![allow(clippy::unwrap_used)]

    use alloc::vec;

    use super::*;

    /// An ACL's value from (tag, perm, id) triples.
    pub(crate) fn value(entries: &[(u16, u16, u32)]) -> Vec<u8> {
        let mut v = VERSION.to_le_bytes().to_vec();
        for &(t, p, id) in entries {
            v.extend_from_slice(&t.to_le_bytes());
            v.extend_from_slice(&p.to_le_bytes());
            v.extend_from_slice(&id.to_le_bytes());
        }
        v
    }

    pub(crate) const UO: u16 = 0x01;
    pub(crate) const U: u16 = 0x02;
    pub(crate) const GO: u16 = 0x04;
    pub(crate) const G: u16 = 0x08;
    pub(crate) const M: u16 = 0x10;
    pub(crate) const O: u16 = 0x20;

    pub(crate) fn acl(entries: &[(u16, u16, u32)]) -> Acl {
        Acl::parse(&value(entries)).unwrap().unwrap()
    }

    #[test]
    fn values_round_trip_and_ids_of_unnamed_entries_are_undefined() {
        let v = value(&[
            (UO, 6, NO_ID),
            (U, 4, 1000),
            (GO, 4, NO_ID),
            (M, 6, NO_ID),
            (O, 0, NO_ID),
        ]);
        assert_eq!(Acl::parse(&v).unwrap().unwrap().to_bytes(), v);
        // The kernel ignores the ids of unnamed entries; so does this.
        let zero_ids = acl(&[(UO, 6, 0), (GO, 4, 0), (O, 4, 0)]);
        assert_eq!(
            zero_ids,
            acl(&[(UO, 6, NO_ID), (GO, 4, NO_ID), (O, 4, NO_ID)])
        );
        assert!(zero_ids.is_minimal());
        assert_eq!(Acl::parse(&VERSION.to_le_bytes()), Ok(None));
    }

    #[test]
    fn malformed_values_are_refused_as_linux_refuses_them() {
        let ok = [(UO, 6, 0), (GO, 4, 0), (O, 4, 0)];
        let bad: Vec<(&str, Vec<u8>, PosixError)> = vec![
            ("short header", vec![2, 0], PosixError::BadAcl),
            (
                "other version",
                {
                    let mut v = value(&ok);
                    v[0] = 1;
                    v
                },
                PosixError::AclVersion,
            ),
            (
                "part of an entry",
                {
                    let mut v = value(&ok);
                    v.pop();
                    v
                },
                PosixError::BadAcl,
            ),
            (
                "unknown tag",
                value(&[(UO, 6, 0), (0x40, 4, 0), (GO, 4, 0), (O, 4, 0)]),
                PosixError::BadAcl,
            ),
            (
                "permission past rwx",
                value(&[(UO, 8, 0), (GO, 4, 0), (O, 4, 0)]),
                PosixError::BadAcl,
            ),
            (
                "no owner",
                value(&[(GO, 4, 0), (O, 4, 0)]),
                PosixError::BadAcl,
            ),
            (
                "no group",
                value(&[(UO, 6, 0), (O, 4, 0)]),
                PosixError::BadAcl,
            ),
            (
                "no other",
                value(&[(UO, 6, 0), (GO, 4, 0)]),
                PosixError::BadAcl,
            ),
            (
                "two owners",
                value(&[(UO, 6, 0), (UO, 6, 0), (GO, 4, 0), (O, 4, 0)]),
                PosixError::BadAcl,
            ),
            (
                "named user, no mask",
                value(&[(UO, 6, 0), (U, 6, 7), (GO, 4, 0), (O, 4, 0)]),
                PosixError::BadAcl,
            ),
            (
                "named group out of place",
                value(&[(UO, 6, 0), (G, 6, 7), (GO, 4, 0), (M, 6, 0), (O, 4, 0)]),
                PosixError::BadAcl,
            ),
            (
                "mask after other",
                value(&[(UO, 6, 0), (GO, 4, 0), (O, 4, 0), (M, 6, 0)]),
                PosixError::BadAcl,
            ),
            (
                "named user without an id",
                value(&[(UO, 6, 0), (U, 6, NO_ID), (GO, 4, 0), (M, 6, 0), (O, 4, 0)]),
                PosixError::BadAcl,
            ),
        ];
        for (what, v, e) in bad {
            assert_eq!(Acl::parse(&v), Err(e), "{what}");
        }
        // A mask alone is allowed (not minimal, though).
        let masked = acl(&[(UO, 6, 0), (GO, 4, 0), (M, 4, 0), (O, 4, 0)]);
        assert!(!masked.is_minimal());
    }

    #[test]
    fn the_mode_an_acl_sets_takes_the_mask_as_the_group_bits() {
        let a = acl(&[(UO, 7, 0), (U, 7, 1000), (GO, 4, 0), (M, 5, 0), (O, 1, 0)]);
        assert_eq!(a.mode(0o4000 | 0o644), 0o4000 | 0o751);
        let plain = acl(&[(UO, 6, 0), (GO, 4, 0), (O, 0, 0)]);
        assert_eq!(plain.mode(0o777), 0o640);
    }

    #[test]
    fn chmod_sets_owner_mask_and_other_but_not_named_entries() {
        let mut a = acl(&[(UO, 7, 0), (U, 7, 1000), (GO, 5, 0), (M, 7, 0), (O, 5, 0)]);
        a.chmod(0o640);
        let perms: Vec<u16> = a.entries().iter().map(|e| e.perm).collect();
        assert_eq!(perms, [6, 7, 5, 4, 0]);
        let mut plain = acl(&[(UO, 7, 0), (GO, 5, 0), (O, 5, 0)]);
        plain.chmod(0o600);
        let perms: Vec<u16> = plain.entries().iter().map(|e| e.perm).collect();
        assert_eq!(perms, [6, 0, 0]);
    }

    #[test]
    fn a_new_inode_takes_the_default_acl_masked_by_its_mode() {
        // setfacl -d -m u::rwx,u:1000:rwx,g::r-x,m::rwx,o::r-x
        let d = acl(&[(UO, 7, 0), (U, 7, 1000), (GO, 5, 0), (M, 7, 0), (O, 5, 0)]);
        // open(O_CREAT, 0666) with umask 077: the umask is ignored.
        let f = inherit(Some(&d), 0o666, 0o077, false);
        assert_eq!(f.perm, 0o664);
        let access = Acl::parse(f.access.as_deref().unwrap()).unwrap().unwrap();
        let perms: Vec<u16> = access.entries().iter().map(|e| e.perm).collect();
        assert_eq!(perms, [6, 7, 5, 6, 4], "named entries kept, mask masked");
        assert_eq!(f.default, None, "files take no default ACL");
        let sub = inherit(Some(&d), 0o2777, 0o077, true);
        assert_eq!(sub.perm, 0o2775);
        assert_eq!(sub.default, Some(d.to_bytes()));
        // A minimal default ACL gives bits alone.
        let m = acl(&[(UO, 6, 0), (GO, 0, 0), (O, 0, 0)]);
        let f = inherit(Some(&m), 0o666, 0o022, false);
        assert_eq!((f.perm, f.access), (0o600, None));
        // No default ACL: the umask.
        let f = inherit(None, 0o666, 0o027, false);
        assert_eq!((f.perm, f.access, f.default), (0o640, None, None));
    }
}
