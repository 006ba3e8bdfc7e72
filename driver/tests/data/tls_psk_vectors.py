#!/usr/bin/env python3
"""Known answers for the NVMe/TCP TLS PSK derivation (driver/src/tls/psk.rs),
computed with Python's own hmac and hashlib, apart from the driver's code.

  retained = HKDF-Expand-Label(HKDF-Extract(0, configured), "HostNQN", hostnqn, L)
  identity = "NVMe0R0<h> <hostnqn> <subnqn>"
  tls psk  = HKDF-Expand-Label(HKDF-Extract(0, retained), "nvme-tls-psk", identity, L)

HKDF is RFC 5869; HKDF-Expand-Label is RFC 8446, 7.1, or (compat) libnvme's
older form up to 1.13: the length little-endian, label and context without
their length bytes. nvme-cli 2.13 (`nvme check-tls-key --keydata=KEY
--hostnqn=H --subsysnqn=S --identity=0 --insert --keyring=R --keytype=user`,
then `keyctl pipe`) gives the compat answers. Run: python3 tls_psk_vectors.py
"""
import hashlib
import hmac

HOST = b"nqn.2014-08.org.nvmexpress:uuid:f81d4fae-7dec-11d0-a765-00a0c91e6bf6"
SUB = b"nqn.2024-01.io.pollfs:test"


def extract(h, ikm):
    return hmac.new(b"\0" * h().digest_size, ikm, h).digest()


def expand(h, prk, info, n):
    out, t, i = b"", b"", 1
    while len(out) < n:
        t = hmac.new(prk, t + info + bytes([i]), h).digest()
        out += t
        i += 1
    return out[:n]


def expand_label(h, ikm, label, context, compat):
    n = len(ikm)
    full = b"tls13 " + label
    if compat:
        info = n.to_bytes(2, "little") + full + context
    else:
        info = n.to_bytes(2, "big") + bytes([len(full)]) + full + bytes([len(context)]) + context
    return expand(h, extract(h, ikm), info, n)


for hh, h, key in [(1, hashlib.sha256, bytes(range(32))), (2, hashlib.sha384, bytes(range(100, 148)))]:
    identity = b"NVMe0R0%d " % hh + HOST + b" " + SUB
    print(f"hash {hh:02}: identity {identity.decode()}")
    for compat in (False, True):
        form = "compat" if compat else "rfc8446"
        retained = expand_label(h, key, b"HostNQN", HOST, compat)
        psk = expand_label(h, retained, b"nvme-tls-psk", identity, compat)
        print(f"hash {hh:02} {form}: retained {retained.hex()}")
        print(f"hash {hh:02} {form}: tls psk  {psk.hex()}")
