"""A tree's metadata, for the mount checks.

  treemeta.py dump DIR [--dir-times]   one line per entry below DIR: path,
      kind, mode, owner, size, mtime in nanoseconds (of directories only
      with --dir-times), link count and the first path of its hard-link
      group, a symlink's target. Two trees are alike if their dumps are.
  treemeta.py vary DIR SEED            gives DIR's entries varied modes,
      owners and nanosecond mtimes, and adds symbolic and hard links, all
      from SEED (so a tar of it carries more than one mode and one time).
"""
import os
import random
import stat
import sys


def entries(root):
    """Every path below root, sorted, relative to it."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            out.append(os.path.relpath(os.path.join(dirpath, n), root))
    return sorted(out)


def dump(root, dir_times):
    first_of_inode = {}
    for rel in entries(root):
        st = os.lstat(os.path.join(root, rel))
        if stat.S_ISDIR(st.st_mode):
            kind, size = "d", "-"
            mtime = st.st_mtime_ns if dir_times else "-"
        elif stat.S_ISLNK(st.st_mode):
            kind, size, mtime = "l", st.st_size, st.st_mtime_ns
        else:
            kind, size, mtime = "f", st.st_size, st.st_mtime_ns
        group = "-"
        if kind == "f":
            group = first_of_inode.setdefault(st.st_ino, rel)
        target = os.readlink(os.path.join(root, rel)) if kind == "l" else "-"
        nlink = st.st_nlink if kind != "d" else "-"
        print(
            f"{rel} {kind} {stat.S_IMODE(st.st_mode):04o} {st.st_uid}:{st.st_gid} "
            f"{size} {mtime} {nlink} {group} {target}"
        )


def vary(root, seed):
    rng = random.Random(seed)
    paths = entries(root)
    files = [p for p in paths if os.path.isfile(os.path.join(root, p))]
    dirs = [p for p in paths if os.path.isdir(os.path.join(root, p))]
    for p in rng.sample(files, min(12, len(files))):
        full = os.path.join(root, p)
        os.symlink(os.path.basename(p), full + ".sym")
        os.link(full, full + ".hard")
    for p in files:
        full = os.path.join(root, p)
        os.chmod(full, rng.choice([0o644, 0o600, 0o755, 0o640, 0o444, 0o700, 0o4755]))
        if rng.random() < 0.2:
            os.chown(full, rng.choice([0, 1234]), rng.choice([0, 5678]))
    stamp = lambda: rng.randrange(946684800, 1700000000) * 10**9 + rng.randrange(10**9)
    for p in entries(root):
        full = os.path.join(root, p)
        if not os.path.isdir(full) or os.path.islink(full):
            os.utime(full, ns=(stamp(), stamp()), follow_symlinks=False)
    # Directories last, deepest first: adding an entry changes the mtime.
    for p in sorted(dirs, key=lambda d: -d.count("/")):
        full = os.path.join(root, p)
        os.chmod(full, rng.choice([0o755, 0o750, 0o775, 0o2755]))
        os.utime(full, ns=(stamp(), stamp()))


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "dump":
        dump(sys.argv[2], "--dir-times" in sys.argv[3:])
    elif len(sys.argv) == 4 and sys.argv[1] == "vary":
        vary(sys.argv[2], int(sys.argv[3]))
    else:
        sys.exit(__doc__)
