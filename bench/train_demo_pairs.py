"""Train the demo model pairs shipped as the project's embedded default, reproducibly, on one GPU.

    cd <repo> && python3 bench/train_demo_pairs.py [--out remote/assets/models] [--smoke] ...

Pipeline (recipe and measurements: shared/research/demo_pair_recipe.md):
  1. corpus      the host's Python sources (stdlib, then site-packages), capped; held-out files by hash of path
  2. tokenizer   byte-level BPE, vocab 4096, `<|endoftext|>` = 0, `<|MASK|>` = 1
  3. targets     Qwen3 (pure attention) and Qwen3.5 text (3 Gated DeltaNet : 1 full attention), bf16 autocast
  4. drafters    per target: greedy self-distillation (its own continuations + hidden states), then a DFlash
                 drafter (target embeddings / LM head frozen) trained on anchor blocks through remote.models.drafter
  5. save        bf16: `demo-qwen3/`, `demo-qwen3_5/` (transformers dirs + tokenizer), `demo-qwen3-dflash/`,
                 `demo-qwen3_5-dflash/` (published DFlash format), `heldout_prompts.jsonl`, `train_report.json`
  6. evaluate    each saved pair opened from disk by the runner (remote.runner.Run), temperature 0, held-out
                 prompts: DFlash and DDTree taus at each budget on all prompts by exact simulation of the runner's
                 loop, then the runner's own loop (AR, DFlash, DDTree) on the first few prompts as a cross-check
                 (taus, exact match vs AR), as many as the time budget allows
Progress lines carry timestamps; the last stdout line is one compact JSON object with sizes, timings, losses and
taus (also when a step fails: then "ok" is false and "error" says why). Seeds are fixed; GPU kernels are not
bitwise deterministic, so a rerun matches closely rather than exactly.
"""
from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import shutil
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import torch  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402
from transformers.utils import logging as hf_logging  # noqa: E402

from demo_training.common import dir_bytes, elapsed, log, seed_everything  # noqa: E402
from demo_training.corpus import build_corpus  # noqa: E402
from demo_training.distill import greedy_continuations, sample_prompts, target_features  # noqa: E402
from demo_training.drafter_train import new_drafter, spread_layer_ids, train_drafter  # noqa: E402
from demo_training.evaluate import open_pair, runner_check, simulated_taus  # noqa: E402
from demo_training.targets import build_target, train_lm  # noqa: E402
from demo_training.tokenizer import encode_stream, heldout_prompts, save_tokenizer, train_tokenizer  # noqa: E402
from remote.models.drafter_io import save_drafter  # noqa: E402

DEFAULT_OUT = REPO / "remote" / "assets" / "models"
SIZE_LIMIT_MB = 40.0
LINEAR, FULL = "linear_attention", "full_attention"

QWEN3 = dict(hidden_size=256, num_hidden_layers=6, num_attention_heads=4, num_key_value_heads=2, head_dim=64,
             intermediate_size=768, max_position_embeddings=4096)
QWEN3_5 = dict(hidden_size=256, num_hidden_layers=8, num_attention_heads=4, num_key_value_heads=2, head_dim=64,
               intermediate_size=768, linear_num_key_heads=4, linear_num_value_heads=4, linear_key_head_dim=64,
               linear_value_head_dim=64, linear_conv_kernel_dim=4, layer_types=[LINEAR, LINEAR, LINEAR, FULL] * 2,
               max_position_embeddings=4096)


@dataclass
class PairSettings:
    """One target + drafter pair: its shape and training budget."""

    kind: str                       # "qwen3" | "qwen3_5" (demo_training.targets.KINDS)
    shape: dict
    steps: int
    batch: int
    seq: int
    lr: float = 3e-3
    warmup: int = 100


@dataclass
class Settings:
    corpus_cap_mb: float = 150.0
    heldout_permille: int = 20
    max_file_kb: int = 1024
    tokenizer_files: int = 3000
    vocab_size: int = 4096
    # Steps are host-bound on the GPU host (a 64 x 512 Qwen3 step took 37 ms, mostly launch overhead), so the
    # recipe's token counts are kept with twice its batch and half its steps.
    pairs: list[PairSettings] = field(default_factory=lambda: [
        PairSettings("qwen3", QWEN3, steps=1500, batch=128, seq=512),
        PairSettings("qwen3_5", QWEN3_5, steps=1000, batch=128, seq=256),
    ])
    prompt_len: int = 64            # distillation and evaluation prompts, tokens
    new_tokens: int = 192           # distillation continuation, tokens
    distill_seqs: int = 32768
    gen_batch: int = 4096
    feature_batch: int = 1024
    drafter_layers: int = 3
    block_size: int = 16
    drafter_steps: int = 2000
    drafter_batch: int = 128
    anchors: int = 16
    drafter_lr: float = 1.5e-3
    drafter_warmup: int = 100
    eval_prompts: int = 24          # simulated (exact) acceptance on this many held-out prompts
    eval_tokens: int = 160
    runner_prompts: int = 4         # of those, decoded through the runner's own loop (AR + every method)
    time_budget_s: float = 480.0    # the runner check stops starting prompts past this (>= 1 prompt per pair)
    budgets: tuple[int, ...] = (16, 64, 256)
    log_every: int = 250

    @classmethod
    def smoke(cls) -> "Settings":
        """Tiny everything: the whole pipeline in well under two minutes on a 2-core CPU."""
        tiny = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16, intermediate_size=128,
                    max_position_embeddings=1024)
        tiny_hybrid = dict(tiny, num_hidden_layers=4, linear_num_key_heads=2, linear_num_value_heads=2,
                           linear_key_head_dim=16, linear_value_head_dim=16, linear_conv_kernel_dim=4,
                           layer_types=[LINEAR, LINEAR, LINEAR, FULL])
        return cls(corpus_cap_mb=0.5, heldout_permille=100, max_file_kb=64, tokenizer_files=200,
                   pairs=[PairSettings("qwen3", dict(tiny, num_hidden_layers=4), steps=12, batch=4, seq=64,
                                       warmup=3),
                          PairSettings("qwen3_5", tiny_hybrid, steps=12, batch=4, seq=64, warmup=3)],
                   prompt_len=16, new_tokens=24, distill_seqs=32, gen_batch=32, feature_batch=32, drafter_layers=2,
                   drafter_steps=12, drafter_batch=4, drafter_warmup=3, eval_prompts=2, eval_tokens=16,
                   runner_prompts=2, time_budget_s=600.0, budgets=(16,), log_every=6)


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=str(DEFAULT_OUT), help="output directory (default: remote/assets/models)")
    p.add_argument("--device", default="auto", choices=["auto", "cuda", "cpu"])
    p.add_argument("--corpus-cap-mb", type=float, help="cap on corpus text, MB (default 150)")
    p.add_argument("--steps-target", type=int, help="steps of the Qwen3 target, batch 128 x 512 (default 1500)")
    p.add_argument("--steps-hybrid", type=int, help="steps of the Qwen3.5 hybrid, batch 128 x 256 (default 1000)")
    p.add_argument("--steps-drafter", type=int, help="steps of each drafter, batch 128 (default 2000)")
    p.add_argument("--distill-seqs", type=int, help="self-distilled sequences per target (default 32768)")
    p.add_argument("--eval-prompts", type=int, help="held-out prompts for simulated acceptance (default 24)")
    p.add_argument("--eval-tokens", type=int, help="new tokens per evaluation prompt (default 160)")
    p.add_argument("--runner-prompts", type=int, help="of those, decoded by the runner itself (default 4)")
    p.add_argument("--time-budget-s", type=float,
                   help="seconds after which the runner check starts no new prompt (default 480)")
    p.add_argument("--only", choices=["qwen3", "qwen3_5"], help="train one pair only (default: both)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--smoke", action="store_true", help="tiny everything, for a CPU test (< 2 minutes)")
    return p.parse_args(argv)


def settings_from(args: argparse.Namespace) -> Settings:
    s = Settings.smoke() if args.smoke else Settings()
    overrides = {"corpus_cap_mb": args.corpus_cap_mb, "drafter_steps": args.steps_drafter,
                 "distill_seqs": args.distill_seqs, "eval_prompts": args.eval_prompts, "eval_tokens": args.eval_tokens,
                 "runner_prompts": args.runner_prompts, "time_budget_s": args.time_budget_s}
    s = dataclasses.replace(s, **{k: v for k, v in overrides.items() if v is not None})
    steps = {"qwen3": args.steps_target, "qwen3_5": args.steps_hybrid}
    for pair in s.pairs:
        if steps[pair.kind] is not None:
            pair.steps = steps[pair.kind]
    if args.only:
        s.pairs = [p for p in s.pairs if p.kind == args.only]
    return s


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise SystemExit("error: --device cuda but torch sees no GPU")
    return torch.device(name)


def free_memory(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


class Pipeline:
    """The steps of one training run; `report` accumulates what the final JSON line prints."""

    def __init__(self, settings: Settings, out: Path, device: torch.device, seed: int):
        self.s, self.out, self.device, self.seed = settings, out, device, seed
        self.report: dict = {"ok": False, "device": str(device), "timings_s": {}, "corpus": {}, "pairs": {}}
        self.tokenizer_dir = out / "_tokenizer"
        self.runs: dict = {}                        # pair kind -> remote.runner.Run over the saved pair

    def warn(self, message: str) -> None:
        log(f"WARNING: {message}")
        self.report.setdefault("warnings", []).append(message)

    def timed(self, phase: str, fn, *args, **kwargs):
        started = time.time()
        log(f"== {phase}")
        result = fn(*args, **kwargs)
        self.report["timings_s"][phase] = round(time.time() - started, 1)
        self.save_report()                          # partial figures survive a run killed at its time limit
        return result

    def save_report(self) -> None:
        if self.out.is_dir():
            self.report["timings_s"].pop("total", None)
            self.report["timings_s"]["total"] = round(elapsed(), 1)
            (self.out / "train_report.json").write_text(json.dumps(self.report, indent=2, default=str) + "\n")

    # ---- 1-2: corpus, tokenizer, streams, held-out prompts ------------------------------------------------------
    def corpus_and_tokenizer(self) -> None:
        s = self.s
        corpus = build_corpus(int(s.corpus_cap_mb * 1e6), s.heldout_permille, s.max_file_kb * 1024)
        self.report["corpus"] = {**corpus.summary(), "roots": corpus.roots}
        log(f"corpus: {corpus.summary()} from {corpus.roots}")
        if not corpus.train or not corpus.heldout:
            raise RuntimeError(f"corpus too small: {corpus.summary()}")
        texts = [t for _, t in corpus.train]
        sample = texts[:: max(1, len(texts) // s.tokenizer_files)][: s.tokenizer_files]
        self.tok = train_tokenizer(sample, s.vocab_size)
        save_tokenizer(self.tok, self.tokenizer_dir, model_max_length=s.pairs[0].shape["max_position_embeddings"])
        for other in sorted(self.out.glob("demo-*/tokenizer.json")):      # pairs trained by an earlier --only run
            if other.read_bytes() != (self.tokenizer_dir / "tokenizer.json").read_bytes():
                self.warn(f"{other} differs from this run's tokenizer: retrain that pair too")
        self.hf_tokenizer = AutoTokenizer.from_pretrained(str(self.tokenizer_dir))
        log(f"tokenizer: {self.tok.get_vocab_size()} tokens, trained on {len(sample)} files")
        self.train_stream = encode_stream(self.tok, texts).to(self.device)
        self.heldout_stream = encode_stream(self.tok, [t for _, t in corpus.heldout]).to(self.device)
        self.report["corpus"].update(train_tokens=self.train_stream.numel(), heldout_tokens=self.heldout_stream.numel())
        log(f"tokens: train {self.train_stream.numel():,}, held-out {self.heldout_stream.numel():,}")
        prompts = heldout_prompts(self.tok, corpus.heldout, s.eval_prompts, s.prompt_len, self.seed)
        if len(prompts) < s.eval_prompts:
            self.warn(f"only {len(prompts)} held-out prompts (asked for {s.eval_prompts})")
        self.out.mkdir(parents=True, exist_ok=True)
        self.prompts_file = self.out / "heldout_prompts.jsonl"
        self.prompts_file.write_text("".join(json.dumps(p) + "\n" for p in prompts), encoding="utf-8")

    # ---- 3-5: one pair --------------------------------------------------------------------------------------
    def train_pair(self, pair: PairSettings) -> None:
        s, device, name = self.s, self.device, f"demo-{pair.kind}"
        row = self.report["pairs"].setdefault(pair.kind, {})
        model = build_target(pair.kind, pair.shape, s.vocab_size, self.seed)
        row["target_params"] = sum(p.numel() for p in model.parameters())
        log(f"{name}: {row['target_params'] / 1e6:.2f} M parameters, {pair.steps} steps of {pair.batch} x {pair.seq}")
        row["target"] = self.timed(f"{pair.kind}.target", train_lm, model, self.train_stream, self.heldout_stream,
                                   steps=pair.steps, batch=pair.batch, seq=pair.seq, lr=pair.lr, warmup=pair.warmup,
                                   device=device, seed=self.seed, name=name, log_every=s.log_every)
        # Served in bf16: round the weights once, save, and distill from exactly these weights (bf16 on GPU,
        # their float32 copy on CPU, where the evaluation also runs in float32).
        model = model.to(torch.bfloat16)
        target_dir = self.out / name
        model.save_pretrained(str(target_dir))
        save_tokenizer(self.tok, target_dir, model_max_length=pair.shape["max_position_embeddings"])
        if device.type != "cuda":
            model = model.float()
        layer_ids = spread_layer_ids(pair.shape["num_hidden_layers"], s.drafter_layers)
        prompts = sample_prompts(self.train_stream, s.distill_seqs, s.prompt_len, self.seed + 7)
        tokens = self.timed(f"{pair.kind}.distill_generate", greedy_continuations, model, prompts, s.new_tokens,
                            s.gen_batch, name)
        features = self.timed(f"{pair.kind}.distill_features", target_features, model, tokens, layer_ids,
                              s.feature_batch)
        log(f"{name}: distilled {tokens.shape[0]} sequences of {tokens.shape[1]} tokens, features "
            f"{tuple(features.shape)} ({features.numel() * features.element_size() / 1e9:.2f} GB)")
        drafter = new_drafter(model, self.hf_tokenizer, s.drafter_layers, s.block_size, layer_ids, self.seed + 1)
        row["drafter_params"] = sum(p.numel() for p in drafter.parameters())
        row["target_layer_ids"] = layer_ids
        row["drafter"] = self.timed(f"{pair.kind}.drafter", train_drafter, drafter, model, tokens, features,
                                    steps=s.drafter_steps, batch=s.drafter_batch, anchors=s.anchors,
                                    lr=s.drafter_lr, warmup=s.drafter_warmup, prompt_len=s.prompt_len,
                                    device=device, seed=self.seed + 2, name=f"{name}-dflash",
                                    log_every=s.log_every)
        save_drafter(drafter.to(torch.bfloat16), self.out / f"{name}-dflash")
        del model, tokens, features, drafter
        free_memory(device)

    # ---- 6: evaluation from disk with the runner's code ------------------------------------------------
    def simulate(self, pair: PairSettings) -> None:
        """Open the saved pair through the runner and measure simulated (exact, T=0) taus on all prompts."""
        s, name = self.s, f"demo-{pair.kind}"
        row = self.report["pairs"][pair.kind]
        run = open_pair(str(self.out / name), str(self.out / f"{name}-dflash"), str(self.prompts_file),
                        num_prompts=s.eval_prompts, max_new_tokens=s.eval_tokens, device=self.device.type,
                        dtype="bfloat16" if self.device.type == "cuda" else "float32", seed=self.seed, name=name)
        self.runs[pair.kind] = run
        row["eval"] = self.timed(f"{pair.kind}.simulate", simulated_taus, run, list(s.budgets), name)
        dflash = row["eval"]["dflash"]["tau"]
        row["goals"] = {"dflash_tau_ge_3.5": dflash >= 3.5}
        if "ddtree64" in row["eval"]:
            tree64 = row["eval"]["ddtree64"]["tau"]
            row["goals"].update({"ddtree64_over_dflash": round(tree64 / dflash, 3) if dflash else None,
                                 "ddtree64_ge_1.4x": tree64 >= 1.4 * dflash})
        log(f"{name}: summary {json.dumps(compact({'pairs': {pair.kind: row}})['pairs'][pair.kind])}")

    def runner_checks(self) -> None:
        """The runner's own decoding loop on the first prompts of each pair, shared out of the time left."""
        kinds = list(self.runs)
        for i, kind in enumerate(kinds):
            now = time.time()
            end = now - elapsed() + self.s.time_budget_s                           # counted from process start
            deadline = max(now + (end - now) / (len(kinds) - i), now + 1e-3)    # >= 1 prompt always starts
            run, row = self.runs[kind], self.report["pairs"][kind]
            row["runner"] = self.timed(f"{kind}.runner_check", runner_check, run, list(self.s.budgets),
                                       self.s.runner_prompts, deadline, row["eval"], f"demo-{kind}")
            del self.runs[kind]
            free_memory(self.device)

    def sizes(self) -> None:
        sizes = {p.name: round(dir_bytes(p) / 1e6, 2) for p in sorted(self.out.iterdir()) if p.is_dir()
                 and not p.name.startswith("_")}
        sizes["heldout_prompts.jsonl"] = round(self.prompts_file.stat().st_size / 1e6, 3)
        total = round(sum(sizes.values()), 2)
        self.report["sizes_mb"] = {**sizes, "total": total, "limit": SIZE_LIMIT_MB, "ok": total <= SIZE_LIMIT_MB}
        log(f"sizes (MB = 1e6 bytes): {sizes}, total {total} (limit {SIZE_LIMIT_MB})")
        if total > SIZE_LIMIT_MB:
            self.warn(f"outputs are {total} MB, over the {SIZE_LIMIT_MB} MB limit")

    def run(self) -> None:
        self.timed("corpus_tokenizer", self.corpus_and_tokenizer)
        for pair in self.s.pairs:
            self.train_pair(pair)
            self.simulate(pair)
        self.sizes()
        self.runner_checks()
        self.report["ok"] = True


def compact(report: dict) -> dict:
    """The report without per-prompt lists (those stay in train_report.json)."""
    out = json.loads(json.dumps(report, default=str))
    for row in out.get("pairs", {}).values():
        for method in (row.get("eval") or {}).values():
            if isinstance(method, dict):
                method.pop("per_prompt", None)
    return out


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    settings = settings_from(args)
    device = pick_device(args.device)
    seed_everything(args.seed)
    hf_logging.disable_progress_bar()          # no "Writing model shards" bars in an unattended log
    if args.smoke and device.type == "cpu":
        torch.set_num_threads(1)                # tiny models gain nothing from threads, and lose much on a busy host
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    out = Path(args.out).resolve()
    pipeline = Pipeline(settings, out, device, args.seed)
    previous = out / "train_report.json"
    if args.only and previous.exists():             # one pair per run: keep the other pair's figures
        old = json.loads(previous.read_text())
        pipeline.report["pairs"].update({k: v for k, v in old.get("pairs", {}).items() if k != args.only})
        pipeline.report["timings_s"].update({k: v for k, v in old.get("timings_s", {}).items()
                                             if not k.startswith(args.only + ".") and k != "total"})
    pipeline.report["settings"] = {"smoke": args.smoke, "seed": args.seed, **{
        k: v for k, v in dataclasses.asdict(settings).items() if k != "pairs"}}
    pipeline.report["settings"]["pairs"] = {p.kind: {"steps": p.steps, "batch": p.batch, "seq": p.seq, "lr": p.lr}
                                            for p in settings.pairs}
    log(f"train_demo_pairs: out={out} device={device} torch {torch.__version__} "
        f"{'smoke' if args.smoke else 'full'} settings")
    status = 0
    try:
        pipeline.run()
    except Exception as exc:   # unattended run: the final JSON line still says how far it got
        traceback.print_exc()
        pipeline.report["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        status = 1
    finally:
        shutil.rmtree(pipeline.tokenizer_dir, ignore_errors=True)
        pipeline.save_report()
        pipeline.report["timings_s"]["total"] = round(elapsed(), 1)
        print(json.dumps(compact(pipeline.report), separators=(",", ":"), default=str), flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
