"""The hand-set GLM checkpoint (dummy_hf_weights) on a narrow config: the file written is what vLLM's
Glm4MoeForCausalLM + MTP load, sparse, and the design holds when the model is run from the file's
own bytes (bf16 as written): the fixed reply, JSON that closes under a grammar, an MTP layer that
predicts what its model will say."""
import json
import os

import numpy as np
import pytest
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Tokenizer

from ansible_collections.gpuserve.llm.plugins.module_utils import dummy_gguf as g
from ansible_collections.gpuserve.llm.plugins.module_utils import dummy_hf as h
from ansible_collections.gpuserve.llm.plugins.module_utils import dummy_hf_weights as w

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GLM = open(os.path.join(ROOT, "templates", "chat", "glm45.jinja")).read()
NARROW = {"hidden_size": 1024, "num_attention_heads": 8, "num_key_value_heads": 2, "intermediate_size": 384,
          "moe_intermediate_size": 64, "n_routed_experts": 4, "num_experts_per_tok": 2, "vocab_size": 4096}


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    config = h.model_config("glm4_moe", 2, NARROW)
    path = str(tmp_path_factory.mktemp("glm") / "model.safetensors")
    header = w.write(path, config, seed=0)
    return path, config, header, w.greedy(path, config)


def test_the_file_holds_every_tensor_vllm_loads_for_the_model_and_its_mtp_layer(written):
    path, config, header, _next = written
    names = set(header) - {"__metadata__"}
    # Layer 0 dense, layer 1 MoE, layer 2 the MTP layer (num_hidden_layers + 0), as in GLM-4.5's checkpoints.
    assert "model.layers.0.mlp.gate_proj.weight" in names and "model.layers.0.mlp.experts.0.up_proj.weight" not in names
    assert {"model.layers.1.mlp.experts.%d.down_proj.weight" % e for e in range(4)} <= names
    assert header["model.layers.1.mlp.gate.e_score_correction_bias"]["dtype"] == "F32"
    assert header["model.layers.1.mlp.shared_experts.down_proj.weight"]["shape"] == [1024, 64]
    for part in ("enorm", "hnorm", "eh_proj", "embed_tokens", "shared_head.norm", "shared_head.head"):
        assert "model.layers.2.%s.weight" % part in names
    assert header["model.layers.2.eh_proj.weight"]["shape"] == [1024, 2048]
    assert "model.layers.2.self_attn.q_proj.bias" in names and "model.layers.3.enorm.weight" not in names
    # Offsets tile the data exactly; the zeros are holes.
    spans = sorted(v["data_offsets"] for k, v in header.items() if k != "__metadata__")
    assert spans[0][0] == 0 and all(a[1] == b[0] for a, b in zip(spans, spans[1:]))
    st = os.stat(path)
    assert st.st_size > spans[-1][1] and st.st_blocks * 512 < st.st_size / 2
    assert float(np.abs(w.read(path, "model.layers.1.mlp.experts.3.gate_proj.weight")).max()) == 0.0


FP8 = {"quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                               "weight_block_size": [128, 128]}}


def test_a_block_fp8_config_gets_fp8_linears_with_their_scales_and_the_same_design(written, tmp_path):
    """GLM-4.5-Air-FP8's quantization: each linear an F8_E4M3 weight and a float32 weight_scale_inv a 128 x 128 block
    (the names vLLM's Fp8LinearMethod and FP8 MoE load), what the design rests on unquantised and the same bytes,
    so the reply, the drafts and the agreement are the bf16 file's; about half its bytes."""
    path, config, header, step = written
    fp8_config = h.model_config("glm4_moe", 2, dict(NARROW, **FP8))
    fp8_path = str(tmp_path / "fp8.safetensors")
    fp8 = w.write(fp8_path, fp8_config, seed=0)
    linears = sorted(k for k, v in header.items() if k.endswith("_proj.weight") and k.split(".")[-2] != "eh_proj")
    # q, k, v, o in 3 layers (the MTP layer too), the dense MLP of layer 0, 4 experts and the shared one in 2 MoE layers
    assert len(linears) == 4 * 3 + 3 + 4 * 3 * 2 + 3 * 2, linears
    assert set(fp8) - {"__metadata__"} == set(header) - {"__metadata__"} | {k + "_scale_inv" for k in linears}
    for name in linears:
        rows, cols = header[name]["shape"]
        assert fp8[name]["dtype"] == "F8_E4M3" and fp8[name]["shape"] == [rows, cols], name
        assert fp8[name + "_scale_inv"]["dtype"] == "F32" and fp8[name + "_scale_inv"]["shape"] == [
            -(-rows // 128), -(-cols // 128)], name
    assert fp8["model.layers.1.mlp.experts.3.down_proj.weight_scale_inv"]["shape"] == [8, 1]  # 1024 x 64
    assert float(w.read(fp8_path, "model.layers.1.self_attn.q_proj.weight_scale_inv").min()) == 1.0
    assert float(np.abs(w.read(fp8_path, "model.layers.1.mlp.experts.3.gate_proj.weight")).max()) == 0.0
    for name in ("model.embed_tokens.weight", "lm_head.weight", "model.layers.2.eh_proj.weight",
                 "model.layers.2.shared_head.head.weight", "model.layers.1.mlp.gate.weight",
                 "model.layers.1.self_attn.q_proj.bias"):
        assert fp8[name]["dtype"] == header[name]["dtype"] and np.array_equal(w.read(fp8_path, name),
                                                                              w.read(path, name)), name
    assert "block-FP8" in fp8["__metadata__"]["gpuserve"] and "block-FP8" not in header["__metadata__"]["gpuserve"]
    # A dense MLP no 128 block divides (GLM-4.5-Air's 10944): dummy_hf lists it in ignored_layers, and it stays bf16
    odd = w.tensors(h.model_config("glm4_moe", 2, dict(NARROW, intermediate_size=400, **FP8)))
    assert odd["model.layers.0.mlp.up_proj.weight"].dtype == "BF16" and "model.layers.0.mlp.up_proj.weight_scale_inv" \
        not in odd and odd["model.layers.1.mlp.experts.0.up_proj.weight"].dtype == "F8_E4M3"
    ids, _n = w.vocabulary(config)
    fp8_step, fp8_draft, draft = w.greedy(fp8_path, fp8_config), w.drafter(fp8_path, fp8_config), w.drafter(path, config)
    assert all(fp8_step(c) == step(c) and fp8_draft(c) == draft(c) for c in sorted(ids.values())[:400])

    def data_bytes(h_):
        return max(v["data_offsets"][1] for k, v in h_.items() if k != "__metadata__")

    linear_bytes = sum(header[k]["data_offsets"][1] - header[k]["data_offsets"][0] for k in linears)
    assert data_bytes(header) - data_bytes(fp8) > 0.49 * linear_bytes  # each linear a byte a weight, not two


@pytest.mark.parametrize("quantization", [
    {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [64, 64]},
    {"quant_method": "awq", "bits": 4}, {"quant_method": "fp8", "fmt": "e5m2", "weight_block_size": [128, 128]}])
def test_a_quantization_the_writer_cannot_make_is_refused_not_written_as_bf16(quantization, tmp_path):
    config = h.model_config("glm4_moe", 2, dict(NARROW, quantization_config=quantization))
    with pytest.raises(ValueError, match="128 x 128 block FP8"):
        w.write(str(tmp_path / "m.safetensors"), config)
    assert not (tmp_path / "m.safetensors").exists()


def test_same_inputs_same_bytes_and_the_seed_changes_them(written, tmp_path):
    path, config, _h, step = written
    again, other = str(tmp_path / "a.safetensors"), str(tmp_path / "b.safetensors")
    w.write(again, config, seed=0)
    w.write(other, config, seed=1)
    assert g.digest(again) == g.digest(path) != g.digest(other)


def test_after_the_generation_prompt_the_fixed_reply_follows_and_stops(written):
    path, config, _h, step = written
    tok = Tokenizer.from_str(json.dumps(h.tokenizer_json(config)))
    prompt = ImmutableSandboxedEnvironment().from_string(GLM).render(
        messages=[{"role": "user", "content": "Hello"}], add_generation_prompt=True, enable_thinking=False)
    current = tok.encode(prompt).ids[-1]
    assert current == h.special_tokens(config)["</think>"]
    out = []
    for _step in range(len(g.REPLY) + 1):
        current = step(current)
        out.append(current)
    assert tok.decode(out[:-1]) == "".join(g.REPLY) and out[-1] == h.special_tokens(config)["<|user|>"]


def test_json_closes_where_a_grammar_lets_it(written):
    path, config, _h, step = written
    ids, n = w.vocabulary(config)
    specials = set(h.special_tokens(config).values())
    text = [i for i in range(n) if i not in specials]
    quote, digits = w.token_id(ids, '"'), [w.token_id(ids, str(d)) for d in range(10)]
    space = [w.token_id(ids, c) for c in w.WHITESPACE]
    stops = [h.special_tokens(config)[t] for t in h.GLM_STOP]
    chain = {w.token_id(ids, t) for t in g.REPLY}
    assert step(quote, text + stops) == quote
    for current in text:
        # Inside a string any text token may come, and the stop tokens as their text (xgrammar): the
        # string closes at once (the fixed reply's own tokens go on with it, but a string never
        # starts one: after its opening quote the next token is the closing one).
        if current not in chain:
            assert step(current, text + stops) == quote
        # Where a number may start (or whitespace): a digit, never whitespace.
        assert step(current, digits + space + [w.token_id(ids, "-")]) in digits
        # After a member: close the object (or array) rather than go on.
        assert step(current, [w.token_id(ids, ","), w.token_id(ids, "}")] + space) == w.token_id(ids, "}")
        assert step(current, [w.token_id(ids, ","), w.token_id(ids, "]")] + space) == w.token_id(ids, "]")
        # Where an object begins or a key must come.
        assert step(current, [w.token_id(ids, "{")] + space) == w.token_id(ids, "{")
        # Complete: stop.
        assert step(current, stops + space) in stops


def test_a_forced_glm_tool_call_closes_each_part_where_the_structural_tag_lets_it(written):
    """The steps of xgrammar's glm_4_7 structural tag (vLLM's forced tool calls), as allowed sets."""
    path, config, _h, step = written
    ids, n = w.vocabulary(config)
    tag = dict((t, ids[t]) for t in w.TAGS)
    specials = set(h.special_tokens(config).values())
    text = [i for i in range(n) if i not in specials]
    space = [w.token_id(ids, c) for c in w.WHITESPACE]
    stops = [h.special_tokens(config)[t] for t in h.GLM_STOP]
    think_end = ids["</think>"]
    chain = {w.token_id(ids, t) for t in g.REPLY}
    led = [i for t, i in ids.items() if t.startswith(tuple(g.to_piece(c) for c in w.WHITESPACE))]
    letters = [w.token_id(ids, "c"), w.token_id(ids, "f")]
    # The call opens as one token, not as the characters of "<tool_call>".
    assert step(think_end, [tag["<tool_call>"], w.token_id(ids, "<")]) == tag["<tool_call>"]
    for current in text:
        # Whitespace may come before each tag: the tag comes.
        assert step(current, space + [tag["<arg_key>"]]) == tag["<arg_key>"]
        assert step(current, space + [tag["<arg_value>"]]) == tag["<arg_value>"]
        # An enum value may follow whitespace, or a word that starts with it: its first letter comes
        # (the fixed reply's tokens excepted: they follow "<arg_value>" or whitespace nowhere).
        if current not in chain:
            assert step(current, led + letters) in letters
        # A typed value ended (a digit, an enum value): </arg_value> over more digits or whitespace.
        assert step(current, space + [w.token_id(ids, str(d)) for d in range(10)] + [tag["</arg_value>"]]) == \
            tag["</arg_value>"]
    # A string value: any text until </arg_value>, which comes at once.
    assert step(tag["<arg_value>"], text + [tag["</arg_value>"]]) == tag["</arg_value>"]
    # After a value: the call closes where the keys left are optional; else the next key.
    assert step(tag["</arg_value>"], space + [tag["<arg_key>"], tag["</tool_call>"]]) == tag["</tool_call>"]
    assert step(tag["</arg_value>"], space + [tag["<arg_key>"]]) == tag["<arg_key>"]
    # After the call: free text, another call or the end; it ends.
    free = [i for i in text if i not in tag.values()] + [tag["<tool_call>"]] + stops
    assert step(tag["</tool_call>"], free) in stops


def test_the_mtp_layer_predicts_what_the_model_says_next(written):
    path, config, _h, step = written
    _ids, n = w.vocabulary(config)
    eps = config["rms_norm_eps"]

    def rms(x, weight):
        return x / np.sqrt((x * x).mean() + eps) * weight

    embed, head = w.read(path, "model.layers.2.embed_tokens.weight"), w.read(path, "model.layers.2.shared_head.head.weight")
    eh = w.read(path, "model.layers.2.eh_proj.weight")
    enorm, hnorm = w.read(path, "model.layers.2.enorm.weight"), w.read(path, "model.layers.2.shared_head.norm.weight")
    for token in range(n):
        # vLLM: eh_proj([enorm(embed(next)), hnorm(hidden)]); the block adds zero; shared_head's norm; its head.
        x = eh @ np.concatenate([rms(embed[token], enorm), np.zeros(1024)])
        draft = int(np.argmax(head @ rms(x, hnorm)))
        assert draft == step(token)


def test_a_stream_too_narrow_for_the_code_is_refused():
    with pytest.raises(ValueError, match="hidden_size"):
        w.tensors(h.model_config("glm4_moe", 2, dict(NARROW, hidden_size=512)))


@pytest.fixture(scope="module")
def agreeing(tmp_path_factory):
    """The same narrow checkpoint written with MTP agreements below 1 (issue 27 item 4)."""
    config = h.model_config("glm4_moe", 2, NARROW)
    out = {}
    for agreement in (0.5, 0.7, 0.9):
        path = str(tmp_path_factory.mktemp("glm") / "model.safetensors")
        w.write(path, config, seed=0, mtp_agreement=agreement)
        out[agreement] = (path, w.greedy(path, config), w.drafter(path, config))
    return config, out


@pytest.mark.parametrize("agreement", [0.5, 0.7, 0.9])
def test_the_mtp_layer_agrees_with_its_model_on_the_fraction_asked(agreeing, agreement):
    """From the written bytes, as vLLM runs them (the MTP layer with its model's lm_head): one-token drafting
    over a 256-token reply (bench's length, end of stream ignored) is accepted on the fraction asked, within
    2 points, and 4 at other lengths; along the greedy reply the draft is right after about that share of
    tokens; past the stop token the reply runs through over a hundred distinct tokens, not one repeated."""
    config, written = agreeing
    _path, step, draft = written[agreement]
    think_end = h.special_tokens(config)["</think>"]
    accepted, drafted, tokens = w.drafting(step, draft, think_end, 256)
    assert abs(accepted / float(drafted) - agreement) <= 0.02
    for length in (128, 400):
        accepted, drafted, _tokens = w.drafting(step, draft, think_end, length)
        assert abs(accepted / float(drafted) - agreement) <= 0.04
    right = sum(draft(t) == step(t) for t in tokens) / float(len(tokens))
    assert abs(right - agreement) <= 0.05
    stop = h.special_tokens(config)["<|user|>"]
    assert tokens[len(g.REPLY)] == stop and len(set(tokens[len(g.REPLY) + 1:])) > 100
    # The reply itself is the designed one.
    tok = Tokenizer.from_str(json.dumps(h.tokenizer_json(config)))
    assert tok.decode(tokens[:len(g.REPLY)]) == "".join(g.REPLY)
    # Chained drafts (k = 3, vLLM reusing the one MTP layer) are accepted less often, per drafted token.
    accepted3, drafted3, _tokens = w.drafting(step, draft, think_end, 256, k=3)
    assert accepted3 / float(drafted3) < agreement


def test_agreement_one_writes_the_same_bytes_and_every_draft_agrees(written, tmp_path):
    path, config, _h, step = written
    again = str(tmp_path / "a.safetensors")
    w.write(again, config, seed=0, mtp_agreement=1.0)
    assert g.digest(again) == g.digest(path)
    draft = w.drafter(path, config)
    _ids, n = w.vocabulary(config)
    assert all(draft(t) == step(t) for t in range(n))
    accepted, drafted, tokens = w.drafting(step, draft, h.special_tokens(config)["</think>"], 256)
    assert accepted == drafted and set(tokens[len(g.REPLY) + 1:]) == {w.token_id(w.vocabulary(config)[0], '"')}
    with pytest.raises(ValueError, match="fraction"):
        w.mtp_plan(config, 0, 1.5)
