#!/usr/bin/env bash
# The main job: builds ddplaunch and trains the reference model on the UCI
# digits set with two data-parallel ranks under ddplaunch (CUDA + NCCL when a
# GPU is usable, the CPU backend otherwise). Self-sufficient on a fresh Debian
# 12 machine; idempotent. Extra arguments go to ddp-train.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
[ -f build/build.ninja ] || meson setup build -Dcuda=auto
ninja -C build
exec build/launcher/ddplaunch --nproc_per_node=2 build/worker/train/ddp-train \
	--config configs/digits.ini "$@"
