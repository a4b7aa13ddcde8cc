"""A user script that fills the disk holding its working directory (the run dir) until a write fails, as a run
writing big outputs does. Its log is padded to whole blocks first: the traceback then finds no room in the log's
last block, which is what loses a runner's last words on a full disk."""
import os
import sys

lines = "".join(f"step {i}: writing outputs\n" for i in range(3))
block = os.statvfs(".").f_bsize
sys.stdout.write(lines + " " * (-len(lines) % block - 1) + "\n")
sys.stdout.flush()
with open("outputs.bin", "wb") as f:
    while True:
        f.write(b"\0" * (1 << 20))
        f.flush()
