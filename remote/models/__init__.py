"""The models as decoding sees them: targets (prefill, verify a tree, commit a path; pure-attention and hybrid), the
DFlash drafter and its checkpoints, loading and placement over GPUs, their caches, and transformers-version shims.

Imports only remote.kernels and the runner's shared types (remote.errors, remote.spec, remote.tree); never the
decoding loop (remote.decoding) or the run (remote.runner).
"""
