"""Triton kernels (tree search, tree attention, the GDN tree recurrence, its conv and gates, its commit install, a
step's glue: row moves, argmax, sampling, step stats) and the choice of kernel path per device.

The ground floor of the runner: imports nothing else of remote/; each kernel keeps a torch reference it is tested
against.
"""
import contextlib

import torch


def pow2(n: int) -> int:
    """The smallest power of two >= n (1 for n <= 1): a Triton block's length."""
    return 1 << max(0, n - 1).bit_length()


def on_device(t: torch.Tensor):
    """`t`'s GPU as the current device while a kernel launches (Triton launches on the current one, and a target
    split over GPUs keeps tensors on others), or nothing for CPU tensors (the interpreter)."""
    return torch.cuda.device(t.device) if t.is_cuda else contextlib.nullcontext()
