"""Every catalog entry this machine can produce, produced for real and matched.

Each scenario is a real failure in its own subprocess (tiny transformers models, a memory-limited process, a real
SIGKILL, a real ENOSPC from /dev/full, ...); its combined stdout+stderr is what a runner.log would hold. The
scenarios all start at once on a thread pool when the module's first test asks for one, so the module costs about
the slowest scenario plus the CPU time divided by the cores. Entries this machine cannot produce (CUDA, NCCL,
other transformers versions, the hub's refusals) are covered by recorded samples in tests/data/failures/
(test_failures_samples.py).
"""
from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import random
import shlex
import signal
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from orchestrator.failures import Detector, classify_exit_code, load_catalog, scan_file, scan_text

DATA = Path(__file__).parent / "data" / "failures"

TINY_QWEN3_5 = """
import sys, torch
from transformers import Qwen3_5TextConfig, Qwen3_5ForCausalLM, AutoModelForCausalLM, DynamicCache
cfg = Qwen3_5TextConfig(vocab_size=1000, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
    num_attention_heads=4, num_key_value_heads=2, head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4,
    linear_key_head_dim=16, linear_value_head_dim=16, layer_types=["linear_attention"] * 3 + ["full_attention"])
torch.manual_seed(0)
"""


@dataclass(frozen=True)
class Scenario:
    expected: str              # the catalog entry the output must be attributed to
    code: str                  # Python source run with `python -c <code> <scratch dir>`
    files: tuple = ()          # (relative path, content) written into the scratch dir first


SCENARIOS = {
    # Slowest first: the pool starts them in this order.
    "hybrid": Scenario("hybrid_cache_without_config", TINY_QWEN3_5 + """
Qwen3_5ForCausalLM(cfg).save_pretrained(sys.argv[1] + "/tiny")
m = AutoModelForCausalLM.from_pretrained(sys.argv[1] + "/tiny", torch_dtype=torch.float32).eval()  # deprecated name
ids = torch.randint(0, 1000, (1, 8))
m.generate(ids, max_new_tokens=3, do_sample=False)          # kernel fast-path warnings at first use
m(ids, past_key_values=DynamicCache(), use_cache=True)      # a cache built without the config: crashes
"""),
    "unknown_model_type": Scenario("model_type_unknown", """
import sys
from transformers import AutoConfig
AutoConfig.from_pretrained(sys.argv[1] + "/model")
""", files=(("model/config.json", '{"model_type": "qwen9_turbo", "hidden_size": 8}'),)),
    "remote_code": Scenario("trust_remote_code_required", """
import sys
from transformers import AutoModelForCausalLM
AutoModelForCausalLM.from_pretrained(sys.argv[1] + "/custom")
""", files=(("custom/config.json", '{"model_type": "custom_thing", "auto_map": {"AutoConfig": '
             '"configuration_custom.CustomConfig", "AutoModelForCausalLM": "modeling_custom.CustomModel"}}'),
            ("custom/configuration_custom.py", "from transformers import PretrainedConfig\n"
             "class CustomConfig(PretrainedConfig):\n    model_type = 'custom_thing'\n"))),
    "nan_probabilities": Scenario("nan_probabilities", """
import torch
logits = torch.randn(1, 1000)
logits[0, 3] = float("nan")
torch.multinomial(torch.softmax(logits, dim=-1), 1)
"""),
    "host_oom": Scenario("host_oom", """
import resource, torch
vm_kb = int(next(l for l in open("/proc/self/status") if l.startswith("VmSize")).split()[1])
resource.setrlimit(resource.RLIMIT_AS, ((vm_kb << 10) + (1 << 30), resource.RLIM_INFINITY))   # 1 GiB more
weights = torch.empty(16 << 30, dtype=torch.uint8)
"""),
    "cuda_unavailable": Scenario("cuda_unavailable", """
import torch
torch.zeros(1, device="cuda:63")   # CPU build: not compiled with CUDA; CUDA build: no such device
"""),
    "disk_full": Scenario("disk_full", """
with open("/dev/full", "w") as f:
    f.write('{"event": "result"}\\n')
    f.flush()
"""),
    "unknown": Scenario("unknown_crash", """
spec = {"model": {}}
print(spec["drafter"]["path"])
"""),
}

TRANSFORMERS_VERSION = tuple(int(x) for x in importlib.metadata.version("transformers").split(".")[:2])


@dataclass(frozen=True)
class Produced:
    output: str
    returncode: int


def _env() -> dict:
    # One thread per process (they run side by side); no network (the scenarios need none).
    return dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", HF_HUB_DISABLE_TELEMETRY="1",
                HF_HUB_OFFLINE="1")


def _produce(scenario: Scenario, tmp: Path) -> Produced:
    for rel, content in scenario.files:
        (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp / rel).write_text(content)
    env = {**_env(), "HF_HOME": str(tmp / "hf")}
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(scenario.code), str(tmp)], env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=180)
    return Produced(proc.stdout, proc.returncode)


@pytest.fixture(scope="module")
def produced(tmp_path_factory):
    """name -> future of Produced; every scenario starts at once, each test waits for its own."""
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        yield {name: pool.submit(_produce, sc, tmp_path_factory.mktemp(name)) for name, sc in SCENARIOS.items()}


def _result(produced, name: str) -> Produced:
    return produced[name].result(timeout=300)


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_real_failure_is_attributed_to_its_entry(produced, name):
    run = _result(produced, name)
    assert run.returncode != 0, run.output[-2000:]
    report = scan_text(run.output, exit_code=run.returncode)
    expected = SCENARIOS[name].expected
    if name == "hybrid" and TRANSFORMERS_VERSION < (5, 5):
        expected = "hybrid_cache_legacy_class"
    assert report.primary is not None and report.primary.id == expected, (report.to_dict(), run.output[-3000:])
    assert report.tags() == {"failure.id": expected, "failure.category": report.primary.category,
                             "failure.hint": report.primary.hint}


def test_hybrid_cache_crash_names_the_cache_frame_and_its_warnings(produced):
    run = _result(produced, "hybrid")
    report = scan_text(run.output, exit_code=run.returncode)
    if TRANSFORMERS_VERSION >= (5, 13):
        reads_first = "get_recurrent_state" if TRANSFORMERS_VERSION >= (5, 25) else "get_conv_state"
        assert report.primary.details["cache_method"] in (reads_first, "update_conv_state")
    warnings = {w.finding.id: w for w in report.warnings}
    assert "torch_dtype_deprecated" in warnings
    if TRANSFORMERS_VERSION >= (5, 24):
        assert "past_key_values_deprecated" in warnings
    if TRANSFORMERS_VERSION >= (5, 18) and not importlib.util.find_spec("fla"):
        packages = {w.finding.details.get("package") for w in report.warnings
                    if w.finding.id == "fast_path_unavailable"}
        assert "flash-linear-attention" in packages and "causal_conv1d" in packages


def test_an_index_error_without_the_cache_frames_is_not_the_hybrid_crash(produced):
    """The same real output with the cache's state frames removed: only a generic crash remains."""
    run = _result(produced, "hybrid")
    if TRANSFORMERS_VERSION < (5, 13):
        pytest.skip("this transformers raises no IndexError here")
    stripped = "\n".join(ln for ln in run.output.splitlines()
                         if "conv_state" not in ln and "recurrent_state" not in ln) + "\n"
    report = scan_text(stripped, exit_code=run.returncode)
    assert report.primary.id == "unknown_crash"
    assert report.primary.details["exception"] == "IndexError: list index out of range"


def test_real_output_fed_in_random_pieces_gives_the_offline_report(produced):
    data = _result(produced, "hybrid").output.encode()
    offline = scan_text(data, exit_code=1).to_dict()
    rng = random.Random(7)
    for _ in range(5):
        detector, pos = Detector(), 0
        while pos < len(data):
            step = rng.choice((1, 2, 3, 17, 64, 1000, 4096))
            detector.feed(data[pos:pos + step])
            pos += step
        detector.close()
        assert detector.report(exit_code=1).to_dict() == offline


def test_details_parsed_from_real_text(produced):
    details = {name: scan_text(_result(produced, name).output).primary.details
               for name in ("unknown_model_type", "remote_code", "host_oom")}
    assert details["unknown_model_type"]["model_type"] == "qwen9_turbo"
    assert details["remote_code"]["repo"].endswith("custom")
    if "requested_bytes" in details["host_oom"]:   # torch's allocator message (a bare MemoryError has no size)
        assert int(details["host_oom"]["requested_bytes"]) == 16 << 30


def _start(argv: list[str]) -> tuple[subprocess.Popen, int]:
    """Start argv whose Python child prints its pid first; return the process and that pid. SIGINT is reset to
    its default in the child: a suite started in the background (`.ci/run &`) inherits it ignored."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_env(),
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    return proc, int(proc.stdout.readline())


SLEEPER = "import os, time; print(os.getpid(), flush=True); time.sleep(60)"


def test_sigkill_gives_exit_137_and_the_shells_killed_line():
    # bash runs the runner in the foreground, as a launch script would; the runner gets a real SIGKILL.
    proc, child = _start(["bash", "-c", f"{shlex.quote(sys.executable)} -c {shlex.quote(SLEEPER)}; exit $?"])
    os.kill(child, signal.SIGKILL)
    output = proc.stdout.read()
    assert proc.wait(timeout=30) == 137
    report = scan_text(output, exit_code=137)
    assert report.primary.id == "process_killed" and report.primary.line_no is not None, output
    assert report.primary.details["pid"] == str(child)


def test_sigkill_without_a_log_line_is_classified_by_the_exit_code():
    proc, _ = _start([sys.executable, "-c", SLEEPER])
    proc.kill()
    code = proc.wait(timeout=30)
    assert code == -9
    assert classify_exit_code(code).id == "process_killed"
    report = scan_text(proc.stdout.read(), exit_code=code)
    assert report.primary.id == "process_killed" and report.primary.details["signal"] == "SIGKILL"


def test_sigint_and_sigterm_are_cancellations():
    proc, _ = _start([sys.executable, "-c", SLEEPER])
    proc.send_signal(signal.SIGINT)           # Python: KeyboardInterrupt traceback, then exits by the signal
    output, code = proc.stdout.read(), proc.wait(timeout=30)
    assert scan_text(output, exit_code=code).primary.id == "cancelled", (code, output)
    proc, _ = _start([sys.executable, "-c", SLEEPER])
    proc.terminate()
    assert scan_text(proc.stdout.read(), exit_code=proc.wait(timeout=30)).primary.id == "cancelled"


def test_segfault_from_the_shell_and_from_faulthandler():
    crash = shlex.quote("import ctypes; ctypes.string_at(0)")
    proc = subprocess.run(["bash", "-c", f"{shlex.quote(sys.executable)} -X faulthandler -c {crash}; exit $?"],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
    assert proc.returncode == 139
    report = scan_text(proc.stdout, exit_code=proc.returncode)
    assert report.primary.id == "segfault" and report.primary.line_no is not None, proc.stdout
    assert classify_exit_code(-11).id == "segfault"


def test_every_catalog_entry_has_real_or_recorded_text():
    recorded = {p.name.split("__")[0] for p in DATA.glob("*.log")}
    # runs that finished with findings: their warnings (tests/test_failures_samples.py checks each)
    recorded |= {w.finding.id for p in (DATA / "warnings").glob("*.log") for w in scan_file(p, exit_code=0).warnings}
    live = {s.expected for s in SCENARIOS.values()} | {"process_killed", "cancelled", "segfault",
                                                       "torch_dtype_deprecated", "past_key_values_deprecated",
                                                       "fast_path_unavailable",
                                                       "runner_vanished", "gpu_busy",   # tests/test_faults.py
                                                       "runner_stalled",                # tests/test_stall.py
                                                       "node_lost",                     # tests/test_ray.py
                                                       "not_lossless"}                  # tests/test_divergence.py
    missing = {e.id for e in load_catalog().entries} - recorded - live
    assert not missing, f"entries with no real or recorded sample: {sorted(missing)}"
