"""What a vLLM server's log says it selected, read the same way by the GPU scripts that start one
(bench_recipe_vs_defaults.py, profile_step.py)."""
import re

# vLLM's own choice ("Using FLASH_ATTN attention backend ..."), or the one --attention-backend named
# ("Using AttentionBackendEnum.TRITON_ATTN backend.")
ATTENTION_BACKEND = r"Using (?:AttentionBackendEnum\.)?(\w+) (?:attention )?backend[ .]"
# patch 0004's own lines: the tuned table read or refused, each shape's GEMV in use, not used, not taken or failed
GEMV_LINE = r"gpuserve\.llm split-K GEMV (?:configs from|in use|not used|not taken|off for|failed for|: )[^\n]*"


def gemv_lines(text):
    """Patch 0004's lines in a log, each once, in order, without the scale strides."""
    return list(dict.fromkeys(m.group(0).split("; scale strides")[0] for m in re.finditer(GEMV_LINE, text)))
