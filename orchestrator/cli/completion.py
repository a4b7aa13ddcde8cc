"""Shell completion through Hydra's plugin (`specbench -sc install=bash`; zsh: `-sc install=zsh`, ours), plus
what Hydra cannot know: the subcommands and the user's config dirs.

Hydra's bash script runs `specbench -sc query=bash` on every Tab with COMP_LINE set and offers the words it
prints; it names the command to complete after sys.argv[0], which is `.../__main__.py` under `python -m`
(Hydra would then register the script for `python`), hence `as_console_script`.
"""
from __future__ import annotations

import os
import sys

from .commands import COMMANDS

_FLAGS = ("-sc", "--shell-completion")


# Hydra's bash script does not run under zsh (`[ a == b ]` is an error there), so zsh gets its own function
# around the same query.
ZSH_SCRIPT = """_specbench_complete() {
  local line="${(j: :)words[1,CURRENT]}"
  local -a choices
  choices=(${=$(COMP_LINE="$line" COMP_POINT=${#line} specbench -sc query=zsh 2>/dev/null)})
  compadd -Q -S '' -- $choices
}
compdef _specbench_complete specbench
"""


def zsh_script(argv: list[str]) -> str | None:
    """Our zsh install/uninstall script for `-sc install=zsh` / `-sc uninstall=zsh`, else None (Hydra's)."""
    if "install=zsh" in argv:
        return ZSH_SCRIPT
    if "uninstall=zsh" in argv:
        return "compdef -d specbench\nunfunction _specbench_complete 2>/dev/null\n"
    return None


def answer(argv: list[str]) -> bool:
    """Handle a `-sc` request before Hydra: print our zsh script or the subcommand candidates of a query.
    True when that is the whole answer; False when Hydra goes on (its install scripts, its query candidates)."""
    as_console_script()
    if (script := zsh_script(argv)) is not None:
        print(script, end="")
        return True
    if any(a.startswith("query=") for a in argv):
        words, hydra_too = command_words()
        see_user_dirs(argv)
        print(" ".join(words))
        return not hydra_too
    return False


def requested(argv: list[str]) -> bool:
    return any(a in _FLAGS or a.startswith(tuple(f + "=" for f in _FLAGS)) for a in argv)


def as_console_script() -> None:
    """Make Hydra's install script and --hydra-help name `specbench`, the command completion works for."""
    if sys.argv[0].endswith(".py"):
        sys.argv[0] = "specbench"


def see_user_dirs(argv: list[str]) -> None:
    """Hydra lists a query's options with the overrides typed on COMP_LINE, not with our argv: put the search
    path there too (after the program name, so the word being completed stays the last one). Hydra splits the
    line on blanks without unquoting, so the override goes in as Hydra's grammar writes it."""
    search = [a for a in argv if a.startswith("hydra.searchpath=")]
    line = os.environ.get("COMP_LINE")
    if search and line is not None and "hydra.searchpath=" not in line:
        program, _, rest = line.lstrip().partition(" ")
        os.environ["COMP_LINE"] = f"{program} {search[0]} {rest}"


def command_words() -> tuple[list[str], bool]:
    """For a query: (subcommand names to offer, whether Hydra's override candidates apply too). The first word
    may be a subcommand; after one, Hydra's candidates do not apply (the shell falls back to file names)."""
    line = os.environ.get("COMP_LINE", "")
    point = int(os.environ.get("COMP_POINT", len(line)) or len(line))
    words = line[:point].split()[1:]      # without the program
    if line[:point].endswith(" "):
        words.append("")
    if not words:
        words = [""]
    if len(words) > 1:
        return [], words[0] not in COMMANDS
    current = words[0]
    return [name for name in COMMANDS if name.startswith(current) and "=" not in current], True
