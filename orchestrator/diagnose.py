"""`python -m orchestrator.diagnose <log> [--json]`: the documented name of orchestrator/failures/diagnose.py."""
import sys

from .failures.diagnose import main

if __name__ == "__main__":
    sys.exit(main())
