"""Record failure texts that the test suite does not produce live (other transformers versions, slower scenarios).

Each scenario runs in its own Python process; its stdout+stderr go verbatim to `<out>/<entry>__<variant>.log`
(the entry it is expected to match: the hybrid-cache crash is `hybrid_cache_legacy_class` on transformers 5.2-5.4
and `hybrid_cache_without_config` later).
Older transformers run from a `pip install --no-deps --target DIR transformers==X` folder put first on
PYTHONPATH (with a huggingface-hub / tokenizers that version accepts). Usage, by hand:

    python3 tests/data/failures/record_cpu.py <out-dir> <scenario> <entry> <variant> [<PYTHONPATH>]
    e.g. python3 tests/data/failures/record_cpu.py tests/data/failures hybrid_cache hybrid_cache_legacy_class \
             tf5.3.0 /tmp/tf5.3.0:/tmp/deps
"""
import os
import subprocess
import sys

TINY = """
import torch
from transformers import Qwen3_5TextConfig, Qwen3_5ForCausalLM, DynamicCache
cfg = Qwen3_5TextConfig(vocab_size=1000, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
    num_attention_heads=4, num_key_value_heads=2, head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4,
    linear_key_head_dim=16, linear_value_head_dim=16, layer_types=["linear_attention"] * 3 + ["full_attention"])
torch.manual_seed(0)
ids = torch.randint(0, 1000, (1, 8))
"""

# A local stand-in for the hub: it answers every request with the status and error headers the hub sends, so
# the installed huggingface_hub and transformers format the error exactly as they would against huggingface.co.
FAKE_HUB = """
import http.server, os, tempfile, threading
STATUS, CODE, MESSAGE = {status}, {code!r}, {message!r}
class Hub(http.server.BaseHTTPRequestHandler):
    def _answer(self):
        self.send_response(STATUS)
        self.send_header("X-Error-Code", CODE)
        self.send_header("X-Error-Message", MESSAGE)
        self.send_header("X-Request-Id", "Root=1-test")
        self.send_header("Content-Length", "0")
        self.end_headers()
    do_GET = do_HEAD = _answer
    def log_message(self, *args):
        pass
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hub)
threading.Thread(target=server.serve_forever, daemon=True).start()
os.environ.update(HF_ENDPOINT=f"http://127.0.0.1:{{server.server_address[1]}}", HF_HOME=tempfile.mkdtemp())
from transformers import AutoConfig
AutoConfig.from_pretrained("meta-llama/Llama-3.1-8B")
"""
GATED_MESSAGE = ("Access to model meta-llama/Llama-3.1-8B is restricted and you are not in the authorized list. "
                 "Visit https://huggingface.co/meta-llama/Llama-3.1-8B to ask for access.")

SCENARIOS = {
    # a tiny hybrid model given a cache built without its config
    "hybrid_cache": TINY + """
m = Qwen3_5ForCausalLM(cfg).eval()
m.generate(ids, max_new_tokens=3, do_sample=False)
m(ids, past_key_values=DynamicCache(), use_cache=True)
""",
    # rolling back a hybrid cache with crop()
    "crop": TINY + """
m = Qwen3_5ForCausalLM(cfg).eval()
out = m(ids, cache=DynamicCache(config=m.config))
out.cache.crop(-2)
""",
    # transformers' own prompt-lookup (assisted) generation on a hybrid model
    "assisted": TINY + """
m = Qwen3_5ForCausalLM(cfg).eval()
m.generate(ids, max_new_tokens=4, do_sample=False, prompt_lookup_num_tokens=3)
""",
    # the hub refusing a gated repo (403) / an unknown or private one (401), and no hub at all (offline)
    "hub_gated": FAKE_HUB.format(status=403, code="GatedRepo", message=GATED_MESSAGE),
    "hub_unauthorized": FAKE_HUB.format(status=401, code="RepoNotFound", message="Repository not found"),
    "hub_offline": """
import os, tempfile
os.environ.update(HF_HUB_OFFLINE="1", HF_HOME=tempfile.mkdtemp())
from transformers import AutoConfig
AutoConfig.from_pretrained("Qwen/Qwen3.5-27B")
""",
    # flash_attention_2 asked for where flash-attn is not installed
    "flash_attn": TINY + """
from transformers import AutoModelForCausalLM
AutoModelForCausalLM.from_config(cfg, attn_implementation="flash_attention_2")
""",
}


def main(out_dir: str, scenario: str, entry: str, variant: str, pythonpath: str = "") -> None:
    code = SCENARIOS[scenario]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    path = os.path.join(out_dir, f"{entry}__{variant}.log")
    with open(path, "w") as f:
        rc = subprocess.run([sys.executable, "-c", code], stdout=f, stderr=subprocess.STDOUT, env=env).returncode
    print(path, "exit", rc)


if __name__ == "__main__":
    main(*sys.argv[1:])
