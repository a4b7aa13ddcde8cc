"""Imported first by every interpreted check (tests.interpreted): Triton's interpreter, at each call of a @triton.jit
helper from inside a kernel, lists every member of triton.language, its tensor class and its math module with
`inspect.getmembers` to find the builtins still to patch. In the GDN kernels' checks that scan was 44% of the time
(88 of 199 s, cProfile, Triton 3.9), for nothing: inside a launch the builtins are already patched. Here the scan
runs once per module and each later call checks only the builtins it found, patching those still unpatched: what
the original does, without the listing. Left alone where the interpreter's internals differ from what this
expects."""
from __future__ import annotations

import inspect

try:
    import triton.language as tl
    from triton.runtime import interpreter
except ImportError:
    interpreter = None

_BUILTINS: dict = {}    # module or class -> its (name, member) builtins, listed before anything patched them


def _patch_builtin(pkg, builder, scope) -> None:
    members = _BUILTINS.get(pkg)
    if members is None:
        members = _BUILTINS[pkg] = [(name, member) for name, member in inspect.getmembers(pkg)
                                    if tl.core.is_builtin(member)]
    for name, member in members:
        if getattr(pkg, name, None) is member:          # not patched yet in this launch
            interpreter._patch_attr(pkg, name, member, builder, scope)


if interpreter is not None and list(inspect.signature(getattr(interpreter, "_patch_builtin", len)).parameters) == \
        ["pkg", "builder", "scope"] and hasattr(interpreter, "_patch_attr"):
    interpreter._patch_builtin = _patch_builtin
