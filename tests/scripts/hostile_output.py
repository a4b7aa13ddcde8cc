"""A user's runner whose output is hostile to a terminal and to memory: escape sequences (a window title, colours, a
screen clear, a cursor-position query the terminal would answer into stdin, an 8-bit CSI, a bell), a progress bar
redrawn with carriage returns, and with `--line-mb N` one line of N MB (written in 1 MB pieces), then exit 0."""
import argparse
import sys

parser = argparse.ArgumentParser()
parser.add_argument("--line-mb", type=int, default=0)
args = parser.parse_args()
out = sys.stdout.buffer
out.write(b"title \x1b]0;PWNED\x07 colour \x1b[38;5;199mPINK\x1b[0m clear \x1b[2J ask \x1b[6n "
          b"c1 \xc2\x9b31m bell \x07\n")
out.write(b"loading 10%\rloading 60%\rloading 100%\n")
for _ in range(args.line_mb):
    out.write(b"x" * (1 << 20))
    out.flush()
out.write(b"\nhostile runner done\n")
out.flush()
