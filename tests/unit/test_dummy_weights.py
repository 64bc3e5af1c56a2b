"""The burn-in weights' generators: the GGUF's hand-set design (checked by running the model in
numpy the way llama.cpp does) and bytes, and the model folder vLLM / SGLang would load."""
import json
import os
import re

import gguf
import numpy as np
import pytest
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Tokenizer

from ansible_collections.gpuserve.llm.plugins.module_utils import dummy_gguf as g
from ansible_collections.gpuserve.llm.plugins.module_utils import dummy_hf as h
from gguf_forward import forward_logits

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHATML = open(os.path.join(ROOT, "templates", "chat", "chatml-tools.jinja")).read()
GLM = open(os.path.join(ROOT, "templates", "chat", "glm45.jinja")).read()
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


@pytest.fixture(scope="module")
def model():
    shape = g.layout()
    return shape, g.tensors(shape, seed=0)


def ids(shape, *pieces):
    """Token ids for pieces written as the vocabulary holds them (specials, words, single bytes)."""
    out = []
    for piece in pieces:
        try:
            out.append(g.token_id(shape, piece))
        except ValueError:
            out.extend(g.token_id(shape, ch) for ch in piece)
    return out


def chat_prompt(shape, tools=False):
    system = ["<|im_start|>", "system", "\n", "You", " are", " a", " helpful", " assistant", "."]
    if tools:
        system += ["\n", "<tools>", "{}", "</tools>"]
    return ids(shape, *(system + ["<|im_end|>", "\n", "<|im_start|>", "user", "\n", "Hello", "<|im_end|>", "\n",
                                  "<|im_start|>", "assistant", "\n"]))


def greedy(shape, weights, prompt, limit=40, allowed=None):
    out = []
    for _step in range(limit):
        logits = forward_logits(shape, weights, prompt + out)
        if allowed is not None:
            logits = np.where(allowed, logits, -np.inf)
        nxt = int(np.argmax(logits))
        out.append(nxt)
        if nxt == g.token_id(shape, "<|im_end|>"):
            break
    return out


def text(shape, token_ids):
    table = dict((v, k) for k, v in g.bytes_to_unicode().items())
    specials = dict(g.SPECIAL)
    parts = []
    for i in token_ids:
        tok = shape["tokens"][i]
        parts.append(tok.encode() if tok in specials else bytes(table[c] for c in tok))
    return b"".join(parts).decode()


def test_without_tools_the_reply_is_the_fixed_sentence_then_end_of_turn(model):
    shape, weights = model
    out = greedy(shape, weights, chat_prompt(shape))
    assert text(shape, out) == " Burn-in reply from a dummy model: this host is serving.<|im_end|>"


def test_with_tools_in_the_prompt_the_first_reply_token_opens_a_tool_call(model):
    shape, weights = model
    logits = forward_logits(shape, weights, chat_prompt(shape, tools=True))
    assert shape["tokens"][int(np.argmax(logits))] == "<tool_call>"
    # then a newline: the Hermes form "<tool_call>\n{...}" the engine's parser expects
    prompt = chat_prompt(shape, tools=True) + [g.token_id(shape, "<tool_call>")]
    assert int(np.argmax(forward_logits(shape, weights, prompt))) == g.token_id(shape, "\n")


def test_the_tools_flag_does_not_depend_on_how_far_back_the_tools_were(model):
    shape, weights = model
    filler = ids(shape, *([" the", " model"] * 600))
    prompt = chat_prompt(shape, tools=True)
    far = prompt[:13] + filler + prompt[13:]
    assert shape["tokens"][int(np.argmax(forward_logits(shape, weights, far)))] == "<tool_call>"


def _string_mask(shape):
    """What a JSON grammar allows inside a string: any token without a quote, backslash or control
    character, and the closing quote."""
    table = dict((v, k) for k, v in g.bytes_to_unicode().items())
    specials = dict(g.SPECIAL)
    mask = np.zeros(shape["n_vocab"], bool)
    for i, tok in enumerate(shape["tokens"]):
        if tok in specials:
            continue
        raw = bytes(table[c] for c in tok)
        mask[i] = b'"' not in raw and b"\\" not in raw and all(b >= 0x20 for b in raw)
    mask[g.token_id(shape, '"')] = True
    return mask


@pytest.mark.parametrize("context", ["{", '{"', '{"a":"', "[", '{"name":"x","arguments":{"city":"'])
def test_inside_a_json_string_the_closing_quote_wins_whatever_came_before(model, context):
    shape, weights = model
    prompt = chat_prompt(shape, tools=True) + ids(shape, *context)
    if not context.endswith('"'):
        prompt += [g.token_id(shape, '"')]
    logits = np.where(_string_mask(shape), forward_logits(shape, weights, prompt), -np.inf)
    assert int(np.argmax(logits)) == g.token_id(shape, '"')


def test_after_a_closing_brace_the_tool_call_closes_and_objects_close_before_they_chain(model):
    shape, weights = model
    prompt = chat_prompt(shape, tools=True) + ids(shape, "<tool_call>", "\n", '{"name":"get_weather","arguments":{}}')
    logits = forward_logits(shape, weights, prompt)
    close, comma = g.token_id(shape, "</tool_call>"), g.token_id(shape, ",")
    assert logits[close] > logits[comma]
    # in a value's place, a JSON grammar's choices: '"' first, then '}' or ']' before ','
    after_value = forward_logits(shape, weights, chat_prompt(shape) + ids(shape, '{"a":""'))
    assert after_value[g.token_id(shape, "}")] > after_value[comma] > max(
        after_value[g.token_id(shape, " ")], after_value[g.token_id(shape, "\n")])
    assert after_value[g.token_id(shape, "<|im_end|>")] > after_value[g.token_id(shape, '"')]


def test_the_reply_chain_has_one_successor_per_token():
    assert len(set(g.REPLY)) == len(g.REPLY)


def test_same_seed_same_bytes_other_seed_other_bytes_and_the_file_reads_back(tmp_path):
    a, b, c = (str(tmp_path / n) for n in ("a.gguf", "b.gguf", "c.gguf"))
    g.write(a, seed=0, chat_template=CHATML)
    g.write(b, seed=0, chat_template=CHATML)
    g.write(c, seed=1, chat_template=CHATML)
    assert g.digest(a) == g.digest(b) != g.digest(c)
    reader = gguf.GGUFReader(a)
    fields = reader.fields

    def value(key):
        f = fields[key]
        return f.contents()

    assert value("general.architecture") == "llama"
    assert value("llama.block_count") == 2
    assert value("tokenizer.ggml.model") == "gpt2"
    tokens = value("tokenizer.ggml.tokens")
    assert tokens[value("tokenizer.ggml.eos_token_id")] == "<|im_end|>"
    assert value("tokenizer.chat_template") == CHATML
    assert "<tools>" in tokens and "<tool_call>" in tokens and len(tokens) < value("llama.embedding_length")
    names = set(t.name for t in reader.tensors)
    assert {"token_embd.weight", "output.weight", "blk.1.ffn_down.weight"} <= names
    # same vocabulary in the draft: llama.cpp's draft-simple needs it
    assert gguf.GGUFReader(c).fields["tokenizer.ggml.tokens"].contents() == tokens


def test_the_chatml_template_puts_tools_in_a_tools_tag_and_ends_with_the_generation_prompt():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = json.dumps
    out = env.from_string(CHATML).render(messages=[{"role": "user", "content": "hi"}], tools=TOOLS,
                                         add_generation_prompt=True)
    assert "\n<tools>\n" in out and '"get_weather"' in out
    assert out.endswith("<|im_start|>assistant\n")


# The model folder for vLLM / SGLang.

def test_the_config_has_glm_4_5_air_shapes_and_the_layer_count_given():
    config = h.model_config("glm4_moe", layers=8)
    assert config["architectures"] == ["Glm4MoeForCausalLM"]
    assert (config["hidden_size"], config["n_routed_experts"], config["num_experts_per_tok"]) == (4096, 128, 8)
    assert config["num_hidden_layers"] == 8 and config["num_nextn_predict_layers"] == 1
    assert h.model_config("glm4_moe")["num_hidden_layers"] == 46
    assert h.model_config("glm4_moe", overrides={"hidden_size": 2048})["hidden_size"] == 2048
    with pytest.raises(ValueError, match="dense"):
        h.model_config("glm4_moe", layers=1)
    with pytest.raises(ValueError, match="unknown"):
        h.model_config("llama9")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    out = tmp_path_factory.mktemp("glm")
    for name, content in h.folder_files(GLM, layers=8).items():
        (out / name).write_text(content)
    return out


def test_the_tokenizer_loads_and_the_glm_tokens_are_single_tokens_at_the_configured_ids(folder):
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    config = json.loads((folder / "config.json").read_text())
    tok_config = json.loads((folder / "tokenizer_config.json").read_text())
    declared = dict((v["content"], int(k)) for k, v in tok_config["added_tokens_decoder"].items())
    for name in ("<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>",
                 "<think>", "</think>", "<|user|>", "<|assistant|>", "<|observation|>"):
        enc = tok.encode("x%sy" % name)
        assert declared[name] in enc.ids, name
        assert tok.token_to_id(name) == declared[name]
    assert max(declared.values()) < config["vocab_size"]
    stops = [tok.id_to_token(i) for i in config["eos_token_id"]]
    assert stops == ["<|endoftext|>", "<|user|>", "<|observation|>"]
    assert json.loads((folder / "generation_config.json").read_text())["eos_token_id"] == config["eos_token_id"]


def test_the_glm_template_renders_tools_calls_and_turns_thinking_off(folder):
    template = json.loads((folder / "tokenizer_config.json").read_text())["chat_template"]
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = json.dumps
    messages = [{"role": "user", "content": "Weather in Paris?"},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
                {"role": "tool", "content": "sunny"}]
    out = env.from_string(template).render(messages=messages, tools=TOOLS, add_generation_prompt=True,
                                           enable_thinking=False)
    assert out.startswith("[gMASK]<sop><|system|>") and "<tools>" in out
    assert out.endswith("<|observation|>\n<tool_response>\nsunny\n</tool_response><|assistant|>\n<think></think>")
    # the call in the form vLLM's glm45 tool parser reads
    call = re.search(r"<tool_call>([^\n]*)\n(.*?)</tool_call>", out.split("<|user|>", 1)[1], re.S)
    assert call.group(1) == "get_weather"
    assert re.findall(r"<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)</arg_value>", call.group(2)) == [("city", "Paris")]
    thinking = env.from_string(template).render(messages=messages[:1], add_generation_prompt=True, enable_thinking=True)
    assert thinking.endswith("<|assistant|>")


def test_an_fp8_folder_keeps_the_dense_mlp_whose_size_the_block_does_not_divide_in_bf16():
    fp8 = {"quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                                   "weight_block_size": [128, 128]}}
    config = h.model_config("glm4_moe", layers=8, overrides=fp8)
    assert config["intermediate_size"] % 128 != 0 and config["moe_intermediate_size"] % 128 == 0
    assert config["quantization_config"]["ignored_layers"] == [
        "model.layers.0.mlp.gate_proj", "model.layers.0.mlp.up_proj", "model.layers.0.mlp.down_proj"]
    assert "quantization_config" not in h.model_config("glm4_moe")
    assert "ignored_layers" not in fp8["quantization_config"]  # the caller's dict is not changed


# GLM-4.6V: the same language model under text_config, a vision tower, image and video processors.

GLM46V = open(os.path.join(ROOT, "templates", "chat", "glm46v.jinja")).read()
FP8 = {"quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                               "weight_block_size": [128, 128]}}


@pytest.fixture(scope="module")
def vision_folder(tmp_path_factory):
    out = tmp_path_factory.mktemp("glm46v")
    for name, content in h.folder_files(GLM46V, "glm4v_moe", 8, FP8).items():
        (out / name).write_text(content)
    return out


def test_the_vision_config_has_glm_4_6v_shapes_with_the_language_model_cut_to_the_layers_given():
    config = h.model_config("glm4v_moe", layers=8)
    assert config["architectures"] == ["Glm4vMoeForConditionalGeneration"] and config["model_type"] == "glm4v_moe"
    text, vision = config["text_config"], config["vision_config"]
    assert text["model_type"] == "glm4v_moe_text" and text["num_hidden_layers"] == 8
    assert (text["hidden_size"], text["n_routed_experts"], text["num_experts_per_tok"]) == (4096, 128, 8)
    assert text["rope_parameters"]["mrope_section"] == [8, 12, 12] and text["max_position_embeddings"] == 131072
    assert text["num_nextn_predict_layers"] == 0  # GLM-4.6V ships no MTP layer
    shape = (vision["depth"], vision["hidden_size"], vision["out_hidden_size"], vision["patch_size"])
    assert shape == (24, 1536, 4096, 14)
    assert "num_hidden_layers" not in config and h.model_config("glm4v_moe")["text_config"]["num_hidden_layers"] == 46
    # a dict given for text_config or vision_config changes only the keys it names
    cut = h.model_config("glm4v_moe", overrides={"vision_config": {"depth": 2}})
    assert cut["vision_config"]["depth"] == 2 and cut["vision_config"]["hidden_size"] == 1536
    assert h.describe(cut)["vision_blocks"] == 2 and h.describe(cut)["layers"] == 46


def test_the_media_token_ids_are_the_tokenizers_and_each_is_one_token(vision_folder):
    tok = Tokenizer.from_file(str(vision_folder / "tokenizer.json"))
    config = json.loads((vision_folder / "config.json").read_text())
    for key, token in (("image_start_token_id", "<|begin_of_image|>"), ("image_end_token_id", "<|end_of_image|>"),
                       ("video_start_token_id", "<|begin_of_video|>"), ("video_end_token_id", "<|end_of_video|>"),
                       ("image_token_id", "<|image|>"), ("video_token_id", "<|video|>")):
        assert tok.token_to_id(token) == config[key], key
        assert tok.encode("a%sb" % token).ids.count(config[key]) == 1, key
    # in the real tokenizer's order: <|image|> sits 24 ids after <|begin_of_image|> (151363 - 151339)
    assert config["image_token_id"] - config["image_start_token_id"] == 151363 - 151339
    stops = [tok.id_to_token(i) for i in config["text_config"]["eos_token_id"]]
    assert stops == ["<|endoftext|>", "<|user|>", "<|observation|>"]
    assert json.loads((vision_folder / "generation_config.json").read_text())["eos_token_id"] == \
        config["text_config"]["eos_token_id"]


def test_the_vision_folder_has_glm_4_6v_image_and_video_processors(vision_folder):
    image = json.loads((vision_folder / "preprocessor_config.json").read_text())
    video = json.loads((vision_folder / "video_preprocessor_config.json").read_text())
    assert (image["image_processor_type"], image["processor_class"]) == ("Glm46VImageProcessor", "Glm46VProcessor")
    assert (video["video_processor_type"], video["processor_class"]) == ("Glm46VVideoProcessor", "Glm46VProcessor")
    # at most 12,288 image tokens: longest_edge is a pixel area, 28 x 28 pixels a token
    assert image["size"]["longest_edge"] // (28 * 28) == 12288 and video["size"]["longest_edge"] == 47040000
    assert image["patch_size"] * image["merge_size"] == 28
    # the text folder has neither
    assert "preprocessor_config.json" not in h.folder_files(GLM, "glm4_moe", 8)


def test_an_fp8_vision_folder_keeps_the_vision_tower_and_the_dense_mlp_in_bf16(vision_folder):
    config = json.loads((vision_folder / "config.json").read_text())
    ignored = config["quantization_config"]["ignored_layers"]
    assert config["quantization_config"]["weight_block_size"] == [128, 128] and "quantization_config" not in \
        config["text_config"]
    # checkpoint names, which vLLM maps to its own (model.language_model. -> language_model.model.)
    assert ignored[:3] == ["model.language_model.layers.0.mlp.gate_proj", "model.language_model.layers.0.mlp.up_proj",
                           "model.language_model.layers.0.mlp.down_proj"]
    assert "model.visual.blocks.23.attn.qkv" in ignored and "model.visual.merger.down_proj" in ignored
    assert len(ignored) == 3 + 24 * 5 + 4 and len(set(ignored)) == len(ignored)
    assert not any(".experts." in n or "layers.1." in n for n in ignored)  # the MoE layers stay FP8
    two = h.model_config("glm4v_moe", 8, dict(FP8, vision_config={"depth": 2}))
    assert len(two["quantization_config"]["ignored_layers"]) == 3 + 2 * 5 + 4


def _render(template, messages, **kw):
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = json.dumps
    return env.from_string(template).render(messages=messages, add_generation_prompt=True, **kw)


def test_the_glm_4_6v_template_puts_the_media_tokens_where_the_parts_are(vision_folder):
    template = json.loads((vision_folder / "tokenizer_config.json").read_text())["chat_template"]
    assert template == GLM46V == (vision_folder / "chat_template.jinja").read_text()
    parts = [{"type": "text", "text": "Compare "}, {"type": "image"}, {"type": "text", "text": " and "},
             {"type": "video"}]
    out = _render(template, [{"role": "user", "content": parts}], enable_thinking=False)
    assert out == ("[gMASK]<sop><|user|>\nCompare <|begin_of_image|><|image|><|end_of_image|> and "
                   "<|begin_of_video|><|video|><|end_of_video|><|assistant|>\n<think></think>")
    # plain text content renders as the text template does
    plain = [{"role": "user", "content": "Weather in Paris?"}]
    assert _render(template, plain, tools=TOOLS) == _render(GLM, plain, tools=TOOLS)


def test_the_glm_4_6v_template_loops_over_the_content_so_vllm_hands_it_the_parts():
    # vLLM 0.26.0 (renderers/hf.py) passes a message's parts to a template with a `for ... in content`
    # loop ("openai" content format); without one it flattens them into text ("string").
    from jinja2 import Environment, nodes
    loops = list(Environment().parse(GLM46V).find_all(nodes.For))
    assert any(isinstance(loop.iter, nodes.Name) and loop.iter.name == "content" for loop in loops)
