//! The file behind a `file:PATH` device: what is there is looked at
//! before anything is written; a file an open creates is removed again if
//! the open (or the run it was for) fails, and a file it did not create is
//! never removed.

use std::fs::OpenOptions;
use std::io::{self, Seek, SeekFrom};
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

/// A file or block device that is already there.
#[derive(Debug)]
pub struct Existing {
    /// Its size in bytes.
    pub len: u64,
    /// Disk it already occupies (0 for a block device).
    pub allocated: u64,
    /// A block device, whose size is fixed.
    pub block_device: bool,
    /// Its first bytes, for [`crate::signature`].
    pub head: Vec<u8>,
}

/// What is at `path`, or `None` if nothing is. Anything but a regular file
/// or a block device (a directory, a FIFO that a read would block on) is
/// an error of kind `InvalidInput`.
pub fn inspect(path: &Path) -> io::Result<Option<Existing>> {
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let kind = meta.file_type();
    let block_device = kind.is_block_device();
    if !kind.is_file() && !block_device {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file or a block device",
        ));
    }
    // A block device's metadata says 0 bytes; its end says how big it is.
    let len = if block_device {
        std::fs::File::open(path).and_then(|mut f| f.seek(SeekFrom::End(0)))?
    } else {
        meta.len()
    };
    let head = crate::signature::read_file_head(path)?.unwrap_or_default();
    Ok(Some(Existing {
        len,
        allocated: if block_device { 0 } else { allocated(&meta) },
        block_device,
        head,
    }))
}

/// Disk a file occupies (less than its length if it is sparse).
pub fn allocated(meta: &std::fs::Metadata) -> u64 {
    use std::os::unix::fs::MetadataExt;
    meta.blocks().saturating_mul(512)
}

/// The folder that holds (or will hold) `path`.
pub fn folder_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// A file this run created: removed when dropped, unless [`Created::keep`]
/// was called, so a failed run leaves nothing behind.
#[derive(Debug)]
pub struct Created {
    path: PathBuf,
    keep: bool,
}

impl Created {
    /// Creates `path`, which must not exist, `len` bytes long (sparse).
    pub fn new(path: &Path, len: u64) -> io::Result<Created> {
        // `create_new`: if something appeared at `path` since it was
        // inspected, it is not ours to size or to remove.
        let file = OpenOptions::new().write(true).create_new(true).open(path)?;
        let created = Created {
            path: path.to_path_buf(),
            keep: false,
        };
        file.set_len(len)?;
        Ok(created)
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The run succeeded: leave the file in place.
    pub fn keep(mut self) {
        self.keep = true;
    }
}

impl Drop for Created {
    fn drop(&mut self) {
        if !self.keep {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("pollfs-devfile-{}-{name}", std::process::id()))
    }

    #[test]
    fn a_created_file_goes_away_unless_kept() {
        let p = temp("dropped");
        let c = Created::new(&p, 8192).unwrap();
        assert_eq!(std::fs::metadata(&p).unwrap().len(), 8192);
        drop(c);
        assert!(!p.exists());
        Created::new(&p, 0).unwrap().keep();
        assert!(p.exists());
        std::fs::remove_file(&p).unwrap();
    }

    #[test]
    fn an_existing_file_is_never_taken_over() {
        let p = temp("existing");
        std::fs::write(&p, b"keep me").unwrap();
        assert!(Created::new(&p, 8192).is_err());
        assert_eq!(std::fs::read(&p).unwrap(), b"keep me");
        let e = inspect(&p).unwrap().unwrap();
        assert_eq!(
            (e.len, e.block_device, e.head.as_slice()),
            (7, false, &b"keep me"[..])
        );
        std::fs::remove_file(&p).unwrap();
        assert!(inspect(&p).unwrap().is_none());
    }

    #[test]
    fn directories_are_not_devices() {
        assert_eq!(
            inspect(&std::env::temp_dir()).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
    }
}
