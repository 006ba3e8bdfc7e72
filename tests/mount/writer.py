"""A sync-heavy writer for the crash check. Loops until the mount goes
away: writes whole new files, and appends records to its own journal
file, each followed by fsync (or fdatasync); only after the sync returns
does it append a line to LOG, on the host, naming what is now durable:
  file NAME SIZE SHA256
  record NAME OFFSET LENGTH SHA256
Exits 0 when the mount goes away under it (the kill; in kernel cache
mode an EIO from a cut-short write-back counts once the mount answers
nothing), 1 on any other error. Usage: writer.py DIR LOG ID SEED"""

import errno
import hashlib
import os
import random
import sys


def main():
    d, log_path, ident, seed = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    rng = random.Random(seed)
    log = open(log_path, "a", buffering=1)
    journal = os.path.join(d, f"journal-{ident}")
    n = 0
    jlen = 0
    jfd = -1
    try:
        jfd = os.open(journal, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        while True:
            if rng.random() < 0.5:
                name = f"w{ident}-{n}"
                n += 1
                data = rng.randbytes(rng.randrange(1, 512 << 10))
                fd = os.open(os.path.join(d, name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                pos = 0
                while pos < len(data):
                    step = rng.randrange(1, len(data) - pos + 1)
                    os.write(fd, data[pos:pos + step])
                    pos += step
                os.fsync(fd)
                os.close(fd)
                log.write(f"file {name} {len(data)} {hashlib.sha256(data).hexdigest()}\n")
            else:
                rec = rng.randbytes(rng.randrange(1, 16 << 10))
                os.write(jfd, rec)
                (os.fdatasync if rng.random() < 0.5 else os.fsync)(jfd)
                log.write(f"record journal-{ident} {jlen} {len(rec)} "
                          f"{hashlib.sha256(rec).hexdigest()}\n")
                jlen += len(rec)
            # Unsynced noise: may or may not survive, and must not disturb
            # what did.
            if rng.random() < 0.3:
                with open(os.path.join(d, f"noise-{ident}-{rng.randrange(8)}"), "wb") as f:
                    f.write(rng.randbytes(rng.randrange(1, 64 << 10)))
    except OSError as e:
        # The server was killed: requests in flight were aborted
        # (ECANCELED for one the kernel had put in the dead server's
        # io_uring), later ones find no connection. In kernel cache mode a write-back the
        # abort cut short is reported by the next fsync or close as EIO:
        # that too is the kill if the mount answers nothing any more. Any
        # other error is a failure.
        if e.errno not in (errno.ENOTCONN, errno.ECONNABORTED, errno.ECANCELED) and not (
            e.errno == errno.EIO and jfd >= 0 and gone(jfd)
        ):
            print(f"writer {ident}: {e}")
            sys.exit(1)


def gone(fd):
    """Whether the mount that FD is open on has lost its server (asked
    through the descriptor: the mount point may be detached by now)."""
    try:
        os.fstatvfs(fd)
    except OSError as e:
        return e.errno in (errno.ENOTCONN, errno.ECONNABORTED)
    return False


main()
