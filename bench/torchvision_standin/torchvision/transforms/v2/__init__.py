"""Stand-in (bench/torchvision_standin/_standin.py says why): any name is a placeholder."""
from _standin import any_name as __getattr__  # noqa: F401

__version__ = "0.0"
