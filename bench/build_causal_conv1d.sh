#!/usr/bin/env bash
# Build a causal-conv1d wheel for the local GPU's architecture from its sdist, on a host with nvcc and no index
# (the GPU host of bench/gpu_suite.sh). Its setup.py compiles for eight architectures from sm_53 up; this keeps the
# local one only (one architecture: minutes, not tens of minutes), stubs the backward kernels (the runner never
# trains; a call raises), and skips its download of a prebuilt wheel.
#
#   bash bench/build_causal_conv1d.sh SDIST DEST     # SDIST: causal_conv1d-<version>.tar.gz; the wheel lands in DEST
set -eu
SDIST=$(realpath "$1"); DEST=$(mkdir -p "$2" && realpath "$2")
WORK=$(mktemp -d)
tar xzf "$SDIST" -C "$WORK"
cd "$WORK"/causal_conv1d-*
ARCH=${ARCH:-$(python3 -c 'import torch; print("%d%d" % torch.cuda.get_device_capability())')}
python3 - "$ARCH" <<'EOF'
import re, sys
arch = sys.argv[1]
src = open("setup.py").read()
# every "-gencode arch=compute_X,code=sm_X" pair the script appends, cut to the local architecture's
keep = f'\n    cc_flag = ["-gencode", "arch=compute_{arch},code=sm_{arch}"] if not HIP_BUILD else cc_flag\n'
src, n = re.subn(r"\n    # HACK: The compiler flag", keep + r"\n    # HACK: The compiler flag", src, count=1)
if n != 1:
    sys.exit("build_causal_conv1d: setup.py's layout changed; cannot cut its architectures")
open("setup.py", "w").write(src)
# Inference only: the backward kernels (the largest of the three sources) become stubs that raise, with the same
# explicit instantiations, so that the binding still links
bwd = open("csrc/causal_conv1d_bwd.cu").read()
head, instances = bwd[:bwd.index("template<")], [l for l in bwd.splitlines() if l.startswith("template void ")]
if not instances:
    sys.exit("build_causal_conv1d: causal_conv1d_bwd.cu's layout changed; cannot stub its backward")
stub = "".join(
    f"template<typename input_t, typename weight_t>\nvoid {name}(ConvParamsBwd &params, cudaStream_t stream) "
    "{ TORCH_CHECK(false, \"causal-conv1d built for inference: no backward\"); }\n"
    for name in ("causal_conv1d_bwd_cuda", "causal_conv1d_channellast_bwd_cuda"))
stub = head + "#include <c10/util/Exception.h>\n" + stub + "\n".join(instances) + "\n"
open("csrc/causal_conv1d_bwd.cu", "w").write(stub)
EOF
CAUSAL_CONV1D_FORCE_BUILD=TRUE MAX_JOBS=${MAX_JOBS:-$(nproc)} \
  python3 -m pip wheel -q --no-build-isolation --no-deps --no-index -w "$DEST" .
ls -la "$DEST"
