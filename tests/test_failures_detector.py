"""The catalog's validation and the detector's mechanics: streaming, multi-line context, reporting, tracebacks,
exit codes. Texts are cut from the recorded real samples in tests/data/failures/ where a real one exists."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from orchestrator import failures as F
from orchestrator.failures import (CatalogError, Detector, Severity, classify_exit_code, exit_signal, extract_traceback,
                                   load_catalog, prefilter, scan_file, scan_text)
from orchestrator.failures.scanner import _MAX_PENDING

DATA = Path(__file__).parent / "data" / "failures"
OOM_LINE = (DATA / "cuda_oom__h200.log").read_text().splitlines()[-1]
FAST_PATH = ("[transformers] `causal_conv1d_fn` is falling back to its reference PyTorch implementation because "
             "`causal_conv1d` is not installed. This is correct but much slower; install `causal_conv1d` for the "
             "optimized kernel.")
HYBRID_524 = '''Traceback (most recent call last):
  File "/opt/bench/remote/hybrid_target.py", line 41, in prefill
    out = self.model(ids, past_key_values=DynamicCache())
  File "/usr/lib/python3.11/site-packages/transformers/models/qwen3_5/modeling_qwen3_5.py", line 560, in forward
    conv_state = cache.get_conv_state(self.layer_idx, state_idx=0)
                 ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/usr/lib/python3.11/site-packages/transformers/cache_utils.py", line 1630, in get_conv_state
    layer = self.layers[layer_idx]
            ~~~~~~~~~~~^^^^^^^^^^^
IndexError: list index out of range
'''


# ------------------------------------------------------------------------------------------------ catalog

REQUIRED_IDS = {"hybrid_cache_legacy_class", "hybrid_cache_without_config", "cuda_oom", "model_type_unknown",
                "hub_access_denied", "trust_remote_code_required", "fast_path_unavailable", "torch_dtype_deprecated",
                "nccl_error", "nccl_timeout", "cuda_device_assert", "process_killed", "disk_full",
                "nan_probabilities", "lossless_check_failed", "unknown_crash"}


def test_catalog_has_the_required_entries_with_one_line_texts():
    catalog = load_catalog()
    assert REQUIRED_IDS <= set(catalog.by_id)
    for entry in catalog.entries:
        assert entry.severity in Severity
        assert "\n" not in entry.explanation and "\n" not in entry.fix
        assert entry.patterns or entry.id == F.UNKNOWN_ID or entry.exit_codes


def test_catalog_is_loaded_once_per_path():
    assert load_catalog() is load_catalog()
    assert load_catalog(F.default_catalog_path()) is load_catalog()


def test_every_prefilter_literal_starts_with_a_rare_character():
    """Performance guard: the prefilter skips to rare first characters; an entry whose literal starts with a
    common one (a lowercase letter, a space) slows every scan. Reword the pattern to include a rarer literal."""
    slow = [(e.id, a) for e in load_catalog().entries for p in e.patterns for a in p.anchors
            if a[0] not in prefilter._RARE_FIRST]
    assert not slow


def _write_catalog(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "catalog.yaml"
    fallback = ("  - {id: unknown_crash, category: unknown, severity: fatal, patterns: [], "
                "explanation: e, fix: f}\n")
    path.write_text("entries:\n" + body + fallback)
    return path


@pytest.mark.parametrize("body, message", [
    ("  - {id: a, category: c, severity: fatl, patterns: [Xyzzy], explanation: e, fix: f}\n",
     "severity must be one of fatal, performance, correctness, cosmetic"),
    ("  - {id: a, category: c, severity: fatal, patterns: [Xyzzy], explanation: e}\n", "missing fields ['fix']"),
    ("  - {id: a, category: c, severity: fatal, patterns: [Xyzzy], explanation: e, fix: f, hint: h}\n",
     "unknown fields ['hint']"),
    ("  - {id: a, category: c, severity: fatal, patterns: ['Bad(regex'], explanation: e, fix: f}\n",
     "does not compile"),
    ("  - {id: a, category: c, severity: fatal, patterns: ['\\d+ \\w+'], explanation: e, fix: f}\n",
     "no plain literal"),
    ("  - {id: a, category: c, severity: fatal, patterns: [Xyzzy], explanation: e, fix: f}\n"
     "  - {id: a, category: c, severity: fatal, patterns: [Plugh], explanation: e, fix: f}\n", "duplicate ids"),
    ("  - {id: a, category: c, severity: fatal, patterns: ['Xyzzy (?P<gpu>\\d+)'], detail: 'GPU {gpus}', "
     "explanation: e, fix: f}\n", "detail uses ['gpus'], which no pattern captures"),
    ("  - {id: a, category: c, severity: fatal, patterns: [{regex: Xyzzy, near: [Plugh], window: 0}], "
     "explanation: e, fix: f}\n", "window must be a positive number"),
])
def test_a_malformed_catalog_is_refused_naming_the_entry_and_field(tmp_path, body, message):
    with pytest.raises(CatalogError, match=message.replace("[", r"\[").replace("]", r"\]")):
        load_catalog(_write_catalog(tmp_path, body))


def test_a_yaml_syntax_error_is_a_catalog_error(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("entries:\n  - {id: a\n")
    with pytest.raises(CatalogError, match="c.yaml"):
        load_catalog(path)


def test_the_fallback_entry_is_required(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("entries:\n  - {id: a, category: c, severity: fatal, patterns: [Xyzzy], explanation: e, fix: f}\n")
    with pytest.raises(CatalogError, match="unknown_crash"):
        load_catalog(path)


def test_a_pattern_alternation_gets_one_literal_per_branch():
    assert set(prefilter.anchors("(?:Killed process|Out of memory)")) == {"Killed process", "Out of memory"}
    assert prefilter.anchors("(?i:killed)") == ()


# ------------------------------------------------------------------------------------------------ streaming


def test_a_line_is_examined_only_once_its_newline_arrives():
    detector = Detector()
    assert detector.feed(OOM_LINE[:40]) == []
    assert detector.feed(OOM_LINE[40:]) == []       # still no newline: could be continued
    [finding] = detector.feed("\n")
    assert finding.id == "cuda_oom" and finding.line_no == 1


def test_close_examines_an_unterminated_last_line():
    detector = Detector()
    assert detector.feed("step 1\n" + OOM_LINE) == []
    [finding] = detector.close()
    assert finding.id == "cuda_oom" and finding.line_no == 2


def test_a_utf8_character_split_across_chunks_is_decoded_whole():
    data = ("Generating: 100%|██████████|\r" + FAST_PATH + "\n").encode()
    detector = Detector()
    for i in range(len(data)):
        detector.feed(data[i:i + 1])
    [warning] = detector.warnings
    assert warning.finding.text == FAST_PATH      # clipped to what was printed after the progress bar's \r
    assert "\ufffd" not in warning.finding.text


def test_fatal_findings_are_reported_once_per_entry_and_warnings_counted():
    detector = Detector()
    first = detector.feed(f"{FAST_PATH}\n{OOM_LINE}\n")
    again = detector.feed(f"{FAST_PATH}\n{OOM_LINE}\n{FAST_PATH}\n")
    assert [f.id for f in first] == ["fast_path_unavailable", "cuda_oom"]
    assert again == []
    assert [(w.finding.id, w.count) for w in detector.warnings] == [("fast_path_unavailable", 3)]
    assert [f.id for f in detector.fatal] == ["cuda_oom"]


def test_line_numbers_count_across_chunks():
    detector = Detector()
    detector.feed("a\nb\nc")
    detector.feed("\nd\n" + OOM_LINE + "\ne\n")
    assert detector.fatal[0].line_no == 5
    assert detector.lines == 6


def test_feed_lines_takes_lines_without_newlines():
    detector = Detector()
    detector.feed_lines(["step 1", OOM_LINE])
    assert detector.fatal[0].line_no == 2


def test_a_progress_bar_that_never_ends_its_line_is_still_scanned():
    detector = Detector()
    bar = "Generating: 50%|█████     | 50/100\r"
    detector.feed(bar * (_MAX_PENDING // len(bar) + 10) + OOM_LINE + "\r")
    assert [f.id for f in detector.fatal] == ["cuda_oom"]


def test_a_long_line_keeps_the_first_words_of_its_lists_and_is_shortened_in_linear_time():
    """transformers' refusal of a model type names all it knows (~830) on one line: five are kept, and a count. A
    line of one long word (a bar of '=', base64) is clipped as fast: the list search once took 8 s on 20 KB of it."""
    head = "error: ValueError: Unrecognized model identifier: nope. Should contain one of "
    assert F.shorten(head + ", ".join(f"t{i}" for i in range(900)) + ".") == \
        head + "t0, t1, t2, t3, t4, … and 895 more."
    short = "method must be one of ar, dflash, ddtree, and a, list, of, more, than, seven, words"
    assert F.shorten(short) == short   # what fits is left alone
    started = time.perf_counter()
    assert F.shorten("=" * 20_000) == "=" * 497 + "..."
    assert time.perf_counter() - started < 1.0


# ------------------------------------------------------------------------------------------------ multi-line context


def test_index_error_counts_as_the_hybrid_crash_only_with_the_cache_frames_before_it():
    report = scan_text(HYBRID_524)
    assert report.primary.id == "hybrid_cache_without_config"
    assert report.primary.details == {"cache_method": "get_conv_state"}
    bare = "\n".join(ln for ln in HYBRID_524.splitlines() if "conv_state" not in ln) + "\n"
    assert scan_text(bare).primary.id == "unknown_crash"


def test_the_cache_frames_must_be_within_the_window():
    lines = HYBRID_524.splitlines()
    far = "\n".join(lines[:-1] + ["  (noise)"] * F.DEFAULT_WINDOW + lines[-1:]) + "\n"
    assert scan_text(far).primary.id == "unknown_crash"


def test_the_cache_frames_may_arrive_in_an_earlier_chunk():
    detector = Detector()
    cut = HYBRID_524.rindex("IndexError")
    detector.feed(HYBRID_524[:cut])
    detector.feed(HYBRID_524[cut:])
    assert detector.fatal[0].id == "hybrid_cache_without_config"


# ------------------------------------------------------------------------------------------------ report


def test_primary_is_the_first_fatal_finding_in_log_order():
    text = (DATA / "nan_probabilities__h200.log").read_text()
    report = scan_text(text, exit_code=1)
    assert report.primary.id == "nan_probabilities" and not report.ok
    assert report.tags() == {"failure.id": "nan_probabilities", "failure.category": "numerics",
                             "failure.hint": load_catalog().by_id["nan_probabilities"].fix}


def test_exit_code_137_means_killed_when_the_log_says_nothing():
    report = scan_text("[runner] progress done=3/8\n", exit_code=137)
    assert report.primary.id == "process_killed" and report.primary.line_no is None
    assert report.primary.details == {"exit_code": "137", "signal": "SIGKILL",
                                      "last_line": "[runner] progress done=3/8"}
    assert "exit code 137 (SIGKILL)" in report.primary.message


def test_the_exit_code_finding_follows_the_logs_own():
    report = scan_text(OOM_LINE + "\n", exit_code=137)
    assert [f.id for f in report.fatal] == ["cuda_oom", "process_killed"]
    assert report.primary.id == "cuda_oom"


def test_an_unknown_failure_carries_the_last_traceback():
    text = ('Traceback (most recent call last):\n  File "run.py", line 3, in <module>\n    spec["drafter"]\n'
            "KeyError: 'drafter'\n")
    report = scan_text(text, exit_code=1)
    assert report.primary.id == "unknown_crash"
    assert report.primary.details == {"exception": "KeyError: 'drafter'", "exit_code": "1"}
    assert report.traceback.exception == "KeyError: 'drafter'"
    assert scan_text(text).primary.id == "unknown_crash"            # exit code unknown, traceback present
    assert scan_text(text, exit_code=0).ok                          # it exited 0: a handled traceback


def test_a_clean_run_has_no_primary_and_no_tags():
    report = scan_text("[runner] done\n", exit_code=0)
    assert report.ok and report.primary is None and report.tags() == {}
    assert report.to_dict()["fatal"] == []


# ------------------------------------------------------------------------------------------------ tracebacks


def test_extract_traceback_keeps_the_last_frames_and_the_exception():
    tb = extract_traceback(HYBRID_524, max_frames=2)
    assert tb.exception == "IndexError: list index out of range"
    assert tb.text.splitlines()[1] == "  ... 1 earlier frames omitted"
    assert "get_conv_state" in tb.text and "^^^" not in tb.text and "~~~" not in tb.text


def test_extract_traceback_takes_the_last_of_a_chain():
    tb = extract_traceback((DATA / "hybrid_cache_without_config__tf5.8.0.log").read_text())
    assert tb.exception.startswith("ValueError: `has_previous_state` can only be called")


def test_extract_traceback_skips_a_launchers_wrapper_and_strips_rank_prefixes():
    text = ("[rank0]: Traceback (most recent call last):\n"
            "[rank0]:   File \"/opt/bench/remote/runner.py\", line 9, in main\n"
            "[rank0]:     load(spec)\n"
            "[rank0]: KeyError: 'drafter'\n"
            "Traceback (most recent call last):\n"
            "  File \"/usr/lib/python3/site-packages/torch/distributed/run.py\", line 994, in <module>\n"
            "    main()\n"
            "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n")
    tb = extract_traceback(text)
    assert tb.exception == "KeyError: 'drafter'"
    assert '  File "/opt/bench/remote/runner.py", line 9, in main' in tb.text.splitlines()


def test_extract_traceback_keeps_a_multi_line_message():
    text = ('Traceback (most recent call last):\n  File "x.py", line 1, in <module>\n    f()\n'
            "ValueError: The checkpoint you are trying to load has model type `qwen9_turbo`\n\n"
            "You can update Transformers with the command `pip install --upgrade transformers`.\n")
    tb = extract_traceback(text)
    assert tb.text.endswith("pip install --upgrade transformers`.")


def test_extract_traceback_without_one_is_none():
    assert extract_traceback("all good\n") is None


# ------------------------------------------------------------------------------------------------ exit codes


@pytest.mark.parametrize("code, entry", [(137, "process_killed"), (-9, "process_killed"), (139, "segfault"),
                                         (-11, "segfault"), (143, "cancelled"), (-15, "cancelled"),
                                         (130, "cancelled"), (0, None), (1, None), (None, None)])
def test_classify_exit_code(code, entry):
    found = classify_exit_code(code)
    assert (found.id if found else None) == entry


@pytest.mark.parametrize("last, entry", [("error: dataset.path: no such file", "runner_refused_input"),
                                         ("train.py: error: unrecognized arguments: --x", "unknown_crash")])
def test_exit_2_is_our_runners_refusal_only_where_its_last_line_says_error(last, entry):
    assert scan_text(f"loading\n{last}\n", exit_code=2).primary.id == entry


def test_exit_signal():
    assert exit_signal(137).name == "SIGKILL" and exit_signal(-9).name == "SIGKILL"
    assert exit_signal(1) is None and exit_signal(None) is None and exit_signal(0) is None


def test_scan_file_reads_in_chunks_like_a_live_tail(tmp_path):
    path = tmp_path / "runner.log"
    path.write_bytes((DATA / "hybrid_cache_without_config__tf5.17.0.log").read_bytes())
    assert scan_file(path, chunk_size=7).to_dict() == scan_file(path).to_dict()


def test_the_variants_of_a_warning_are_one_line_each_live_and_one_in_the_summary():
    """transformers says once per kernel function which package it lacks: a hybrid model on a host without fla
    and causal-conv1d printed the explanation and fix four times live and four identical summary lines."""
    from rich.console import Console

    from orchestrator.run.monitor import Outcome, _show, _summary
    from orchestrator.tracking.tracker import Status

    lines = [FAST_PATH.replace("causal_conv1d_fn", name).replace("`causal_conv1d`", f"`{package}`")
             for name, package in (("causal_conv1d_fn", "causal_conv1d"), ("chunk_gated_delta_rule",
                                   "flash-linear-attention"), ("causal_conv1d_update", "causal_conv1d"))]
    outcome, console, shown = Outcome(None), Console(record=True, width=400), set()
    for finding in outcome.detector.feed_lines(lines + lines[:1]):
        _show(console, finding, shown)
    live = console.export_text().splitlines()
    assert len([l for l in live if "fix:" in l]) == 1 and len(live) == 4, live
    assert live[2:] == ["performance: fast_path_unavailable: also chunk_gated_delta_rule needs flash-linear-attention",
                        "performance: fast_path_unavailable: also causal_conv1d_update needs causal_conv1d"]
    outcome.status = Status.FINISHED

    class Kept:   # the closing line's tracker: what it says of MLflow is not under test here
        def closing_note(self, later=None):
            return ""
    _summary(outcome, outcome.detector.report(), {}, Kept(), Path("/r"), console, "t")
    summary = [l for l in console.export_text().splitlines() if l.startswith("warning")]
    assert summary == ["warning x4: fast_path_unavailable (causal_conv1d_fn needs causal_conv1d; "
                       "chunk_gated_delta_rule needs flash-linear-attention; causal_conv1d_update needs "
                       "causal_conv1d): " + load_catalog().by_id["fast_path_unavailable"].fix], summary
