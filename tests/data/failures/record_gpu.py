"""Record failure texts that only a CUDA machine produces (run once by hand; the outputs are the *_cuda/_nccl samples).

Each scenario runs in its own Python process (a poisoned CUDA context or a dead NCCL rank must not leak into the
next) and its stdout+stderr go verbatim to `<out>/<entry>__<variant>.log`, named after the catalog entry it is
expected to match. Usage on a GPU host (recorded on one H200, torch 2.11.0+cu130, transformers 5.17.0):

    python3 tests/data/failures/record_gpu.py <out-dir> [<one scenario name>]
"""
import os
import subprocess
import sys
import textwrap

TINY_QWEN3_5 = """
import torch
from transformers import Qwen3_5TextConfig, Qwen3_5ForCausalLM, AutoModelForCausalLM, DynamicCache
cfg = Qwen3_5TextConfig(vocab_size=1000, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
    num_attention_heads=4, num_key_value_heads=2, head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4,
    linear_key_head_dim=16, linear_value_head_dim=16, layer_types=["linear_attention"] * 3 + ["full_attention"])
Qwen3_5ForCausalLM(cfg).save_pretrained("/tmp/tiny_qwen3_5")
m = AutoModelForCausalLM.from_pretrained("/tmp/tiny_qwen3_5", torch_dtype=torch.bfloat16).cuda().eval()
ids = torch.randint(0, 1000, (1, 8), device="cuda")
m.generate(ids, max_new_tokens=4, do_sample=False)
m(ids, past_key_values=DynamicCache(), use_cache=True)
"""

SCENARIOS = {
    "cuda_oom__h200": """
import torch
keep = torch.empty(100 * 2**30, dtype=torch.uint8, device="cuda")   # leave ~40 GiB free, like a loaded model
more = torch.empty(64 * 2**30, dtype=torch.uint8, device="cuda")
""",
    "cuda_device_assert__h200": """
import torch
emb = torch.nn.Embedding(1000, 16).cuda()
ids = torch.tensor([[5, 151643]], device="cuda")   # a token id past the vocabulary (drafter/target vocab mismatch)
out = emb(ids)
print(out.sum().item())
""",
    "nan_probabilities__h200": """
import torch
logits = torch.randn(1, 1000, device="cuda")
logits[0, 3] = float("nan")
probs = torch.softmax(logits, dim=-1)
tok = torch.multinomial(probs, 1)
print(tok.item())
""",
    "hybrid_cache_without_config__tf5.17.0_h200": TINY_QWEN3_5,
    # an out-of-bounds write by a custom kernel (CuPy), surfacing at torch's next synchronisation
    "cuda_error__h200": """
import cupy, torch
poke = cupy.RawKernel(r'extern "C" __global__ void poke(float* p) { p[(size_t)1 << 40] = 1.0f; }', "poke")
x = torch.zeros(4, device="cuda")
poke((1,), (1,), (cupy.zeros(4, dtype=cupy.float32),))
torch.cuda.synchronize()
print(x.sum().item())
""",
}

NCCL_WORKER = """
import datetime, os, time, torch, torch.distributed as dist
rank = int(os.environ["RANK"])
torch.cuda.set_device(0)                      # both ranks on GPU 0: this host has one GPU
dist.init_process_group("nccl", timeout=datetime.timedelta(seconds=20), device_id=torch.device("cuda:0"))
x = torch.ones(4, device="cuda")
dist.all_reduce(x)
torch.cuda.synchronize()
print("rank", rank, x.tolist())
"""

# Rank 1 never joins the collective and exits after a while: rank 0 loses its peer (a watchdog timeout was the aim;
# torch 2.11 reported the lost store connection instead).
NCCL_HANG_WORKER = """
import datetime, os, time, torch, torch.distributed as dist
rank = int(os.environ["RANK"])
torch.cuda.set_device(0)
dist.init_process_group("nccl", timeout=datetime.timedelta(seconds=15))
if rank == 1:
    time.sleep(45)
else:
    x = torch.ones(4, device="cuda")
    dist.all_reduce(x)
    torch.cuda.synchronize()
"""


def run(name, argv, out_dir, timeout=180, env=None):
    path = os.path.join(out_dir, f"{name}.log")
    with open(path, "w") as f:
        try:
            rc = subprocess.run(argv, stdout=f, stderr=subprocess.STDOUT, timeout=timeout, env=env).returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
    print(name, "rc", rc, flush=True)


def main(out_dir, only=None):
    os.makedirs(out_dir, exist_ok=True)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    for name, code in SCENARIOS.items():
        if only is None or name == only:
            run(name, [sys.executable, "-c", textwrap.dedent(code)], out_dir, env=env)
    if only is not None:
        return
    with open("/tmp/nccl_worker.py", "w") as f:
        f.write(NCCL_WORKER)
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2"]
    run("nccl_error__h200", [*torchrun, "/tmp/nccl_worker.py"], out_dir, timeout=150, env=env)
    with open("/tmp/nccl_hang.py", "w") as f:
        f.write(NCCL_HANG_WORKER)
    run("distributed_peer_lost__h200", [*torchrun, "/tmp/nccl_hang.py"], out_dir, timeout=90, env=env)


if __name__ == "__main__":
    main(*sys.argv[1:3])
