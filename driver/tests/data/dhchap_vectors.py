#!/usr/bin/env python3
"""Known-answer vectors for the driver's DH-HMAC-CHAP (NVMe Base 2.0,
8.13.5), computed independently of the driver with Python's hmac and
hashlib, the RFC 7919 groups as OpenSSL holds them (through the
`cryptography` package), and zlib's CRC-32.

    python3 driver/tests/data/dhchap_vectors.py > driver/tests/data/dhchap_vectors.txt

Each block is `key value` lines (hex for bytes) ended by a blank line;
`driver/src/auth/tests.rs` reads it.
"""
import base64
import hashlib
import hmac
import random
import subprocess
import zlib

from cryptography.hazmat.primitives import serialization

HASHES = {1: hashlib.sha256, 2: hashlib.sha384, 3: hashlib.sha512}
GROUPS = {1: 2048, 2: 3072, 3: 4096, 4: 6144, 5: 8192}


def ffdhe_prime(bits):
    """p of RFC 7919's ffdhe<bits>, from OpenSSL's named group."""
    pem = subprocess.run(
        ["openssl", "genpkey", "-genparam", "-algorithm", "DH", "-pkeyopt",
         f"group:ffdhe{bits}", "-outform", "PEM"],
        check=True, capture_output=True).stdout
    p = serialization.load_pem_parameters(pem).parameter_numbers().p
    assert p.bit_length() == bits and pow(2, (p - 1) // 2, p) == 1
    return p


def dhhc(key, hash_id):
    """The DHHC-1 representation of `key` with transformation `hash_id`."""
    crc = zlib.crc32(key).to_bytes(4, "little")
    return f"DHHC-1:{hash_id:02d}:{base64.b64encode(key + crc).decode()}:"


def transform(key, hash_id, nqn):
    if hash_id == 0:
        return key
    return hmac.new(key, nqn.encode() + b"NVMe-over-Fabrics", HASHES[hash_id]).digest()


def augment(hid, session, challenge):
    h = HASHES[hid]
    return hmac.new(h(session).digest(), challenge, h).digest()


def host_response(hid, key, c1, s1, t_id, hostnqn, subnqn):
    m = c1 + s1.to_bytes(4, "little") + t_id.to_bytes(2, "little") + b"\0"
    m += b"HostHost" + hostnqn.encode() + b"\0" + subnqn.encode()
    return hmac.new(key, m, HASHES[hid]).digest()


def ctrl_response(hid, key, c2, s2, t_id, hostnqn, subnqn):
    m = c2 + s2.to_bytes(4, "little") + t_id.to_bytes(2, "little") + b"\0"
    m += b"Controller" + subnqn.encode() + b"\0" + hostnqn.encode()
    return hmac.new(key, m, HASHES[hid]).digest()


def main():
    rng = random.Random(20261206)
    rb = lambda n: bytes(rng.getrandbits(8) for _ in range(n))  # noqa: E731
    primes = {gid: ffdhe_prime(bits) for gid, bits in GROUPS.items()}
    for gid in sorted(primes):
        print(f"group {gid}")
        print(f"prime {primes[gid]:x}")
        print()
    hostnqn = "nqn.2014-08.org.nvmexpress:uuid:706f6c6c-6673-2d68-6f73-742d69643031"
    subnqn = "testnqn"
    case = 0
    for hid in (1, 2, 3):
        for gid in (0, 1, 2, 3, 4, 5):
            case += 1
            klen = rng.choice((32, 48, 64))
            key_hash = rng.choice((0, 1, 2, 3))
            host_key, ctrl_key = rb(klen), rb(klen)
            t_id, s1, s2 = rng.getrandbits(16), rng.getrandbits(32), rng.getrandbits(32) | 1
            hl = HASHES[hid]().digest_size
            c1, c2 = rb(hl), rb(hl)
            print(f"case {case}")
            print(f"hash {hid}")
            print(f"dhgroup {gid}")
            print(f"hostnqn {hostnqn}")
            print(f"subnqn {subnqn}")
            print(f"host_secret {dhhc(host_key, key_hash)}")
            print(f"ctrl_secret {dhhc(ctrl_key, key_hash)}")
            print(f"host_key_transformed {transform(host_key, key_hash, hostnqn).hex()}")
            print(f"t_id {t_id}")
            print(f"s1 {s1}")
            print(f"c1 {c1.hex()}")
            print(f"s2 {s2}")
            print(f"c2 {c2.hex()}")
            session = b""
            if gid:
                p = primes[gid]
                size = (p.bit_length() + 7) // 8
                x = int.from_bytes(rb(64), "big")
                y = int.from_bytes(rb(64), "big")
                ctrl_pub = pow(2, y, p).to_bytes(size, "big")
                host_pub = pow(2, x, p).to_bytes(size, "big")
                session = pow(2, x * y, p).to_bytes(size, "big")
                print(f"host_private {x.to_bytes(64, 'big').hex()}")
                print(f"ctrl_public {ctrl_pub.hex()}")
                print(f"host_public {host_pub.hex()}")
                print(f"session {session.hex()}")
            ca1 = augment(hid, session, c1) if gid else c1
            ca2 = augment(hid, session, c2) if gid else c2
            kh = transform(host_key, key_hash, hostnqn)
            kc = transform(ctrl_key, key_hash, subnqn)
            print(f"host_response {host_response(hid, kh, ca1, s1, t_id, hostnqn, subnqn).hex()}")
            print(f"ctrl_response {ctrl_response(hid, kc, ca2, s2, t_id, hostnqn, subnqn).hex()}")
            print()


if __name__ == "__main__":
    main()
