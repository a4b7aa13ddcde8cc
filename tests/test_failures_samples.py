"""Recorded failure texts (tests/data/failures/<entry>__<variant>.log) are attributed to the entry in their name.

The samples are real output recorded where this machine cannot produce it live: CUDA, NCCL and torchrun on an
H200 (record_gpu.py); other transformers versions, the hub's 401/403 answers (a local stand-in server sends the
hub's status and error headers to the real client) and slower scenarios on CPU (record_cpu.py); plus a few
transcribed from public logs (names ending in `_transcribed`). README.md there says where each comes from.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from orchestrator.failures import Detector, scan_file
from orchestrator.failures.catalog import load_catalog

DATA = Path(__file__).parent / "data" / "failures"
SAMPLES = sorted(DATA.glob("*.log"))


def _expected(path: Path) -> str:
    return path.name.split("__")[0]


def _exit_code(path: Path) -> int | None:
    """The runner's exit code, recorded with the log where it matters: a variant ending in `_exit<N>`."""
    found = re.search(r"_exit(-?\d+)$", path.stem)
    return int(found.group(1)) if found else None


@pytest.mark.parametrize("path", SAMPLES, ids=[p.stem for p in SAMPLES])
def test_sample_primary_failure_is_its_entry(path):
    report = scan_file(path, exit_code=_exit_code(path))
    assert report.primary is not None, path.read_text()[-2000:]
    assert report.primary.id == _expected(path), report.to_dict()
    if report.primary.entry.patterns:
        assert report.primary.line_no is not None   # found in the text, not inferred from an exit code
    else:   # known by its exit code alone: the message carries the line where the process said why
        assert report.primary.details["last_line"] == path.read_text().rstrip().splitlines()[-1]
        assert report.primary.details["last_line"] in report.primary.message


@pytest.mark.parametrize("path", SAMPLES, ids=[p.stem for p in SAMPLES])
def test_sample_fed_line_by_line_gives_the_same_report(path):
    detector = Detector()
    with open(path, "rb") as f:
        for line in f:
            detector.feed(line)
    detector.close()
    assert detector.report().to_dict() == scan_file(path).to_dict()


def test_hybrid_cache_crash_in_every_transformers_version():
    """5.3: AttributeError; 5.8: ValueError (after a chained StopIteration); 5.14/5.17: IndexError in
    update_conv_state; 5.25: in get_recurrent_state, with the longer fast-path warnings (5.24's get_conv_state
    variant is produced live in test_failures_real.py where 5.24 is installed)."""
    by_version = {p.name.split("__")[1].removesuffix(".log"): scan_file(p).primary
                  for p in DATA.glob("hybrid_cache_*__tf*.log")}
    assert by_version["tf5.3.0"].text == "AttributeError: 'DynamicCache' object has no attribute 'has_previous_state'"
    assert by_version["tf5.8.0"].text.startswith("ValueError: `has_previous_state` can only be called")
    for version in ("tf5.14.0", "tf5.17.0", "tf5.17.0_h200"):
        assert by_version[version].text == "IndexError: list index out of range"
        assert by_version[version].details == {"cache_method": "update_conv_state"}
    assert by_version["tf5.25.0"].details == {"cache_method": "get_recurrent_state"}
    assert "Qwen3_5DynamicCache" in by_version["tf5.3.0"].hint
    assert "DynamicCache(config=model.config)" in by_version["tf5.8.0"].hint


def test_old_one_line_fast_path_warning_is_a_performance_warning():
    for name in ("hybrid_cache_legacy_class__tf5.3.0.log", "hybrid_cache_without_config__tf5.14.0.log"):
        warnings = [w for w in scan_file(DATA / name).warnings if w.finding.id == "fast_path_unavailable"]
        assert len(warnings) == 1 and warnings[0].finding.severity.value == "performance"
        assert warnings[0].finding.text.endswith("https://github.com/Dao-AILab/causal-conv1d")


def test_cuda_oom_details_are_parsed_into_the_message():
    new = scan_file(DATA / "cuda_oom__h200.log").primary
    assert new.details == {"requested": "64.00 GiB", "gpu": "0", "total": "139.80 GiB", "free": "39.29 GiB",
                           "in_use": "100.51 GiB"}
    assert "GPU 0: tried to allocate 64.00 GiB with 39.29 GiB free of 139.80 GiB" in new.message
    old = scan_file(DATA / "cuda_oom__torch1.13_transcribed.log").primary
    assert (old.details["gpu"], old.details["free"], old.details["total"]) == ("0", "0 bytes", "2.00 GiB")


def test_nan_assertion_on_cuda_wins_over_the_generic_device_assert():
    report = scan_file(DATA / "nan_probabilities__h200.log")
    assert [f.id for f in report.fatal] == ["nan_probabilities", "cuda_device_assert"]


def test_device_assert_names_the_kernel_and_assertion():
    details = scan_file(DATA / "cuda_device_assert__h200.log").primary.details
    assert details["kernel"] == "indexSelectSmallIndex"
    assert details["assertion"] == "srcIndex < srcSelectDimSize"


def test_nccl_details_merge_over_the_lines_of_one_failure():
    primary = scan_file(DATA / "nccl_error__h200.log").primary
    assert primary.details["reason"] == "invalid usage"
    assert primary.details["device"] == "60"          # from the later "Duplicate GPU detected" line
    assert "share CUDA device 60" in primary.message


def test_lossless_line_parses_every_field():
    primary = scan_file(DATA / "lossless_check_failed__runner.log").primary
    assert primary.details == {"method": "ddtree", "prompt": "3", "position": "17", "expected": "1234", "got": "877"}


def test_hub_refusals_name_the_repository_and_status():
    gated = scan_file(DATA / "hub_access_denied__gated403_tf5.24.0.log").primary.details
    missing = scan_file(DATA / "hub_access_denied__notfound401_tf5.24.0.log").primary.details
    assert (gated["repo"], gated["status"]) == ("meta-llama/Llama-3.1-8B", "403")
    assert (missing["repo"], missing["status"]) == ("meta-llama/Llama-3.1-8B", "401")
    offline = scan_file(DATA / "hub_unreachable__offline_tf5.24.0.log").primary.details
    assert offline["endpoint"] == "https://huggingface.co"


def test_an_engine_runs_findings_are_warnings_on_a_finished_run():
    """A real runner.log: vLLM's CPU build on the hybrid demo pair, prefix caching off (docs/PERFORMANCE.md, engine
    arms). The run finished; its engine accepted half of what ours did and differed from its own AR on 2 prompts."""
    report = scan_file(DATA / "warnings" / "engine_low_acceptance_and_not_lossless__vllm0.32_cpu_hybrid.log",
                       exit_code=0)
    assert report.primary is None and report.ok
    found = {w.finding.id: w.finding for w in report.warnings}
    assert found["engine_low_acceptance"].details["ratio"] == "0.52"
    entry = load_catalog().by_id["engine_low_acceptance"]      # each detail said once: the ratio, the depth if any
    assert entry.render_detail(found["engine_low_acceptance"].details) == \
        "vllm-dflash: tau 1.127 against ours 2.172 (ratio 0.52) with the same drafter and prompts"
    line = "ENGINE LOW ACCEPTANCE: method=vllm-dflash tau=2.338 ours=2.784 ratio=0.84 from_depth=2 per_depth(e" \
           "ngine/ours)=1:0.53/0.53 2:0.33/0.38"     # remote.engines.checks.low_acceptance's line today
    _, details, _ = load_catalog().match(line, lambda n: [])
    assert entry.render_detail(details) == "vllm-dflash: tau 2.338 against ours 2.784 (ratio 0.84) with the same " \
                                           "drafter and prompts; behind from depth 2"
    assert found["engine_not_lossless"].details["prompts"] == "2/8"
