//! The device form of an NVMe/TCP subsystem:
//! `nvme-tcp://HOST:PORT/NQN?hdgst=1&ddgst=1&kato=MS&reconnect=MS`
//! (and the authentication options below).
//!
//! HOST is a name, an IPv4 address or a bracketed IPv6 address; PORT
//! defaults to 4420 (NVMe/TCP 1.0, 3.1.2); NQN is the subsystem's name as
//! it is, up to the `?`. Options: `hdgst` and `ddgst` (0 or 1) ask for
//! header and data digests, `kato` sets the Keep Alive Timeout in
//! milliseconds (0: none), `reconnect` how long, in milliseconds, a reset
//! keeps trying to reach the controller again (30000 by default; a mirror
//! leg waits this long, up to a few times over, before it is dropped, so
//! a mirror's writes stall that long when a target goes away).
//!
//! Authentication (DH-HMAC-CHAP, [`crate::auth`]): `hostnqn=NQN` names
//! this host (the NQN the target's allowed-host entry and the key's
//! transformation use; a UUID form by default), `dhchap_key_file=PATH`
//! the file holding the host's `DHHC-1:` secret, and
//! `dhchap_ctrl_key_file=PATH` the controller's, for bidirectional
//! authentication.
//!
//! TLS ([`crate::tls`]): `tls_key_file=PATH` names the file holding the
//! configured PSK (`NVMeTLSkey-1:01:...:`, what `nvme gen-tls-key`
//! prints) and requires TLS on every connection; `tls=1` says the same
//! and is refused without a key file. `tls_derivation=rfc8446|compat`
//! says how the TLS PSK is derived from that key: `rfc8446` (the
//! default) as TP 8011 and current nvme-cli do, `compat` as nvme-cli
//! 2.13 and before (Debian 13's) did, which is what a target whose
//! keyring was filled by such an nvme-cli holds
//! ([`Derivation`](crate::tls::psk::Derivation)). Digests are off under
//! TLS (NVMe/TCP 1.0c, 3.6.1): `hdgst=1` or `ddgst=1` with TLS is refused.
//!
//! A secret itself is never part of a device name (a name shows in `ps`
//! and in logs): an option whose value looks like one is refused, and
//! the error does not repeat it.

use alloc::string::{String, ToString};
use core::fmt;

use super::transport::TcpOptions;
use crate::spec::fabrics::Nqn;
use crate::tls::psk::Derivation;

/// The scheme every NVMe/TCP device name starts with.
pub const SCHEME: &str = "nvme-tcp://";
/// TCP port 4420, assigned to NVMe over Fabrics.
pub const DEFAULT_PORT: u16 = 4420;

/// A parsed `nvme-tcp://` device name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TcpAddress {
    /// Host name or address (IPv6 without brackets).
    pub host: String,
    /// TCP port.
    pub port: u16,
    /// Subsystem NQN.
    pub subnqn: Nqn,
    /// Header digests asked for.
    pub header_digest: bool,
    /// Data digests asked for.
    pub data_digest: bool,
    /// Keep Alive Timeout, if given.
    pub kato_ms: Option<u32>,
    /// How long a reset tries to reconnect, if given (milliseconds).
    pub reconnect_ms: Option<u64>,
    /// This host's NQN, if given.
    pub hostnqn: Option<Nqn>,
    /// The file with the host's DH-HMAC-CHAP secret.
    pub dhchap_key_file: Option<String>,
    /// The file with the controller's secret (bidirectional).
    pub dhchap_ctrl_key_file: Option<String>,
    /// TLS required (`tls=1`, or implied by `tls_key_file`).
    pub tls: bool,
    /// The file with the configured TLS PSK.
    pub tls_key_file: Option<String>,
    /// How the TLS PSK is derived from the configured one.
    pub tls_derivation: Derivation,
}

/// Why a device name is not an NVMe/TCP address.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AddressError {
    /// It does not start with `nvme-tcp://`.
    Scheme,
    /// No host, or an unclosed `[`.
    Host,
    /// The port is not a number from 1 to 65535.
    Port,
    /// No NQN after the host, or one that is not a valid NQN.
    Nqn,
    /// An option that is unknown or has a bad value.
    Option(String),
    /// An option whose value is a secret (`DHHC-1:...`): secrets go in
    /// files, named by `dhchap_key_file`. Holds the option's name only.
    Secret(String),
    /// `dhchap_ctrl_key_file` without `dhchap_key_file`.
    CtrlKeyAlone,
    /// `tls=1` or `tls_derivation` without `tls_key_file`, or `tls=0`
    /// with it.
    TlsKey,
    /// `tls_derivation` with a value that names no derivation (holds the
    /// value).
    TlsDerivation(String),
    /// Header or data digests asked for under TLS.
    DigestsUnderTls,
}

impl fmt::Display for AddressError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AddressError::Scheme => write!(f, "an NVMe/TCP device starts with {SCHEME}"),
            AddressError::Host => write!(f, "missing or malformed host"),
            AddressError::Port => write!(f, "the port must be a number from 1 to 65535"),
            AddressError::Nqn => write!(f, "missing or invalid subsystem NQN after the host"),
            AddressError::Option(o) => {
                write!(
                    f,
                    "unknown option or bad value '{o}' (hdgst=0|1, ddgst=0|1, kato=MS, \
                     reconnect=MS, hostnqn=NQN, dhchap_key_file=PATH, dhchap_ctrl_key_file=PATH, \
                     tls=1, tls_key_file=PATH, tls_derivation=rfc8446|compat)"
                )
            }
            AddressError::Secret(k) => write!(
                f,
                "option '{k}' holds a secret: secrets never go in a device name, put it in a \
                 file and name that with dhchap_key_file=PATH (or dhchap_ctrl_key_file=PATH, \
                 tls_key_file=PATH)"
            ),
            AddressError::CtrlKeyAlone => f.write_str(
                "dhchap_ctrl_key_file (bidirectional authentication) needs dhchap_key_file too",
            ),
            AddressError::TlsKey => f.write_str(
                "TLS needs its pre-shared key: tls_key_file=PATH (a file holding \
                 NVMeTLSkey-1:...), which tls=1 and tls_derivation go with and tls=0 \
                 cannot",
            ),
            AddressError::TlsDerivation(v) => write!(
                f,
                "tls_derivation is rfc8446 (the default: RFC 8446's HKDF labels, as \
                 nvme-cli after 2.13 derives) or compat (nvme-cli 2.13 and before, as in \
                 Debian 13; --compat later), not '{v}'"
            ),
            AddressError::DigestsUnderTls => f.write_str(
                "digests are off under TLS (NVMe/TCP 1.0c, 3.6.1; TLS checks every record): \
                 drop hdgst=1 and ddgst=1",
            ),
        }
    }
}

impl core::error::Error for AddressError {}

fn flag(v: &str, whole: &str) -> Result<bool, AddressError> {
    match v {
        "0" => Ok(false),
        "1" => Ok(true),
        _ => Err(AddressError::Option(whole.to_string())),
    }
}

/// How the text forms of secrets start: DH-HMAC-CHAP secrets and
/// NVMe/TCP TLS PSKs.
const SECRET_MARKS: [&str; 2] = ["DHHC-1:", "NVMeTLSkey-1:"];

/// Where the first secret in `s` starts.
fn find_secret(s: &str) -> Option<usize> {
    SECRET_MARKS.iter().filter_map(|m| s.find(m)).min()
}

/// `name` with every secret in it (a `DHHC-1:` or `NVMeTLSkey-1:` value,
/// up to the next `&`, `,` or `)`) replaced by `<secret>`: for error
/// messages about a name that should not have held one.
pub fn redact(name: &str) -> alloc::borrow::Cow<'_, str> {
    if find_secret(name).is_none() {
        return alloc::borrow::Cow::Borrowed(name);
    }
    let mut out = String::with_capacity(name.len());
    let mut rest = name;
    while let Some(at) = find_secret(rest) {
        out.push_str(&rest[..at]);
        out.push_str("<secret>");
        let tail = &rest[at..];
        let end = tail.find(['&', ',', ')']).unwrap_or(tail.len());
        rest = &tail[end..];
    }
    out.push_str(rest);
    alloc::borrow::Cow::Owned(out)
}

impl TcpAddress {
    /// True if `s` is meant as an NVMe/TCP device name.
    pub fn is_tcp(s: &str) -> bool {
        s.starts_with(SCHEME)
    }

    /// Parses `nvme-tcp://HOST[:PORT]/NQN[?OPTIONS]`.
    pub fn parse(s: &str) -> Result<TcpAddress, AddressError> {
        let rest = s.strip_prefix(SCHEME).ok_or(AddressError::Scheme)?;
        let (authority, path) = rest.split_once('/').ok_or(AddressError::Nqn)?;
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let (h, after) = v6.split_once(']').ok_or(AddressError::Host)?;
            match after {
                "" => (h, None),
                p => (h, Some(p.strip_prefix(':').ok_or(AddressError::Port)?)),
            }
        } else {
            match authority.split_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (authority, None),
            }
        };
        if host.is_empty() {
            return Err(AddressError::Host);
        }
        let port = match port {
            None => DEFAULT_PORT,
            Some(p) => p
                .parse::<u16>()
                .ok()
                .filter(|&p| p != 0)
                .ok_or(AddressError::Port)?,
        };
        let (nqn, query) = match path.split_once('?') {
            Some((n, q)) => (n, Some(q)),
            None => (path, None),
        };
        let subnqn = Nqn::new(nqn).map_err(|_| AddressError::Nqn)?;
        let mut a = TcpAddress {
            host: host.to_string(),
            port,
            subnqn,
            header_digest: false,
            data_digest: false,
            kato_ms: None,
            reconnect_ms: None,
            hostnqn: None,
            dhchap_key_file: None,
            dhchap_ctrl_key_file: None,
            tls: false,
            tls_key_file: None,
            tls_derivation: Derivation::default(),
        };
        let mut tls = None;
        let mut derivation = None;
        for opt in query.unwrap_or("").split('&').filter(|o| !o.is_empty()) {
            let (k, v) = opt
                .split_once('=')
                .ok_or_else(|| AddressError::Option(opt.to_string()))?;
            if find_secret(opt).is_some() {
                let key = k.get(..find_secret(k).unwrap_or(k.len())).unwrap_or("");
                return Err(AddressError::Secret(key.to_string()));
            }
            let file = |v: &str| {
                (!v.is_empty())
                    .then(|| v.to_string())
                    .ok_or_else(|| AddressError::Option(opt.to_string()))
            };
            match k {
                "hostnqn" => {
                    a.hostnqn =
                        Some(Nqn::new(v).map_err(|_| AddressError::Option(opt.to_string()))?)
                }
                "dhchap_key_file" => a.dhchap_key_file = Some(file(v)?),
                "dhchap_ctrl_key_file" => a.dhchap_ctrl_key_file = Some(file(v)?),
                "tls" => tls = Some(flag(v, opt)?),
                "tls_key_file" => a.tls_key_file = Some(file(v)?),
                "tls_derivation" => {
                    derivation = Some(
                        Derivation::from_name(v)
                            .ok_or_else(|| AddressError::TlsDerivation(v.to_string()))?,
                    )
                }
                "hdgst" => a.header_digest = flag(v, opt)?,
                "ddgst" => a.data_digest = flag(v, opt)?,
                "kato" => {
                    a.kato_ms = Some(
                        v.parse()
                            .map_err(|_| AddressError::Option(opt.to_string()))?,
                    )
                }
                "reconnect" => {
                    a.reconnect_ms = Some(
                        v.parse()
                            .ok()
                            .filter(|&ms: &u64| ms.checked_mul(1_000_000).is_some())
                            .ok_or_else(|| AddressError::Option(opt.to_string()))?,
                    )
                }
                _ => return Err(AddressError::Option(opt.to_string())),
            }
        }
        if a.dhchap_ctrl_key_file.is_some() && a.dhchap_key_file.is_none() {
            return Err(AddressError::CtrlKeyAlone);
        }
        a.tls = match (tls, &a.tls_key_file) {
            (Some(false), Some(_)) | (Some(true), None) => return Err(AddressError::TlsKey),
            (_, key) => key.is_some(),
        };
        match derivation {
            Some(_) if !a.tls => return Err(AddressError::TlsKey),
            Some(d) => a.tls_derivation = d,
            None => {}
        }
        if a.tls && (a.header_digest || a.data_digest) {
            return Err(AddressError::DigestsUnderTls);
        }
        Ok(a)
    }

    /// Transport options for this address: the defaults of
    /// [`TcpOptions::new`] with the address's digests, Keep Alive and
    /// reconnect window.
    pub fn options(&self) -> TcpOptions {
        let mut o = TcpOptions::new(self.subnqn.clone());
        o.header_digest = self.header_digest;
        o.data_digest = self.data_digest;
        if let Some(k) = self.kato_ms {
            o.kato_ms = k;
        }
        if let Some(ms) = self.reconnect_ms {
            o.reconnect_timeout = ms.saturating_mul(1_000_000);
        }
        if let Some(n) = &self.hostnqn {
            o.hostnqn = n.clone();
        }
        o
    }
}

impl fmt::Display for TcpAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let host = &self.host;
        if host.contains(':') {
            write!(f, "{SCHEME}[{host}]:{}/{}", self.port, self.subnqn)?;
        } else {
            write!(f, "{SCHEME}{host}:{}/{}", self.port, self.subnqn)?;
        }
        let mut sep = '?';
        for (k, on) in [("hdgst", self.header_digest), ("ddgst", self.data_digest)] {
            if on {
                write!(f, "{sep}{k}=1")?;
                sep = '&';
            }
        }
        if let Some(k) = self.kato_ms {
            write!(f, "{sep}kato={k}")?;
            sep = '&';
        }
        if let Some(ms) = self.reconnect_ms {
            write!(f, "{sep}reconnect={ms}")?;
            sep = '&';
        }
        if let Some(n) = &self.hostnqn {
            write!(f, "{sep}hostnqn={n}")?;
            sep = '&';
        }
        for (k, v) in [
            ("dhchap_key_file", &self.dhchap_key_file),
            ("dhchap_ctrl_key_file", &self.dhchap_ctrl_key_file),
            ("tls_key_file", &self.tls_key_file),
        ] {
            if let Some(path) = v {
                write!(f, "{sep}{k}={path}")?;
                sep = '&';
            }
        }
        if self.tls_derivation != Derivation::default() {
            write!(f, "{sep}tls_derivation={}", self.tls_derivation.name())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_names_parse_and_print_back() {
        let a = TcpAddress::parse("nvme-tcp://127.0.0.1:4420/testnqn").unwrap();
        assert_eq!((a.host.as_str(), a.port), ("127.0.0.1", 4420));
        assert_eq!(a.subnqn.as_str(), "testnqn");
        assert!(!a.header_digest && !a.data_digest);
        let s =
            "nvme-tcp://[::1]:9000/nqn.2014-08.org.nvmexpress:uuid:abc?hdgst=1&ddgst=1&kato=5000";
        let a = TcpAddress::parse(s).unwrap();
        assert_eq!((a.host.as_str(), a.port), ("::1", 9000));
        assert!(a.header_digest && a.data_digest);
        assert_eq!(a.kato_ms, Some(5000));
        assert_eq!(a.to_string(), s);
        let o = a.options();
        assert!(o.header_digest && o.data_digest);
        assert_eq!(o.kato_ms, 5000);
        assert_eq!(
            o.reconnect_timeout,
            TcpOptions::new(a.subnqn.clone()).reconnect_timeout
        );
        let a = TcpAddress::parse("nvme-tcp://target/sub").unwrap();
        assert_eq!(a.port, DEFAULT_PORT);
        let s = "nvme-tcp://10.0.0.1:4420/sub?kato=0&reconnect=2500";
        let a = TcpAddress::parse(s).unwrap();
        assert_eq!(a.reconnect_ms, Some(2500));
        assert_eq!(a.options().reconnect_timeout, 2_500_000_000);
        assert_eq!(a.to_string(), s);
        let s = "nvme-tcp://10.0.0.1:4420/sub?reconnect=1";
        assert_eq!(TcpAddress::parse(s).unwrap().to_string(), s);
    }

    #[test]
    fn bad_names_say_what_is_wrong() {
        let e = |s| TcpAddress::parse(s).unwrap_err();
        assert_eq!(e("tcp://h/n"), AddressError::Scheme);
        assert_eq!(e("nvme-tcp://h:4420"), AddressError::Nqn);
        assert_eq!(e("nvme-tcp://h:4420/"), AddressError::Nqn);
        assert_eq!(e("nvme-tcp://:4420/n"), AddressError::Host);
        assert_eq!(e("nvme-tcp://[::1/n"), AddressError::Host);
        assert_eq!(e("nvme-tcp://h:0/n"), AddressError::Port);
        assert_eq!(e("nvme-tcp://h:x/n"), AddressError::Port);
        assert_eq!(
            e("nvme-tcp://h/n?hdgst=2"),
            AddressError::Option("hdgst=2".into())
        );
        assert_eq!(
            e("nvme-tcp://h/n?reconnect=-1"),
            AddressError::Option("reconnect=-1".into())
        );
        assert_eq!(
            e("nvme-tcp://h/n?reconnect=18446744073710"),
            AddressError::Option("reconnect=18446744073710".into())
        );
        assert_eq!(
            e("nvme-tcp://h/n?tls=2"),
            AddressError::Option("tls=2".into())
        );
        assert_eq!(
            e("nvme-tcp://h/n?tlz=1"),
            AddressError::Option("tlz=1".into())
        );
        assert!(TcpAddress::is_tcp("nvme-tcp://x/y") && !TcpAddress::is_tcp("vfio:0000:00:04.0"));
    }

    #[test]
    fn authentication_options_name_files_never_secrets() {
        let s = "nvme-tcp://127.0.0.1:4420/sub?hostnqn=nqn.2014-08.org.example:host1\
                 &dhchap_key_file=/etc/pollfs/host.key&dhchap_ctrl_key_file=/etc/pollfs/ctrl.key";
        let a = TcpAddress::parse(s).unwrap();
        assert_eq!(
            a.hostnqn.as_ref().unwrap().as_str(),
            "nqn.2014-08.org.example:host1"
        );
        assert_eq!(a.dhchap_key_file.as_deref(), Some("/etc/pollfs/host.key"));
        assert_eq!(
            a.dhchap_ctrl_key_file.as_deref(),
            Some("/etc/pollfs/ctrl.key")
        );
        assert_eq!(a.to_string(), s);
        assert_eq!(
            a.options().hostnqn.as_str(),
            "nqn.2014-08.org.example:host1"
        );
        let e = |s| TcpAddress::parse(s).unwrap_err();
        assert_eq!(
            e("nvme-tcp://h/n?dhchap_ctrl_key_file=/k"),
            AddressError::CtrlKeyAlone
        );
        assert_eq!(
            e("nvme-tcp://h/n?dhchap_key_file="),
            AddressError::Option("dhchap_key_file=".into())
        );
        let secret = "DHHC-1:00:AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQHMnzFi:";
        for name in [
            alloc::format!("nvme-tcp://h/n?dhchap_secret={secret}"),
            alloc::format!("nvme-tcp://h/n?dhchap_key_file={secret}"),
            alloc::format!("nvme-tcp://h/n?{secret}=1"),
        ] {
            let err = TcpAddress::parse(&name).unwrap_err();
            assert!(matches!(err, AddressError::Secret(_)), "{err:?}");
            let shown = alloc::format!("{err} {err:?}");
            assert!(!shown.contains("AQEB"), "{shown}");
            let redacted = redact(&name);
            assert!(
                !redacted.contains("AQEB") && redacted.contains("<secret>"),
                "{redacted}"
            );
        }
        assert_eq!(
            redact("mirror:(nvme-tcp://h/n?k=DHHC-1:00:QUJD:&x=1,nvme-tcp://h/m)"),
            "mirror:(nvme-tcp://h/n?k=<secret>&x=1,nvme-tcp://h/m)"
        );
        assert_eq!(redact("nvme-tcp://h/n"), "nvme-tcp://h/n");
    }

    #[test]
    fn tls_options_name_a_key_file_and_turn_digests_away() {
        let s = "nvme-tcp://127.0.0.1:4420/sub?tls_key_file=/etc/pollfs/tls.key";
        let a = TcpAddress::parse(s).unwrap();
        assert!(a.tls);
        assert_eq!(a.tls_key_file.as_deref(), Some("/etc/pollfs/tls.key"));
        assert_eq!(a.to_string(), s);
        let b = TcpAddress::parse(&alloc::format!("{s}&tls=1")).unwrap();
        assert_eq!(a, b);
        assert!(!TcpAddress::parse("nvme-tcp://h/n").unwrap().tls);
        let e = |s| TcpAddress::parse(s).unwrap_err();
        assert_eq!(e("nvme-tcp://h/n?tls=1"), AddressError::TlsKey);
        assert_eq!(
            e("nvme-tcp://h/n?tls=0&tls_key_file=/k"),
            AddressError::TlsKey
        );
        assert_eq!(
            e("nvme-tcp://h/n?tls_key_file="),
            AddressError::Option("tls_key_file=".into())
        );
        assert_eq!(
            e("nvme-tcp://h/n?tls_key_file=/k&hdgst=1"),
            AddressError::DigestsUnderTls
        );
        assert_eq!(
            e("nvme-tcp://h/n?ddgst=1&tls=1&tls_key_file=/k"),
            AddressError::DigestsUnderTls
        );
        // The derivation: named, printed back when not the default, only
        // with a key, and a bad value said as such.
        assert_eq!(a.tls_derivation, Derivation::Rfc8446);
        let c = alloc::format!("{s}&tls_derivation=compat");
        let a = TcpAddress::parse(&c).unwrap();
        assert_eq!(a.tls_derivation, Derivation::Compat);
        assert_eq!(a.to_string(), c);
        let r = TcpAddress::parse(&alloc::format!("{s}&tls_derivation=rfc8446")).unwrap();
        assert_eq!(
            (r.tls_derivation, r.to_string()),
            (Derivation::Rfc8446, s.into())
        );
        assert_eq!(
            e("nvme-tcp://h/n?tls_derivation=compat"),
            AddressError::TlsKey
        );
        let bad = e("nvme-tcp://h/n?tls_key_file=/k&tls_derivation=old");
        assert_eq!(bad, AddressError::TlsDerivation("old".into()));
        let shown = bad.to_string();
        assert!(
            shown.contains("'old'") && shown.contains("rfc8446") && shown.contains("compat"),
            "{shown}"
        );
        let key = "NVMeTLSkey-1:01:AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQHMnzFi:";
        for name in [
            alloc::format!("nvme-tcp://h/n?tls_key={key}"),
            alloc::format!("nvme-tcp://h/n?tls_key_file={key}"),
        ] {
            let err = TcpAddress::parse(&name).unwrap_err();
            assert!(matches!(err, AddressError::Secret(_)), "{err:?}");
            let shown = alloc::format!("{err} {err:?} {}", redact(&name));
            assert!(!shown.contains("AQEB"), "{shown}");
        }
    }
}
