//! Secrets from files (std): the device name names a file
//! (`dhchap_key_file=PATH`, `tls_key_file=PATH`), never the secret itself, so the secret
//! shows neither in `ps` nor in the process's environment. The file
//! holds the `DHHC-1:` form (what `nvme gen-dhchap-key` prints) or the
//! `NVMeTLSkey-1:` form (`nvme gen-tls-key`); its
//! contents are zeroed once parsed. Errors name the file, never what is
//! in it.

use std::fmt;
use std::io::Read;
use std::string::String;

use zeroize::Zeroizing;

use super::secret::{DhchapSecret, SecretError};
use crate::tls::psk::{ConfiguredPsk, PskError};

/// Why a key file could not be used.
#[derive(Debug)]
#[non_exhaustive]
pub enum KeyFileError {
    /// The file could not be read.
    Read {
        /// The file.
        path: String,
        /// What the system said.
        error: std::io::Error,
    },
    /// The file does not hold a valid secret.
    Secret {
        /// The file.
        path: String,
        /// What is wrong (never the secret).
        error: SecretError,
    },
    /// The file does not hold a valid TLS PSK, or no TLS PSK comes from
    /// it for this host and subsystem.
    Psk {
        /// The file.
        path: String,
        /// What is wrong (never the key).
        error: PskError,
    },
}

impl fmt::Display for KeyFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyFileError::Read { path, error } => write!(f, "key file {path}: {error}"),
            KeyFileError::Secret { path, error } => write!(f, "key file {path}: {error}"),
            KeyFileError::Psk { path, error } => write!(f, "key file {path}: {error}"),
        }
    }
}

impl std::error::Error for KeyFileError {}

/// Fills `buf` from the system's random source (`/dev/urandom`): the
/// [`FillRandom`](super::FillRandom) of hosted builds.
pub fn os_random(buf: &mut [u8]) -> bool {
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(buf))
        .is_ok()
}

/// The text of key file `path`, zeroed on drop.
fn read_key_text(path: &str) -> Result<Zeroizing<String>, KeyFileError> {
    let read = |error| KeyFileError::Read {
        path: path.into(),
        error,
    };
    let mut file = std::fs::File::open(path).map_err(read)?;
    let mut text = Zeroizing::new(String::with_capacity(128));
    // A key is under 100 bytes; a larger file is not one.
    file.by_ref()
        .take(4096)
        .read_to_string(&mut text)
        .map_err(read)?;
    Ok(text)
}

/// Reads the secret in file `path`.
pub fn read_secret(path: &str) -> Result<DhchapSecret, KeyFileError> {
    DhchapSecret::parse(&read_key_text(path)?).map_err(|error| KeyFileError::Secret {
        path: path.into(),
        error,
    })
}

/// Reads the configured TLS PSK (`NVMeTLSkey-1:`, what `nvme
/// gen-tls-key` prints) in file `path`.
pub fn read_tls_psk(path: &str) -> Result<ConfiguredPsk, KeyFileError> {
    ConfiguredPsk::parse(&read_key_text(path)?).map_err(|error| KeyFileError::Psk {
        path: path.into(),
        error,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_files_are_read_and_errors_hold_no_secret() {
        let dir = std::env::temp_dir().join(format!("pollfs-keyfile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let good = dir.join("good");
        // 32 bytes of 0x01 and their CRC-32.
        std::fs::write(
            &good,
            "DHHC-1:01:AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQHMnzFi:\n",
        )
        .unwrap();
        let s = read_secret(good.to_str().unwrap());
        assert!(s.is_ok(), "{s:?}");
        let bad = dir.join("bad");
        std::fs::write(
            &bad,
            "DHHC-1:01:AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQHMnzFj:\n",
        )
        .unwrap();
        let e = read_secret(bad.to_str().unwrap()).unwrap_err();
        let shown = format!("{e}");
        assert!(shown.contains("CRC") && !shown.contains("AQEB"), "{shown}");
        let e = read_secret(dir.join("missing").to_str().unwrap()).unwrap_err();
        assert!(matches!(e, KeyFileError::Read { .. }));
        let (mut a, mut b) = ([0u8; 32], [0u8; 32]);
        assert!(os_random(&mut a) && os_random(&mut b));
        assert_ne!(a, b);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
