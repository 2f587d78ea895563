#!/usr/bin/env bash
# Prefill server of a PD-disaggregated DeepSeek-V4 deployment: one node, 8 GPUs.
# The decode server runs on its own node and connects through the bootstrap port.
set -euo pipefail

MODEL_PATH="${MODEL_PATH:-/models/deepseek-ai/DeepSeek-V4-NVFP4}"
SGLANG_PYTHON="${SGLANG_PYTHON:-/opt/sglang-dsv4/venv/bin/python}"
HOST_IP="${HOST_IP:-0.0.0.0}"
PORT="${PORT:-30000}"
BOOTSTRAP_PORT="${BOOTSTRAP_PORT:-8998}"
IB_DEVICE="${IB_DEVICE:-mlx5_0,mlx5_1,mlx5_2,mlx5_3}"
LOG_DIR="${LOG_DIR:-/var/log/sglang}"

mkdir -p "$LOG_DIR"

# bf16 index-K: exact indexer keys for long-context recall (patchkit fix dsv4-bf16-index-k).
export SGLANG_DSV4_BF16_INDEX_K=1

"$SGLANG_PYTHON" -m sglang.launch_server \
    --model-path "$MODEL_PATH" \
    --served-model-name deepseek-v4 \
    --trust-remote-code \
    --host "$HOST_IP" \
    --port "$PORT" \
    --tp-size 8 \
    --dp-size 8 \
    --enable-dp-attention \
    --disaggregation-mode prefill \
    --disaggregation-transfer-backend mooncake \
    --disaggregation-bootstrap-port "$BOOTSTRAP_PORT" \
    --disaggregation-ib-device "$IB_DEVICE" \
    --enable-hierarchical-cache \
    --hicache-ratio 2 \
    --hicache-write-policy write_through \
    --hicache-io-backend kernel \
    --hicache-mem-layout page_first \
    --mem-fraction-static 0.82 \
    --chunked-prefill-size 16384 \
    --max-running-requests 128 \
    --context-length 262144 \
    --tool-call-parser deepseek_v4 \
    --reasoning-parser deepseek-v4 \
    --watchdog-timeout 1800 \
    2>&1 | tee -a "$LOG_DIR/prefill.log"
