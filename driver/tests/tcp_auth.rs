//! DH-HMAC-CHAP end to end against the in-process test target on
//! 127.0.0.1: every hash with the NULL group and FFDHE groups, one- and
//! two-way, on the admin queue and every I/O queue, again after a
//! reconnect; a wrong key, no key, an impostor target and a target that
//! cannot answer the host's challenge each refused with its own error,
//! at once (not retried until the reconnect window closes).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use pollfs_core::dev::{Command, DeviceQueue};
use pollfs_core::units::{FrameId, Lba};
use pollfs_driver::auth::keyfile::os_random;
use pollfs_driver::auth::{AuthError, DhchapConfig, DhchapSecret, Hash};
use pollfs_driver::spec::auth::dhgroup;

use pollfs_driver::tcp::target::{Fault, TargetAuth, TargetConfig, TestTarget};
use pollfs_driver::tcp::TcpError;
use pollfs_driver::{DriverConfig, DriverError, TcpOptions};

const HOST: &str = "DHHC-1:01:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:";
const CTRL: &str =
    "DHHC-1:02:ZGVmZ2hpamtsbW5vcHFyc3R1dnd4eXp7fH1+f4CBgoOEhYaHiImKi4yNjo+QkZKTvGwQfg==:";
const OTHER: &str = "DHHC-1:03:MjM0NTY3ODk6Ozw9Pj9AQUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVpbXF1eX2BhYmNkZWZnaGlqa2xtbm9wcfBEbLg=:";
const PLAIN: &str = "DHHC-1:00:BwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyAhIiMkJSYDWRHm:";

fn secret(s: &str) -> DhchapSecret {
    DhchapSecret::parse(s).unwrap()
}

fn target(hash: Hash, group: u8, host: &str, ctrl: Option<&str>) -> TestTarget {
    TestTarget::start(TargetConfig {
        auth: Some(TargetAuth {
            host_key: secret(host),
            ctrl_key: ctrl.map(secret),
            hash,
            dhgroup: group,
            silent_failure: false,
        }),
        ..TargetConfig::default()
    })
    .unwrap()
}

fn options(t: &TestTarget, host: Option<&str>, ctrl: Option<&str>) -> TcpOptions {
    let mut o = t.options();
    o.dhchap = host.map(|h| {
        Arc::new(DhchapConfig {
            host: secret(h),
            ctrl: ctrl.map(secret),
            random: os_random,
        })
    });
    o
}

fn config() -> DriverConfig {
    DriverConfig {
        io_entries: 16,
        ..DriverConfig::default()
    }
}

use common::run_real as run;

/// A write and a read of one page through `q`.
fn io<Q: DeviceQueue>(q: &mut Q) {
    let f = [FrameId(0)];
    run(
        q,
        Command::Write {
            lba: Lba(8),
            frames: &f,
            fua: false,
        },
    )
    .unwrap();
    run(
        q,
        Command::Read {
            lba: Lba(8),
            frames: &f,
        },
    )
    .unwrap();
}

fn auth_error<T>(r: Result<T, DriverError<TcpError>>) -> AuthError {
    match r {
        Err(DriverError::Protocol(pollfs_driver::qpair::ProtocolError::Transport(
            TcpError::Auth(e),
        ))) => e,
        Err(e) => panic!("not an authentication error: {e}"),
        Ok(_) => panic!("connected"),
    }
}

#[test]
fn every_hash_and_group_authenticates_every_queue_one_and_two_way() {
    let cases = [
        (Hash::Sha256, dhgroup::NULL),
        (Hash::Sha384, dhgroup::NULL),
        (Hash::Sha512, dhgroup::NULL),
        (Hash::Sha256, dhgroup::FFDHE2048),
        (Hash::Sha384, dhgroup::FFDHE3072),
        (Hash::Sha512, dhgroup::FFDHE4096),
        (Hash::Sha256, dhgroup::FFDHE6144),
        (Hash::Sha512, dhgroup::FFDHE8192),
    ];
    for (hash, group) in cases {
        for two_way in [false, true] {
            let ctrl = two_way.then_some(CTRL);
            let t = target(hash, group, HOST, Some(CTRL));
            let dev = t
                .device(options(&t, Some(HOST), ctrl), config(), 16)
                .unwrap();
            let mut q1 = dev.open_nvme_queue().unwrap();
            let mut q2 = dev.open_nvme_queue().unwrap();
            io(&mut q1);
            io(&mut q2);
            let s = t.stats();
            assert_eq!(
                s.auths, 3,
                "{hash:?} group {group} two-way {two_way}: {s:?}"
            );
            assert_eq!(s.auth_failures, 0);
        }
    }
    // A secret with no transformation works the same.
    let t = target(Hash::Sha256, dhgroup::FFDHE2048, PLAIN, Some(OTHER));
    let dev = t
        .device(options(&t, Some(PLAIN), Some(OTHER)), config(), 16)
        .unwrap();
    io(&mut dev.open_nvme_queue().unwrap());
    assert_eq!(t.stats().auths, 2);
}

#[test]
fn a_reconnect_authenticates_again() {
    let t = target(Hash::Sha256, dhgroup::FFDHE2048, HOST, Some(CTRL));
    let dev = t
        .device(options(&t, Some(HOST), Some(CTRL)), config(), 16)
        .unwrap();
    let mut q = dev.open_nvme_queue().unwrap();
    io(&mut q);
    assert_eq!(t.stats().auths, 2);
    t.inject(Fault::DropConnection);
    io(&mut q);
    assert_eq!(dev.controller().resets(), 1);
    assert_eq!(t.stats().auths, 4, "admin and I/O queue again");
    assert_eq!(t.stats().auth_failures, 0);
}

#[test]
fn a_key_refused_at_a_reconnect_is_not_retried() {
    let t = target(Hash::Sha256, dhgroup::NULL, HOST, None);
    let impatient = DriverConfig {
        command_timeout: 300_000_000,
        abort_timeout: 200_000_000,
        admin_timeout: 500_000_000,
        ..config()
    };
    let dev = t
        .device(options(&t, Some(HOST), None), impatient, 16)
        .unwrap();
    let mut q = dev.open_nvme_queue().unwrap();
    io(&mut q);
    // The target now holds another key for this host, and the
    // connection drops: the reconnect is refused.
    t.set_auth(Some(TargetAuth {
        host_key: secret(OTHER),
        ctrl_key: None,
        hash: Hash::Sha256,
        dhgroup: dhgroup::NULL,
        silent_failure: false,
    }));
    let before = t.stats().connections;
    t.inject(Fault::DropConnection);
    let started = Instant::now();
    let f = [FrameId(0)];
    let r = run(
        &mut q,
        Command::Read {
            lba: Lba(8),
            frames: &f,
        },
    );
    assert!(r.is_err(), "{r:?}");
    // The controller layer's bounded resets (max_resets) each try the
    // admin queue and the I/O queue once: a reconnect loop would have
    // tried every 20 ms for the 5 s window.
    let tries = t.stats().connections - before;
    assert!(tries <= 2 * 4, "{tries} connections");
    assert!(t.stats().auth_failures >= 1);
    assert!(dev.controller().is_dead());
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn a_wrong_key_no_key_and_an_impostor_are_refused_at_once() {
    let started = Instant::now();
    // The target holds another key for this host.
    let t = target(Hash::Sha256, dhgroup::FFDHE2048, OTHER, None);
    assert_eq!(
        auth_error(t.device(options(&t, Some(HOST), None), config(), 16)),
        AuthError::Refused { explanation: 1 }
    );
    assert_eq!(t.stats().connections, 1, "not retried");
    // The same, from a target that closes instead of saying so.
    let t = TestTarget::start(TargetConfig {
        auth: Some(TargetAuth {
            host_key: secret(OTHER),
            ctrl_key: None,
            hash: Hash::Sha256,
            dhgroup: dhgroup::NULL,
            silent_failure: true,
        }),
        ..TargetConfig::default()
    })
    .unwrap();
    assert_eq!(
        auth_error(t.device(options(&t, Some(HOST), None), config(), 16)),
        AuthError::ClosedAfterReply
    );
    assert_eq!(t.stats().connections, 1, "not retried");
    // No key at all.
    let t = target(Hash::Sha256, dhgroup::NULL, HOST, None);
    assert_eq!(
        auth_error(t.device(options(&t, None, None), config(), 16)),
        AuthError::NoKey
    );
    // An impostor: it accepts the host (it learnt the host key) but
    // cannot answer with the controller key the host trusts.
    let t = target(Hash::Sha384, dhgroup::FFDHE3072, HOST, Some(OTHER));
    assert_eq!(
        auth_error(t.device(options(&t, Some(HOST), Some(CTRL)), config(), 16)),
        AuthError::ControllerFailed
    );
    assert_eq!(
        t.stats().auth_failures,
        1,
        "the host said so in AUTH_Failure2"
    );
    // A target with no controller key cannot take a two-way check.
    let t = target(Hash::Sha512, dhgroup::NULL, HOST, None);
    assert_eq!(
        auth_error(t.device(options(&t, Some(HOST), Some(CTRL)), config(), 16)),
        AuthError::Refused { explanation: 1 }
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn errors_and_debug_output_show_no_secret() {
    let t = target(Hash::Sha256, dhgroup::FFDHE2048, OTHER, None);
    let o = options(&t, Some(HOST), Some(CTRL));
    let shown = format!("{o:?}");
    let e = t.device(o, config(), 16).unwrap_err();
    let shown = format!("{shown} {e} {e:?}");
    for s in [HOST, CTRL, OTHER] {
        let b64 = s.split(':').nth(2).unwrap();
        assert!(!shown.contains(&b64[..16]), "{shown}");
    }
    assert!(shown.contains("refused this host's key"), "{shown}");
}
