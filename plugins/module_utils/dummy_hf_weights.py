# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuserve.llm contributors
# Apache License 2.0 (see LICENSE)
"""Hand-set weights for the burn-in GLM folder (dummy_hf), written as model.safetensors, for the
checks `--load-format dummy` cannot pass: with the engine's random weights greedy decoding repeats
one token, so no JSON string closes and grammar-constrained replies (response_format, forced tool
calls) run to max_tokens; an MTP drafter never agrees with its model.

The design is dummy_gguf's, on GLM-4.5's shapes: the residual stream holds a one-hot code of the
current token (the burn-in tokenizer has ~330 tokens; the stream is 4096 wide); every attention
output, MLP and expert is zero, so the stream reaches the head unchanged and the head is a bigram
table: logit[next] = B[current, next] + baseline[next].

* after the generation prompt ("<|assistant|>", or "</think>" with thinking off) a fixed reply
  follows and ends with <|user|>, a stop token;
* JSON terminates under any grammar: '"' beats every other token a string may hold (the stop
  tokens too, which xgrammar lets into strings as text), '}' and ']' beat ',', a digit beats
  whitespace (numbers are one digit), and where the value is complete a stop token beats the
  whitespace that is all the grammar still allows;
* a forced tool call in GLM's form (vLLM 0.26.0 asks xgrammar for its glm_4_7 structural tag):
  each tag beats the whitespace allowed before it, a string value is empty, a typed one a digit
  or the first enum value the grammar spells, </tool_call> beats another <arg_key> where the
  remaining keys are optional, and the reply stops after the call;
* the MTP layer (eh_proj passes the next token's embedding through; its block is zero too)
  predicts with the same table, so every unconstrained draft is accepted.

`mtp_agreement` below 1 (issue 27 item 4: drafting between the random weights' 0 % and this 100 %)
changes two things, and 1 leaves the bytes as they were:

* past the stop token (only `ignore_eos` gets there, as bench does) the reply runs around a cycle
  of ordinary tokens (printable, none that JSON or the tool-call tags rank: a seeded order) instead
  of repeating '"', so what a fixed-length reply generates past the stop has the agreement too. A
  grammar that forces a string onto a cycle token and then lets it run would follow the cycle: use
  these folders to measure drafting, the default ones for verify;
* for a chosen set of tokens eh_proj sends the next token's code to another token's place, whose
  row of the table ranks another next token first: after such a token the draft is wrong. vLLM
  0.26.0 gives the MTP layer its model's lm_head and embedding (its own shared_head.head is
  written, and replaced at load), so the disagreement lives in eh_proj. The set is the tokens the
  greedy reply visits, taken in a seeded order, as many as bring the acceptance of one-token
  drafting over a `mtp_reply_tokens`-token reply (simulated as vLLM drafts: after each step, from
  the newest token) nearest to the fraction asked; of the other tokens a seeded share of
  1 - agreement.

Routing is degenerate (a zero router ties every expert) and the kernels multiply zeros: use it to
prove serving, grammars and drafting, never to measure the model's speed (that is `--load-format
dummy`); drafting's cost against its gain, both sides on the same kernels, is what `mtp_agreement`
measures (tests/gpu/mtp_fraction.py).
Zero regions are left as holes in a sparse file: the 2-layer file is 14.9 GB long, 26 MB on disk.

A config with a 128 x 128 block-FP8 `quantization_config` (the weights stage's `weights_fp8_quantization`, as
GLM-4.5-Air-FP8 declares it) gets the checkpoint an FP8 engine loads: every attention projection, MLP and expert
weight F8_E4M3 (zero, a hole) with its float32 `weight_scale_inv` per 128 x 128 block (ones), except the
`ignored_layers` it names (dummy_hf keeps GLM-4.5-Air's dense MLP, 10944 wide, in bf16); the rest as above
(embeddings, heads, norms, biases, router and eh_proj stay unquantised in such checkpoints and in vLLM). Half the
bytes of bf16: GLM-4.5-Air's full depth, 205.8 GiB in bf16, is 105.4 GiB as FP8, which one 141 GB GPU holds.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import struct

from ansible_collections.gpuserve.llm.plugins.module_utils import dummy_gguf, dummy_hf

REPLY = dummy_gguf.REPLY
CHAIN = 10.0
# Below every JSON token: xgrammar (vLLM) lets special tokens into a JSON string as their text, so a
# stop token above '"' ends the reply inside the first string (seen on vLLM 0.26.0: '{"name":"').
STOP = 2.2
BASELINE = {'"': 5.5, "}": 4.5, "]": 4.5, ",": 4.0, "{": 3.0}
DIGIT = 2.5           # above any noise: a number is one digit, never whitespace first
# GLM's tool-call tags, above whitespace (xgrammar's glm_4_7 structural tag, which vLLM uses for
# forced tool calls, allows unbounded whitespace between them) and below '"' (inside a JSON string
# they are text). </arg_value> ends a typed value; a string value ends by the chain below.
TAGS = {"</arg_value>": 3.5, "</tool_call>": 3.2, "<tool_call>": 3.0, "<arg_key>": 3.0, "<arg_value>": 3.0}
NOISE = 2.0           # seeded uniform [0, NOISE) on ordinary transitions
WHITESPACE = [" ", "\n", "\t", "\r"]


def vocabulary(config):
    """{text: id} of the burn-in tokenizer's tokens (byte-level forms), and how many there are."""
    vocab, _merges = dummy_hf.base_vocabulary()
    ids = dict(vocab)
    ids.update(dummy_hf.special_tokens(config))
    return ids, max(ids.values()) + 1


def token_id(ids, text):
    return ids[text] if text in ids else ids[dummy_gguf.to_piece(text)]


def bigram(config, seed=0, tail=None):
    """B[current, next] + baseline[next] over the tokenizer's ids; with `tail` (token ids) the stop token
    <|user|> leads into them and they run in a cycle."""
    import numpy as np

    ids, n = vocabulary(config)
    table = np.random.default_rng(seed).uniform(0.0, NOISE, size=(n, n)).astype(np.float32)
    specials = [ids[t] for t in dummy_hf.GLM_SPECIAL]
    levels = dict((token_id(ids, t), v) for t, v in BASELINE.items())
    levels.update((token_id(ids, str(d)), DIGIT) for d in range(10))
    levels.update((ids[t], STOP) for t in dummy_hf.GLM_STOP)
    levels.update((ids[t], v) for t, v in TAGS.items())
    table[:, specials + list(levels)] = 0.0
    # Whitespace, and the words that start with it (" from"): xgrammar allows whitespace before a
    # typed value, and vLLM's GLM parser keeps it (' fahrenheit' is no enum value).
    lead = tuple(dummy_gguf.to_piece(c) for c in WHITESPACE)
    table[:, [i for t, i in ids.items() if t.startswith(lead)]] = 0.0
    for column, level in levels.items():
        table[:, column] += level
    reply = [token_id(ids, t) for t in REPLY] + [ids["<|user|>"]]
    # Thinking on: "<|assistant|>" <think></think> reply; thinking off the prompt ends with </think>.
    chain = [ids["<|assistant|>"], ids["<think>"], ids["</think>"]] + reply
    for a, b in zip(chain, chain[1:]):
        table[a, b] = CHAIN
    # A forced call's string value is empty (xgrammar's xml_string: any text until </arg_value>),
    # and after the call the reply stops.
    table[ids["<arg_value>"], ids["</arg_value>"]] = CHAIN
    table[ids["</tool_call>"], ids["<|user|>"]] = CHAIN
    if tail:
        cycle = [ids["<|user|>"]] + list(tail) + [tail[0]]
        for a, b in zip(cycle, cycle[1:]):
            table[a, b] = CHAIN
    return table


def tail_tokens(config, seed=0):
    """The cycle past the stop token: printable tokens without a level (no JSON punctuation, digit,
    whitespace, '<' or '>' that could spell a tag, none of the reply's), in a seeded order."""
    import numpy as np

    ids, _n = vocabulary(config)
    specials = set(dummy_hf.GLM_SPECIAL)
    banned = set(token_id(ids, t) for t in list(BASELINE) + ["[", "<", ">", "\\"] + [str(d) for d in range(10)])
    banned.update(token_id(ids, t) for t in REPLY)
    lead = tuple(dummy_gguf.to_piece(c) for c in WHITESPACE)
    printable = set(dummy_gguf.to_piece(chr(c)) for c in range(33, 127))
    pool = sorted(i for t, i in ids.items() if t not in specials and i not in banned and not t.startswith(lead)
                  and all(c in printable for c in t))
    order = np.random.default_rng([seed, 27, 4]).permutation(len(pool))
    return [pool[i] for i in order]


def drafting(step, draft, start, reply_tokens, k=1):
    """(accepted, drafted, tokens) of greedy speculative decoding as vLLM does it with an MTP drafter:
    the first token comes from the prompt (no draft), then each step drafts k tokens from the newest
    one (`draft(current)`, each draft from the one before), keeps the drafts up to the first that
    `step` (the model's greedy next token) disagrees with, and adds the model's own next token."""
    tokens = [step(start)]
    accepted = drafted = 0
    while len(tokens) < reply_tokens:
        current, drafts = tokens[-1], []
        for _k in range(k):
            drafts.append(draft(drafts[-1] if drafts else current))
        drafted += k
        for d in drafts:
            right = step(current)
            tokens.append(right)
            if d != right:
                break
            accepted += 1
            current = right
        else:
            tokens.append(step(current))
    return accepted, drafted, tokens[:reply_tokens]


def mtp_plan(config, seed=0, agreement=1.0, reply_tokens=256):
    """{"tail": cycle ids, "redirect": {token: token whose row eh_proj reads instead}} for an MTP layer
    that agrees with its model on about `agreement` of one-token drafts over a greedy reply of
    `reply_tokens` tokens after the generation prompt (thinking off); 1.0: no tail, no redirects."""
    import numpy as np

    if not 0.0 <= agreement <= 1.0:
        raise ValueError("mtp_agreement is a fraction from 0 to 1, not %r" % agreement)
    if agreement >= 1.0:
        return {"tail": [], "redirect": {}}
    ids, n = vocabulary(config)
    tail = tail_tokens(config, seed)
    table = bigram(config, seed, tail)
    nxt = table.argmax(axis=1)
    quote, other = token_id(ids, '"'), ids["<|assistant|>"]

    def wrong(c):  # a token whose row ranks another next token first
        return quote if nxt[quote] != nxt[c] else other

    def step(c):
        return int(nxt[c])

    def drafter_off(off):
        return lambda c: int(nxt[wrong(c)]) if c in off else int(nxt[c])

    start = ids["</think>"]
    visited = []
    for t in drafting(step, step, start, reply_tokens)[2]:
        if t not in visited:
            visited.append(t)
    rng = np.random.default_rng([seed, 27, 4, 1])
    order = [visited[i] for i in rng.permutation(len(visited))]
    best = None
    for j in range(len(order) + 1):
        accepted, drafted, _tokens = drafting(step, drafter_off(set(order[:j])), start, reply_tokens)
        gap = abs(accepted / float(drafted) - agreement)
        if best is None or gap < best[0]:
            best = (gap, j)
    redirect = dict((c, wrong(c)) for c in order[:best[1]])
    rest = rng.uniform(size=n)
    redirect.update((c, wrong(c)) for c in range(n) if c not in visited and rest[c] >= agreement)
    return {"tail": tail, "redirect": redirect}


def _rms_scale(config):
    """What RMSNorm multiplies a one-hot vector by (weight 1): 1 / sqrt(1/d + eps)."""
    return 1.0 / ((1.0 / config["hidden_size"] + config.get("rms_norm_eps", 1e-5)) ** 0.5)


class Tensor:
    """A tensor whose rows from `rows.shape[0]` on are zero (`rows` may be None: all zero)."""

    def __init__(self, shape, dtype="BF16", rows=None):
        self.shape, self.dtype, self.rows = [int(s) for s in shape], dtype, rows

    @property
    def nbytes(self):
        size = {"BF16": 2, "F32": 4, "F8_E4M3": 1}[self.dtype]
        for s in self.shape:
            size *= s
        return size

    def head_bytes(self):
        import numpy as np

        if self.rows is None:
            return b""
        a = np.ascontiguousarray(self.rows, dtype=np.float32)
        if self.dtype == "F32":
            return a.astype("<f4").tobytes()
        bits = a.view(np.uint32)
        rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16  # round to nearest even
        return rounded.astype("<u2").tobytes()


def fp8_block(config):
    """The [rows, columns] of a block-FP8 checkpoint's weight blocks, or None (a bf16 checkpoint). Only the 128 x 128
    blocks GLM-4.5/4.6's FP8 checkpoints use are written; another quantization is refused, not written as bf16."""
    q = config.get("quantization_config") or {}
    if not q:
        return None
    block = q.get("weight_block_size")
    if q.get("quant_method") != "fp8" or q.get("fmt", "e4m3") != "e4m3" or list(block or []) != [128, 128]:
        raise ValueError("hand-set weights are bf16 or 128 x 128 block FP8 (e4m3), not %s" % json.dumps(q))
    return [128, 128]


def tensors(config, seed=0, mtp_agreement=1.0, mtp_reply_tokens=256):
    """{HF name: Tensor} of a Glm4MoeForCausalLM checkpoint with its MTP layer, as designed above."""
    import numpy as np

    d, vocab_size = config["hidden_size"], config["vocab_size"]
    _ids, n = vocabulary(config)
    if n >= d:
        raise ValueError("the one-hot code needs hidden_size > %d tokens" % n)
    s = _rms_scale(config)
    one_hot = np.eye(n, d, dtype=np.float32)
    # Head rows of the ids the tokenizer has (the others stay zero: logit 0, below every real token).
    head = np.zeros((n, d), np.float32)
    plan = mtp_plan(config, seed, mtp_agreement, mtp_reply_tokens)
    head[:, :n] = bigram(config, seed, plan["tail"]).T / s
    heads, kv, hd = config["num_attention_heads"], config["num_key_value_heads"], config.get("head_dim") or 128
    experts, mi = config["n_routed_experts"], config["moe_intermediate_size"]
    shared = mi * int(config.get("n_shared_experts") or 0)
    block = fp8_block(config)
    # What the config keeps unquantised (dummy_hf: the dense layer's MLP whose width no 128 block divides)
    ignored = set((config.get("quantization_config") or {}).get("ignored_layers") or [])

    def weight(name, shape):
        """A zero linear weight: bf16, or block-FP8 with its scales (ones) where the checkpoint is FP8."""
        if not block or name[:-len(".weight")] in ignored:
            return {name: Tensor(shape)}
        scales = [-(-shape[0] // block[0]), -(-shape[1] // block[1])]
        return {name: Tensor(shape, "F8_E4M3"), name + "_scale_inv": Tensor(scales, "F32", rows=np.ones(scales))}

    out = {"model.embed_tokens.weight": Tensor([vocab_size, d], rows=one_hot),
           "model.norm.weight": Tensor([d], rows=np.ones(d)),
           "lm_head.weight": Tensor([vocab_size, d], rows=head)}

    def layer(i, moe):
        p = "model.layers.%d." % i
        t = {p + "input_layernorm.weight": Tensor([d], rows=np.ones(d)),
             p + "post_attention_layernorm.weight": Tensor([d], rows=np.ones(d))}
        for proj, rows in (("q", heads * hd), ("k", kv * hd), ("v", kv * hd)):
            t.update(weight(p + "self_attn.%s_proj.weight" % proj, [rows, d]))
            t[p + "self_attn.%s_proj.bias" % proj] = Tensor([rows])
        t.update(weight(p + "self_attn.o_proj.weight", [d, heads * hd]))

        def mlp(q, inter):
            for proj, shape in (("gate", [inter, d]), ("up", [inter, d]), ("down", [d, inter])):
                t.update(weight(q + "%s_proj.weight" % proj, shape))

        if not moe:
            mlp(p + "mlp.", config["intermediate_size"])
            return t
        t[p + "mlp.gate.weight"] = Tensor([experts, d])
        t[p + "mlp.gate.e_score_correction_bias"] = Tensor([experts], "F32")
        for e in range(experts):
            mlp(p + "mlp.experts.%d." % e, mi)
        if shared:
            mlp(p + "mlp.shared_experts.", shared)
        return t

    layers, dense = config["num_hidden_layers"], int(config.get("first_k_dense_replace", 0))
    for i in range(layers):
        out.update(layer(i, i >= dense))
    for m in range(int(config.get("num_nextn_predict_layers") or 0)):
        i = layers + m
        p = "model.layers.%d." % i
        out.update(layer(i, True))
        pass_through = np.zeros((n, 2 * d), np.float32)
        pass_through[np.arange(n), np.arange(n)] = 1.0 / s  # enorm's output back to a one-hot
        for token, instead in plan["redirect"].items():  # ... at another token's place
            pass_through[token, token] = 0.0
            pass_through[instead, token] = 1.0 / s
        out.update({p + "enorm.weight": Tensor([d], rows=np.ones(d)), p + "hnorm.weight": Tensor([d], rows=np.ones(d)),
                    p + "eh_proj.weight": Tensor([d, 2 * d], rows=pass_through),
                    p + "embed_tokens.weight": Tensor([vocab_size, d], rows=one_hot),
                    p + "shared_head.norm.weight": Tensor([d], rows=np.ones(d)),
                    p + "shared_head.head.weight": Tensor([vocab_size, d], rows=head)})
    return out


def write(path, config, seed=0, mtp_agreement=1.0, mtp_reply_tokens=256):
    """model.safetensors at `path`, zero regions as holes. Returns the header (names, shapes, offsets)."""
    items = sorted(tensors(config, seed, mtp_agreement, mtp_reply_tokens).items())
    what = "burn-in, hand-set weights (seed %d%s)" % (seed, ", block-FP8 linears" if fp8_block(config) else "")
    if mtp_agreement < 1.0:
        what += ", MTP agreement %g over %d-token replies" % (mtp_agreement, mtp_reply_tokens)
    header, offset = {"__metadata__": {"format": "pt", "gpuserve": what}}, 0
    for name, t in items:
        header[name] = {"dtype": t.dtype, "shape": t.shape, "data_offsets": [offset, offset + t.nbytes]}
        offset += t.nbytes
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    start = 8 + len(text)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for name, t in items:
            data = t.head_bytes()
            if data:
                f.seek(start + header[name]["data_offsets"][0])
                f.write(data)
        f.truncate(start + offset)
    return header


def read(path, name):
    """One tensor back as float32 (tests and the GPU script's own check)."""
    import numpy as np

    with open(path, "rb") as f:
        size = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(size))
        meta = header[name]
        f.seek(8 + size + meta["data_offsets"][0])
        raw = f.read(meta["data_offsets"][1] - meta["data_offsets"][0])
    if meta["dtype"] == "F32":
        return np.frombuffer(raw, "<f4").reshape(meta["shape"])
    if meta["dtype"] == "F8_E4M3":  # the written ones are all zero; any other byte is refused, not misread
        data = np.frombuffer(raw, np.uint8)
        if (data & 0x7F).any():
            raise ValueError("%s holds non-zero F8_E4M3 bytes, which this reader does not decode" % name)
        return np.zeros(meta["shape"], np.float32)
    return (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32).reshape(meta["shape"])


def greedy(path, config):
    """next(current, allowed=None): the token the written model picks after `current` (among the
    `allowed` ids, as a grammar would), from the file's own bytes: embedding, final norm, head."""
    import numpy as np

    embed, norm = read(path, "model.embed_tokens.weight"), read(path, "model.norm.weight")
    head = read(path, "lm_head.weight")
    eps = config.get("rms_norm_eps", 1e-5)

    def pick(current, allowed=None):
        x = embed[current]
        logits = head @ (x / np.sqrt((x * x).mean() + eps) * norm)
        if allowed is not None:
            allowed = list(allowed)
            return allowed[int(np.argmax(logits[allowed]))]
        return int(np.argmax(logits))
    return pick


def drafter(path, config):
    """draft(current): the token the written MTP layer drafts after `current`, from the file's own bytes
    as vLLM 0.26.0 runs it: the model's embedding and lm_head (shared with the MTP layer), the layer's
    enorm, eh_proj (the hidden-state half reads zero weights) and shared_head's norm (its block adds 0)."""
    import numpy as np

    layer = "model.layers.%d." % config["num_hidden_layers"]
    embed, head = read(path, "model.embed_tokens.weight"), read(path, "lm_head.weight")
    enorm, eh = read(path, layer + "enorm.weight"), read(path, layer + "eh_proj.weight")
    norm = read(path, layer + "shared_head.norm.weight")
    eps, d = config.get("rms_norm_eps", 1e-5), config["hidden_size"]

    def rms(x, weight):
        return x / np.sqrt((x * x).mean() + eps) * weight

    def pick(current):
        x = eh[:, :d] @ rms(embed[current], enorm)
        return int(np.argmax(head @ rms(x, norm)))
    return pick
