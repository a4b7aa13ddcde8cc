"""`python -m orchestrator show <run>`: per prompt, the prompt, AR's text and the method's text side by side, the
first divergence marked.

Contract: `<run>` is what `attach` takes (a run dir, its run id or directory name) or the run's MLflow run id.
Reads the run's outputs.jsonl (method, prompt_index, token_ids, text; AR's rows too unless `baseline=none`); the
prompt text comes from outputs.jsonl's `prompt` field, or else is loaded again from spec.json's dataset as the
runner loaded it (remote.prompts; a dataset this machine cannot read leaves the prompt out, said so). The first
divergence is the first token index where the method's ids differ from AR's (a sequence that ends first differs
there); the texts are marked where their characters first differ, and each divergence says its kind as the runner
classified it (results.json's `divergences`, remote.divergence: a near-tie within the dtype's rounding, or not
lossless). Prints one panel per prompt, writes `show.html`
into the run dir and logs it as an artifact of the run's MLflow run (bounded; kept in the run dir if MLflow does
not answer, said so). Exit 0; a run without outputs: one line naming the file, exit 1.
Non-goals: runs still going (their outputs.jsonl is partial: shown as far as it goes), sweeps as a whole.
"""
from __future__ import annotations

import argparse
import html
import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from remote.events import read_json

from ..config.arms import AR, method_named
from ..program import program
from ..untrusted import printable
from .find import JOB_FILE, find_run_dir

OUTPUTS = "outputs.jsonl"
HTML = "show.html"
MARK = "▶"              # where the texts part, in the terminal (visible without colour too)
LOG_WITHIN_S = 120.0    # MLflow's import and a local database's first use take seconds on a loaded machine


def first_difference(a: Sequence, b: Sequence) -> int | None:
    """Index of the first differing element (a sequence that ends first differs there), None when equal."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


@dataclass(frozen=True)
class Output:
    token_ids: list[int]
    text: str


@dataclass(frozen=True)
class Prompt:
    """One prompt of the run: its text (None: unknown here), AR's output and the method's (None: not run)."""

    index: int
    text: str | None
    ar: Output | None
    method: Output | None
    classified: dict | None = None    # the runner's classification of its first divergence (remote.divergence)

    @property
    def token_divergence(self) -> int | None:
        return first_difference(self.method.token_ids, self.ar.token_ids) if self.ar and self.method else None

    @property
    def char_divergence(self) -> int | None:
        return first_difference(self.method.text, self.ar.text) if self.ar and self.method else None

    def verdict(self, method: str) -> str:
        if not (self.ar and self.method):
            return f"{len((self.method or self.ar).token_ids)} tokens"
        at = self.token_divergence
        if at is None:
            return f"identical ({len(self.ar.token_ids)} tokens)"
        token = lambda ids: str(ids[at]) if at < len(ids) else "end"   # noqa: E731
        return (f"first divergence at token {at}: AR {token(self.ar.token_ids)}, {method} "
                f"{token(self.method.token_ids)}{kind_of(self.classified)}")


def kind_of(found: dict | None) -> str:
    """` (near-tie: ...)` / ` (NOT LOSSLESS: ...)`: a divergence's kind, as the runner classified it."""
    if not found:
        return ""
    if found.get("near_tie") is None:
        return " (not classified: its replay did not reproduce it, or a sequence ended there)"
    gaps = f"gaps {found['ar_gap']:.3g} in AR's forward, {found['method_gap']:.3g} in the method's"
    units = max(found["ar_gap"], found["method_gap"]) / found["unit"]
    if found["near_tie"]:
        return f" (near-tie: {gaps}, {units:.3g} units of rounding: harmless)"
    return f" (NOT LOSSLESS: {gaps}, {units:.3g} units of rounding: not a near-tie)"


@dataclass(frozen=True)
class Shown:
    """What `show` shows of one run."""

    run_dir: Path
    method: str
    title: str
    prompts: list[Prompt]
    prompt_note: str | None   # where the prompt text came from when not from outputs.jsonl


def load(run_dir: Path) -> Shown:
    path = run_dir / OUTPUTS
    if not path.is_file():
        raise SystemExit(f"error: {path}: no {OUTPUTS} (the run wrote no outputs: did it fail before decoding?)")
    spec = read_json(run_dir / "spec.json")
    method = spec.get("decoding", {}).get("method") or "method"
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    by_index: dict[int, dict[str, Output]] = {}
    texts: dict[int, str] = {}
    for row in rows:
        by_index.setdefault(int(row["prompt_index"]), {})[row["method"]] = Output(list(row["token_ids"]),
                                                                                 str(row["text"]))
        if isinstance(row.get("prompt"), str):
            texts[int(row["prompt_index"])] = row["prompt"]
    note = None
    if len(texts) < len(by_index):
        loaded, note = _prompts_from_spec(spec)
        texts = {i: loaded[i] for i in by_index if i < len(loaded)} | texts
    kinds = {d["prompt"]: d for d in read_json(run_dir / "results.json").get("divergences") or []}
    prompts = [Prompt(i, texts.get(i), outs.get(AR.tag), outs.get(method) if method != AR.tag else None, kinds.get(i))
               for i, outs in sorted(by_index.items())]
    return Shown(run_dir, method, _title(run_dir, spec, method), prompts, note)


def _prompts_from_spec(spec: dict) -> tuple[list[str], str]:
    """The run's prompts loaded again from its spec's dataset (outputs.jsonl of this runner has no prompt text)."""
    try:
        import dataclasses

        from remote.assets import resolve
        from remote.prompts import load_prompts
        from remote.spec import RunSpec

        ds = RunSpec.from_json(json.dumps(spec)).dataset
        prompts = load_prompts(dataclasses.replace(ds, path=resolve(ds.path, "dataset.path")))
        return prompts, f"prompts loaded again from the spec's dataset ({ds.name})"
    except Exception as exc:   # noqa: BLE001 - a dataset only the host can read: show the outputs without it
        why = str(exc).splitlines()[0] if str(exc) else ""
        return [], f"prompt text unavailable here ({type(exc).__name__}: {why})"


def _title(run_dir: Path, spec: dict, method: str) -> str:
    d, m = spec.get("decoding", {}), spec.get("model", {})
    model = _model_name(run_dir) or m.get("path") or "random model"
    arm = method_named(method)
    budget = f" b{d['tree_budget']}" if arm and arm.builds_tree and "tree_budget" in d else ""
    engine = (spec.get("engine") or {}).get("kind")
    versus = "" if arm and arm.baseline is True else f" vs {engine}'s own AR" if engine else " vs AR"
    return (f"{method}{budget}{versus} · {model} · {m.get('dtype', '?')} · "
            f"temperature {d.get('temperature', '?')} · run {spec.get('run_id', run_dir.name)}")


def _model_name(run_dir: Path) -> str | None:
    try:
        from omegaconf import OmegaConf

        return str(OmegaConf.load(run_dir / "config.yaml").model.name)
    except Exception:   # noqa: BLE001 - a title without the config's name is still a title
        return None


# ---- terminal ---------------------------------------------------------------------------------------------------

def marked(text: str, at: int | None, style: str) -> Text:
    """`text` with MARK and `style` from character `at` on (the whole text plain when `at` is None)."""
    text = printable(text)
    if at is None:
        return Text(text)
    return Text.assemble(text[:at], (MARK, "bold yellow"), (text[at:], style))


def panel(p: Prompt, method: str) -> Panel:
    parts = [Text.assemble(("prompt: ", "bold"), (printable(p.text) if p.text is not None else "(unknown)", "dim"))]
    at = p.char_divergence
    if p.ar and p.method:
        table = Table(show_header=True, header_style="bold", expand=True, show_lines=False)
        table.add_column("AR", ratio=1)
        table.add_column(method, ratio=1)
        table.add_row(marked(p.ar.text, at, "green"), marked(p.method.text, at, "red"))
        parts.append(table)
    else:
        only = p.method or p.ar
        parts.append(Text(printable(only.text)))
    colour = "green" if p.token_divergence is None else "yellow"
    return Panel(Group(*parts), title=f"[{colour}]prompt {p.index}: {p.verdict(method)}[/]", title_align="left")


def summary(shown: Shown) -> str:
    pairs = [p for p in shown.prompts if p.ar and p.method]
    if not pairs:
        return f"{len(shown.prompts)} prompts; no AR baseline to compare with" if shown.method != AR.tag else \
            f"{len(shown.prompts)} prompts of AR"
    differ = [p for p in pairs if p.token_divergence is not None]
    where = "; first divergence: " + ", ".join(f"prompt {p.index} at token {p.token_divergence}"
                                                for p in differ) if differ else ""
    kinds = [p.classified.get("near_tie") for p in differ if p.classified]
    said = f"; near-ties {kinds.count(True)}, not lossless {kinds.count(False)}" if kinds else ""
    return f"{len(pairs) - len(differ)}/{len(pairs)} prompts identical to AR{where}{said}"


def print_terminal(shown: Shown, console: Console, only_diverged: bool = False) -> None:
    console.print(f"[bold]{shown.title}[/]", highlight=False)
    console.print(summary(shown), highlight=False)
    if shown.prompt_note:
        console.print(f"[dim]{shown.prompt_note}[/]", highlight=False)
    for p in shown.prompts:
        if not only_diverged or p.token_divergence is not None:
            console.print(panel(p, shown.method))


# ---- html -------------------------------------------------------------------------------------------------------

CSS = """body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}h1{font-size:1.2em}
section{border:1px solid #ccc;border-radius:6px;margin:1em 0;padding:.6em 1em}
h2{font-size:1em;margin:.2em 0 .6em}.ok{color:#17692f}.diverged{color:#9a5b00}
pre{white-space:pre-wrap;word-break:break-word;margin:0;font-size:.9em}.prompt{color:#555;margin-bottom:.8em}
table{width:100%;table-layout:fixed;border-collapse:collapse}th{text-align:left;border-bottom:1px solid #ccc}
td{vertical-align:top;padding:.3em .5em}.after{background:#ffe9b3}.first{outline:2px solid #d08700}"""


def _html_text(text: str, at: int | None) -> str:
    text = printable(text)
    if at is None:
        return f'<span class="same">{html.escape(text)}</span>'
    head, first, rest = text[:at], text[at:at + 1], text[at + 1:]
    return (f'<span class="same">{html.escape(head)}</span><span class="after"><span class="first">'
            f'{html.escape(first) or "&#8203;"}</span>{html.escape(rest)}</span>')


def _html_section(p: Prompt, method: str) -> str:
    at_token, at_char = p.token_divergence, p.char_divergence
    attrs = f'data-prompt="{p.index}"' + (f' data-divergence-token="{at_token}"' if at_token is not None else "") + \
        (f' data-divergence-char="{at_char}"' if at_char is not None else "")
    prompt = html.escape(printable(p.text)) if p.text is not None else "(unknown)"
    if p.ar and p.method:
        body = (f"<table><tr><th>AR</th><th>{html.escape(method)}</th></tr><tr>"
                f'<td><pre class="ar">{_html_text(p.ar.text, at_char)}</pre></td>'
                f'<td><pre class="method">{_html_text(p.method.text, at_char)}</pre></td></tr></table>')
    else:
        body = f'<pre class="method">{_html_text((p.method or p.ar).text, None)}</pre>'
    cls = "ok" if at_token is None else "diverged"
    return (f'<section {attrs}><h2 class="{cls}">prompt {p.index}: {html.escape(p.verdict(method))}</h2>'
            f'<pre class="prompt">{prompt}</pre>{body}</section>')


def render_html(shown: Shown) -> str:
    note = f"<p><em>{html.escape(shown.prompt_note)}</em></p>" if shown.prompt_note else ""
    sections = "\n".join(_html_section(p, shown.method) for p in shown.prompts)
    return (f'<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(shown.title)}</title>'
            f"<style>{CSS}</style></head><body><h1>{html.escape(shown.title)}</h1>"
            f"<p>{html.escape(summary(shown))}. Highlighted: where the texts first differ, and after.</p>{note}\n"
            f"{sections}\n</body></html>\n")


# ---- MLflow -----------------------------------------------------------------------------------------------------

def log_to_mlflow(run_dir: Path, path: Path) -> str:
    """Log `path` on the run's MLflow run (named in job.json or tracking.json); returns what happened, in words."""
    meta = read_json(run_dir / JOB_FILE) or read_json(run_dir / "tracking.json")
    run_id, uri = meta.get("mlflow_run_id"), meta.get("tracking_uri")
    if not run_id or not uri:
        return f"{path.name} kept in the run dir (the run has no MLflow run)"
    from .tracker import mlflow_client

    done, errors = threading.Event(), []

    def upload() -> None:
        try:
            mlflow_client(uri).log_artifact(run_id, str(path))
        except Exception as exc:   # noqa: BLE001 - reported below, the file stays in the run dir
            errors.append(exc)
        finally:
            done.set()

    threading.Thread(target=upload, name="mlflow-show", daemon=True).start()
    if not done.wait(LOG_WITHIN_S):
        return f"{path.name} kept in the run dir; MLflow at {uri} did not answer within {LOG_WITHIN_S:g} s"
    if errors:
        return f"{path.name} kept in the run dir; MLflow at {uri} refused it ({type(errors[0]).__name__}: " \
               f"{str(errors[0])[:200]})"
    return f"{path.name} logged on MLflow run {run_id}"


def resolve_run(ref: str) -> Path:
    """A run dir holding outputs.jsonl as given, or what `attach` finds (run id, dir name, MLflow run id)."""
    path = Path(ref).expanduser()
    return path.resolve() if (path / OUTPUTS).is_file() else find_run_dir(ref)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog=f"{program()} show", description=__doc__.split("\n\n")[0])
    parser.add_argument("run", help="the run's local directory, its run id, its directory name or its MLflow run id")
    parser.add_argument("--diverged", action="store_true", help="in the terminal, only the prompts that diverge")
    parser.add_argument("--no-mlflow", action="store_true", help=f"write {HTML} in the run dir, log nothing")
    args = parser.parse_args(argv)
    shown = load(resolve_run(args.run))
    console = Console()
    print_terminal(shown, console, only_diverged=args.diverged)
    page = shown.run_dir / HTML
    page.write_text(render_html(shown), encoding="utf-8")
    said = f"{HTML} written in the run dir" if args.no_mlflow else log_to_mlflow(shown.run_dir, page)
    console.print(f"{said}: {page}", highlight=False, soft_wrap=True)
    return 0
