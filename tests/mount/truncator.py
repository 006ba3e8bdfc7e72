"""Truncates, extends and rewrites one file on the mount for SECONDS, while
other load runs, and checks every byte against a model after each step:
what a truncate cut off reads as zeros when the file grows again, what it
kept is intact. Usage: truncator.py FILE SECONDS SEED"""

import os
import random
import sys
import time


def main():
    path, seconds, seed = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
    rng = random.Random(seed)
    model = bytearray()
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    end = time.monotonic() + seconds
    steps = truncates = 0
    while time.monotonic() < end:
        op = rng.random()
        if op < 0.45:
            off = rng.randrange(0, 4 << 20)
            data = rng.randbytes(rng.randrange(1, 256 << 10))
            os.pwrite(fd, data, off)
            if off > len(model):
                model.extend(bytes(off - len(model)))
            model[off:off + len(data)] = data
        else:
            size = rng.randrange(0, 5 << 20)
            if rng.random() < 0.5:
                os.ftruncate(fd, size)
            else:
                os.truncate(path, size)
            truncates += 1
            if size < len(model):
                del model[size:]
            else:
                model.extend(bytes(size - len(model)))
        if rng.random() < 0.1:
            os.fsync(fd)
        st = os.fstat(fd)
        back = os.pread(fd, len(model) + 4096, 0)
        if st.st_size != len(model) or back != bytes(model):
            first = next((i for i, (a, b) in enumerate(zip(back, model)) if a != b), None)
            print(f"truncator: step {steps}: size {st.st_size} (model {len(model)}), "
                  f"read {len(back)} bytes, first difference at {first}")
            sys.exit(1)
        steps += 1
    os.close(fd)
    print(f"truncator: {steps} steps ({truncates} truncates), every byte as modelled")


main()
