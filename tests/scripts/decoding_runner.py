"""A user's runner that looks like ours to the tail and costs no CPU: a `start` event as ours sends once its models
are loaded (with CUDA_VISIBLE_DEVICES), then a `progress` event every 0.1 s for `--steps` steps (default: 300 s,
never paid in full by a test that stops it) or until the file `--until` exists, then exit 0. For fault tests,
where what the runner computes does not matter and ours would spend seconds of CPU on imports and decoding beside
the test."""
import argparse
import os
import time

from remote.events import EventWriter

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=3000)
parser.add_argument("--until", default=None, help="end once this file exists (the test says when)")
args = parser.parse_args()
events = EventWriter("events.jsonl")   # launched in its run dir, with the bundle on PYTHONPATH
events.emit("start", method="script", cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES", ""))
for done in range(1, args.steps + 1):
    if args.until and os.path.exists(args.until):
        break
    time.sleep(0.1)
    events.emit("progress", method="script", done=done, total=args.steps)
events.close()
print("decoding runner done", flush=True)
