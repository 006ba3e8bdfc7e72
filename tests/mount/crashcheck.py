"""After the crash: every file and journal record a writer logged as
synced is on the mount, byte for byte. Usage: crashcheck.py DIR LOG..."""

import hashlib
import os
import sys


def main():
    d = sys.argv[1]
    files = records = bad = 0
    for log in sys.argv[2:]:
        for line in open(log):
            parts = line.split()
            if parts[0] == "file" and len(parts) == 4:
                name, size, sha = parts[1], int(parts[2]), parts[3]
                try:
                    data = open(os.path.join(d, name), "rb").read()
                except OSError as e:
                    print(f"crashcheck: {name}: {e}")
                    bad += 1
                    continue
                if len(data) != size or hashlib.sha256(data).hexdigest() != sha:
                    print(f"crashcheck: {name}: {len(data)} bytes, synced {size}, content differs")
                    bad += 1
                files += 1
            elif parts[0] == "record" and len(parts) == 5:
                name, off, length, sha = parts[1], int(parts[2]), int(parts[3]), parts[4]
                with open(os.path.join(d, name), "rb") as f:
                    f.seek(off)
                    data = f.read(length)
                if hashlib.sha256(data).hexdigest() != sha:
                    print(f"crashcheck: {name}: record at {off} ({length} bytes) differs")
                    bad += 1
                records += 1
            # A torn last line (the kill came mid-write) names nothing.
    print(f"crashcheck: {files} synced files and {records} synced journal records checked, "
          f"{bad} wrong")
    sys.exit(1 if bad or files + records == 0 else 0)


main()
