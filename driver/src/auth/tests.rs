//! Known answers computed outside the driver
//! (`driver/tests/data/dhchap_vectors.py`: Python's hmac and hashlib,
//! OpenSSL's RFC 7919 primes) and hostile controller messages.

use alloc::collections::BTreeMap;
use alloc::string::String;
use alloc::vec::Vec;

use num_bigint::BigUint;

use super::dh::Group;
use super::*;
use crate::spec::auth::{self, id, RECEIVE_LEN};

const VECTORS: &str = include_str!("../../tests/data/dhchap_vectors.txt");

fn blocks() -> Vec<BTreeMap<&'static str, &'static str>> {
    VECTORS
        .split("\n\n")
        .map(|b| b.lines().filter_map(|l| l.split_once(' ')).collect())
        .filter(|m: &BTreeMap<_, _>| !m.is_empty())
        .collect()
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn never(_: &mut [u8]) -> bool {
    false
}

fn counting(b: &mut [u8]) -> bool {
    for (i, x) in b.iter_mut().enumerate() {
        *x = i as u8 ^ 0x5c;
    }
    true
}

fn challenge(
    t_id: u16,
    hashid: u8,
    hl: usize,
    dhgid: u8,
    s1: u32,
    c1: &[u8],
    dh: &[u8],
) -> Vec<u8> {
    let mut m = vec![1, id::CHALLENGE, 0, 0];
    m.extend_from_slice(&t_id.to_le_bytes());
    m.extend_from_slice(&[hl as u8, 0, hashid, dhgid]);
    m.extend_from_slice(&(dh.len() as u16).to_le_bytes());
    m.extend_from_slice(&s1.to_le_bytes());
    m.extend_from_slice(c1);
    m.extend_from_slice(dh);
    // The controller pads the answer to the length asked for.
    m.resize(m.len().max(RECEIVE_LEN), 0);
    m
}

fn success1(t_id: u16, hl: usize, response: Option<&[u8]>) -> Vec<u8> {
    let mut m = vec![1, id::SUCCESS1, 0, 0];
    m.extend_from_slice(&t_id.to_le_bytes());
    m.extend_from_slice(&[
        hl as u8,
        0,
        u8::from(response.is_some()),
        0,
        0,
        0,
        0,
        0,
        0,
        0,
    ]);
    m.extend_from_slice(response.unwrap_or(&[]));
    m.resize(RECEIVE_LEN, 0);
    m
}

#[test]
fn the_groups_are_openssls() {
    let mut n = 0;
    for b in blocks().iter().filter(|b| b.contains_key("prime")) {
        let g = Group::from_id(b["group"].parse().unwrap()).unwrap();
        let p = BigUint::parse_bytes(b["prime"].as_bytes(), 16).unwrap();
        assert_eq!(g.prime(), &p, "group {}", b["group"]);
        assert_eq!(g.size() * 8, p.bits() as usize);
        n += 1;
    }
    assert_eq!(n, 5);
    assert!(Group::from_id(0).is_none() && Group::from_id(6).is_none());
}

#[test]
fn known_answers_for_every_hash_and_group() {
    let mut n = 0;
    for v in blocks().iter().filter(|b| b.contains_key("case")) {
        let hashid: u8 = v["hash"].parse().unwrap();
        let gid: u8 = v["dhgroup"].parse().unwrap();
        let hl = Hash::from_id(hashid).unwrap().output_len();
        let config = DhchapConfig {
            host: DhchapSecret::parse(v["host_secret"]).unwrap(),
            ctrl: Some(DhchapSecret::parse(v["ctrl_secret"]).unwrap()),
            random: never,
        };
        let (hostnqn, subnqn) = (v["hostnqn"].as_bytes(), v["subnqn"].as_bytes());
        assert_eq!(
            &**config.host.transformed(hostnqn),
            &hex(v["host_key_transformed"])[..]
        );
        let t_id: u16 = v["t_id"].parse().unwrap();
        let ctrl_public = v.get("ctrl_public").map(|h| hex(h)).unwrap_or_default();
        let x = v.get("host_private").map(|h| hex(h)).unwrap_or_default();
        let msg = challenge(
            t_id,
            hashid,
            hl,
            gid,
            v["s1"].parse().unwrap(),
            &hex(v["c1"]),
            &ctrl_public,
        );
        let mut ex = Exchange::new(&config, hostnqn, subnqn, t_id);
        let c2 = hex(v["c2"]);
        let s2: u32 = v["s2"].parse().unwrap();
        let reply = ex.reply_with(&msg, &x, &c2, s2).unwrap();
        let case = v["case"];
        assert_eq!(&reply[..2], &[1, id::REPLY]);
        assert_eq!(&reply[4..6], &t_id.to_le_bytes());
        assert_eq!((usize::from(reply[6]), reply[8]), (hl, 1), "case {case}");
        assert_eq!(&reply[12..16], &s2.to_le_bytes());
        assert_eq!(
            &reply[16..16 + hl],
            &hex(v["host_response"])[..],
            "R1, case {case}"
        );
        assert_eq!(&reply[16 + hl..16 + 2 * hl], &c2[..]);
        let public = v.get("host_public").map(|h| hex(h)).unwrap_or_default();
        assert_eq!(&reply[10..12], &(public.len() as u16).to_le_bytes());
        assert_eq!(
            &reply[16 + 2 * hl..],
            &public[..],
            "host DH value, case {case}"
        );
        let r2 = hex(v["ctrl_response"]);
        let done = ex.finish(&success1(t_id, hl, Some(&r2))).unwrap();
        assert_eq!(done, Some(auth::success2(t_id)), "R2, case {case}");
        // An impostor: one bit off in R2.
        let mut ex = Exchange::new(&config, hostnqn, subnqn, t_id);
        ex.reply_with(&msg, &x, &c2, s2).unwrap();
        let mut bad = r2.clone();
        bad[hl - 1] ^= 1;
        assert_eq!(
            ex.finish(&success1(t_id, hl, Some(&bad))),
            Err(AuthError::ControllerFailed)
        );
        // Unidirectional: no challenge for the controller, no success2.
        let uni = DhchapConfig {
            ctrl: None,
            ..config.clone()
        };
        let mut ex = Exchange::new(&uni, hostnqn, subnqn, t_id);
        let reply = ex.reply_with(&msg, &x, &c2, s2).unwrap();
        assert_eq!((reply[8], &reply[12..16]), (0, &[0u8; 4][..]));
        assert_eq!(&reply[16..16 + hl], &hex(v["host_response"])[..]);
        assert!(reply[16 + hl..16 + 2 * hl].iter().all(|&b| b == 0));
        assert_eq!(ex.finish(&success1(t_id, hl, None)), Ok(None));
        n += 1;
    }
    assert_eq!(n, 18);
}

fn config(ctrl: bool) -> DhchapConfig {
    // Key bytes 00..1f and their CRC-32, little-endian.
    let mut raw: Vec<u8> = (0u8..32).collect();
    raw.extend_from_slice(
        &crc::Crc::<u32>::new(&crc::CRC_32_ISO_HDLC)
            .checksum(&raw[..32])
            .to_le_bytes(),
    );
    let text: String = alloc::format!(
        "DHHC-1:00:{}:",
        base64::Engine::encode(&base64::engine::general_purpose::STANDARD, &raw)
    );
    let s = DhchapSecret::parse(&text).unwrap();
    DhchapConfig {
        host: s.clone(),
        ctrl: ctrl.then_some(s),
        random: counting,
    }
}

#[test]
fn hostile_challenges_are_refused_with_their_reason() {
    let cfg = config(true);
    let run = |msg: &[u8]| Exchange::new(&cfg, b"h", b"s", 9).reply(msg);
    let c1 = [3u8; 32];
    assert!(run(&challenge(9, 1, 32, 0, 1, &c1, &[])).is_ok());
    assert_eq!(
        run(&challenge(8, 1, 32, 0, 1, &c1, &[])),
        Err(AuthError::TransactionId)
    );
    assert_eq!(
        run(&challenge(9, 7, 20, 0, 1, &[0; 20], &[])),
        Err(AuthError::UnsupportedHash(7))
    );
    assert_eq!(
        run(&challenge(9, 1, 32, 9, 1, &c1, &[2; 256])),
        Err(AuthError::UnsupportedGroup(9))
    );
    assert_eq!(
        run(&challenge(9, 1, 32, 0, 1, &c1, &[2; 8])),
        Err(AuthError::Malformed),
        "a DH value with the NULL group"
    );
    for dh in [&[][..], &[2; 255][..], &[0; 256][..], &[0xff; 256][..]] {
        assert_eq!(
            run(&challenge(9, 1, 32, 1, 1, &c1, dh)),
            Err(AuthError::BadDhValue),
            "DH value of {} bytes",
            dh.len()
        );
    }
    let mut one = [0u8; 256];
    one[255] = 1;
    assert_eq!(
        run(&challenge(9, 1, 32, 1, 1, &c1, &one)),
        Err(AuthError::BadDhValue)
    );
    let full = challenge(9, 1, 32, 0, 1, &c1, &[]);
    for n in 0..48 {
        assert_eq!(run(&full[..n]), Err(AuthError::Malformed), "{n} bytes");
    }
    let mut other = full.clone();
    other[1] = id::SUCCESS1;
    assert_eq!(
        run(&other),
        Err(AuthError::Unexpected {
            auth_id: id::SUCCESS1
        })
    );
    let failure = [0, id::FAILURE1, 0, 0, 9, 0, 1, 1];
    assert_eq!(run(&failure), Err(AuthError::Refused { explanation: 1 }));
    let no_random = DhchapConfig {
        random: never,
        ..cfg.clone()
    };
    assert_eq!(
        Exchange::new(&no_random, b"h", b"s", 9).reply(&full),
        Err(AuthError::Random)
    );
}

#[test]
fn hostile_success1_messages_are_refused() {
    let cfg = config(true);
    let c1 = [3u8; 32];
    let ready = || {
        let mut ex = Exchange::new(&cfg, b"h", b"s", 9);
        ex.reply(&challenge(9, 1, 32, 0, 1, &c1, &[])).unwrap();
        ex
    };
    assert_eq!(
        Exchange::new(&cfg, b"h", b"s", 9).finish(&success1(9, 32, None)),
        Err(AuthError::Unexpected {
            auth_id: id::SUCCESS1
        }),
        "success1 before the reply"
    );
    assert_eq!(
        ready().finish(&success1(9, 32, None)),
        Err(AuthError::ControllerSilent)
    );
    assert_eq!(
        ready().finish(&success1(8, 32, Some(&[0; 32]))),
        Err(AuthError::TransactionId)
    );
    assert_eq!(
        ready().finish(&success1(9, 48, Some(&[0; 48]))),
        Err(AuthError::Malformed)
    );
    assert_eq!(
        ready().finish(&success1(9, 32, Some(&[0; 32]))),
        Err(AuthError::ControllerFailed)
    );
    let s = success1(9, 32, Some(&[0; 32]));
    for n in 0..48 {
        assert_eq!(
            ready().finish(&s[..n]),
            Err(AuthError::Malformed),
            "{n} bytes"
        );
    }
    assert_eq!(
        ready().finish(&[0, id::FAILURE1, 0, 0, 9, 0, 1, 5]),
        Err(AuthError::Refused { explanation: 5 })
    );
}

#[test]
fn errors_name_no_secret() {
    let cfg = config(true);
    let shown = alloc::format!("{cfg:?}");
    assert!(
        shown.contains("<secret>") && !shown.contains("AAEC"),
        "{shown}"
    );
    let ex = Exchange::new(&cfg, b"h", b"s", 9);
    assert_eq!(
        ex.failure2(AuthError::ControllerFailed),
        auth::failure2(9, auth::reason::FAILED)
    );
    assert_eq!(
        ex.failure2(AuthError::UnsupportedGroup(9)),
        auth::failure2(9, auth::reason::DHGROUP_UNUSABLE)
    );
}
