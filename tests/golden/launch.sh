#!/usr/bin/env bash
# Written by the orchestrator: runs the runner detached and records its pid and exit code.
cd '/work dir/runs/r1' || exit 97
echo $$ > pid
export PYTHONPATH='/work dir/bundles/abc'
export PYTHONUNBUFFERED=1
export PYTHONDONTWRITEBYTECODE=1
export CUDA_DEVICE_ORDER=PCI_BUS_ID
export CUDA_VISIBLE_DEVICES=0,1
export EVIL='$(touch /tmp/x); `id`
rm -rf /'
export HF_HOME='/data/hf cache'
if [ -f secrets.env ]; then set -a; . ./secrets.env; set +a; rm -f secrets.env; fi
trap 'echo 143 > exit_code.tmp; mv exit_code.tmp exit_code; exit 143' TERM
/opt/venv/bin/python3 -m remote '/work dir/runs/r1' > runner.log 2>&1 < /dev/null &
wait $!
code=$?
echo $code > exit_code.tmp && mv exit_code.tmp exit_code
