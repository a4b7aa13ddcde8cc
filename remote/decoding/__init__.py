"""The decoding methods: the step loop (AR, DFlash, DDTree), tree building, sampling, and the CUDA-graph decoder with
its per-phase split.

Imports remote.models, remote.kernels and the runner's shared types (remote.errors, remote.timing, remote.tree);
never the run (remote.runner, remote.metrics).
"""
