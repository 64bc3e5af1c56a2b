"""The burn-in GGUF's model run in numpy the way llama.cpp runs it, for the unit tests that check
the hand-set design (plugins/module_utils/dummy_gguf.py) against what an engine would compute."""
import numpy as np

from ansible_collections.gpuserve.llm.plugins.module_utils.dummy_gguf import HEAD_DIM, ROPE_BASE


def forward_logits(shape, weights, ids, rows=None):
    """The model's logits for the last position, computed the way llama.cpp does (RMSNorm, causal
    attention with RoPE, SwiGLU). `rows`: {position: embedding} for positions whose input is not a
    token's embedding (an image's tokens from the mmproj; their entry in ids is ignored)."""
    d, n_head = shape["n_embd"], shape["n_head"]
    x = weights["token_embd.weight"][ids].astype(np.float64)
    for position, row in (rows or {}).items():
        x[position] = row
    pos = np.arange(len(ids))
    inv = ROPE_BASE ** (-np.arange(0, HEAD_DIM, 2) / HEAD_DIM)
    angle = pos[:, None] * inv[None, :]
    cos, sin = np.cos(angle), np.sin(angle)

    def rms(a, w):
        return a / np.sqrt((a * a).mean(-1, keepdims=True) + 1e-6) * w

    def rope(a):  # a: (T, n_head, HEAD_DIM), adjacent pairs (llama's "normal" RoPE)
        even, odd = a[..., 0::2], a[..., 1::2]
        r = np.empty_like(a)
        r[..., 0::2] = even * cos[:, None, :] - odd * sin[:, None, :]
        r[..., 1::2] = even * sin[:, None, :] + odd * cos[:, None, :]
        return r

    for layer in range(shape["layers"]):
        p = "blk.%d." % layer
        h = rms(x, weights[p + "attn_norm.weight"])
        q = rope((h @ weights[p + "attn_q.weight"].T).reshape(len(ids), n_head, HEAD_DIM))
        k = rope((h @ weights[p + "attn_k.weight"].T).reshape(len(ids), n_head, HEAD_DIM))
        v = (h @ weights[p + "attn_v.weight"].T).reshape(len(ids), n_head, HEAD_DIM)
        scores = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(HEAD_DIM)
        scores = np.where(np.tril(np.ones((len(ids), len(ids)), bool))[None], scores, -np.inf)
        att = np.exp(scores - scores.max(-1, keepdims=True))
        att /= att.sum(-1, keepdims=True)
        x = x + np.einsum("hqk,khd->qhd", att, v).reshape(len(ids), d) @ weights[p + "attn_output.weight"].T
        h = rms(x, weights[p + "ffn_norm.weight"])
        gate = h @ weights[p + "ffn_gate.weight"].T
        x = x + ((gate / (1 + np.exp(-gate))) * (h @ weights[p + "ffn_up.weight"].T)) @ weights[p + "ffn_down.weight"].T
    return rms(x[-1], weights["output_norm.weight"]) @ weights["output.weight"].T
