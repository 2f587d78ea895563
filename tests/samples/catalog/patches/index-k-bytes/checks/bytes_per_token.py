"""Verification: bytes_per_token counts the bf16 index-K cache at two bytes per element."""
import sys

sys.path.insert(0, sys.argv[1] + "/python")
from sglang.srt.pool import bytes_per_token  # noqa: E402

assert bytes_per_token(1, 128, 2) == 128 * 2 + 128 * 2, bytes_per_token(1, 128, 2)
