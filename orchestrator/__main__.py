"""`python -m orchestrator`: the same program as the `specbench` command (orchestrator.cli.main)."""
from orchestrator.cli.main import main

if __name__ == "__main__":
    main()
