# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuserve.llm contributors
# Apache License 2.0 (see LICENSE)
"""A tiny llama-architecture GGUF for burn-in, with hand-set weights (docs/engines.md: purely random
weights cannot start a tool call or close a JSON string, so the engine's lazy tool grammar never
starts and `json_object` runs to max_tokens).

The residual stream is wide enough to hold a one-hot code of the current token, so every
behaviour is a weight we set, not one we hope for:

* the output head is a bigram table: logit[next] = B[current, next] + baseline[next];
  - after the chat template's generation prompt ("<|im_start|>assistant\\n") a fixed reply
    follows and ends with <|im_end|>;
  - baselines make JSON terminate under any grammar: '"' beats every other token a string may
    hold (strings close at once), '}' and ']' beat ',' and whitespace, '{' beats whitespace,
    <|im_end|> beats all of them where the grammar allows it;
  - seeded noise below every baseline fills the other transitions, so the seed changes the file
    and the text after an ignored end of stream, never the replies above;
* one attention head of layer 0 spots a <tools> token anywhere before (its query and key sit in
  the slowest RoPE pair, with a large rope base, so the match does not depend on distance) and
  writes a flag; the flag lifts <tool_call> over the reply's first word, so with tools in the
  prompt the first reply token is <tool_call> and the engine's tool grammar takes over.

Needs numpy and gguf (the host virtualenv's requirements); imported lazily so that the module
imports without them.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import json

ARCH = "llama"
ROPE_BASE = 1.0e8          # slowest pair turns ~1e-8 rad a position: the tools head ignores distance
HEAD_DIM = 128

# Words that become single tokens (byte-level BPE merges). Leading-space forms are words too.
WORDS = [
    "system", "user", "assistant", "tool", "tools", "You", " are", " a", " helpful", " assistant",
    " Burn", "-in", " reply", " from", " the", " dummy", " model", " is", " serving", " on",
    " this", " host", "name", "arguments", "type", "object", "string", "properties", "required",
    "function", "description", " function", " call", " one", " or", " more", " functions", " to",
    " with", " within", " XML", " tags", " json", " For", " each", " return", " and", " user",
    " query", " provided", " signatures", " assist", " Tools", "Tools", "Hello", " Hello",
]
SPECIAL = [  # (text, llama.cpp token type): CONTROL = 3 is not printed, USER_DEFINED = 4 is
    ("<|endoftext|>", 3), ("<|im_start|>", 3), ("<|im_end|>", 3),
    ("<tool_call>", 4), ("</tool_call>", 4), ("<tools>", 4), ("</tools>", 4),
    ("<tool_response>", 4), ("</tool_response>", 4), ("<think>", 4), ("</think>", 4),
]
# The fixed reply after the generation prompt, as tokens (byte-level forms of WORDS and bytes).
REPLY = [" Burn", "-in", " reply", " from", " a", " dummy", " model", ":", " this", " host", " is",
         " serving", "."]
# Logit levels (the margins the tests check against the engine's grammars).
CHAIN = 10.0          # a reply token after the one before
TOOL_CALL_AFTER_NL = 8.0
CLOSE_CALL = 7.0
TOOLS_FLAG = 3.0      # added to <tool_call> everywhere when <tools> was seen: only after '\n' it wins
BASELINE = {"<|im_end|>": 6.0, '"': 5.5, "}": 4.5, "]": 4.5, ",": 4.0, "{": 3.0}
NOISE = 2.0           # seeded uniform [0, NOISE) on ordinary transitions: below every baseline


def bytes_to_unicode():
    """GPT-2's byte-to-printable map, which byte-level BPE vocabularies are written in."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) + list(range(ord("\xae"), ord("\xff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


def to_piece(text):
    table = bytes_to_unicode()
    return "".join(table[b] for b in text.encode("utf-8"))


def vocabulary():
    """(tokens, types, merges): 256 byte tokens, word prefixes by merges, then the special tokens."""
    table = bytes_to_unicode()
    tokens = [table[b] for b in range(256)]
    types = [1] * 256  # NORMAL
    merges, seen = [], set(tokens)
    for word in WORDS:
        piece = to_piece(word)
        for i in range(2, len(piece) + 1):
            left, right, whole = piece[:i - 1], piece[i - 1], piece[:i]
            if whole not in seen:
                seen.add(whole)
                tokens.append(whole)
                types.append(1)
                merges.append("%s %s" % (left, right))
    for text, kind in SPECIAL:
        tokens.append(text)
        types.append(kind)
    return tokens, types, merges


def layout(layers=2, context=8192):
    """The shapes: the stream holds a one-hot token code, a constant and the tools flag."""
    tokens, types, merges = vocabulary()
    n_vocab = len(tokens)
    n_embd = -(-(n_vocab + 2) // HEAD_DIM) * HEAD_DIM
    return {
        "tokens": tokens, "types": types, "merges": merges, "n_vocab": n_vocab, "n_embd": n_embd,
        "n_head": n_embd // HEAD_DIM, "n_ff": 64, "layers": int(layers), "context": int(context),
        "bias_dim": n_vocab, "flag_dim": n_vocab + 1,
    }


def token_id(shape, text):
    """The id of a token given as text (special tokens as written, others in their byte form)."""
    specials = dict(SPECIAL)
    return shape["tokens"].index(text if text in specials else to_piece(text))


def bigram(shape, seed):
    """B[current, next] + baseline[next], as logits before the flag."""
    import numpy as np

    n = shape["n_vocab"]
    rng = np.random.default_rng(seed)
    table = rng.uniform(0.0, NOISE, size=(n, n)).astype(np.float32)
    structural = [token_id(shape, t) for t in BASELINE] + [token_id(shape, t) for t, _k in SPECIAL]
    table[:, structural] = 0.0
    for text, level in BASELINE.items():
        table[:, token_id(shape, text)] += level
    newline = token_id(shape, "\n")
    chain = [newline] + [token_id(shape, t) for t in REPLY] + [token_id(shape, "<|im_end|>")]
    for a, b in zip(chain, chain[1:]):
        table[a, b] = CHAIN
    table[newline, token_id(shape, "<tool_call>")] = TOOL_CALL_AFTER_NL
    # The Hermes/Qwen form the engine's parser expects: "<tool_call>\n{...}\n</tool_call>".
    table[token_id(shape, "<tool_call>"), newline] = CHAIN
    # After a '}' the grammar allows "</tool_call>" only where a call may close: take it there
    # (over ',' that would chain a second call into the same tag).
    table[token_id(shape, "}"), token_id(shape, "</tool_call>")] = CLOSE_CALL
    return table


def tensors(shape, seed):
    """{gguf tensor name: numpy array (rows = outputs)} for the design described above."""
    import numpy as np

    n_vocab, d, n_ff = shape["n_vocab"], shape["n_embd"], shape["n_ff"]
    bias, flag = shape["bias_dim"], shape["flag_dim"]
    tools = token_id(shape, "<tools>")
    # RMSNorm of (one-hot + constant) gives sqrt(d / 2) on both; weights below undo that scale.
    s = float(np.sqrt(d / 2.0))
    emb = np.zeros((n_vocab, d), np.float32)
    emb[np.arange(n_vocab), np.arange(n_vocab)] = 1.0
    emb[:, bias] = 1.0

    out = {"token_embd.weight": emb, "output_norm.weight": np.ones(d, np.float32)}
    table = bigram(shape, seed)
    head = np.zeros((n_vocab, d), np.float32)
    head[:, :n_vocab] = table.T / s
    head[token_id(shape, "<tool_call>"), flag] = TOOLS_FLAG / s
    out["output.weight"] = head

    pair = HEAD_DIM - 2           # the slowest RoPE pair of head 0
    gain = 18.0                   # q.k / sqrt(head_dim) = 18 * 18 / 11.3 ~ 29: one token takes all
    for layer in range(shape["layers"]):
        q = np.zeros((d, d), np.float32)
        k = np.zeros((d, d), np.float32)
        v = np.zeros((d, d), np.float32)
        o = np.zeros((d, d), np.float32)
        if layer == 0:
            q[pair, bias] = gain / s
            k[pair, tools] = gain / s
            v[0, tools] = 1.0 / s
            o[flag, 0] = 1.0
        prefix = "blk.%d." % layer
        out[prefix + "attn_norm.weight"] = np.ones(d, np.float32)
        out[prefix + "attn_q.weight"] = q
        out[prefix + "attn_k.weight"] = k
        out[prefix + "attn_v.weight"] = v
        out[prefix + "attn_output.weight"] = o
        out[prefix + "ffn_norm.weight"] = np.ones(d, np.float32)
        out[prefix + "ffn_gate.weight"] = np.zeros((n_ff, d), np.float32)
        out[prefix + "ffn_up.weight"] = np.zeros((n_ff, d), np.float32)
        out[prefix + "ffn_down.weight"] = np.zeros((d, n_ff), np.float32)
    return out


def write(path, seed=0, layers=2, context=8192, chat_template="", name="gpuserve burn-in llama"):
    """Write the GGUF to `path`. Same inputs, same bytes."""
    import gguf
    import numpy as np

    shape = layout(layers, context)
    writer = gguf.GGUFWriter(path, ARCH)
    writer.add_name("%s (seed %d)" % (name, seed))
    writer.add_context_length(shape["context"])
    writer.add_embedding_length(shape["n_embd"])
    writer.add_feed_forward_length(shape["n_ff"])
    writer.add_block_count(shape["layers"])
    writer.add_head_count(shape["n_head"])
    writer.add_head_count_kv(shape["n_head"])
    writer.add_rope_dimension_count(HEAD_DIM)
    writer.add_rope_freq_base(ROPE_BASE)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_vocab_size(shape["n_vocab"])
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen2")
    writer.add_token_list(shape["tokens"])
    writer.add_token_types(shape["types"])
    writer.add_token_merges(shape["merges"])
    writer.add_bos_token_id(token_id(shape, "<|endoftext|>"))
    writer.add_eos_token_id(token_id(shape, "<|im_end|>"))
    writer.add_eot_token_id(token_id(shape, "<|im_end|>"))
    writer.add_pad_token_id(token_id(shape, "<|endoftext|>"))
    writer.add_add_bos_token(False)
    if chat_template:
        writer.add_chat_template(chat_template)
    write_tensors(writer, tensors(shape, seed))
    return describe(shape, seed)


def write_tensors(writer, named):
    """The tensors ({name: array}; matrices as f16, vectors as they are) and the file's end."""
    import numpy as np
    for tensor_name, array in named.items():
        writer.add_tensor(tensor_name, array if array.ndim == 1 else array.astype(np.float16))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def describe(shape, seed):
    """What the file is, for the module's result and the reports."""
    return {
        "architecture": ARCH, "seed": int(seed), "layers": shape["layers"], "n_embd": shape["n_embd"],
        "n_vocab": shape["n_vocab"], "context": shape["context"],
        "reply": "".join(REPLY).strip(),
    }


def digest(path):
    sha = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            sha.update(block)
    return sha.hexdigest()


def manifest(**inputs):
    """The inputs that determine the file's bytes, as a stable string (the module's change key)."""
    return json.dumps(inputs, sort_keys=True)
