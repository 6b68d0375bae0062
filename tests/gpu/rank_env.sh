#!/bin/sh
# Runs a worker with the NCCL settings for several ranks on one machine, as
# ddplaunch's PROGRAM: every rank gets its own NCCL_HOSTID (NCCL before 2.30
# refuses two ranks on one GPU unless they look like different hosts; it then
# connects them through sockets), sockets on lo, no InfiniBand probing.
#   ddplaunch --nproc_per_node=2 tests/gpu/rank_env.sh ddp-train ARGS...
export NCCL_HOSTID="ddp-test-host-${RANK:-0}"
export NCCL_SOCKET_IFNAME="${NCCL_SOCKET_IFNAME:-lo}"
export NCCL_IB_DISABLE=1
export DDP_BACKEND="${DDP_BACKEND:-nccl}"
exec "$@"
