"""Memory pool sizing (sample)."""


def bytes_per_token(kv_heads, head_dim, dtype_bytes):
    kv = kv_heads * head_dim * dtype_bytes
    index_k = head_dim
    return kv + index_k


def tokens_for(budget, per_token):
    return budget // per_token
