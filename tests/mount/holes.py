"""Punch holes, zero ranges, allocate and truncate a file on the mount with
util-linux's fallocate(1) and coreutils' truncate(1), and after each step
compare every byte and the size with a model: zeros where a step must
leave zeros, the rest intact, fallocate(2)'s size rules for every mode at
sizes that are and are not page-aligned. Also checks that allocation
reserves blocks, that punching frees them, and the errors of what pollfs
does not do.
Usage: holes.py DIR"""

import os
import subprocess
import sys

failures = 0


def run(*args):
    return subprocess.run(list(args), capture_output=True, text=True)


def expect(what, cond):
    global failures
    if not cond:
        print(f"holes: FAIL: {what}")
        failures += 1


def main():
    d = sys.argv[1]
    path = os.path.join(d, "holes")
    model = bytearray(os.urandom(1 << 20))
    with open(path, "wb") as f:
        f.write(model)
        os.fsync(f.fileno())

    def same(what):
        data = open(path, "rb").read()
        expect(f"{what}: {len(data)} bytes, model {len(model)}", data == bytes(model))

    def zero(off, end):
        end = min(end, len(model))
        if off < end:
            model[off:end] = bytes(end - off)

    def blocks():
        return os.stat(path).st_blocks

    # Punch holes (KEEP_SIZE is implied): aligned, unaligned, past EOF.
    for off, length in [(4096, 8192), (100_000, 5_000), (1_040_000, 100_000)]:
        r = run("fallocate", "-p", "-o", str(off), "-l", str(length), path)
        expect(f"punch {off}+{length}: {r.stderr}", r.returncode == 0)
        zero(off, off + length)
        same(f"after punch {off}+{length}")
    # Whole blocks freed: 1 and 2, and 254 and 255 (the last punch ends at EOF).
    expect(f"punching freed 4 blocks: {blocks()} sectors", blocks() == (256 - 4) * 8)

    # Zero a range inside EOF, then one that extends the file.
    r = run("fallocate", "-z", "-o", "200000", "-l", "10000", path)
    expect(f"zero range: {r.stderr}", r.returncode == 0)
    zero(200_000, 210_000)
    same("after zero range")
    r = run("fallocate", "-z", "-o", str(len(model) - 10), "-l", "5000", path)
    expect(f"zero range past EOF: {r.stderr}", r.returncode == 0)
    model.extend(bytes(len(model) - 10 + 5000 - len(model)))
    same("after zero range past EOF")

    # Shrink, then grow: the cut bytes come back as zeros.
    for size in [700_000, 1_200_000, 0, 65_536]:
        r = run("truncate", "-s", str(size), path)
        expect(f"truncate -s {size}: {r.stderr}", r.returncode == 0)
        if size < len(model):
            del model[size:]
        else:
            model.extend(bytes(size - len(model)))
        same(f"after truncate -s {size}")

    # Allocate: the file grows to the range's end, reads zeros, and every
    # block of it is reserved.
    r = run("fallocate", "-o", "0", "-l", str(8 << 20), path)
    expect(f"allocate 8 MiB: {r.stderr}", r.returncode == 0)
    model.extend(bytes((8 << 20) - len(model)))
    same("after allocate")
    expect(f"8 MiB allocated: {blocks()} sectors", blocks() == (8 << 20) // 512)
    # Write into the middle, allocate over it: the data stays.
    with open(path, "r+b") as f:
        f.seek(3 << 20)
        f.write(b"kept" * 1000)
    model[3 << 20:(3 << 20) + 4000] = b"kept" * 1000
    r = run("fallocate", "-n", "-o", "0", "-l", str(8 << 20), path)
    expect(f"allocate, keep size, inside EOF: {r.stderr}", r.returncode == 0)
    same("after allocating over data")
    r = run("fallocate", "-p", "-o", "0", "-l", str(8 << 20), path)
    expect(f"punch it all: {r.stderr}", r.returncode == 0)
    zero(0, 8 << 20)
    same("after punching everything")
    expect(f"no block left: {blocks()} sectors", blocks() == 0)

    # What pollfs refuses, and how.
    for args, errtext in [
        (["-c", "-o", "0", "-l", "4096"], "Operation not supported"),   # collapse
        (["-i", "-o", "0", "-l", "4096"], "Operation not supported"),   # insert
        (["-o", "0", "-l", "1T"], "No space left on device"),
    ]:
        r = run("fallocate", *args, path)
        expect(f"fallocate {' '.join(args)} fails with '{errtext}': {r.stderr.strip()}",
               r.returncode != 0 and errtext in r.stderr)
    same("after the refused requests")

    # fallocate(2)'s size rules at sizes that are not page-aligned, each
    # mode on a fresh file against the model: mode 0 grows the file to
    # the range's end wherever the old EOF lies (inside the range's last
    # page too: the two cases ext4 shows as 4096 and 8000); KEEP_SIZE never
    # changes the size (past EOF it reserves nothing, and succeeds); ZERO_
    # RANGE zeroes, and grows unless KEEP_SIZE.
    # A file of its own: the remount check reads "holes" afterwards.
    path = os.path.join(d, "sizes")
    cases = [
        (100, [], 0, 4096, 4096),
        (5000, [], 0, 8000, 8000),
        (5000, [], 4000, 1, 5000),
        (4096, [], 100, 4097, 4197),
        (10, [], 9000, 3, 9003),
        (5000, ["-n"], 0, 8000, 5000),
        (5000, ["-n"], 16 << 20, 4096, 5000),
        (5000, ["-z"], 4000, 5000, 9000),
        (5000, ["-z", "-n"], 4000, 5000, 5000),
        (9000, ["-p"], 100, 5000, 9000),
    ]
    for old, flags, off, length, size in cases:
        what = f"fallocate {' '.join(flags)} -o {off} -l {length} on {old} bytes"
        model = bytearray(os.urandom(old))
        with open(path, "wb") as f:
            f.write(model)
        r = run("fallocate", *flags, "-o", str(off), "-l", str(length), path)
        expect(f"{what}: {r.stderr}", r.returncode == 0)
        if "-z" in flags or "-p" in flags:
            zero(off, off + length)
        model.extend(bytes(max(0, size - len(model))))
        expect(f"{what}: size {os.stat(path).st_size}, want {size}",
               os.stat(path).st_size == size)
        same(what)
        if not flags and off == 0:
            want = -(-size // 4096) * 8
            expect(f"{what}: {blocks()} sectors allocated, want {want}", blocks() == want)

    print(f"holes: {failures} failures")
    sys.exit(1 if failures else 0)


main()
