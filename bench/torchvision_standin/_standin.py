"""A text-only stand-in for torchvision, for measuring vLLM's CPU build on Qwen3.5 targets on a machine without a
CPU build of torchvision (PyPI's is a CUDA build, which fails there with `operator torchvision::nms does not exist`).

vLLM 0.32's Qwen3.5 classes import transformers' Qwen3-VL image processor, which imports torchvision; serving text
never calls it. Each module of the package here answers any name with a placeholder class. Use it through
`python_with_standin.sh` as host.engine_python, never for images. docs/PERFORMANCE.md (engine arms) says what ran.
"""


class _Meta(type):
    def __getattr__(cls, name):
        return cls


class Placeholder(metaclass=_Meta):
    pass


def any_name(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    return Placeholder
