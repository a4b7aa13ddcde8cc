"""`specbench --help`: what to type. Commands from orchestrator.cli.commands, groups and their options from every
config source (orchestrator.config.sources), each knob with its value for this command line and its sentence
(orchestrator.config.knobs, a host's by its kind): nothing here is written twice.

`specbench host=ssh --help` shows host=ssh's own knobs, as the run would compose them.
"""
from __future__ import annotations

import copy
import json
import os
import textwrap

from omegaconf import DictConfig, OmegaConf

from ..config.knobs import SECTIONS, RunKnobs
from ..config.sections import complete, host_knobs
from ..config.sources import CONFIG_DIR_ENV, Configs, user_dir
from ..knob import knobs_of
from ..paths import CONF_DIR, SOURCE_CHECKOUT, runs_dir
from ..program import program
from .commands import COMMANDS

EXAMPLES = (
    ("the embedded default: DDTree against AR on this machine", ""),
    ("a sweep on your box (conf/host/gpu1.yaml shows one; put yours in the user dir)",
     "-m host=gpu1 method=dflash,ddtree tree_budget=31,63"),
    ("the fastest budget by Optuna (pip install hydra-optuna-sweeper)",
     "-m hydra/sweeper=optuna hydra.sweeper.n_trials=8 hydra.sweeper.direction=maximize "
     "'tree_budget=int(interval(8,256))' objective=tokens_per_s"),
)
_WIDTH = 100


def _value(cfg: DictConfig, key: str) -> str:
    value = OmegaConf.select(cfg, key, throw_on_missing=False)   # "???" where the config leaves it unset
    if OmegaConf.is_config(value):
        value = OmegaConf.to_container(value, resolve=False)
    text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
    return text if len(text) <= 24 else text[:21] + "..."


def _knob_lines(docs: dict[str, str], cfg: DictConfig, prefix: str = "") -> list[str]:
    lines = []
    for key, doc in docs.items():
        full = f"{prefix}{key}"
        head = f"  {full}={_value(cfg, full)}"
        body = _wrap(doc, _WIDTH - 36) or [""]
        lines.append(f"{head:<36}{body[0]}" if len(head) < 36 else f"{head}\n{'':36}{body[0]}")
        lines.extend(f"{'':36}{more}" for more in body[1:])
    return lines


def render(argv: list[str]) -> str:
    me = program()
    overrides = [a for a in argv if "=" in a and not a.startswith("-")]
    out = ["specbench: benchmark speculative decoding (AR, DFlash, DDTree) on your own GPU hosts, tracked in "
           "MLflow.", "", "Usage:",
           f"  {me} [KEY=VALUE ...]        one run (Hydra overrides)",
           f"  {me} -m [KEY=A,B ...]       a sweep: a job per combination, one MLflow parent run",
           f"  {me} COMMAND ...            one of the commands below ({me} COMMAND --help)", "", "Commands:"]
    out += [f"  {name:<10}{summary}" for name, (_, summary) in COMMANDS.items()]
    out += ["", "Examples:"]
    for what, args in EXAMPLES:
        out += [f"  # {what}", f"  {me} {args}".rstrip()]
    with Configs(argv) as configs:
        cfg = copy.deepcopy(configs.compose(overrides, with_hydra=True))
        choices = cfg.hydra.runtime.choices
        complete(cfg, choices)   # what the run reads: each key a section's file leaves out has its default
        out += ["", f"Config groups (GROUP=OPTION; add your own as {user_dir()}/GROUP/NAME.yaml, "
                    f"${CONFIG_DIR_ENV}, --config-dir DIR or hydra.searchpath=[DIR]):"]
        groups = sorted(configs.groups())
        for group in groups:
            chosen = choices.get(group)
            options = ", ".join(f"[{o}]" if o == chosen else o for o in configs.options(group))
            out += _wrap(options, _WIDTH - 2, initial_indent=f"  {group:<10}", subsequent_indent=" " * 12)
        out += ["", "Knobs (KEY=VALUE; the value this command line gives):", f"  <runs dir> is {runs_dir()} "
                f"({_runs_dir_source()})"]
        out += _knob_lines(docs(knobs_of(RunKnobs)), cfg)
        for group in groups:
            knobs = host_knobs(cfg.host) if group == "host" else knobs_of(SECTIONS[group]) if group in SECTIONS \
                else None
            if knobs and group in cfg:
                path = configs.file_of(group, str(choices.get(group)))
                out += ["", f"{group}={choices.get(group)} ({_shown(path) if path else 'a structured config'}):"]
                out += _knob_lines(docs(knobs), cfg, f"{group}.")
    out += ["", f"{me} --cfg job prints the whole composed config; {me} --hydra-help shows Hydra's own flags.",
            "Tab completion (the console script): eval \"$(specbench -sc install=bash)\" in ~/.bashrc; zsh: "
            "eval \"$(specbench -sc install=zsh)\" in ~/.zshrc after compinit."]
    return "\n".join(out) + "\n"


def docs(knobs) -> dict[str, str]:
    """{key: the sentence --help shows} of a section's knobs."""
    return {key: k.help for key, k in knobs.items()}


def _wrap(text: str, width: int, **indents) -> list[str]:
    """Lines of at most `width`, broken at spaces only: option names and paths (tiny-qwen3) stay whole."""
    return textwrap.wrap(text, width, break_on_hyphens=False, break_long_words=False, **indents)


def _runs_dir_source() -> str:
    if os.environ.get("SPECBENCH_RUNS_DIR"):
        return "$SPECBENCH_RUNS_DIR"
    return "the checkout's runs/; $SPECBENCH_RUNS_DIR moves it" if SOURCE_CHECKOUT else \
        "./runs where specbench started; $SPECBENCH_RUNS_DIR moves it"


def _shown(path) -> str:
    try:
        return f"conf/{path.relative_to(CONF_DIR)}"
    except ValueError:
        return str(path)
