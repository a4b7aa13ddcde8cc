"""A user's hand-written runner, as people write them: a tiny hybrid Qwen3.5 model and a cache they build.

`--bare-cache` hands the model a bare DynamicCache() (what the public reference code does) and crashes on
every transformers version; without it the cache is built from the config and the script finishes.
"""
import argparse
import json

import torch
from transformers import AutoConfig, AutoModelForCausalLM, DynamicCache

parser = argparse.ArgumentParser()
parser.add_argument("--bare-cache", action="store_true")
parser.add_argument("--steps", type=int, default=3)
args = parser.parse_args()

torch.manual_seed(0)
config = AutoConfig.for_model(
    "qwen3_5_text", vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
    num_attention_heads=2, num_key_value_heads=1, head_dim=16, linear_num_key_heads=1, linear_num_value_heads=2,
    linear_key_head_dim=8, linear_value_head_dim=8, layer_types=["linear_attention", "full_attention"])
model = AutoModelForCausalLM.from_config(config).eval()
cache = DynamicCache() if args.bare_cache else DynamicCache(config=model.config)
ids = torch.tensor([[1, 2, 3, 4]])
with torch.no_grad():
    for step in range(args.steps):
        out = model(ids, past_key_values=cache, use_cache=True)
        ids = out.logits[:, -1:].argmax(-1)
        print(json.dumps({"metric": "logit_max", "value": float(out.logits.max()), "step": step}), flush=True)
print("done")
