"""A worker that hits a real fatal error, reports it, and then hangs instead of exiting (as stuck distributed
jobs do): only fail-fast ends such a run early."""
import time
import traceback

import torch

try:
    torch.multinomial(torch.tensor([[float("nan"), 1.0]]), 1)
except RuntimeError:
    traceback.print_exc()
print("worker waiting for peers...", flush=True)
time.sleep(300)
