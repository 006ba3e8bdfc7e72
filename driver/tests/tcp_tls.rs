//! NVMe/TCP inside TLS 1.3 with a pre-shared key, end to end against the
//! in-process test target on 127.0.0.1: every queue's connection and
//! data of many sizes through the channel, the handshake again at a
//! reconnect, and each refusal by name and at once (not retried until
//! the reconnect window closes): a wrong PSK, a target without TLS, a
//! PSK refused at a reconnect, a peer answering the handshake with
//! garbage or with nothing.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::Arc;
use std::time::Duration;

use pollfs_core::dev::Command;
use pollfs_core::units::{FrameId, Lba};
use pollfs_driver::auth::keyfile::KeyFileError;
use pollfs_driver::tcp::net::{NetConnector, TcpDevice};
use pollfs_driver::tcp::target::{Fault, TargetConfig, TestTarget};
use pollfs_driver::tcp::{Connector, LinkError, TcpAddress, TcpError};
use pollfs_driver::tls::psk::{ConfiguredPsk, Derivation, PskError, TlsPsk};
use pollfs_driver::tls::TlsError;
use pollfs_driver::{DriverConfig, DriverError, TcpOptions};

use common::{run_real as run, tcp_write_read_check as write_read_check};

/// 32 bytes 0..31, SHA-256, and their CRC-32.
const KEY: &str = "NVMeTLSkey-1:01:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:";
/// Another SHA-256 key.
const OTHER: &str = "NVMeTLSkey-1:01:AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQHMnzFi:";

fn config() -> DriverConfig {
    DriverConfig {
        io_entries: 32,
        max_transfer: Some(1 << 20),
        ..DriverConfig::default()
    }
}

/// The TLS PSK `key` gives the test target's default host for `t`.
fn psk_for(t: &TestTarget, key: &str) -> TlsPsk {
    derived(t, key, Derivation::Rfc8446)
}

/// The same, derived the way `how` says.
fn derived(t: &TestTarget, key: &str, how: Derivation) -> TlsPsk {
    let o = t.options();
    ConfiguredPsk::parse(key)
        .unwrap()
        .tls(o.hostnqn.as_bytes(), o.subnqn.as_bytes(), how)
        .unwrap()
}

/// A target that requires TLS with `key` (the subsystem's NQN is the
/// default one, so the PSK can be derived before it starts).
fn target(key: &str) -> TestTarget {
    let t = TestTarget::start(TargetConfig::default()).unwrap();
    t.set_tls(Some(psk_for(&t, key)));
    t
}

fn options(t: &TestTarget, key: Option<&str>) -> TcpOptions {
    let mut o = t.options();
    o.tls = key.map(|k| Arc::new(psk_for(t, k)));
    o
}

fn tls_error<T>(r: Result<T, DriverError<TcpError>>) -> TlsError {
    match r {
        Err(DriverError::Protocol(pollfs_driver::qpair::ProtocolError::Transport(
            TcpError::Link(LinkError::Tls(e)),
        ))) => e,
        Err(e) => panic!("not a TLS error: {e}"),
        Ok(_) => panic!("connected"),
    }
}

#[test]
fn every_queue_and_its_data_travel_inside_tls() {
    let t = target(KEY);
    let dev = t.device(options(&t, Some(KEY)), config(), 512).unwrap();
    let mut q1 = dev.open_nvme_queue().unwrap();
    let mut q2 = dev.open_nvme_queue().unwrap();
    // One page (in the capsule), eight (R2T), 64 (split at MDTS, many
    // records each way).
    for (i, n) in [1u32, 8, 64].into_iter().enumerate() {
        write_read_check(&t, &dev, &mut q1, 16, n, i as u64);
        write_read_check(&t, &dev, &mut q2, 4096, n, 10 + i as u64);
    }
    let s = t.stats();
    assert_eq!(s.tls_sessions, 3, "admin and two I/O queues: {s:?}");
    assert_eq!(s.tls_failures, 0);
}

#[test]
fn a_reconnect_runs_the_handshake_again() {
    let t = target(KEY);
    let dev = t.device(options(&t, Some(KEY)), config(), 64).unwrap();
    let mut q = dev.open_nvme_queue().unwrap();
    write_read_check(&t, &dev, &mut q, 8, 2, 1);
    assert_eq!(t.stats().tls_sessions, 2);
    t.inject(Fault::DropConnection);
    write_read_check(&t, &dev, &mut q, 8, 2, 2);
    assert_eq!(dev.controller().resets(), 1);
    assert_eq!(t.stats().tls_sessions, 4, "admin and I/O queue again");
}

#[test]
fn a_wrong_psk_is_refused_by_name_at_once() {
    let t = target(OTHER);
    assert_eq!(
        tls_error(t.device(options(&t, Some(KEY)), config(), 16)),
        TlsError::Refused
    );
    assert_eq!(t.stats().connections, 1, "not retried");
}

#[test]
fn a_target_without_tls_is_refused_when_tls_is_required() {
    let t = TestTarget::start(TargetConfig::default()).unwrap();
    let e = tls_error(t.device(options(&t, Some(KEY)), config(), 16));
    assert_eq!(e, TlsError::NotTls);
    assert!(e.is_final());
    assert_eq!(t.stats().connections, 1, "not retried");
}

#[test]
fn a_host_without_tls_gets_nothing_from_a_tls_target() {
    let t = target(KEY);
    // The target's TLS side fails on the ICReq and closes: the host
    // sees the connection end (a reset, or a close), not a target it
    // can talk to.
    let e = t
        .device(options(&t, None), config(), 16)
        .map(drop)
        .unwrap_err();
    assert!(
        matches!(
            e,
            DriverError::Protocol(pollfs_driver::qpair::ProtocolError::Transport(
                TcpError::Link(LinkError::Reset | LinkError::Closed)
            ))
        ),
        "{e:?}"
    );
    assert_eq!(t.stats().connects, 0, "no Connect got through");
}

#[test]
fn a_psk_refused_at_a_reconnect_is_not_retried() {
    let t = target(KEY);
    let impatient = DriverConfig {
        command_timeout: 300_000_000,
        abort_timeout: 200_000_000,
        admin_timeout: 500_000_000,
        ..config()
    };
    let dev = t.device(options(&t, Some(KEY)), impatient, 16).unwrap();
    let mut q = dev.open_nvme_queue().unwrap();
    write_read_check(&t, &dev, &mut q, 8, 1, 1);
    // The target now holds another key, and the connection drops.
    t.set_tls(Some(psk_for(&t, OTHER)));
    let before = t.stats().connections;
    t.inject(Fault::DropConnection);
    let f = [FrameId(0)];
    let r = run(
        &mut q,
        Command::Read {
            lba: Lba(8),
            frames: &f,
        },
    );
    assert!(r.is_err(), "{r:?}");
    // Bounded resets, each trying the admin and the I/O queue once: a
    // reconnect loop would try every 20 ms for the 5 s window.
    let tries = t.stats().connections - before;
    assert!(tries <= 2 * 4, "{tries} connections");
    assert!(dev.controller().is_dead());
}

/// A listener that answers a connection with `reply` (and then closes),
/// or with nothing while the connection lasts.
fn peer(reply: Option<&'static [u8]>) -> (std::net::SocketAddr, std::thread::JoinHandle<()>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let h = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let mut hello = [0u8; 512];
        let _ = s.read(&mut hello);
        match reply {
            Some(r) => {
                let _ = s.write_all(r);
            }
            // Hold the connection until the host gives up.
            None => {
                let _ = s.read(&mut hello);
            }
        }
    });
    (addr, h)
}

fn handshake_with(addr: std::net::SocketAddr, timeout: Duration) -> LinkError {
    let t = TestTarget::start(TargetConfig::default()).unwrap();
    let psk = Arc::new(psk_for(&t, KEY));
    NetConnector::to(addr, timeout)
        .with_tls(Some(psk))
        .unwrap()
        .connect()
        .map(drop)
        .unwrap_err()
}

#[test]
fn hostile_peers_fail_the_handshake_with_an_error_not_a_hang() {
    // Not TLS at all.
    let (addr, h) = peer(Some(b"HTTP/1.1 400 Bad Request\r\n\r\n"));
    assert_eq!(
        handshake_with(addr, Duration::from_secs(5)),
        LinkError::Tls(TlsError::NotTls)
    );
    h.join().unwrap();
    // A TLS record header announcing more than a record may hold.
    let (addr, h) = peer(Some(&[22, 3, 3, 0xff, 0xff, 1, 2, 3]));
    assert!(matches!(
        handshake_with(addr, Duration::from_secs(5)),
        LinkError::Tls(TlsError::NotTls | TlsError::Handshake | TlsError::Closed)
    ));
    h.join().unwrap();
    // An alert.
    let (addr, h) = peer(Some(&[21, 3, 3, 0, 2, 2, 40]));
    assert_eq!(
        handshake_with(addr, Duration::from_secs(5)),
        LinkError::Tls(TlsError::Refused)
    );
    h.join().unwrap();
    // Closed at once.
    let (addr, h) = peer(Some(b""));
    assert_eq!(
        handshake_with(addr, Duration::from_secs(5)),
        LinkError::Tls(TlsError::Closed)
    );
    h.join().unwrap();
    // Silent: the setup time bounds the handshake.
    let (addr, h) = peer(None);
    assert_eq!(
        handshake_with(addr, Duration::from_millis(200)),
        LinkError::TimedOut
    );
    h.join().unwrap();
}

#[test]
fn the_device_name_names_a_key_file_and_a_missing_one_is_refused() {
    let t = target(KEY);
    let dir = std::env::temp_dir().join(format!("pollfs-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("tls.key");
    std::fs::write(&file, format!("{KEY}\n")).unwrap();
    let name = format!("{}?tls_key_file={}", t.url(false, false), file.display());
    let address = TcpAddress::parse(&name).unwrap();
    let mut o = address.load_options().unwrap();
    (o.setup_timeout, o.reconnect_timeout) = (2_000_000_000, 5_000_000_000);
    let dev = TcpDevice::tcp_with(&address, o, config(), 16).unwrap();
    write_read_check(&t, &dev, &mut dev.open_nvme_queue().unwrap(), 8, 1, 3);
    assert_eq!(t.stats().tls_sessions, 2);
    // A missing file, and one holding something else, each named.
    let gone = dir.join("gone.key");
    let name = format!("{}?tls_key_file={}", t.url(false, false), gone.display());
    match TcpAddress::parse(&name).unwrap().load_options() {
        Err(KeyFileError::Read { path, .. }) => assert_eq!(path, gone.display().to_string()),
        other => panic!("{other:?}"),
    }
    std::fs::write(
        &file,
        "DHHC-1:01:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:\n",
    )
    .unwrap();
    let name = format!("{}?tls_key_file={}", t.url(false, false), file.display());
    let e = TcpAddress::parse(&name)
        .unwrap()
        .load_options()
        .unwrap_err();
    assert!(
        matches!(
            e,
            KeyFileError::Psk {
                error: PskError::Format,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(!format!("{e} {e:?}").contains("AAECAwQF"));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A target whose keyring holds the PSK in nvme-cli 2.13's form: a host
/// naming `tls_derivation=compat` reaches it, one with the default form
/// is refused as for a wrong key (nothing on the wire says which form).
#[test]
fn the_device_name_picks_the_derivation_the_target_used() {
    let t = TestTarget::start(TargetConfig::default()).unwrap();
    t.set_tls(Some(derived(&t, KEY, Derivation::Compat)));
    let dir = std::env::temp_dir().join(format!("pollfs-tls-compat-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("tls.key");
    std::fs::write(&file, format!("{KEY}\n")).unwrap();
    let open = |extra: &str| {
        let name = format!(
            "{}?tls_key_file={}{extra}",
            t.url(false, false),
            file.display()
        );
        let address = TcpAddress::parse(&name).unwrap();
        let mut o = address.load_options().unwrap();
        (o.setup_timeout, o.reconnect_timeout) = (2_000_000_000, 5_000_000_000);
        TcpDevice::tcp_with(&address, o, config(), 16)
    };
    let dev = open("&tls_derivation=compat").unwrap();
    write_read_check(&t, &dev, &mut dev.open_nvme_queue().unwrap(), 8, 1, 4);
    drop(dev);
    assert_eq!(t.stats().tls_failures, 0);
    assert_eq!(tls_error(open("")), TlsError::Refused);
    assert_eq!(
        tls_error(open("&tls_derivation=rfc8446")),
        TlsError::Refused
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn errors_and_debug_output_show_no_key() {
    let t = target(OTHER);
    let o = options(&t, Some(KEY));
    let shown = format!("{o:?}");
    let e = t.device(o, config(), 16).unwrap_err();
    let shown = format!("{shown} {e} {e:?}");
    for k in [KEY, OTHER] {
        let b64 = k.split(':').nth(2).unwrap();
        assert!(!shown.contains(&b64[..16]), "{shown}");
    }
    assert!(shown.contains("wrong PSK"), "{shown}");
}
