"""What each knob means, read from the comment beside it in its YAML file: the one place a knob is described
(conf/config.yaml, conf/host/ssh.yaml, ... and the user's own files), shown by `--help`.

Contract: `describe(path)` -> {dotted key: sentence} for every `key: value   # comment` line of one YAML file;
a comment-only line right below, indented to the same comment column, continues the sentence. Nested mappings
written in block style give dotted keys (`job.name`). YAML parsers drop comments, hence this small line reader;
it reads only the files we and our users write in this style, and a line it does not understand is skipped.
"""
from __future__ import annotations

import re
from pathlib import Path

_KEY_LINE = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z_][\w.-]*):(?P<value>[^#]*?)(?:\s+#\s?(?P<doc>.*))?$")
_COMMENT_LINE = re.compile(r"^(?P<indent> *)#\s?(?P<doc>.*)$")


def describe(path: Path) -> dict[str, str]:
    docs: dict[str, str] = {}
    parents: list[tuple[int, str]] = []    # (indent, key) of the open block mappings
    last: tuple[str, int] | None = None      # (key, comment column) a continuation line may extend
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        comment = _COMMENT_LINE.match(line)
        if comment and last is not None and line.index("#") == last[1] and line.strip() != "#":
            docs[last[0]] = f"{docs[last[0]]} {comment['doc'].strip()}"
            continue
        last = None
        match = _KEY_LINE.match(line)
        if match is None or line.lstrip().startswith("-"):
            continue
        indent = len(match["indent"])
        while parents and parents[-1][0] >= indent:
            parents.pop()
        key = ".".join([*(k for _, k in parents), match["key"]])
        if not match["value"].strip():
            parents.append((indent, match["key"]))   # a block mapping (or list) opens below
        if match["doc"]:
            docs[key] = match["doc"].strip()
            last = (key, line.rindex("#", 0, match.start("doc")))
    return docs
