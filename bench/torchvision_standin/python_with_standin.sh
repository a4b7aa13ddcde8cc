#!/bin/sh
# host.engine_python for vLLM's CPU build on a Qwen3.5 target without a CPU torchvision (_standin.py says why):
#   ENGINE_PYTHON=~/.cache/specbench/vllm-cpu/bin/python specbench method=vllm-dflash model=demo-qwen3_5 \
#     host.engine_python=$PWD/bench/torchvision_standin/python_with_standin.sh +host.env.ENGINE_PYTHON=$ENGINE_PYTHON
here=$(cd "$(dirname "$0")" && pwd)
PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}" exec "${ENGINE_PYTHON:?set ENGINE_PYTHON to the engine venv's python}" "$@"
