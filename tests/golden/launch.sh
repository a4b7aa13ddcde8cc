#!/usr/bin/env bash
# Written by the orchestrator: runs the runner detached and records its pid and exit code.
cd '/work dir/runs/r1' || exit 97
cat /proc/sys/kernel/random/boot_id > boot_id 2>/dev/null
echo $$ > pid.tmp && mv pid.tmp pid
printf '%-15s\n' - > exit_code.tmp; head -c 65536 /dev/zero > .room 2>/dev/null
finish() { rm -f .room; printf '%-15s\n' "$1" 1<> exit_code.tmp && mv -f exit_code.tmp exit_code; exit "$1"; }
export PYTHONPATH='/work dir/bundles/abc'
export PYTHONUNBUFFERED=1
export PYTHONDONTWRITEBYTECODE=1
export CUDA_DEVICE_ORDER=PCI_BUS_ID
export CUDA_VISIBLE_DEVICES=0,1
export EVIL='$(touch /tmp/x); `id`
rm -rf /'
export HF_HOME='/data/hf cache'
leases=${SPECBENCH_GPU_LEASES:-auto}
if [ "$leases" = auto ]; then leases=0; if [ -z "$SLURM_JOB_ID" ] && { [ -e /dev/nvidiactl ] || [ -e /dev/kfd ]; }; then leases=1; fi; fi
if [ "$leases" = 1 ] && ! command -v flock >/dev/null; then leases=0; echo "[specbench] flock not found on this host: GPU leases are not held here" >> runner.log; fi
held=; if [ "$leases" = 1 ]; then mkdir -p '/work dir/locks'; [ -n "$held" ] || { exec 20>>'/work dir/locks/gpu0.lock'; flock -n 20 || held=0; }; [ -n "$held" ] || { exec 21>>'/work dir/locks/gpu1.lock'; flock -n 21 || held=1; }; fi
if [ -n "$held" ]; then echo "[specbench] GPU $held is held by run $(cat '/work dir/locks'/gpu$held.run 2>/dev/null || echo unknown) on this host: not started" >> runner.log; finish 75; fi
if [ "$leases" = 1 ]; then basename "$PWD" > '/work dir/locks/gpu0.run'; basename "$PWD" > '/work dir/locks/gpu1.run'; fi
if [ -f secrets.env ]; then set -a; . ./secrets.env; set +a; rm -f secrets.env; fi
trap 'finish 143' TERM
/opt/venv/bin/python3 -m remote '/work dir/runs/r1' >> runner.log 2>&1 < /dev/null &
wait $!
code=$?
trap '' TERM
[ $code = 0 ] || set -- $(stat -f -c '%a %S %b' . 2>/dev/null)
if [ $# = 3 ] && [ $(( $1 * $2 )) -lt 1048576 ]; then rm -f .room; echo "[specbench] No space left on device in $PWD: $(( $1 * $2 )) bytes free of $(( $3 * $2 )); the runner's last output may be missing here" >> runner.log; fi
finish $code
