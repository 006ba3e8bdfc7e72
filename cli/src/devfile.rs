//! The file behind a `file:PATH` device. The tools look at what is there
//! before writing anything; a file a run creates is removed again if the
//! run fails, and a file it did not create is never removed.

use std::fs::OpenOptions;
use std::io::{Seek, SeekFrom};
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
/// an error.
pub fn inspect(path: &Path) -> Result<Option<Existing>, String> {
    let shown = path.display();
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("{shown}: {e}")),
    };
    let kind = meta.file_type();
    let block_device = kind.is_block_device();
    if !kind.is_file() && !block_device {
        return Err(format!("{shown}: not a regular file or a block device"));
    }
    // A block device's metadata says 0 bytes; its end says how big it is.
    let len = if block_device {
        std::fs::File::open(path)
            .and_then(|mut f| f.seek(SeekFrom::End(0)))
            .map_err(|e| format!("{shown}: {e}"))?
    } else {
        meta.len()
    };
    let head = crate::signature::read_file_head(path)
        .map_err(|e| format!("{shown}: {e}"))?
        .unwrap_or_default();
    Ok(Some(Existing {
        len,
        allocated: if block_device {
            0
        } else {
            crate::host::allocated(&meta)
        },
        block_device,
        head,
    }))
}

/// Free bytes on the filesystem that holds (or will hold) `path`.
pub fn free_space_for(path: &Path) -> Option<u64> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    crate::host::free_space(dir)
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
    pub fn new(path: &Path, len: u64) -> Result<Created, String> {
        // `create_new`: if something appeared at `path` since it was
        // inspected, it is not ours to size or to remove.
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(path)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        let created = Created {
            path: path.to_path_buf(),
            keep: false,
        };
        file.set_len(len)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(created)
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
        assert!(inspect(&std::env::temp_dir())
            .unwrap_err()
            .contains("not a regular file"));
    }
}
