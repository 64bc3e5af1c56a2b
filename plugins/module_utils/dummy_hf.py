# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuserve.llm contributors
# Apache License 2.0 (see LICENSE)
"""A model folder for vLLM / SGLang burn-in with `--load-format dummy`: the architecture's
config.json (the engine allocates and fills the weights itself), generation_config.json, and a
tokenizer (tokenizer.json + tokenizer_config.json with the chat template) carrying the model
family's special tokens in the real tokenizer's order, so that the engine's tool-call and
reasoning parsers (vLLM's and SGLang's glm45) find them. A vision preset (glm4v_moe) adds the
image and video processors' configs, so that the engine's multimodal processor loads and turns
images and video into placeholder tokens. No weight files: nothing to download, nothing to verify.

Standard library only: it runs on the host with any Python.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

from ansible_collections.gpuserve.llm.plugins.module_utils.dummy_gguf import vocabulary

# GLM-4.5-Air (zai-org/GLM-4.5-Air config.json): 1 dense + 45 MoE layers, 128 routed experts
# (8 active) + 1 shared, one MTP layer. GLM-4.6V's language model has the same shapes.
PRESETS = {
    "glm4_moe": {
        "architectures": ["Glm4MoeForCausalLM"],
        "model_type": "glm4_moe",
        "attention_bias": True,
        "attention_dropout": 0.0,
        "head_dim": 128,
        "hidden_act": "silu",
        "hidden_size": 4096,
        "initializer_range": 0.02,
        "intermediate_size": 10944,
        "max_position_embeddings": 131072,
        "moe_intermediate_size": 1408,
        "n_group": 1,
        "n_routed_experts": 128,
        "n_shared_experts": 1,
        "norm_topk_prob": True,
        "num_attention_heads": 96,
        "num_experts_per_tok": 8,
        "first_k_dense_replace": 1,
        "num_hidden_layers": 46,
        "num_key_value_heads": 8,
        "num_nextn_predict_layers": 1,
        "partial_rotary_factor": 0.5,
        "rms_norm_eps": 1e-05,
        "rope_scaling": None,
        "rope_theta": 1000000,
        "routed_scaling_factor": 1.0,
        "tie_word_embeddings": False,
        "topk_group": 1,
        "torch_dtype": "bfloat16",
        "use_cache": True,
        "use_qk_norm": False,
        "vocab_size": 151552,
    },
}

# GLM-4.6V (zai-org/GLM-4.6V-FP8): GLM-4.5-Air's language model under text_config, plus a
# 24-block vision tower. Where each number comes from:
# - zai-org/GLM-4.5V config.json (as transformers 5.7 prints it): the text shapes (the same as
#   GLM-4.5-Air), mrope_section [8, 12, 12], vision_config (depth 24, hidden 1536, 12 heads,
#   intermediate 10944, out_hidden_size 4096, patch 14, image_size 336, spatial merge 2,
#   temporal patch 2, silu, rms_norm_eps 1e-5), the token ids' order (image_start 151339 ..
#   video 151364 = <|endoftext|> 151329 + their place in GLM_SPECIAL).
# - configs published as derived from GLM-4.6V (tiny-random/glm-4.6v, QuixiAI/INTELLECT-3V on the
#   hub): max_position_embeddings 131072, rope_theta 500000 in rope_parameters, and
#   num_nextn_predict_layers 0 - the vision model ships no MTP layer.
# The token ids are this tokenizer's (its vocabulary is small), in the real order.
PRESETS["glm4v_moe"] = {
    "architectures": ["Glm4vMoeForConditionalGeneration"],
    "model_type": "glm4v_moe",
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "text_config": dict(
        dict((k, v) for k, v in PRESETS["glm4_moe"].items()
             if k not in ("architectures", "rope_scaling", "rope_theta", "partial_rotary_factor")),
        model_type="glm4v_moe_text",
        num_nextn_predict_layers=0,
        rope_parameters={"mrope_section": [8, 12, 12], "partial_rotary_factor": 0.5, "rope_theta": 500000,
                         "rope_type": "default"},
        partial_rotary_factor=0.5,
    ),
    "vision_config": {
        "model_type": "glm4v_moe_vision",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "depth": 24,
        "hidden_act": "silu",
        "hidden_size": 1536,
        "image_size": 336,
        "in_channels": 3,
        "initializer_range": 0.02,
        "intermediate_size": 10944,
        "num_heads": 12,
        "out_hidden_size": 4096,
        "patch_size": 14,
        "rms_norm_eps": 1e-05,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
    },
}

# The image and video processors of GLM-4.6V (preprocessor_config.json and
# video_preprocessor_config.json as copies of zai-org/GLM-4.6V on the hub carry them): an image is
# resized to at most 9,633,792 pixels (12,288 tokens of 28 x 28 pixels), a video to 47,040,000
# pixels over all its frames.
CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
CLIP_STD = [0.26862954, 0.26130258, 0.27577711]
IMAGE_PROCESSOR = {
    "size": {"shortest_edge": 12544, "longest_edge": 9633792},
    "do_rescale": True, "patch_size": 14, "temporal_patch_size": 2, "merge_size": 2,
    "image_mean": CLIP_MEAN, "image_std": CLIP_STD,
    "image_processor_type": "Glm46VImageProcessor", "processor_class": "Glm46VProcessor",
}
VIDEO_PROCESSOR = dict(
    dict((k, v) for k, v in IMAGE_PROCESSOR.items() if k != "image_processor_type"),
    size={"shortest_edge": 12544, "longest_edge": 47040000}, video_processor_type="Glm46VVideoProcessor")
# config.json's names for the media tokens.
MEDIA_TOKENS = {
    "image_start_token_id": "<|begin_of_image|>", "image_end_token_id": "<|end_of_image|>",
    "video_start_token_id": "<|begin_of_video|>", "video_end_token_id": "<|end_of_video|>",
    "image_token_id": "<|image|>", "video_token_id": "<|video|>",
}

# GLM-4.5's special tokens (zai-org/GLM-4.5 tokenizer_config.json), in the real order. They get
# the ids right after the small byte-level vocabulary (the `tokenizers` library numbers added
# tokens after the model's vocabulary), all below the config's vocab_size.
GLM_SPECIAL = [
    "<|endoftext|>", "[MASK]", "[gMASK]", "[sMASK]", "<sop>", "<eop>", "<|system|>", "<|user|>",
    "<|assistant|>", "<|observation|>", "<|begin_of_image|>", "<|end_of_image|>",
    "<|begin_of_video|>", "<|end_of_video|>", "<|begin_of_audio|>", "<|end_of_audio|>",
    "<|begin_of_transcription|>", "<|end_of_transcription|>", "<|code_prefix|>",
    "<|code_middle|>", "<|code_suffix|>", "<think>", "</think>", "<tool_call>", "</tool_call>",
    "<tool_response>", "</tool_response>", "<arg_key>", "</arg_key>", "<arg_value>",
    "</arg_value>", "/nothink", "<|begin_of_box|>", "<|end_of_box|>", "<|image|>", "<|video|>",
]
# The real generation_config's stop tokens.
GLM_STOP = ["<|endoftext|>", "<|user|>", "<|observation|>"]
# Shown in the text (not "special" to the decoder): the parsers read them from the output.
GLM_VISIBLE = {"<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>",
               "</tool_response>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>", "/nothink"}


def merged(base, changes):
    """`base` with `changes` laid over it; a dict meets a dict key by key (text_config, vision_config)."""
    out = json.loads(json.dumps(base))
    for key, value in (changes or {}).items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = json.loads(json.dumps(value))
    return out


def language_model(config):
    """The part of config.json holding the language model's shapes (text_config in a vision model)."""
    return config["text_config"] if isinstance(config.get("text_config"), dict) else config


def model_config(preset="glm4_moe", layers=None, overrides=None):
    """config.json: a preset's shapes, or the given config, with the language model's layer count adjustable."""
    if preset not in PRESETS:
        raise ValueError("unknown dummy config preset %r; known: %s" % (preset, ", ".join(sorted(PRESETS))))
    config = merged(PRESETS[preset], overrides)
    text = language_model(config)
    if layers:
        layers = int(layers)
        dense = int(text.get("first_k_dense_replace", 0))
        if layers <= dense:
            raise ValueError("layers must exceed the %d dense layer(s) so that the MoE layers exist" % dense)
        text["num_hidden_layers"] = layers
    _keep_dense_mlp_unquantized(config)
    specials = special_tokens(config)
    text["eos_token_id"] = [specials[t] for t in GLM_STOP]
    text["pad_token_id"] = specials["<|endoftext|>"]
    if "vision_config" in config:
        for key, token in MEDIA_TOKENS.items():
            config[key] = specials[token]
    return config


def _keep_dense_mlp_unquantized(config):
    """Block-FP8 kernels need every quantized dimension divisible by the block: vLLM 0.26.0 stops at
    load with "the last dimension of `x` 10944 must be divisible by `group_size` 128" for
    GLM-4.5-Air's dense layer. Its MLP stays bf16 (ignored_layers), the MoE layers are FP8. A vision
    tower stays bf16 whole, as FP8 checkpoints of vision models keep it (its merger is 10944 wide too)."""
    quant = config.get("quantization_config") or {}
    block = (quant.get("weight_block_size") or [None, None])[-1]
    text = language_model(config)
    vision = config.get("vision_config")
    if not block or (int(text.get("intermediate_size", 0)) % int(block) == 0 and not vision):
        return
    # Names as the checkpoint has them; vLLM maps them to its modules (hf_to_vllm_mapper).
    prefix = "model.language_model." if vision else "model."
    names = []
    if int(text.get("intermediate_size", 0)) % int(block):
        for layer in range(int(text.get("first_k_dense_replace", 0))):
            names += ["%slayers.%d.mlp.%s" % (prefix, layer, p) for p in ("gate_proj", "up_proj", "down_proj")]
    if vision:
        for b in range(int(vision.get("depth", 0))):
            names += ["model.visual.blocks.%d.%s" % (b, p) for p in (
                "attn.qkv", "attn.proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")]
        names += ["model.visual.merger.%s" % p for p in ("proj", "gate_proj", "up_proj", "down_proj")]
    ignored = list(quant.get("ignored_layers") or [])
    quant["ignored_layers"] = ignored + [n for n in names if n not in ignored]


def base_vocabulary():
    """The byte-level BPE part: byte tokens and word merges (no special tokens)."""
    tokens, _types, merges = vocabulary()
    base = [t for t in tokens if not (t.startswith("<") and t.endswith(">") and len(t) > 1)]
    vocab = dict((t, i) for i, t in enumerate(base))
    return vocab, [m for m in merges if all(p in vocab for p in m.split(" "))]


def special_tokens(config):
    """{text: id} for the family's special tokens."""
    if config.get("model_type") not in ("glm4_moe", "glm4v_moe"):
        raise ValueError("no tokenizer for model_type %r: the dummy tokenizer knows glm4_moe and glm4v_moe"
                         % config.get("model_type"))
    first = len(base_vocabulary()[0])
    return dict((text, first + i) for i, text in enumerate(GLM_SPECIAL))


def tokenizer_json(config):
    """A byte-level BPE tokenizer (Hugging Face `tokenizers` format) with the special tokens."""
    vocab, base_merges = base_vocabulary()
    added = [
        {"id": i, "content": text, "single_word": False, "lstrip": False, "rstrip": False,
         "normalized": False, "special": text not in GLM_VISIBLE}
        for text, i in sorted(special_tokens(config).items(), key=lambda kv: kv[1])
    ]
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                  "ignore_merges": False, "vocab": vocab, "merges": base_merges},
    }


def tokenizer_config(config, chat_template):
    specials = special_tokens(config)
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": int(language_model(config).get("max_position_embeddings", 131072)),
        "padding_side": "left",
        "clean_up_tokenization_spaces": False,
        "do_lower_case": False,
        "eos_token": "<|endoftext|>",
        "pad_token": "<|endoftext|>",
        "extra_special_tokens": {},
        "added_tokens_decoder": dict(
            (str(i), {"content": text, "lstrip": False, "normalized": False, "rstrip": False,
                      "single_word": False, "special": text not in GLM_VISIBLE})
            for text, i in sorted(specials.items(), key=lambda kv: kv[1])),
        "chat_template": chat_template,
    }


def generation_config(config):
    text = language_model(config)
    return {
        "_from_model_config": False,
        "eos_token_id": text.get("eos_token_id"),
        "pad_token_id": text.get("pad_token_id"),
        "do_sample": True,
        "temperature": 1.0,
        "top_p": 0.95,
    }


def folder_files(chat_template, preset="glm4_moe", layers=None, overrides=None):
    """{file name: text} of the model folder. Same inputs, same bytes."""
    config = model_config(preset, layers, overrides)
    files = {
        "config.json": config,
        "generation_config.json": generation_config(config),
        "tokenizer.json": tokenizer_json(config),
        "tokenizer_config.json": tokenizer_config(config, chat_template),
        "special_tokens_map.json": {"eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>"},
    }
    if "vision_config" in config:
        files["preprocessor_config.json"] = IMAGE_PROCESSOR
        files["video_preprocessor_config.json"] = VIDEO_PROCESSOR
    texts = dict((n, json.dumps(v, indent=2, sort_keys=True, ensure_ascii=False) + "\n") for n, v in files.items())
    if "vision_config" in config:
        # Where the real repo keeps it, so that the processor (AutoProcessor) has the template too.
        texts["chat_template.jinja"] = chat_template
    return texts


def describe(config):
    """What the folder is, for the module's result and the reports."""
    text = language_model(config)
    out = {
        "architecture": config["architectures"][0], "layers": text["num_hidden_layers"],
        "hidden_size": text["hidden_size"], "experts": text.get("n_routed_experts"),
        "mtp_layers": text.get("num_nextn_predict_layers", 0), "vocab_size": text["vocab_size"],
    }
    if "vision_config" in config:
        out["vision_blocks"] = config["vision_config"]["depth"]
    return out
