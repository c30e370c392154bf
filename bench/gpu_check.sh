#!/usr/bin/env bash
# The prepared GPU check, one call: `bench/gpu_check.sh [--tiny] [--out FILE]` -> one JSON (see bench/gpu_check.py).
#
# On a GPU box with no internet: python3 with a CUDA torch already installed, and the project's other
# dependencies as wheels in $WHEELS (default: wheels/, made here with `bench/gpu_check.sh --prepare`); they go
# into .venv-gpu, which sees the system's torch. Where the project's .venv exists (./dev setup) it is used as is.
set -euo pipefail
cd "$(dirname "$0")/.."
wheels="${WHEELS:-wheels}"

if [ "${1:-}" = --prepare ]; then  # on a box with a package registry: everything but torch, for CPython 3.12
  missing=()  # the ROS 2 wheels are built for this Python only; the check does not need them
  for req in $(.venv/bin/pip freeze --exclude-editable | grep -v -e '^torch==' -e '^nvidia-' -e '^triton=='); do
    .venv/bin/pip download -q -d "$wheels" --only-binary=:all: --python-version 3.12 --no-deps "$req" \
      >/dev/null 2>&1 || missing+=("$req")
  done
  du -sh "$wheels"; [ ${#missing[@]} -eq 0 ] || echo "no CPython 3.12 wheel for: ${missing[*]}" >&2; exit 0
fi

py=.venv/bin/python
if [ ! -x "$py" ]; then
  if [ ! -d "$wheels" ]; then
    echo "gpu_check: no .venv (./dev setup) and no wheels in $wheels (bench/gpu_check.sh --prepare)" >&2; exit 2
  fi
  py=.venv-gpu/bin/python
  [ -x "$py" ] || python3 -m venv --system-site-packages .venv-gpu
  .venv-gpu/bin/pip install -q --no-index --find-links "$wheels" --no-deps "$wheels"/*.whl
  .venv-gpu/bin/pip install -q --no-index --no-deps --no-build-isolation -e .
fi
export MUJOCO_GL="${MUJOCO_GL:-egl}" ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST
exec timeout 480 "$py" bench/gpu_check.py "$@"
