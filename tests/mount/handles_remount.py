#!/usr/bin/env python3
"""A file handle across a remount. pollfs numbers inodes from one past the
highest in use when it mounts, so the number of a file removed before an
unmount comes back with the next file made; that file must not open
through the removed file's handle (ESTALE, as the generation differs).

Usage: handles_remount.py take|use MOUNT_DIR STATE_DIR   (root; run by
tests/mount/posix.sh: `take`, remount, `use`)
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import conformance as c  # noqa: E402


def main():
    step, d, state = sys.argv[1], sys.argv[2], sys.argv[3]
    if step == "take":
        os.makedirs(state, exist_ok=True)
        c.write(d + "/gone", b"removed")
        h = c.name_to_handle(d + "/gone")
        with open(state + "/handle", "wb") as f:
            f.write(bytes(h))
        with open(state + "/ino", "w") as f:
            f.write(str(os.lstat(d + "/gone").st_ino))
        os.unlink(d + "/gone")
        return 0
    c.write(d + "/new", b"a later file")
    with open(state + "/ino") as f:
        removed = int(f.read())
    reused = os.lstat(d + "/new").st_ino == removed
    with open(state + "/handle", "rb") as f:
        h = c.FileHandle.from_buffer_copy(f.read())
    mount_fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        got = c.r(lambda: os.pread(c.open_by_handle(mount_fd, h, os.O_RDONLY), 64, 0))
    finally:
        os.close(mount_fd)
    print("  the new file took the removed one's number: %s; its handle gives: %s" % (reused, got))
    return 0 if reused and got == "ESTALE" else 1


if __name__ == "__main__":
    sys.exit(main())
