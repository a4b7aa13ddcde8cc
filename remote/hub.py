"""Whether the hub can serve a run's hub ids, asked once before anything loads: an unreachable hub is one line within
seconds, not transformers' retries (19 `Retrying...` lines over 52 s, then the error).

Contract: `prepare_hub(sources)` looks at the spec's hub ids ((name, revision) pairs; a name is a hub id when it is
`owner/name` and not a local directory: None, local paths and shipped assets are skipped). With HF_HUB_OFFLINE set,
each must be in the host's hub cache, else a SpecError names it and the cache. Otherwise the hub's endpoint is asked
once (one HTTP HEAD through the environment's proxies, at most REACH_WITHIN_S): unreachable with everything cached,
HF_HUB_OFFLINE=1 is set for this process (before transformers is imported: every version reads it at import) and the
line returned says so; with something missing, a SpecError says the hub cannot be reached, why, and what is missing.
Standard library only (called before transformers and huggingface_hub are imported).
"""
from __future__ import annotations

import os
import threading
import urllib.error
import urllib.request
from pathlib import Path

from .errors import SpecError

REACH_WITHIN_S = 10.0      # the endpoint's answer (a DNS lookup that hangs included)
TRUE = ("1", "true", "yes", "on")


def hub_id(name) -> bool:
    return isinstance(name, str) and name.count("/") == 1 and not name.startswith(("/", ".", "~", "assets:")) \
        and not os.path.isdir(name)


def cache_dir() -> Path:
    """huggingface_hub's cache as its environment variables place it."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(os.environ.get("XDG_CACHE_HOME", "~/.cache"), "huggingface")
    return Path(home).expanduser() / "hub"


def cached(repo: str, revision: str | None) -> bool:
    """Whether the cache holds a snapshot of `repo` at `revision` (a branch, tag or commit) with a config."""
    root = cache_dir() / f"models--{repo.replace('/', '--')}"
    ref = root / "refs" / (revision or "main")
    commit = ref.read_text().strip() if ref.is_file() else (revision or "")
    snapshot = root / "snapshots" / commit
    return bool(commit) and any((snapshot / name).is_file() for name in ("config.json", "tokenizer_config.json"))


def unreachable(endpoint: str) -> str | None:
    """Why `endpoint` does not answer (None when it answers at all, any HTTP status included)."""
    said: list[str | None] = []

    def ask() -> None:
        try:
            urllib.request.urlopen(urllib.request.Request(endpoint, method="HEAD"), timeout=REACH_WITHIN_S)
            said.append(None)
        except urllib.error.HTTPError:
            said.append(None)
        except (urllib.error.URLError, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", exc)
            said.append(str(reason) or type(exc).__name__)

    thread = threading.Thread(target=ask, name="hub-reach", daemon=True)
    thread.start()
    thread.join(REACH_WITHIN_S)
    return said[0] if said else f"no answer within {REACH_WITHIN_S:g} s"


def prepare_hub(sources) -> str | None:
    """Refuse (SpecError) a run the hub cannot serve, or make it load from the cache; the line saying so, or None.
    `sources`: (name, revision) pairs, the model's, its tokenizer's and the drafter's."""
    wanted = {name: revision for name, revision in sources if hub_id(name)}
    ids = list(wanted)
    if not ids:
        return None
    missing = [repo for repo, revision in wanted.items() if not cached(repo, revision)]
    absent = f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not"
    fix = (f"download them where there is network (`hf download {missing[0] if missing else ids[0]}`) into "
           f"{cache_dir()}, or set model.path / drafter.path to a local directory")
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in TRUE:
        if missing:
            raise SpecError(f"HF_HUB_OFFLINE is set and {absent} in the hub cache "
                            f"({cache_dir()}): {fix}")
        return None
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")
    why = unreachable(endpoint)
    if why is None:
        return None
    if missing:
        raise SpecError(f"HF hub at {endpoint} cannot be reached from this host ({why}) and {absent} in its "
                        f"cache ({cache_dir()}): {fix}")
    os.environ["HF_HUB_OFFLINE"] = "1"
    return f"HF hub at {endpoint} cannot be reached ({why}): loading {', '.join(ids)} from the cache ({cache_dir()})"
