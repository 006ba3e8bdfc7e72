//! A reference model of the namespace: directories, files, symbolic links,
//! FIFOs, sockets, device nodes and hard links, with the rules POSIX gives for each operation, so a
//! test can predict which operations succeed and what the tree looks like
//! after them; and snapshots that compare a model's tree with an engine's.

use std::collections::{BTreeMap, BTreeSet};

use pollfs_core::dev::BlockDevice;
use pollfs_core::error::NamespaceError;
use pollfs_core::{Error, Fs, InodeId, Kind};

/// The model's root directory.
pub const ROOT: u64 = 0;

/// What a model inode is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MKind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link and its target.
    Symlink(String),
    /// A FIFO, socket or device node, and its device number.
    Special(Kind, u64),
}

/// Why the model refuses an operation (as the engine should).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MErr {
    /// No such entry.
    NotFound,
    /// The name is taken.
    Exists,
    /// A directory was needed.
    NotDir,
    /// A directory where a file was needed.
    IsDir,
    /// The directory is not empty.
    NotEmpty,
    /// A directory would move under itself.
    InvalidMove,
    /// A hard link to a directory.
    NotPermitted,
}

impl MErr {
    /// True if the engine's error is this one.
    pub fn matches(self, e: &Error) -> bool {
        let want = match self {
            MErr::NotFound => NamespaceError::NotFound,
            MErr::Exists => NamespaceError::Exists,
            MErr::NotDir => NamespaceError::NotADirectory,
            MErr::IsDir => NamespaceError::IsADirectory,
            MErr::NotEmpty => NamespaceError::NotEmpty,
            MErr::InvalidMove => NamespaceError::InvalidMove,
            MErr::NotPermitted => NamespaceError::NotPermitted,
        };
        *e == Error::Namespace(want)
    }
}

/// The namespace, as plain maps.
#[derive(Clone, Debug)]
pub struct TreeModel {
    /// Model inode -> what it is.
    pub kinds: BTreeMap<u64, MKind>,
    /// (directory, name) -> model inode.
    pub entries: BTreeMap<(u64, String), u64>,
    next: u64,
}

impl Default for TreeModel {
    fn default() -> TreeModel {
        TreeModel {
            kinds: BTreeMap::from([(ROOT, MKind::Dir)]),
            entries: BTreeMap::new(),
            next: 1,
        }
    }
}

impl TreeModel {
    fn is_dir(&self, id: u64) -> bool {
        self.kinds.get(&id) == Some(&MKind::Dir)
    }
    fn get(&self, dir: u64, name: &str) -> Option<u64> {
        self.entries.get(&(dir, name.to_string())).copied()
    }
    fn empty(&self, dir: u64) -> bool {
        !self.entries.keys().any(|(d, _)| *d == dir)
    }
    /// The directory holding directory `id`.
    fn parent(&self, id: u64) -> Option<u64> {
        self.entries
            .iter()
            .find(|(_, &i)| i == id)
            .map(|((d, _), _)| *d)
    }
    /// True if directory `dir` is `ancestor` or under it.
    fn under(&self, mut dir: u64, ancestor: u64) -> bool {
        for _ in 0..=self.kinds.len() {
            if dir == ancestor {
                return true;
            }
            match self.parent(dir) {
                Some(p) => dir = p,
                None => return false,
            }
        }
        false
    }
    fn dir(&self, dir: u64) -> Result<(), MErr> {
        match self.kinds.get(&dir) {
            Some(MKind::Dir) => Ok(()),
            Some(_) => Err(MErr::NotDir),
            None => Err(MErr::NotFound),
        }
    }
    fn make(&mut self, dir: u64, name: &str, kind: MKind) -> Result<u64, MErr> {
        self.dir(dir)?;
        if self.get(dir, name).is_some() {
            return Err(MErr::Exists);
        }
        let id = self.next;
        self.next += 1;
        self.kinds.insert(id, kind);
        self.entries.insert((dir, name.to_string()), id);
        Ok(id)
    }
    /// `mkdir`.
    pub fn mkdir(&mut self, dir: u64, name: &str) -> Result<u64, MErr> {
        self.make(dir, name, MKind::Dir)
    }
    /// `create`.
    pub fn create(&mut self, dir: u64, name: &str) -> Result<u64, MErr> {
        self.make(dir, name, MKind::File)
    }
    /// `symlink`.
    pub fn symlink(&mut self, dir: u64, name: &str, target: &str) -> Result<u64, MErr> {
        self.make(dir, name, MKind::Symlink(target.to_string()))
    }
    /// `mknod` of a FIFO, socket or device node (a device number only
    /// for a device node, as the engine keeps it).
    pub fn mknod(&mut self, dir: u64, name: &str, kind: Kind, rdev: u64) -> Result<u64, MErr> {
        let rdev = if kind.is_device() { rdev } else { 0 };
        self.make(dir, name, MKind::Special(kind, rdev))
    }
    /// `link`.
    pub fn link(&mut self, id: u64, dir: u64, name: &str) -> Result<(), MErr> {
        self.dir(dir)?;
        if self.is_dir(id) {
            return Err(MErr::NotPermitted);
        }
        if self.get(dir, name).is_some() {
            return Err(MErr::Exists);
        }
        self.entries.insert((dir, name.to_string()), id);
        Ok(())
    }
    /// Links to `id` left.
    pub fn links(&self, id: u64) -> usize {
        self.entries.values().filter(|&&i| i == id).count()
    }
    /// `unlink` (not directories); returns the inode if no link is left.
    pub fn unlink(&mut self, dir: u64, name: &str) -> Result<Option<u64>, MErr> {
        self.dir(dir)?;
        let id = self.get(dir, name).ok_or(MErr::NotFound)?;
        if self.is_dir(id) {
            return Err(MErr::IsDir);
        }
        self.entries.remove(&(dir, name.to_string()));
        Ok((self.links(id) == 0).then_some(id))
    }
    /// `rmdir`.
    pub fn rmdir(&mut self, dir: u64, name: &str) -> Result<(), MErr> {
        self.dir(dir)?;
        let id = self.get(dir, name).ok_or(MErr::NotFound)?;
        if !self.is_dir(id) {
            return Err(MErr::NotDir);
        }
        if !self.empty(id) {
            return Err(MErr::NotEmpty);
        }
        self.entries.remove(&(dir, name.to_string()));
        self.kinds.remove(&id);
        Ok(())
    }
    /// `rename` (with `RENAME_NOREPLACE` or `RENAME_EXCHANGE`); returns an
    /// inode replaced and left with no link.
    pub fn rename(
        &mut self,
        from: u64,
        fname: &str,
        to: u64,
        tname: &str,
        noreplace: bool,
        exchange: bool,
    ) -> Result<Option<u64>, MErr> {
        self.dir(from)?;
        self.dir(to)?;
        let src = self.get(from, fname).ok_or(MErr::NotFound)?;
        let dst = self.get(to, tname);
        if noreplace && dst.is_some() {
            return Err(MErr::Exists);
        }
        if from == to && fname == tname {
            return Ok(None);
        }
        if self.is_dir(src) && self.under(to, src) {
            return Err(MErr::InvalidMove);
        }
        if exchange {
            let dst = dst.ok_or(MErr::NotFound)?;
            if self.is_dir(dst) && self.under(from, dst) {
                return Err(MErr::InvalidMove);
            }
            self.entries.insert((from, fname.to_string()), dst);
            self.entries.insert((to, tname.to_string()), src);
            return Ok(None);
        }
        let mut gone = None;
        if let Some(dst) = dst {
            if dst == src {
                return Ok(None);
            }
            match (self.is_dir(src), self.is_dir(dst)) {
                (true, false) => return Err(MErr::NotDir),
                (false, true) => return Err(MErr::IsDir),
                (true, true) if !self.empty(dst) => return Err(MErr::NotEmpty),
                _ => {}
            }
            self.entries.remove(&(to, tname.to_string()));
            if self.is_dir(dst) {
                self.kinds.remove(&dst);
            } else if self.links(dst) == 0 {
                gone = Some(dst);
            }
        }
        self.entries.remove(&(from, fname.to_string()));
        self.entries.insert((to, tname.to_string()), src);
        Ok(gone)
    }

    /// Directories, the root first.
    pub fn dirs(&self) -> Vec<u64> {
        self.kinds
            .iter()
            .filter(|(_, k)| **k == MKind::Dir)
            .map(|(&i, _)| i)
            .collect()
    }

    /// Every linked regular file.
    pub fn files(&self) -> Vec<u64> {
        let linked: BTreeSet<u64> = self.entries.values().copied().collect();
        self.kinds
            .iter()
            .filter(|(i, k)| **k == MKind::File && linked.contains(i))
            .map(|(&i, _)| i)
            .collect()
    }

    /// Every path with the model inode it names.
    pub fn paths(&self) -> BTreeMap<String, u64> {
        let mut out = BTreeMap::new();
        let mut todo = vec![(ROOT, String::new())];
        while let Some((dir, path)) = todo.pop() {
            for ((_, name), &id) in self
                .entries
                .range((dir, String::new())..)
                .take_while(|((d, _), _)| *d == dir)
            {
                let p = format!("{path}/{name}");
                if self.is_dir(id) {
                    todo.push((id, p.clone()));
                }
                out.insert(p, id);
            }
        }
        out
    }

    /// The tree as a [`Snapshot`].
    pub fn snapshot(&self) -> Snapshot {
        let paths = self.paths();
        Snapshot::build(paths.iter().map(|(p, id)| {
            let kind = match &self.kinds[id] {
                MKind::File => Shape::File,
                MKind::Dir => Shape::Dir,
                MKind::Symlink(t) => Shape::Symlink(t.clone()),
                MKind::Special(k, rdev) => Shape::Special(k.code(), *rdev),
            };
            (p.clone(), kind, *id)
        }))
    }
}

/// What a path names, in a snapshot.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Shape {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link to this target.
    Symlink(String),
    /// A FIFO, socket or device node: its kind's code and device number.
    Special(u8, u64),
}

/// A tree reduced to what must agree: every path, what it names, and which
/// paths name the same inode (each path maps to the first path, in order,
/// naming its inode).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot(pub BTreeMap<String, (Shape, String)>);

impl Snapshot {
    /// From each path's shape and its inode (a model's or an engine's).
    fn build<I: Ord + Copy>(items: impl Iterator<Item = (String, Shape, I)>) -> Snapshot {
        let items: Vec<_> = items.collect();
        let mut first: BTreeMap<I, String> = BTreeMap::new();
        for (p, _, id) in &items {
            first.entry(*id).or_insert_with(|| p.clone());
        }
        Snapshot(
            items
                .into_iter()
                .map(|(p, s, id)| (p, (s, first[&id].clone())))
                .collect(),
        )
    }

    /// The engine's tree, walked from the root, with each path's inode.
    pub fn of<D: BlockDevice>(fs: &Fs<D>) -> Result<(Snapshot, BTreeMap<String, InodeId>), Error> {
        let mut items = Vec::new();
        let mut inos = BTreeMap::new();
        let mut todo = vec![(InodeId::ROOT, String::new())];
        while let Some((dir, path)) = todo.pop() {
            let mut after = 0;
            loop {
                let batch = fs.read_dir(dir, after, 64)?;
                let Some(last) = batch.last() else { break };
                after = last.cookie;
                for e in batch {
                    let p = format!("{path}/{}", e.name);
                    let shape = match e.kind {
                        Kind::File => Shape::File,
                        Kind::Dir => {
                            todo.push((e.ino, p.clone()));
                            Shape::Dir
                        }
                        Kind::Symlink => Shape::Symlink(fs.readlink(e.ino)?),
                        Kind::Fifo | Kind::Socket | Kind::CharDev | Kind::BlockDev => {
                            Shape::Special(e.kind.code(), fs.attr(e.ino)?.rdev)
                        }
                    };
                    inos.insert(p.clone(), e.ino);
                    items.push((p, shape, e.ino));
                }
            }
        }
        items.sort();
        Ok((Snapshot::build(items.into_iter()), inos))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_model_follows_posix_rename_rules() {
        let mut m = TreeModel::default();
        let d = m.mkdir(ROOT, "d").unwrap();
        let e = m.mkdir(d, "e").unwrap();
        let f = m.create(ROOT, "f").unwrap();
        assert_eq!(
            m.rename(ROOT, "d", e, "x", false, false),
            Err(MErr::InvalidMove)
        );
        assert_eq!(m.rename(ROOT, "f", d, "e", false, false), Err(MErr::IsDir));
        assert_eq!(m.rename(d, "e", ROOT, "f", false, false), Err(MErr::NotDir));
        m.link(f, d, "g").unwrap();
        assert_eq!(m.unlink(ROOT, "f"), Ok(None), "a link is left");
        assert_eq!(m.unlink(d, "g"), Ok(Some(f)));
        assert_eq!(m.rmdir(ROOT, "d"), Err(MErr::NotEmpty));
        m.rmdir(d, "e").unwrap();
        m.rmdir(ROOT, "d").unwrap();
        assert!(m.paths().is_empty());
    }
}
