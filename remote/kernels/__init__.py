"""Triton kernels (tree search, tree attention, the GDN tree recurrence) and the choice of kernel path per device.

The ground floor of the runner: imports nothing else of remote/; each kernel keeps a torch reference it is tested
against.
"""
