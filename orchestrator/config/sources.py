"""Where configs come from: the shipped conf/ and the user's own dirs, seen the way Hydra will see them.

Sources, in Hydra's lookup order: the shipped conf/ (primary), `--config-dir DIR`, each `hydra.searchpath`
entry, then the per-user dir `user_dir()` (added to `hydra.searchpath` by `with_user_dir`). Hydra takes the first
file of a name, so a user's file adds options (host=mybox) but cannot replace a shipped one of the same name:
`shadowed()` names those so the user can rename them.

Contract: `Configs(argv)` opened as a context manager lists group options (`options`, `groups`) and composes
(`compose`) with the same sources as the `hydra_main` the same argv starts; validation and `--help` use it, so
what they accept is what Hydra can load.
"""
from __future__ import annotations

import importlib
import os
from pathlib import Path

from ..paths import CONF_DIR

# The knob defaults that conf/config.yaml's defaults list names (specbench_knobs) are registered as this imports.
importlib.import_module(f"{__package__}.knobs")

CONFIG_DIR_ENV = "SPECBENCH_CONFIG_DIR"
_SEARCHPATH = "hydra.searchpath"


def user_dir() -> Path:
    """$SPECBENCH_CONFIG_DIR, else $XDG_CONFIG_HOME/specbench, else ~/.config/specbench."""
    if os.environ.get(CONFIG_DIR_ENV):
        return Path(os.environ[CONFIG_DIR_ENV]).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    return Path(base).expanduser() / "specbench"


def _flag_value(argv: list[str], *names: str) -> str | None:
    """The value of `--flag VALUE` or `--flag=VALUE` (the last one given), as Hydra's argparse reads it."""
    found = None
    for index, arg in enumerate(argv):
        for name in names:
            if arg == name and index + 1 < len(argv):
                found = argv[index + 1]
            elif arg.startswith(name + "="):
                found = arg[len(name) + 1:]
    return found


def _quoted(entry: str) -> str:
    return "'" + entry.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _searchpath(argv: list[str]) -> tuple[int | None, list[str]]:
    """(index in argv, entries) of a `hydra.searchpath=[...]` override; (None, []) when there is none."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    for index, arg in enumerate(argv):
        if arg.split("=", 1)[0].lstrip("+") == _SEARCHPATH:
            value = OverridesParser.create().parse_override(arg).value()
            return index, [str(v) for v in (value if isinstance(value, list) else [value])]
    return None, []


def with_user_dir(argv: list[str]) -> list[str]:
    """argv with the per-user dir appended to `hydra.searchpath` (merged into the user's own override, if any),
    when that dir exists."""
    folder = user_dir()
    if not folder.is_dir():
        return list(argv)
    index, entries = _searchpath(argv)
    entry = f"file://{folder.resolve()}"
    if entry in entries:
        return list(argv)
    override = f"{_SEARCHPATH}=[{','.join(_quoted(e) for e in [*entries, entry])}]"
    return [*argv, override] if index is None else [*argv[:index], override, *argv[index + 1:]]


def _search_overrides(argv: list[str]) -> list[str]:
    """`hydra.searchpath` for a Compose-API loader: the user's entries, then --config-dir (which the Compose API
    has no flag for), then the per-user dir."""
    argv = with_user_dir(argv)
    index, entries = _searchpath(argv)
    config_dir = _flag_value(argv, "--config-dir", "-cd")
    if config_dir is not None:
        entries.insert(0, f"file://{Path(config_dir).expanduser().resolve()}")
    return [f"{_SEARCHPATH}=[{','.join(_quoted(e) for e in entries)}]"] if entries else []


def extra_dirs(argv: list[str], search: list[str] | None = None) -> list[Path]:
    """The user's config dirs (file:// sources and plain paths) this argv adds, in lookup order (`search`: its
    `_search_overrides`, where the caller has them)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    dirs = []
    for override in OverridesParser.create().parse_overrides(_search_overrides(argv) if search is None else search):
        for entry in override.value():
            if "://" not in entry or entry.startswith("file://"):
                dirs.append(Path(entry.removeprefix("file://")).expanduser())
    return dirs


def missing_dir(argv: list[str]) -> str | None:
    """The first config dir given on the command line that is not a directory, as `FLAG: problem` (Hydra warns
    about it, then runs without it: host=mybox then is an unknown option)."""
    config_dir = _flag_value(argv, "--config-dir", "-cd")
    if config_dir is not None and not Path(config_dir).expanduser().is_dir():
        return f"--config-dir: {config_dir} is not a directory"
    for folder in extra_dirs(argv):
        if not folder.is_dir():
            return f"{_SEARCHPATH}: {folder} is not a directory"
    return None


def shadowed(argv: list[str]) -> list[str]:
    """One line per user config file hidden by a shipped one of the same group and name."""
    lines = []
    for folder in extra_dirs(argv):
        for path in sorted(folder.glob("*/*.yaml")) if folder.is_dir() else []:
            shipped = CONF_DIR / path.parent.name / path.name
            if shipped.is_file():
                lines.append(f"{path} is hidden by the shipped {path.parent.name}/{path.stem} (Hydra reads the "
                             f"first file of a name); rename it, e.g. {path.parent.name}/my-{path.name}")
    return lines


class Configs:
    """The config tree Hydra composes for `argv`: `with Configs(argv) as configs: configs.options("host")`."""

    def __init__(self, argv: list[str]):
        self.search = _search_overrides(argv)
        self._dirs = extra_dirs(argv, self.search)
        primary = _flag_value(argv, "--config-path", "-cp")
        self.primary = Path(primary).expanduser().resolve() if primary else CONF_DIR
        self.config_name = _flag_value(argv, "--config-name", "-cn") or "config"
        self._context = None
        self._composed: dict[tuple[str, ...], object] = {}

    def __enter__(self) -> "Configs":
        from hydra import initialize_config_dir

        self._context = initialize_config_dir(config_dir=str(self.primary), version_base="1.3")
        self._context.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._context.__exit__(*exc)

    def _loader(self):
        from hydra.core.global_hydra import GlobalHydra

        return GlobalHydra.instance().config_loader()

    def options(self, group: str) -> list[str]:
        """Every option of `group` over all sources (sorted), as `group=<option>` accepts."""
        from hydra.core.object_type import ObjectType

        return self._loader().get_group_options(group, results_filter=ObjectType.CONFIG,
                                                config_name=self.config_name, overrides=self.search)

    def groups(self) -> set[str]:
        """Top-level config groups over all sources (hydra's own excluded)."""
        from hydra.core.object_type import ObjectType

        names = self._loader().get_group_options("", results_filter=ObjectType.GROUP,
                                                 config_name=self.config_name, overrides=self.search)
        return {name for name in names if name != "hydra" and not name.startswith(("_", "."))}

    def compose(self, overrides: list[str], with_hydra: bool = False):
        """The job config for `overrides` (cached: validation composes the same group choices often); with
        `with_hydra`, Hydra's own node too (`hydra.runtime.choices`: the option chosen in each group)."""
        from hydra import compose

        key = (*overrides, with_hydra)
        if key not in self._composed:
            self._composed[key] = compose(config_name=self.config_name, overrides=[*self.search, *overrides],
                                          return_hydra_config=with_hydra)
        return self._composed[key]

    def source(self, group: str, option: str) -> str:
        """Where `group=option` comes from, for an error message: its file, else `group/option.yaml`."""
        return str(self.file_of(group, option) or f"{group}/{option}.yaml")

    def file_of(self, group: str, option: str) -> Path | None:
        """The YAML file Hydra loads for `group=option` (the first source that has it), if it is a file."""
        for folder in (self.primary, *self._dirs):
            if (path := folder / group / f"{option}.yaml").is_file():
                return path
        return None
