#!/usr/bin/env bash
# Sets up the Python environment for the PyTorch side of the Lockstep-vs-PyTorch
# CPU benchmark (bench/pytorch_fashion_mnist.py).
#
# Creates a venv at ${LOCKSTEP_VENV:-<repo>/.venv-bench} with a pinned PyTorch and
# numpy. Order of attempts:
#   1. the CPU-only wheel (torch==X+cpu) from download.pytorch.org, if reachable;
#   2. the PyPI wheel with --no-deps, plus its pure-Python deps and only the NVIDIA
#      runtime libraries libtorch is dynamically linked against (PyPI has no CPU-only
#      Linux x86_64 torch; this skips triton, cuSOLVER, etc.: ~4 GB instead of ~5.3 GB);
#   3. Debian's python3-torch via apt (older version), with a warning.
# Idempotent: returns at once when the venv already holds the pinned torch.
# Progress goes to stderr; stdout is one line, the python interpreter to use:
#   PY=$(bench/setup_venv.sh) && "$PY" bench/pytorch_fashion_mnist.py
set -euo pipefail

TORCH_VERSION=2.15.0
# torchvision (mobilenet_v2 / efficientnet_b0 for bench/peer_bench.py): the newest release,
# 0.29.2, is the one that accepts torch 2.15.0 (its metadata: torch>=2.14.0); installed with
# --no-deps so pip never swaps the pinned torch. The models are pure Python on torch.nn.
TORCHVISION_VERSION=0.29.2
# Exact versions the torch 2.15.0 wheel pins (through cuda-toolkit==13.2.2).
NVIDIA_LIBS=(
  nvidia-cuda-runtime==13.2.86 nvidia-cublas==13.4.1.3 nvidia-cufft==12.2.0.57
  nvidia-cufile==1.17.1.22 nvidia-cuda-cupti==13.2.86 nvidia-cusparse==12.7.10.12
  nvidia-nvjitlink==13.5.37 nvidia-cuda-nvrtc==13.2.86 nvidia-cudnn-cu13==9.26.0.51
  nvidia-cusparselt-cu13==0.8.1 nvidia-nccl-cu13==2.30.7 nvidia-nvshmem-cu13==3.7.2
)
PURE_DEPS=(filelock "typing-extensions>=4.13.0" "setuptools>=77.0.3" "sympy>=1.13.3"
           "networkx>=2.5.1" jinja2 "fsspec>=0.8.5" numpy)

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${LOCKSTEP_VENV:-$REPO/.venv-bench}
PY=$VENV/bin/python
MARKER=$VENV/.lockstep-torch-ok   # written only after `import torch` succeeded
WANT="$TORCH_VERSION torchvision==$TORCHVISION_VERSION"

log() { echo "[setup_venv] $*" >&2; }

if [[ -x $PY && "$(cat "$MARKER" 2>/dev/null)" == "$WANT" ]]; then
  echo "$PY"; exit 0
fi

torch_works() {  # $1 = python; checks the version and a CPU conv
  "$1" - "$TORCH_VERSION" "$TORCHVISION_VERSION" <<'EOF' >&2
import sys, torch, numpy, torchvision
assert torch.__version__.split("+")[0] == sys.argv[1], torch.__version__
assert torchvision.__version__.split("+")[0] == sys.argv[2], torchvision.__version__
torch.nn.Conv2d(1, 2, 3)(torch.zeros(1, 1, 5, 5))
torchvision.models.mobilenet_v2(weights=None).eval()(torch.zeros(1, 3, 32, 32))
print("torch", torch.__version__, "torchvision", torchvision.__version__, "ok")
EOF
}

pip_install() {
  [[ -x $PY ]] || "${PYTHON:-python3}" -m venv "$VENV" >&2 || return 1
  local pip=("$PY" -m pip install -q --disable-pip-version-check)
  if "$PY" -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '$TORCH_VERSION')" \
       2>/dev/null; then
    log "torch==$TORCH_VERSION already installed; adding torchvision==$TORCHVISION_VERSION"
  elif "${pip[@]}" --timeout 10 --retries 0 --index-url https://download.pytorch.org/whl/cpu \
       "torch==$TORCH_VERSION+cpu" >&2 2>/dev/null; then
    log "installed torch==$TORCH_VERSION+cpu from download.pytorch.org"
    "${pip[@]}" numpy >&2 || return 1
  else
    log "download.pytorch.org unreachable; using the PyPI wheel with minimal NVIDIA libs"
    "${pip[@]}" "${PURE_DEPS[@]}" >&2 || return 1
    "${pip[@]}" --no-deps "torch==$TORCH_VERSION" "${NVIDIA_LIBS[@]}" >&2 || return 1
  fi
  "${pip[@]}" --no-deps "torchvision==$TORCHVISION_VERSION" "pillow>=5.3.0" >&2 || return 1
  torch_works "$PY"
}

log "setting up $VENV (torch==$TORCH_VERSION, torchvision==$TORCHVISION_VERSION)"
if pip_install; then
  echo "$WANT" > "$MARKER"
  echo "$PY"; exit 0
fi

log "WARNING: pip install of torch==$TORCH_VERSION failed; falling back to Debian's"
log "WARNING: python3-torch (older version, different build): numbers are not comparable"
sudo=(); [[ $(id -u) == 0 ]] || sudo=(sudo)
apt_install() { "${sudo[@]}" apt-get install -y -q --no-install-recommends python3-torch python3-numpy >&2; }
apt_install || { "${sudo[@]}" apt-get update -q >&2 && apt_install; }
/usr/bin/python3 -c "import torch; print('Debian torch', torch.__version__)" >&2
echo /usr/bin/python3
