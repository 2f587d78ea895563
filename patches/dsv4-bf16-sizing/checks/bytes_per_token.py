"""Check that DSV4PoolConfigurator prices bf16 index-K rows as the pool allocates them.

Usage: python bytes_per_token.py <sglang root>   (a checkout, or an installed site-packages)

No torch or sglang import: the relevant functions are taken from the source with ``ast``
and run against small stand-in inputs. Exit 0 when, under SGLANG_DSV4_BF16_INDEX_K, the
c4 indexer term of the per-token bytes is the doubled (bf16) key size and equals what
DeepSeekV4IndexerPool allocates; exit 1 with the reason otherwise.
"""

import ast
import sys
from pathlib import Path
from types import SimpleNamespace

POOL = "sglang/srt/mem_cache/deepseek_v4_memory_pool.py"
CONF = "sglang/srt/model_executor/pool_configurator.py"
HEAD_DIM = 128  # DeepSeek-V4 index_head_dim


def fail(message):
    print(f"FAIL: {message}")
    sys.exit(1)


def source_of(root, rel):
    for candidate in (root / "python" / rel, root / rel):
        if candidate.is_file():
            return candidate, ast.parse(candidate.read_text(encoding="utf-8"))
    fail(f"{rel} not found under {root} (checkout or package layout)")


def find(tree, name, cls=None):
    body = tree.body
    if cls is not None:
        owner = [n for n in body if isinstance(n, ast.ClassDef) and n.name == cls]
        if not owner:
            return None
        body = owner[0].body
    for node in body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    return None


def load(node, namespace):
    node.decorator_list = []
    code = compile(ast.Module(body=[node], type_ignores=[]), "<extracted>", "exec")
    exec(code, namespace)
    return namespace[node.name]


def main(argv):
    root = Path(argv[1] if len(argv) > 1 else ".")
    pool_file, pool = source_of(root, POOL)
    conf_file, conf = source_of(root, CONF)

    fp8_fn = find(pool, "get_dsv4_indexer_bytes_per_token")
    bf16_fn = find(pool, "get_dsv4_bf16_index_k_bytes_per_token")
    pool_bytes = find(pool, "get_bytes_per_token", cls="DeepSeekV4IndexerPool")
    if fp8_fn is None or pool_bytes is None:
        fail(f"{pool_file}: DeepSeek-V4 indexer sizing functions not found")
    if bf16_fn is None:
        fail(f"{pool_file}: no get_dsv4_bf16_index_k_bytes_per_token: "
             "the bf16 index-K fix (dsv4-bf16-index-k) is not applied")
    conf_bytes = find(conf, "_get_indexer_bytes_per_token", cls="DSV4PoolConfigurator")
    compressed = find(conf, "_compressed_bytes_per_full_token", cls="DSV4PoolConfigurator")
    init = find(conf, "__init__", cls="DSV4PoolConfigurator")
    if conf_bytes is None:
        fail(f"{conf_file}: DSV4PoolConfigurator has no _get_indexer_bytes_per_token: "
             "the c4 indexer is still priced at the fp8 size (sizing fix not applied)")
    if compressed is None or init is None:
        fail(f"{conf_file}: DSV4PoolConfigurator sizing methods not found")
    uses_it = any(
        isinstance(n, ast.Assign)
        and any(isinstance(t, ast.Attribute) and t.attr == "indexer_bytes_per_token"
                for t in n.targets)
        and isinstance(n.value, ast.Call)
        and isinstance(n.value.func, ast.Attribute)
        and n.value.func.attr == "_get_indexer_bytes_per_token"
        for n in ast.walk(init)
    )
    if not uses_it:
        fail(f"{conf_file}: DSV4PoolConfigurator.__init__ does not set "
             "indexer_bytes_per_token from _get_indexer_bytes_per_token()")

    helpers = {}
    load(fp8_fn, helpers)
    load(bf16_fn, helpers)

    def configured_term(bf16_switch):
        ns = dict(helpers, BF16_INDEX_K=bf16_switch, _is_hip=False,
                  get_exec=lambda: SimpleNamespace(
                      kernel=SimpleNamespace(enable_deepseek_v4_fp4_indexer=False)))
        get_bytes = load(conf_bytes, dict(ns))
        per_token = load(compressed, dict(ns))
        stub = SimpleNamespace(indexer_head_dim=HEAD_DIM, c4_shrink_factor=1,
                               kv_bytes=0, low_ratio_index_bytes=0,
                               _get_paged_kv_bytes_per_token=lambda ratio=0: 0.0)
        stub.indexer_bytes_per_token = get_bytes(stub)
        # With the paged KV priced at 0, the ratio-4 term is the indexer alone.
        return stub.indexer_bytes_per_token, per_token(stub, 4)

    def allocated(bf16_switch):
        ns = dict(helpers)
        fn = load(pool_bytes, ns)
        return fn(SimpleNamespace(bf16_index_k=bf16_switch, index_head_dim=HEAD_DIM,
                                  use_fp4_indexer=False))

    fp8_bytes, fp8_term = configured_term(False)
    bf16_bytes, bf16_term = configured_term(True)
    fp8_keys = HEAD_DIM  # one byte per key element; the rest is the block scale
    if fp8_bytes != allocated(False):
        fail(f"fp8 index-K priced at {fp8_bytes} B/token but the pool allocates "
             f"{allocated(False)}")
    if bf16_bytes != allocated(True):
        fail(f"bf16 index-K priced at {bf16_bytes} B/token but the pool allocates "
             f"{allocated(True)}: the KV pool over-commits")
    if bf16_bytes != 2 * fp8_keys:
        fail(f"bf16 index-K priced at {bf16_bytes} B/token, expected twice the fp8 key "
             f"bytes ({2 * fp8_keys})")
    if bf16_term != 2 * fp8_keys / 4 or bf16_term <= fp8_term:
        fail(f"c4 indexer term per full token is {bf16_term} under bf16 vs {fp8_term} "
             f"under fp8; expected the doubled key bytes / 4 = {2 * fp8_keys / 4}")
    print(f"ok: c4 indexer term per full token {fp8_term} (fp8) -> {bf16_term} (bf16), "
          f"matching the pool's {bf16_bytes} B per bf16 index-K token")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
