#!/usr/bin/env bash
# An older commit's code beside the working tree, for gpu_suite.sh's BASE: the old and the new code measured in one
# device call, since timings compare only as ratios within one run. Writes .ab/base (git-ignored: carry it to the
# device): REV's runner, benches, orchestrator and configs, without the model assets (gpu_suite.sh links the working
# tree's there).
#
#   bash bench/ab_base.sh 91937b8
#   (on the device, carrying .ab and .whl) OUT=/tmp/o WHEELS=.whl BASE=.ab/base STEPS=q35 bash bench/gpu_suite.sh
set -eu
rev=${1:?usage: bash bench/ab_base.sh REV}
cd "$(dirname "$0")/.."
rm -rf .ab/base
mkdir -p .ab/base
git archive "$rev" remote bench orchestrator conf | tar -x -C .ab/base
rm -rf .ab/base/remote/assets
git rev-parse "$rev" > .ab/base/REV
echo ".ab/base: $(cat .ab/base/REV) ($(du -sh .ab/base | cut -f1))"
