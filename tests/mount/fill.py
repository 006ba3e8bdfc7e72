"""Writers that fill a pollfs mount, as xfstests' fstest -F does: each of
N processes writes 512-byte pieces with a hole between each two into its
files, truncating and rewriting them round after round, with no sync.

  fill.py write DIR WRITERS FILES FILE_BYTES ROUNDS  -> prints, per file,
      "NAME ROUND LENGTH" of what it holds, and "refused" lines for every
      write answered ENOSPC
  fill.py verify DIR LIST  -> checks every file of LIST (the output above)
"""
import errno
import os
import sys

PIECE = 512


def byte(w, rnd, f, off):
    return (w * 7 + rnd * 3 + f + off // PIECE) % 251


def closed(fd):
    """Closes fd; False if the close said the device is full: with the
    kernel's writeback cache the refusal comes when the pages reach the
    server, at the latest at close, and then the file's bytes may not all
    be stored."""
    try:
        os.close(fd)
        return True
    except OSError as e:
        if e.errno != errno.ENOSPC:
            raise
        return False


def writer(d, w, files, size, rounds, out):
    held = {}
    refused = None
    for rnd in range(rounds):
        for f in range(files):
            name = f"w{w}f{f}"
            try:
                fd = os.open(f"{d}/{name}", os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
            except OSError as e:
                # A new file's inode is metadata: a full device refuses it.
                if e.errno != errno.ENOSPC:
                    raise
                held.pop(name, None)
                refused = f"refused {name} round {rnd} at open"
                break
            off = 0
            try:
                while off < size:
                    os.pwrite(fd, bytes([byte(w, rnd, f, off)]) * PIECE, off)
                    off += 2 * PIECE
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
                refused = f"refused {name} round {rnd} at {off}"
            held[name] = (rnd, off)
            if not closed(fd):
                del held[name]
                refused = refused or f"refused {name} round {rnd} at close"
            if refused:
                break
        if refused:
            out.write(refused + "\n")
            break
    for n, (r, ln) in held.items():
        out.write(f"{n} {r} {ln}\n")


def write(d, writers, files, size, rounds):
    pids = []
    for w in range(writers):
        r, wfd = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            with os.fdopen(wfd, "w") as out:
                writer(d, w, files, size, rounds, out)
            os._exit(0)
        os.close(wfd)
        pids.append((pid, r))
    rc = 0
    for pid, r in pids:
        with os.fdopen(r) as inp:
            sys.stdout.write(inp.read())
        _, st = os.waitpid(pid, 0)
        rc |= os.waitstatus_to_exitcode(st)
    return rc


def verify(d, listing):
    bad = 0
    for line in open(listing):
        if line.startswith("refused"):
            continue
        name, rnd, ln = line.split()
        rnd, ln = int(rnd), int(ln)
        w, f = (int(x) for x in name[1:].split("f"))
        data = open(f"{d}/{name}", "rb").read()
        want_len = max(ln - PIECE, 0)
        if len(data) != want_len:
            print(f"{name}: {len(data)} bytes, wanted {want_len}")
            bad += 1
            continue
        for off in range(0, want_len, PIECE):
            v = byte(w, rnd, f, off) if (off // PIECE) % 2 == 0 else 0
            if data[off:off + PIECE] != bytes([v]) * PIECE:
                print(f"{name}: wrong bytes at {off}")
                bad += 1
                break
    return 1 if bad else 0


if __name__ == "__main__":
    if sys.argv[1] == "write":
        sys.exit(write(sys.argv[2], *(int(x) for x in sys.argv[3:7])))
    sys.exit(verify(sys.argv[2], sys.argv[3]))
