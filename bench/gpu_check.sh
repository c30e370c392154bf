#!/usr/bin/env bash
# The prepared GPU check, one call: `bench/gpu_check.sh [--tiny] [--out FILE]` -> one JSON (see bench/gpu_check.py).
#
# On a GPU box with no internet (the device machine: Python 3.12 with a CUDA torch, no registry): run
# `bench/gpu_check.sh --prepare` on a box with one first. It puts in $WHEELS (default .whl/, git-ignored) CPython
# 3.12 wheels of what the check imports and that box lacks, plus robot_rl itself: ~45 MB, inside a device call's
# 64 MiB. Carry $WHEELS; they install into .gpu-site beside the system's torch. Where the project's .venv exists
# (./dev setup) it is used as is.
set -euo pipefail
cd "$(dirname "$0")/.."
wheels="${WHEELS:-.whl}"
# What the check imports (a --tiny run's modules) minus what the device image has (KINDS.md of the device tool).
# Left out: mujoco-studio (the viewer, 13 MB) and ManiSkill: mani_skill + sapien are 150 MB and SAPIEN fetches its
# PhysX GPU library from GitHub at run time, so the maniskill section records that it is skipped there.
carry=(antlr4-python3-runtime backports.zstd diffusers donfig farama-notifications glfw google-crc32c gymnasium
  hydra-core importlib-metadata lz4 mujoco mujoco-core numcodecs omegaconf peft pyopengl rosbags ruamel.yaml
  transformers zarr)

if [ "${1:-}" = --prepare ]; then
  mkdir -p "$wheels"
  freeze=$(.venv/bin/pip freeze)
  for name in "${carry[@]}"; do
    req=$(grep -i -m1 "^${name//[-._]/[-._]}==" <<<"$freeze")
    .venv/bin/pip download -q -d "$wheels" --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform any "$req" 2>/dev/null \
      || .venv/bin/pip wheel -q -w "$wheels" --no-deps "$req"  # antlr4 4.9.3 is an sdist only
  done
  .venv/bin/pip wheel -q -w "$wheels" --no-deps --no-build-isolation . && rm -rf build/lib build/bdist.*
  du -sh "$wheels"; exit 0
fi

py=.venv/bin/python
if [ ! -x "$py" ]; then
  if ! ls "$wheels"/robot_rl-*.whl >/dev/null 2>&1; then
    echo "gpu_check: no .venv (./dev setup) and no wheels in $wheels (bench/gpu_check.sh --prepare)" >&2; exit 2
  fi
  py=python3
  python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target .gpu-site "$wheels"/*.whl
  export PYTHONPATH="$PWD/.gpu-site"
fi
export MUJOCO_GL="${MUJOCO_GL:-egl}" ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST PYTHONUNBUFFERED=1
exec timeout 480 "$py" bench/gpu_check.py "$@"
