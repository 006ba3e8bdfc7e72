//! The NVMe/TCP pre-shared keys (NVMe/TCP Transport 1.0c, 3.6.1.2 to
//! 3.6.1.4, from TP 8011) and what TLS is given from them.
//!
//! - The **configured PSK** in its interchange form,
//!   `NVMeTLSkey-1:HH:BASE64:` (what `nvme gen-tls-key` prints): HH names
//!   the hash that turns it into a retained PSK (00: none, 01: SHA-256,
//!   02: SHA-384), the base64 holds 32 (SHA-256) or 48 (SHA-384) key
//!   bytes and their CRC-32, as a `DHHC-1:` secret does
//!   ([`crate::auth::secret`]).
//! - The **retained PSK**: `HKDF-Expand-Label(HKDF-Extract(0, configured),
//!   "HostNQN", host NQN, L)`, or the configured PSK itself for 00.
//! - The **PSK identity**, version 0: `NVMe0R<hh> <hostnqn> <subnqn>`,
//!   hh the hash of the cipher suite the PSK is for (01:
//!   TLS_AES_128_GCM_SHA256, 02: TLS_AES_256_GCM_SHA384). It is what
//!   Linux's host and target (6.12) look the key up by.
//! - The **TLS PSK**: `HKDF-Expand-Label(HKDF-Extract(0, retained),
//!   "nvme-tls-psk", identity, L)`, as nvme-cli's `gen-tls-key --insert`
//!   derives it for the keyring that `tlshd` reads. L is the key's length
//!   throughout; HKDF-Expand-Label is TLS 1.3's (RFC 8446, 7.1).
//!
//! libnvme up to 1.13 (nvme-cli 2.13, Debian 13's) wrote the HKDF label
//! differently: L little-endian, the label and the context without their
//! length bytes (libnvme keeps it as `derive_retained_key_compat` and
//! `derive_tls_key_compat`; nvme-cli's `--compat` after 2.13). Both are
//! here ([`Derivation`], the device name's `tls_derivation`): a host must
//! derive what the target's tools put in its keyring, and nothing on the
//! wire says which form that was (a mismatch is a refused handshake).
//! `vm/tcp-tls-test.sh` checks the older form against a key nvme-cli 2.13
//! put in Linux's keyring, with `tlshd` doing the target's handshake.
//!
//! Keys are zeroed on drop, print as `<secret>`, and no error carries
//! any part of them. `driver/tests/data/tls_psk_vectors.py` computes the
//! same derivation independently.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use hkdf::Hkdf;
use sha2::{Sha256, Sha384};
use zeroize::Zeroizing;

use crate::auth::secret::{key_with_crc, SecretError};

/// The hash of a PSK and of the TLS 1.3 cipher suite it is used with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PskHash {
    /// SHA-256, 32-byte keys, TLS_AES_128_GCM_SHA256.
    Sha256,
    /// SHA-384, 48-byte keys, TLS_AES_256_GCM_SHA384.
    Sha384,
}

impl PskHash {
    /// Its number in the interchange form and the PSK identity.
    pub fn id(self) -> u8 {
        match self {
            PskHash::Sha256 => 1,
            PskHash::Sha384 => 2,
        }
    }
    /// Key length, which is the hash's output length.
    pub fn key_len(self) -> usize {
        match self {
            PskHash::Sha256 => 32,
            PskHash::Sha384 => 48,
        }
    }
    /// The TLS 1.3 cipher suite (OpenSSL's name) a PSK of this hash
    /// goes with.
    pub fn cipher_suite(self) -> &'static str {
        match self {
            PskHash::Sha256 => "TLS_AES_128_GCM_SHA256",
            PskHash::Sha384 => "TLS_AES_256_GCM_SHA384",
        }
    }
}

/// How the HKDF labels are written (see the module's text).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Derivation {
    /// RFC 8446's HkdfLabel, as TP 8011 says and current libnvme does.
    #[default]
    Rfc8446,
    /// libnvme's older form (nvme-cli 2.13 and before; `--compat` after).
    Compat,
}

impl Derivation {
    /// The form named `name` in a device name (`rfc8446` or `compat`).
    pub fn from_name(name: &str) -> Option<Derivation> {
        match name {
            "rfc8446" => Some(Derivation::Rfc8446),
            "compat" => Some(Derivation::Compat),
            _ => None,
        }
    }
    /// Its name in a device name.
    pub fn name(self) -> &'static str {
        match self {
            Derivation::Rfc8446 => "rfc8446",
            Derivation::Compat => "compat",
        }
    }
}

/// Why a text is not a configured PSK, or no TLS PSK comes from it. No
/// variant carries any part of the key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PskError {
    /// It does not have the form `NVMeTLSkey-1:HH:BASE64:`.
    Format,
    /// HH names no known hash (00 to 02).
    Hash(u8),
    /// The base64 part does not decode.
    Base64,
    /// The key length does not fit the hash (the length found).
    Length(usize),
    /// The CRC-32 after the key does not match it.
    Crc,
    /// The PSK identity is longer than TLS can carry here (the NQNs are
    /// too long together: 255 bytes at most).
    IdentityTooLong,
}

impl fmt::Display for PskError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PskError::Format => f.write_str("a TLS PSK has the form NVMeTLSkey-1:HH:BASE64:"),
            PskError::Hash(h) => write!(f, "TLS PSK: unknown hash {h:02} (00 to 02)"),
            PskError::Base64 => f.write_str("TLS PSK: the key is not valid base64"),
            PskError::Length(n) => write!(
                f,
                "TLS PSK: {n} key bytes, not 32 (hash 00 or 01) or 48 (hash 00 or 02)"
            ),
            PskError::Crc => f.write_str("TLS PSK: the key's CRC-32 does not match"),
            PskError::IdentityTooLong => f.write_str(
                "TLS PSK identity 'NVMe0Rhh HOSTNQN SUBNQN' longer than 255 bytes: \
                 shorter NQNs are needed",
            ),
        }
    }
}

impl core::error::Error for PskError {}

/// A configured PSK (NVMe/TCP 3.6.1.2), as read from its interchange
/// form.
#[derive(Clone, PartialEq, Eq)]
pub struct ConfiguredPsk {
    key: Zeroizing<Vec<u8>>,
    /// The hash that derives the retained PSK; none: the key is the
    /// retained PSK.
    transform: Option<PskHash>,
}

impl fmt::Debug for ConfiguredPsk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<secret>")
    }
}

impl ConfiguredPsk {
    /// Reads `NVMeTLSkey-1:HH:BASE64:` (the last colon may be missing;
    /// whitespace around it, like a file's final newline, is ignored).
    pub fn parse(text: &str) -> Result<ConfiguredPsk, PskError> {
        let rest = text
            .trim()
            .strip_prefix("NVMeTLSkey-1:")
            .ok_or(PskError::Format)?;
        let (hh, b64) = rest.split_once(':').ok_or(PskError::Format)?;
        let b64 = b64.strip_suffix(':').unwrap_or(b64);
        if hh.len() != 2 || !hh.bytes().all(|c| c.is_ascii_digit()) || b64.contains(':') {
            return Err(PskError::Format);
        }
        let n = hh.bytes().fold(0u8, |a, c| a * 10 + (c - b'0'));
        let (transform, lens): (_, &[usize]) = match n {
            0 => (None, &[32, 48]),
            1 => (Some(PskHash::Sha256), &[32]),
            2 => (Some(PskHash::Sha384), &[48]),
            n => return Err(PskError::Hash(n)),
        };
        let key = key_with_crc(b64, lens).map_err(|e| match e {
            SecretError::Base64 => PskError::Base64,
            SecretError::Length(n) => PskError::Length(n),
            SecretError::Crc => PskError::Crc,
            _ => PskError::Format,
        })?;
        Ok(ConfiguredPsk { key, transform })
    }

    /// The hash of the cipher suite this key is for: its transformation
    /// hash, or the one its length fits.
    pub fn hash(&self) -> PskHash {
        match self.transform {
            Some(h) => h,
            None if self.key.len() == 48 => PskHash::Sha384,
            None => PskHash::Sha256,
        }
    }

    /// The retained PSK for host `hostnqn` (3.6.1.3).
    pub fn retained(&self, hostnqn: &[u8], how: Derivation) -> Zeroizing<Vec<u8>> {
        match self.transform {
            None => self.key.clone(),
            Some(h) => expand_label(h, how, &self.key, b"HostNQN", hostnqn),
        }
    }

    /// What TLS needs to reach subsystem `subnqn` as host `hostnqn`:
    /// the version 0 identity and the TLS PSK (3.6.1.4).
    pub fn tls(&self, hostnqn: &[u8], subnqn: &[u8], how: Derivation) -> Result<TlsPsk, PskError> {
        let hash = self.hash();
        let mut identity = Vec::with_capacity(10 + hostnqn.len() + subnqn.len());
        identity.extend_from_slice(b"NVMe0R0");
        identity.push(b'0' + hash.id());
        identity.push(b' ');
        identity.extend_from_slice(hostnqn);
        identity.push(b' ');
        identity.extend_from_slice(subnqn);
        if identity.len() > usize::from(u8::MAX) {
            return Err(PskError::IdentityTooLong);
        }
        let retained = self.retained(hostnqn, how);
        let key = expand_label(hash, how, &retained, b"nvme-tls-psk", &identity);
        Ok(TlsPsk {
            // NQNs are ASCII (checked by `Nqn`); a lossy conversion
            // changes nothing for them.
            identity: String::from_utf8_lossy(&identity).into_owned(),
            key,
            hash,
        })
    }
}

/// `HKDF-Expand-Label(HKDF-Extract(0, ikm), label, context, L)` with L
/// the length of `ikm` (RFC 8446, 7.1: the label gets the "tls13 "
/// prefix, label and context their length bytes; or libnvme's older
/// form). Callers keep `context` under 256 bytes.
fn expand_label(
    hash: PskHash,
    how: Derivation,
    ikm: &[u8],
    label: &[u8],
    context: &[u8],
) -> Zeroizing<Vec<u8>> {
    let len = ikm.len();
    let mut out = Zeroizing::new(alloc::vec![0u8; len]);
    let (be, le) = ((len as u16).to_be_bytes(), (len as u16).to_le_bytes());
    let (label_len, context_len) = ([(6 + label.len()) as u8], [context.len() as u8]);
    let rfc: [&[u8]; 6] = [&be, &label_len, b"tls13 ", label, &context_len, context];
    let compat: [&[u8]; 4] = [&le, b"tls13 ", label, context];
    let info: &[&[u8]] = match how {
        Derivation::Rfc8446 => &rfc,
        Derivation::Compat => &compat,
    };
    // Cannot fail: L is at most 48, far under 255 times the hash length.
    let _ = match hash {
        PskHash::Sha256 => Hkdf::<Sha256>::new(None, ikm).expand_multi_info(info, &mut out),
        PskHash::Sha384 => Hkdf::<Sha384>::new(None, ikm).expand_multi_info(info, &mut out),
    };
    out
}

/// What a TLS 1.3 handshake with an external PSK needs: the identity
/// sent in the clear, the key, the cipher suite's hash.
#[derive(Clone, PartialEq, Eq)]
pub struct TlsPsk {
    /// `NVMe0Rhh HOSTNQN SUBNQN`.
    pub identity: String,
    /// The TLS PSK.
    pub key: Zeroizing<Vec<u8>>,
    /// Its hash.
    pub hash: PskHash,
}

impl fmt::Debug for TlsPsk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsPsk")
            .field("identity", &self.identity)
            .field("key", &"<secret>")
            .field("hash", &self.hash)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(key: &[u8], hh: &str) -> String {
        use base64::Engine;
        let crc = crc::Crc::<u32>::new(&crc::CRC_32_ISO_HDLC);
        let mut raw = key.to_vec();
        raw.extend_from_slice(&crc.checksum(key).to_le_bytes());
        alloc::format!(
            "NVMeTLSkey-1:{hh}:{}:",
            base64::engine::general_purpose::STANDARD.encode(&raw)
        )
    }

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| alloc::format!("{x:02x}")).collect()
    }

    const HOST: &[u8] = b"nqn.2014-08.org.nvmexpress:uuid:f81d4fae-7dec-11d0-a765-00a0c91e6bf6";
    const SUB: &[u8] = b"nqn.2024-01.io.pollfs:test";

    /// Known answers from `driver/tests/data/tls_psk_vectors.py`, which
    /// computes HKDF from Python's own `hmac` module, for both forms.
    #[test]
    fn the_derivation_matches_independent_ones() {
        let key: Vec<u8> = (0u8..32).collect();
        let psk = ConfiguredPsk::parse(&text(&key, "01")).unwrap();
        assert_eq!(
            hex(&psk.retained(HOST, Derivation::Rfc8446)),
            "2777170cfb82b52c5ec8cb00cc26fa9145d942315f2c892822b0772f5debe85d"
        );
        let tls = psk.tls(HOST, SUB, Derivation::Rfc8446).unwrap();
        assert_eq!(
            tls.identity,
            "NVMe0R01 nqn.2014-08.org.nvmexpress:uuid:f81d4fae-7dec-11d0-a765-00a0c91e6bf6 \
             nqn.2024-01.io.pollfs:test"
        );
        assert_eq!(
            hex(&tls.key),
            "ca09777655182c42bcf64887d141565d8c8c3b2194af282b3780a7bdc5cae82d"
        );
        assert_eq!(
            hex(&psk.retained(HOST, Derivation::Compat)),
            "8ea8c172dcbe294d04395b23836f5a90decc74a756669406f9c341df82b6ba04"
        );
        let compat = psk.tls(HOST, SUB, Derivation::Compat).unwrap();
        assert_eq!(compat.identity, tls.identity, "one identity for both forms");
        assert_eq!(
            hex(&compat.key),
            "8ab763c65e3035484816ccd6204e8bfe553fab0a2aeb9fc4cbdb3a4b458122b7"
        );
        let key: Vec<u8> = (100u8..148).collect();
        let psk = ConfiguredPsk::parse(&text(&key, "02")).unwrap();
        let tls = psk.tls(HOST, SUB, Derivation::Rfc8446).unwrap();
        assert!(tls.identity.starts_with("NVMe0R02 "));
        assert_eq!(tls.hash, PskHash::Sha384);
        assert_eq!(
            hex(&tls.key),
            "3bc604f5341a77349880961f77d35a21bc2761d561cb0bed6173386dd282c37e\
             a9f186626fff9cce1ca894ad12a89d8b"
        );
        let tls = psk.tls(HOST, SUB, Derivation::Compat).unwrap();
        assert_eq!(
            hex(&tls.key),
            "a637ab9a42c8361af3589ee1362aea9ac9b4c7915a571231a91650d781d56326\
             b72b326588db78687b8946b8b8a6c19a"
        );
        // 00: the configured key is the retained one, in either form.
        let psk = ConfiguredPsk::parse(&text(&[7; 32], "00")).unwrap();
        for how in [Derivation::Rfc8446, Derivation::Compat] {
            assert_eq!(&**psk.retained(HOST, how), &[7; 32]);
        }
        assert_eq!(psk.hash(), PskHash::Sha256);
    }

    #[test]
    fn malformed_keys_are_refused_without_echoing_them() {
        let e = |s: &str| ConfiguredPsk::parse(s).unwrap_err();
        let good = text(&[1; 32], "01");
        assert!(ConfiguredPsk::parse(&alloc::format!(" {good}\n")).is_ok());
        assert!(ConfiguredPsk::parse(good.strip_suffix(':').unwrap()).is_ok());
        assert_eq!(e("NVMeTLSkey-2:01:AAAA:"), PskError::Format);
        assert_eq!(e("NVMeTLSkey-1:1:AAAA:"), PskError::Format);
        assert_eq!(e("DHHC-1:01:AAAA:"), PskError::Format);
        assert_eq!(e(&good.replace(":01:", ":03:")), PskError::Hash(3));
        assert_eq!(e("NVMeTLSkey-1:01:!!!!:"), PskError::Base64);
        assert_eq!(e(&text(&[1; 48], "01")), PskError::Length(48));
        assert_eq!(e(&text(&[1; 32], "02")), PskError::Length(32));
        assert_eq!(e(&text(&[1; 64], "00")), PskError::Length(64));
        let mut bad = good.clone().into_bytes();
        bad[20] = if bad[20] == b'A' { b'B' } else { b'A' };
        assert_eq!(e(core::str::from_utf8(&bad).unwrap()), PskError::Crc);
        let psk = ConfiguredPsk::parse(&good).unwrap();
        assert_eq!(alloc::format!("{psk:?}"), "<secret>");
        let long = [b'n'; 230];
        assert_eq!(
            psk.tls(&long, SUB, Derivation::Rfc8446).unwrap_err(),
            PskError::IdentityTooLong
        );
        let shown = alloc::format!("{:?}", psk.tls(HOST, SUB, Derivation::Rfc8446).unwrap());
        assert!(
            shown.contains("<secret>") && shown.contains("NVMe0R01"),
            "{shown}"
        );
    }
}
