//! DH-HMAC-CHAP secrets in their text form, `DHHC-1:NN:BASE64:` (NVMe
//! Base 2.0, 8.13.5.8; what `nvme gen-dhchap-key` prints and nvmet's
//! `dhchap_key` takes): NN names the hash that transforms the key with
//! an NQN before use (00: none, 01 SHA-256, 02 SHA-384, 03 SHA-512), and
//! the base64 holds the 32, 48 or 64 key bytes followed by their CRC-32,
//! little-endian.
//!
//! A secret is held zeroed on drop, prints as `<secret>` and is never
//! part of an error message.

use alloc::vec::Vec;
use core::fmt;

use base64::Engine;
use zeroize::{Zeroize, Zeroizing};

use super::hash::Hash;

/// The CRC that guards the key bytes (CRC-32 as zlib computes it).
const CRC: crc::Crc<u32> = crc::Crc::<u32>::new(&crc::CRC_32_ISO_HDLC);

/// Why a text is not a DH-HMAC-CHAP secret. No variant carries any part
/// of the text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SecretError {
    /// It does not have the form `DHHC-1:NN:BASE64:`.
    Format,
    /// NN names no known transformation.
    Transform(u8),
    /// The base64 part does not decode.
    Base64,
    /// The key is not 32, 48 or 64 bytes (the length found).
    Length(usize),
    /// The CRC-32 after the key does not match it.
    Crc,
}

impl fmt::Display for SecretError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SecretError::Format => {
                f.write_str("a DH-HMAC-CHAP secret has the form DHHC-1:NN:BASE64:")
            }
            SecretError::Transform(n) => write!(
                f,
                "DH-HMAC-CHAP secret: unknown key transformation {n:02} (00 to 03)"
            ),
            SecretError::Base64 => f.write_str("DH-HMAC-CHAP secret: the key is not valid base64"),
            SecretError::Length(n) => {
                write!(f, "DH-HMAC-CHAP secret: {n} key bytes, not 32, 48 or 64")
            }
            SecretError::Crc => f.write_str("DH-HMAC-CHAP secret: the key's CRC-32 does not match"),
        }
    }
}

impl core::error::Error for SecretError {}

/// The key bytes of a secret's base64 part: `lens` key bytes followed
/// by their CRC-32, little-endian. The `DHHC-1:` secrets and the
/// NVMe/TCP TLS PSKs (`NVMeTLSkey-1:`, [`crate::tls::psk`]) share this
/// form.
pub(crate) fn key_with_crc(b64: &str, lens: &[usize]) -> Result<Zeroizing<Vec<u8>>, SecretError> {
    let mut raw = Zeroizing::new(Vec::with_capacity(b64.len()));
    base64::engine::general_purpose::STANDARD
        .decode_vec(b64, &mut raw)
        .map_err(|_| SecretError::Base64)?;
    let len = raw.len().saturating_sub(4);
    if raw.len() < 4 || !lens.contains(&len) {
        return Err(SecretError::Length(len));
    }
    let (key, crc) = raw.split_at(len);
    if CRC.checksum(key).to_le_bytes() != crc {
        return Err(SecretError::Crc);
    }
    Ok(Zeroizing::new(key.to_vec()))
}

/// A DH-HMAC-CHAP secret: the key bytes and the hash that transforms
/// them, if any.
#[derive(Clone, PartialEq, Eq)]
pub struct DhchapSecret {
    key: Zeroizing<Vec<u8>>,
    transform: Option<Hash>,
}

impl fmt::Debug for DhchapSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<secret>")
    }
}

impl DhchapSecret {
    /// Reads `DHHC-1:NN:BASE64:` (the last colon may be missing;
    /// whitespace around it, like a file's final newline, is ignored).
    pub fn parse(text: &str) -> Result<DhchapSecret, SecretError> {
        let text = text.trim();
        let rest = text.strip_prefix("DHHC-1:").ok_or(SecretError::Format)?;
        let (nn, b64) = rest.split_once(':').ok_or(SecretError::Format)?;
        let b64 = b64.strip_suffix(':').unwrap_or(b64);
        if nn.len() != 2 || !nn.bytes().all(|c| c.is_ascii_digit()) || b64.contains(':') {
            return Err(SecretError::Format);
        }
        let n = nn.bytes().fold(0u8, |a, c| a * 10 + (c - b'0'));
        let transform = match n {
            0 => None,
            n => Some(Hash::from_id(n).ok_or(SecretError::Transform(n))?),
        };
        Ok(DhchapSecret {
            key: key_with_crc(b64, &[32, 48, 64])?,
            transform,
        })
    }

    /// The key as used with `nqn` (8.13.5.8): HMAC of the NQN and
    /// "NVMe-over-Fabrics" keyed with the secret, under the secret's
    /// transformation hash; the secret itself when it names none. The
    /// host's key is transformed with the host NQN, the controller's
    /// with the subsystem NQN (as Linux's host and target do).
    pub fn transformed(&self, nqn: &[u8]) -> Zeroizing<Vec<u8>> {
        match self.transform {
            None => self.key.clone(),
            Some(h) => h.hmac(&self.key, &[nqn, b"NVMe-over-Fabrics"]),
        }
    }

    /// Length of the key in bytes.
    pub fn len(&self) -> usize {
        self.key.len()
    }

    /// Never true: a parsed secret has 32, 48 or 64 bytes.
    pub fn is_empty(&self) -> bool {
        self.key.is_empty()
    }
}

impl Zeroize for DhchapSecret {
    fn zeroize(&mut self) {
        self.key.zeroize();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(key: &[u8], nn: &str) -> alloc::string::String {
        let mut raw = key.to_vec();
        raw.extend_from_slice(&CRC.checksum(key).to_le_bytes());
        alloc::format!(
            "DHHC-1:{nn}:{}:",
            base64::engine::general_purpose::STANDARD.encode(&raw)
        )
    }

    #[test]
    fn secrets_parse_and_never_print() {
        let s = DhchapSecret::parse(&text(&[7; 32], "00")).unwrap();
        assert_eq!(s.len(), 32);
        assert_eq!(&**s.transformed(b"any"), &[7; 32]);
        assert_eq!(alloc::format!("{s:?}"), "<secret>");
        let t = text(&[9; 48], "02");
        let s = DhchapSecret::parse(&alloc::format!("{t}\n")).unwrap();
        assert_eq!(s.transformed(b"nqn").len(), 48);
        let no_colon = t.strip_suffix(':').unwrap();
        assert_eq!(DhchapSecret::parse(no_colon), Ok(s));
    }

    #[test]
    fn malformed_secrets_are_refused_without_echoing_them() {
        let good = text(&[1; 64], "03");
        let e = |s: &str| DhchapSecret::parse(s).unwrap_err();
        assert_eq!(e("DHHC-2:00:AAAA:"), SecretError::Format);
        assert_eq!(e("DHHC-1:0:AAAA:"), SecretError::Format);
        assert_eq!(e("DHHC-1:00"), SecretError::Format);
        assert_eq!(e("DHHC-1:x1:AAAA:"), SecretError::Format);
        assert_eq!(e(&good.replace(":03:", ":04:")), SecretError::Transform(4));
        assert_eq!(e("DHHC-1:00:!!!!:"), SecretError::Base64);
        assert_eq!(e(&text(&[1; 31], "00")), SecretError::Length(31));
        assert_eq!(e(&text(&[1; 65], "00")), SecretError::Length(65));
        // One bit off in the key: the CRC catches it.
        let mut raw = [1u8; 68];
        raw[64..].copy_from_slice(&CRC.checksum(&[1; 64]).to_le_bytes());
        raw[3] ^= 0x10;
        let bad = alloc::format!(
            "DHHC-1:03:{}:",
            base64::engine::general_purpose::STANDARD.encode(raw)
        );
        assert_eq!(e(&bad), SecretError::Crc);
        for err in [
            SecretError::Format,
            SecretError::Base64,
            SecretError::Crc,
            SecretError::Length(3),
        ] {
            assert!(!alloc::format!("{err}").contains("AQEB"));
        }
    }
}
