#!/usr/bin/env python3
"""libpollfs from Python through ctypes: format the emulated device, write,
sync, read back, list, see an errno. Usage: smoke.py [PATH/libpollfs.so]
(default: target/debug/libpollfs.so of this checkout)."""
import ctypes
import errno
import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "..", "target", "debug", "libpollfs.so")
lib = ctypes.CDLL(path)

c_p = ctypes.c_void_p
lib.pollfs_version.restype = ctypes.c_char_p
lib.pollfs_last_error.restype = ctypes.c_char_p
lib.pollfs_format.argtypes = [ctypes.c_char_p, c_p, ctypes.POINTER(c_p)]
lib.pollfs_open.argtypes = [c_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_uint32, ctypes.POINTER(c_p)]
lib.pollfs_pwrite.argtypes = [c_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint64]
lib.pollfs_pwrite.restype = ctypes.c_ssize_t
lib.pollfs_pread.argtypes = [c_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint64]
lib.pollfs_pread.restype = ctypes.c_ssize_t
lib.pollfs_fsync.argtypes = [c_p]
lib.pollfs_close.argtypes = [c_p]
lib.pollfs_unmount.argtypes = [c_p]


class Dirent(ctypes.Structure):
    _fields_ = [("ino", ctypes.c_uint64), ("type_", ctypes.c_uint32), ("name", ctypes.c_char * 256)]


lib.pollfs_readdir.argtypes = [c_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(Dirent)]


def ok(r):
    if r < 0:
        raise OSError(-r, lib.pollfs_last_error().decode())
    return r


fs = c_p()
ok(lib.pollfs_format(b"emu", None, ctypes.byref(fs)))
f = c_p()
ok(lib.pollfs_open(fs, b"hello.txt", os.O_CREAT | os.O_RDWR, 0o644, ctypes.byref(f)))
data = b"hello from python" * 300
assert ok(lib.pollfs_pwrite(f, data, len(data), 4096)) == len(data)
ok(lib.pollfs_fsync(f))
buf = ctypes.create_string_buffer(len(data) + 4096)
assert ok(lib.pollfs_pread(f, buf, len(buf), 0)) == len(data) + 4096
assert buf.raw[:4096] == bytes(4096) and buf.raw[4096:] == data

cookie = ctypes.c_uint64(0)
entry = Dirent()
names = []
while ok(lib.pollfs_readdir(fs, b"/", ctypes.byref(cookie), ctypes.byref(entry))) == 1:
    names.append(entry.name.decode())
assert names == ["hello.txt"], names

missing = c_p()
r = lib.pollfs_open(fs, b"nope", 0, 0, ctypes.byref(missing))
assert r == -errno.ENOENT, r
assert b"nope" in lib.pollfs_last_error()

ok(lib.pollfs_close(f))
ok(lib.pollfs_unmount(fs))
print("libpollfs %s: Python ctypes smoke test passed" % lib.pollfs_version().decode())
