"""Values that validate but cannot run (issue 38 item 2), refused by settings validation before anything changes:
a GPU count the engine cannot split the model over (its attention heads, KV heads, MLP and experts' widths, the
vision tower's heads), experts split into parts of their FP8 weight blocks without expert parallelism
(llm_expert_parallel), expert parallelism on vLLM for a dense model, images on for a text model, a URL whose port
is not a port. The model's shape comes from
the burn-in folder's config, a hub config.json on the workstation, or the shape the collection carries for the
recipe's model; an unknown shape is W_CHECK_SKIPPED, never a guess."""
import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import jinja2
import pytest
import yaml

from ansible_collections.gpuserve.llm.plugins.module_utils import checkpoint, dummy_hf, hub_config
from ansible_collections.gpuserve.llm.plugins.module_utils.settings import (
    CARRIED_SHAPES, DUMMY_PRESETS, FP8_BLOCKS, URL_PORT_ITEMS, URL_PORT_SETTINGS, validate, validate_templated)
from settings_bases import CPU, DEFAULTS, OPTIONS, ROOT, SGLANG, SPECS

GPUS3, GPUS4, GPUS8 = [0, 1, 2], [0, 1, 2, 3], list(range(8))
with open(os.path.join(ROOT, "roles", "weights", "defaults", "main.yml")) as f:
    WEIGHTS_DEFAULTS = yaml.safe_load(f)
# The burn-in folder of an FP8 model, as the weights role's weights_dummy_config gives it (llm_model_dense fp8).
FP8_DUMMY = {"llm_weights": "dummy", "weights_dummy_config": WEIGHTS_DEFAULTS["weights_fp8_quantization"]}


def check(base=None, model_config=None, hub_config=None, **changes):
    return validate(dict(base or DEFAULTS, **changes), OPTIONS, SPECS.internal, model_config=model_config,
                    hub_config=hub_config)[0]


def codes(findings):
    return [(f["code"], f["subject"]) for f in findings]


# The recipe's model (hub weights; the shape the collection carries) and its burn-in folder: 96 attention heads,
# 8 KV heads, MLP width 10944, 128 experts 1408 wide, a vision tower of 12 heads.
@pytest.mark.parametrize("weights", ["hub", "dummy"])
def test_three_gpus_on_the_recipes_model_are_refused_four_accepted(weights):
    assert DEFAULTS["llm_gpus"] == GPUS4 and DEFAULTS["llm_model"] in CARRIED_SHAPES
    assert DEFAULTS["llm_expert_parallel"] is True  # whole experts on each GPU: only the KV heads stop 3 GPUs
    findings = check(llm_weights=weights, llm_gpus=GPUS3)
    assert codes(findings) == [("E_UNSUPPORTED", "llm_gpus")], findings
    message = findings[0]["message"]
    assert message.startswith("llm_gpus is [0, 1, 2] on vllm: ")
    assert "(tensor parallel, each expert whole on a GPU: llm_expert_parallel)" in message
    assert "3 does not divide its 8 KV heads" in message and "moe_intermediate_size" not in message
    assert "attention heads" not in message  # 96 divides by 3: only what fails is named
    assert findings[0]["details"]["allowed"] == "1, 2 or 4 GPUs" and findings[0]["details"]["value"] == GPUS3
    assert message.endswith("set llm_gpus to 1, 2 or 4 GPUs")
    for gpus in ([0], [0, 1], GPUS4):
        assert check(llm_weights=weights, llm_gpus=gpus) == [], gpus
    # Without expert parallelism each expert's width is split too: 1408 does not divide by 3 either.
    findings = check(llm_weights=weights, llm_gpus=GPUS3, llm_expert_parallel=False)
    assert codes(findings) == [("E_UNSUPPORTED", "llm_gpus")], findings
    assert "(tensor parallel), and 3 does not divide its 8 KV heads (nor is 3 a multiple of them) or its 128 " \
        "experts' width 1408 (moe_intermediate_size)" in findings[0]["message"]


@pytest.mark.parametrize("weights", [{}, FP8_DUMMY])
def test_four_gpus_need_expert_parallelism_for_the_recipes_block_fp8_experts(weights):
    """vLLM's recipe for zai-org/GLM-4.6V-FP8 is --tensor-parallel-size 4 --enable-expert-parallel: split over 4
    GPUs each expert is 352 wide, not whole 128-wide FP8 blocks, and vLLM stops at load ("The output_size of gate's
    and up's weight = 352 is not divisible by weight quantization block_n = 128")."""
    assert check(**weights) == []  # llm_expert_parallel true, the default: whole experts (1408 = 11 x 128) on each GPU
    findings = check(llm_expert_parallel=False, **weights)
    assert codes(findings) == [("E_UNSUPPORTED", "llm_expert_parallel")], findings
    message = findings[0]["message"]
    assert message.startswith("llm_expert_parallel is false on vllm: it splits ")
    assert "over all 4 GPUs (tensor parallel), and 4 does not divide its 128 experts' width 1408 into whole fp8 " \
        "weight blocks of 128 (352 on each GPU; quantization_config weight_block_size)" in message
    assert message.endswith("set llm_expert_parallel: true (each GPU then holds whole experts, attention and the "
                            "dense layers stay tensor parallel), or llm_gpus to 1 GPU")
    assert findings[0]["details"] == {"variable": "llm_expert_parallel", "value": False, "allowed": "true",
                                      "engine": "vllm"}
    # 704 on each of 2 GPUs is no whole number of blocks either; one GPU holds every expert whole.
    assert codes(check(llm_expert_parallel=False, llm_gpus=[0, 1], **weights)) == [
        ("E_UNSUPPORTED", "llm_expert_parallel")]
    assert check(llm_expert_parallel=False, llm_gpus=[0], **weights) == []
    # SGLang's block-FP8 MoE method refuses the same part; its --ep-size keeps the experts whole (text only here:
    # the burn-in vision folder is proven on vLLM only).
    sglang = dict(SGLANG, llm_vision=False)
    assert codes(check(sglang, llm_expert_parallel=False, **weights)) == [("E_UNSUPPORTED", "llm_expert_parallel")]
    assert check(sglang, **weights) == []


def test_the_burn_in_folder_without_fp8_blocks_splits_its_experts_anywhere_they_divide():
    """A bf16 folder (no quantization_config) has no blocks: 1408 / 4 = 352 is a width vLLM takes."""
    assert check(llm_weights="dummy", llm_expert_parallel=False) == []
    assert checkpoint.shape(dummy_hf.PRESETS["glm4v_moe"])["weight_block"] is None


def test_sglang_is_held_to_the_same_split_and_llama_cpp_to_none():
    assert codes(check(SGLANG, llm_gpus=GPUS3)) == [("E_UNSUPPORTED", "llm_gpus")]
    assert check(SGLANG) == []
    # llama.cpp runs on the CPU: no tensor parallel split to judge, whatever llm_gpus holds.
    assert [f for f in check(CPU, llm_gpus=GPUS3) if f["subject"] == "llm_gpus"] == []


def test_eight_gpus_split_the_language_model_but_not_the_vision_tower():
    findings = check(llm_gpus=GPUS8)
    assert codes(findings) == [("E_UNSUPPORTED", "llm_gpus")]
    assert "8 does not divide its vision tower's 12 attention heads" in findings[0]["message"]
    assert "or llm_vision: false" in findings[0]["message"]  # vLLM then loads the language model alone
    assert check(llm_gpus=GPUS8, llm_vision=False) == []


def test_each_part_of_the_shape_is_judged_as_vllm_splits_it():
    model = {"heads": 32, "kv_heads": 8, "mlp_width": 14336, "experts": None, "expert_width": None,
             "vision": False, "vision_heads": None}
    assert checkpoint.split_problems(model, 4, False) == []
    assert checkpoint.split_problems(model, 16, False) == []  # more GPUs than KV heads: each replicated twice
    assert checkpoint.split_problems(model, 3, False) == [
        "its 32 attention heads", "its 8 KV heads (nor is 3 a multiple of them)",
        "its MLP width 14336 (intermediate_size)"]
    assert "its 4 KV heads (nor is 6 a multiple of them)" in checkpoint.split_problems(dict(model, kv_heads=4), 6, False)
    assert checkpoint.split_problems(dict(model, mlp_width=10000), 32, False) == ["its MLP width 10000 (intermediate_size)"]
    assert checkpoint.gpu_counts(model, False) == "1, 2, 4, 8 or 16"
    assert checkpoint.gpu_counts(dict(model, heads=7, kv_heads=7, mlp_width=7), False) == "1 or 7"


def test_expert_parallelism_keeps_experts_whole_and_places_them_as_each_engine_does():
    model = {"heads": 32, "kv_heads": 8, "mlp_width": 14336, "experts": 60, "expert_width": 1408, "vision": False,
             "vision_heads": None, "weight_block": {"method": "fp8", "n": 128, "k": 128}}
    # Tensor parallel: 1408 / 8 = 176, no whole number of 128-wide blocks.
    assert checkpoint.split_problems(model, 8, False) == [
        "its 60 experts' width 1408 into whole fp8 weight blocks of 128 (176 on each GPU; quantization_config "
        "weight_block_size)"]
    # Expert parallel: whole experts. vLLM gives the first GPUs one more (determine_expert_map: 60 over 8 GPUs is 8
    # on four and 7 on four); SGLang's FusedMoE asserts the experts divide by the GPUs.
    assert checkpoint.split_problems(model, 8, False, True, "vllm") == []
    assert checkpoint.split_problems(model, 8, False, True, "sglang") == [
        "its 60 routed experts (expert parallel: as many whole experts on each GPU)"]
    assert checkpoint.gpu_counts(model, False, expert_parallel=True, engine="sglang") == "1, 2 or 4"
    assert checkpoint.gpu_counts(model, False) == "1"
    # Blocks n x k: gate and up's output in blocks of n, down's input (more than one GPU) in blocks of k.
    assert checkpoint.split_problems(dict(model, weight_block={"method": "fp8", "n": 128, "k": 256}), 2, False) == [
        "its 60 experts' width 1408 into whole fp8 weight blocks of 128x256 (704 on each GPU; quantization_config "
        "weight_block_size)"]
    # A dense model: nothing to place, the flag changes no rule.
    dense = dict(model, experts=None, expert_width=None)
    assert checkpoint.split_problems(dense, 8, False, True, "sglang") == []


def test_the_shape_records_a_checkpoints_weight_blocks():
    fp8 = dummy_hf.merged(dummy_hf.PRESETS["glm4v_moe"], WEIGHTS_DEFAULTS["weights_fp8_quantization"])
    assert checkpoint.shape(fp8)["weight_block"] == {"method": "fp8", "n": 128, "k": 128}
    # Under text_config, as some vision checkpoints put it; a malformed one is no block.
    inner = dummy_hf.merged(dummy_hf.PRESETS["glm4v_moe"], {"text_config": FP8_BLOCKS})
    assert checkpoint.shape(inner)["weight_block"] == {"method": "fp8", "n": 128, "k": 128}
    for odd in ([128], [128, 0], "128", [128, True], None):
        config = dict(dummy_hf.PRESETS["glm4_moe"], quantization_config={"weight_block_size": odd})
        assert checkpoint.shape(config)["weight_block"] is None, odd
    # The shape carried for the recipe's model is its config.json's: FP8 in 128 x 128 blocks, as the weights role
    # declares an FP8 model's burn-in folder.
    assert FP8_BLOCKS == WEIGHTS_DEFAULTS["weights_fp8_quantization"]


def test_expert_parallelism_on_vllm_for_a_dense_model_is_refused(tmp_path):
    """vLLM refuses --enable-expert-parallel for a model with no routed experts (ModelConfig.
    _verify_with_expert_parallelism), and the template renders it on more than one GPU."""
    dense = {"architectures": ["Qwen2ForCausalLM"], "num_attention_heads": 28, "num_key_value_heads": 4,
             "intermediate_size": 18944}
    _cache(tmp_path, "acme/dense", dense)

    def read(repo, revision):
        return checkpoint.cached_config(str(tmp_path), repo, revision)
    base = dict(DEFAULTS, llm_model="acme/dense", llm_vision=False)
    findings = check(base, model_config=read)
    assert codes(findings) == [("E_UNSUPPORTED", "llm_expert_parallel")]
    assert "llm_expert_parallel is true on vllm but acme/dense@main" in findings[0]["message"]
    assert "\"Number of experts in the model must be greater than 0 when expert parallelism is enabled\"" in \
        findings[0]["message"]
    assert findings[0]["message"].endswith("set llm_expert_parallel: false")
    assert check(base, model_config=read, llm_expert_parallel=False) == []
    assert check(base, model_config=read, llm_gpus=[0]) == []  # one GPU: the flag is not rendered
    # SGLang's --ep-size on a dense model: not known to fail, so not refused.
    on_sglang = dict(base, **{k: SGLANG[k] for k in ("llm_engine", "llm_media_urls", "llm_kv_cap_gib", "llm_thinking")})
    assert check(on_sglang, model_config=read) == []
    # Both mistakes, each named once: the split is judged as with llm_expert_parallel false.
    assert codes(check(base, model_config=read, llm_gpus=GPUS3)) == [
        ("E_UNSUPPORTED", "llm_expert_parallel"), ("E_UNSUPPORTED", "llm_gpus")]


def test_images_on_for_the_text_burn_in_folder_are_refused():
    findings = check(llm_weights="dummy", weights_dummy_preset="glm4_moe")
    assert codes(findings) == [("E_UNSUPPORTED", "llm_vision")]
    assert "the burn-in folder (weights_dummy_preset: glm4_moe) is a text model" in findings[0]["message"]
    assert "set llm_vision: false, or weights_dummy_preset: glm4v_moe" in findings[0]["message"]
    assert check(llm_weights="dummy", weights_dummy_preset="glm4_moe", llm_vision=False) == []
    assert check(llm_weights="dummy") == []  # the default folder follows llm_vision: GLM-4.6V's, with its tower


def test_images_on_for_a_text_checkpoint_from_the_hub_are_refused():
    findings = check(llm_model="zai-org/GLM-4.5-Air-FP8")
    assert codes(findings) == [("E_UNSUPPORTED", "llm_vision")]
    assert "zai-org/GLM-4.5-Air-FP8" in findings[0]["message"] and "a text model" in findings[0]["message"]
    assert check(llm_model="zai-org/GLM-4.5-Air-FP8", llm_vision=False) == []


def test_one_finding_per_mistake():
    # Two mistakes, two findings: images on a text folder, and three GPUs.
    findings = check(llm_weights="dummy", weights_dummy_preset="glm4_moe", llm_gpus=GPUS3)
    assert codes(findings) == [("E_UNSUPPORTED", "llm_vision"), ("E_UNSUPPORTED", "llm_gpus")]
    assert "vision tower" not in findings[1]["message"]
    # llm_gpus refused on its own is not judged again against the model.
    assert codes(check(llm_gpus=[0, 1, 1])) == [("E_CONFIG", "llm_gpus")]
    # A refused weights_dummy_preset: the folder's shape is not known, so nothing is judged through it.
    assert codes(check(llm_weights="dummy", weights_dummy_preset="glm5", llm_gpus=GPUS3)) == [
        ("E_CONFIG", "weights_dummy_preset")]


def test_a_model_of_unknown_shape_is_w_check_skipped_never_guessed():
    findings = check(llm_model="acme/unknown-moe", llm_gpus=GPUS3)
    assert codes(findings) == [("W_CHECK_SKIPPED", "llm_model")]
    message = findings[0]["message"]
    assert "acme/unknown-moe on 3 GPUs" in message and "not in the workstation's Hugging Face cache" in message
    assert "hf download acme/unknown-moe config.json --revision main" in message
    # Every check the settings ask for and the unknown shape leaves unmade is named, and only those.
    assert message.startswith("The GPU split check, the check that the model has a vision tower (llm_vision) and the "
                              "check that it has routed experts (llm_expert_parallel) (E_UNSUPPORTED) were not made")
    assert "autotune_moe" not in message  # off by default: not asked
    findings = check(llm_model="acme/unknown-moe", llm_gpus=[0])  # one GPU: nothing to split, images still asked
    assert codes(findings) == [("W_CHECK_SKIPPED", "llm_model")]
    assert findings[0]["message"].startswith("The check that the model has a vision tower (llm_vision) (E_UNSUPPORTED) "
                                             "was not made for acme/unknown-moe on 1 GPU: ")
    findings = check(llm_model="acme/unknown-moe", llm_gpus=[0], llm_vision=False, autotune_moe="reduced")
    assert findings[0]["details"]["check"] == "the check of the MoE tune's split (autotune_moe)"
    assert check(llm_model="acme/unknown-moe", llm_gpus=[0], llm_vision=False) == []  # nothing asked of the shape
    assert check(CPU, llm_model="acme/unknown-gguf") == []


def _cache(root, repo, config, ref="main", commit="c" * 40):
    folder = root / ("models--" + repo.replace("/", "--"))
    (folder / "refs").mkdir(parents=True)
    (folder / "refs" / ref).write_text(commit)
    (folder / "snapshots" / commit).mkdir(parents=True)
    (folder / "snapshots" / commit / "config.json").write_text(config if isinstance(config, str) else json.dumps(config))
    return folder / "snapshots" / commit / "config.json"


def test_a_hub_config_json_in_the_workstations_cache_gives_the_shape(tmp_path):
    dense = {"architectures": ["Qwen2ForCausalLM"], "num_attention_heads": 28, "num_key_value_heads": 4,
             "intermediate_size": 18944}
    path = _cache(tmp_path, "acme/dense", dense)
    assert checkpoint.cached_config(str(tmp_path), "acme/dense", "main") == (dense, str(path))
    assert checkpoint.cached_config(str(tmp_path), "acme/dense", "c" * 40) == (dense, str(path))
    assert checkpoint.cached_config(str(tmp_path), "acme/dense", "v2") is None
    assert checkpoint.cached_config(str(tmp_path), "acme/other", "main") is None

    def read(repo, revision):
        return checkpoint.cached_config(str(tmp_path), repo, revision)
    findings = check(model_config=read, llm_model="acme/dense", llm_gpus=GPUS3, llm_expert_parallel=False)
    assert codes(findings) == [("E_UNSUPPORTED", "llm_vision"), ("E_UNSUPPORTED", "llm_gpus")]
    assert "acme/dense@main (config.json in %s)" % path in findings[1]["message"]
    assert "3 does not divide its 28 attention heads" in findings[1]["message"]
    assert check(model_config=read, llm_model="acme/dense", llm_gpus=GPUS4, llm_vision=False,
                 llm_expert_parallel=False) == []
    # Through validate_templated too (what the action runs).
    raw = dict(DEFAULTS, llm_model="acme/dense", llm_gpus=GPUS3, llm_vision=False, llm_expert_parallel=False)
    findings = validate_templated(raw, lambda value, typed: value, OPTIONS, SPECS.internal, model_config=read)[0]
    assert codes(findings) == [("E_UNSUPPORTED", "llm_gpus")]


def test_a_broken_or_partial_config_is_never_a_traceback(tmp_path):
    _cache(tmp_path, "acme/broken", "{not json")
    _cache(tmp_path, "acme/list", "[1, 2]")
    _cache(tmp_path, "acme/partial", {"model_type": "mystery", "num_attention_heads": "many"})

    def read(repo, revision):
        return checkpoint.cached_config(str(tmp_path), repo, revision)
    for repo in ("acme/broken", "acme/list"):
        assert codes(check(model_config=read, llm_model=repo, llm_gpus=GPUS3)) == [("W_CHECK_SKIPPED", "llm_model")]
    # What the config does not give is not judged; it has no vision tower, so images on are refused.
    assert codes(check(model_config=read, llm_model="acme/partial", llm_gpus=GPUS3)) == [
        ("E_UNSUPPORTED", "llm_vision")]
    assert check(llm_weights="dummy", llm_vision=False, weights_dummy_config={"text_config": "odd"}) == []


def test_the_workstations_cache_is_where_huggingface_hub_keeps_it():
    assert checkpoint.hub_cache_dir({}, "/home/u") == "/home/u/.cache/huggingface/hub"
    assert checkpoint.hub_cache_dir({"XDG_CACHE_HOME": "/c"}, "/home/u") == "/c/huggingface/hub"
    assert checkpoint.hub_cache_dir({"HF_HOME": "/hf"}, "/home/u") == "/hf/hub"
    assert checkpoint.hub_cache_dir({"HF_HOME": "/hf", "HF_HUB_CACHE": "/cache"}, "/home/u") == "/cache"


def test_validation_reads_the_burn_in_folder_the_weights_stage_makes():
    """The preset validation assumes is the weights role's default, and the carried shapes are the presets'."""
    with open(os.path.join(ROOT, "roles", "weights", "defaults", "main.yml")) as f:
        template = yaml.safe_load(f)["weights_dummy_preset"]
    for vision in (True, False):
        rendered = jinja2.Environment().from_string(template.replace("| bool", "")).render(llm_vision=vision)
        assert rendered == DUMMY_PRESETS[vision]
    made = dummy_hf.model_config("glm4v_moe")
    assert checkpoint.shape(made) == checkpoint.shape(dummy_hf.PRESETS["glm4v_moe"])
    assert checkpoint.shape(made) == {"heads": 96, "kv_heads": 8, "mlp_width": 10944, "experts": 128,
                                      "expert_width": 1408, "vision": True, "vision_heads": 12, "weight_block": None}


def test_the_weights_stage_refuses_the_same_split_from_the_hubs_config_json():
    caps = checkpoint.from_config(dummy_hf.merged(dummy_hf.PRESETS["glm4v_moe"], FP8_BLOCKS))
    serve = {"llm_vision": True, "llm_drafter": "ngram", "llm_engine": "vllm", "llm_expert_parallel": True}
    found = checkpoint.refusals(dict(serve, llm_gpus=GPUS3), caps, "zai-org/GLM-4.6V-FP8", "a" * 40)
    assert codes(found) == [("E_UNSUPPORTED", "llm_gpus")]
    assert "zai-org/GLM-4.6V-FP8@aaaaaaaaaaaa (config.json)" in found[0]["message"]
    assert checkpoint.refusals(dict(serve, llm_gpus=GPUS4), caps, "zai-org/GLM-4.6V-FP8", "a" * 40) == []
    found = checkpoint.refusals(dict(serve, llm_gpus=GPUS4, llm_expert_parallel=False), caps, "zai-org/GLM-4.6V-FP8",
                                "a" * 40)
    assert codes(found) == [("E_UNSUPPORTED", "llm_expert_parallel")] and "(352 on each GPU;" in found[0]["message"]
    dense = checkpoint.from_config({"num_attention_heads": 28, "num_key_value_heads": 4, "intermediate_size": 18944})
    assert codes(checkpoint.refusals(dict(serve, llm_vision=False, llm_gpus=GPUS4), dense, "acme/dense", "a" * 40)) \
        == [("E_UNSUPPORTED", "llm_expert_parallel")]
    # The weights stage hands the module what it judges by (roles/weights/tasks/hub.yml's serve).
    with open(os.path.join(ROOT, "roles", "weights", "tasks", "hub.yml")) as f:
        assert "'llm_expert_parallel': llm_settings.llm_expert_parallel" in f.read()
    assert checkpoint.refusals(serve, caps, "zai-org/GLM-4.6V-FP8", "a" * 40) == []  # no GPUs given: not judged
    assert checkpoint.needed(dict(serve, llm_vision=False, llm_drafter="off", llm_gpus=GPUS3))
    assert not checkpoint.needed(dict(serve, llm_vision=False, llm_drafter="off", llm_gpus=[0]))
    assert not checkpoint.needed({"llm_vision": False, "llm_drafter": "off", "llm_engine": "llamacpp",
                                  "llm_gpus": GPUS3})
    # A MoE tune the tuner could not make, on a shape validation did not know: refused here, before the download.
    with open(os.path.join(ROOT, "roles", "weights", "tasks", "hub.yml")) as f:
        assert "'autotune_moe': llm_settings.autotune_moe | default('off')" in f.read()
    tune = dict(serve, llm_vision=False, llm_engine="sglang", llm_gpus=GPUS4, autotune_moe="reduced")
    assert codes(checkpoint.refusals(tune, caps, "acme/moe", "a" * 40)) == [("E_UNSUPPORTED", "autotune_moe")]
    assert checkpoint.refusals(dict(tune, autotune_moe="off"), caps, "acme/moe", "a" * 40) == []
    assert checkpoint.needed(dict(tune, llm_gpus=[0]))  # one GPU, but a tune to check
    assert codes(checkpoint.refusals(dict(tune, llm_engine="vllm", llm_gpus=[0]), dense, "acme/dense", "a" * 40)) \
        == [("E_UNSUPPORTED", "autotune_moe")]


@pytest.mark.parametrize("name, value, why", [
    ("weights_hf_endpoint", "https://hub.internal:8o80", "its port '8o80' is not a number"),
    ("host_venv_index_url", "http://pypi.internal:0/simple", "its port 0 is not from 1 to 65535"),
    ("host_apt_mirror", "http://mirror.internal:65536/apt", "its port 65536 is not from 1 to 65535"),
    ("verify_undrafted_url", "http://127.0.0.1:80a/v1", "its port '80a' is not a number"),
    ("router_wheel_url", "https://files.internal: 443/w.whl", "its port ' 443' is not a number"),
    ("image_debian_mirror", "http://deb.internal:http/debian", "its port 'http' is not a number"),
    ("front_debian_mirror", "http://deb.internal:-1/debian", "its port '-1' is not a number"),
    ("router_debian_mirror", "http://fe80::1:8080/debian", "its IPv6 host is not in brackets ([address]:port)"),
    ("image_git_repo", "https://git.internal:x/vllm.git", "its port 'x' is not a number"),
    ("llm_docker_host", "tcp://10.0.0.5:docker", "its port 'docker' is not a number"),
])
def test_a_url_whose_port_is_not_a_port_is_refused(name, value, why):
    findings = check(**{name: value})
    assert codes(findings) == [("E_CONFIG", name)], findings
    assert findings[0]["message"] == "%s is %r: %s; allowed: a URL whose port, if it names one, is a number from 1 " \
        "to 65535" % (name, value, why)


def test_urls_with_good_ports_or_none_are_accepted():
    assert check(weights_hf_endpoint="https://hub.internal:8080", host_venv_index_url="http://[fd00::5]:3141/simple",
                 host_apt_mirror="http://mirror.internal/apt", image_debian_mirror="http://deb.internal:1/debian",
                 front_debian_mirror="http://deb.internal:65535/debian", image_git_repo="git@git.internal:org/vllm.git",
                 llm_docker_host="unix:///var/run/docker.sock", verify_undrafted_url="http://[::1]/v1",
                 bench_endpoints=[{"name": "b", "url": "http://10.0.0.9:8000/v1", "api_key": "", "model": "m"}]) == []
    assert check(llm_docker_host="tcp://10.0.0.5:2376") == []
    assert check(llm_docker_host="ssh://deploy@gpu-host-1") == []


def test_a_proxy_with_a_bad_port_is_refused_without_showing_it():
    findings = check(host_proxy="http://user:s3cret@proxy.internal:31x8")
    assert codes(findings) == [("E_CONFIG", "host_proxy")]
    assert findings[0]["message"].startswith("host_proxy is (hidden): its port is not a number; allowed: ")
    assert "s3cret" not in repr(findings) and "31x8" not in repr(findings) and findings[0]["details"]["value"] is None


def test_each_bench_endpoint_url_is_judged():
    endpoints = [{"name": "a", "url": "http://10.0.0.8:8000/v1"}, {"name": "b", "url": "http://10.0.0.9:99999/v1"}]
    findings = check(bench_endpoints=endpoints)
    assert codes(findings) == [("E_CONFIG", "bench_endpoints[1].url")]
    assert findings[0]["details"]["variable"] == "bench_endpoints"
    assert "'http://10.0.0.9:99999/v1': its port 99999 is not from 1 to 65535" in findings[0]["message"]


def test_every_setting_that_holds_a_url_has_its_port_checked():
    """A URL setting added later is named here, or this fails: its port would go unjudged."""
    urlish = set(name for name, option in OPTIONS.items()
                 if name.endswith(("_url", "_mirror", "_endpoint", "_docker_host", "_git_repo")) or name == "host_proxy"
                 or "://" in str(option.get("default", "")))
    assert urlish - set(URL_PORT_SETTINGS) == set()
    assert set(name for name, _key in URL_PORT_ITEMS) == set(
        name for name, option in OPTIONS.items()
        if option.get("elements") == "dict" and "url" in str(option.get("description", "")))


# The autotune stage's MoE tune (autotune_moe full or reduced) of the split the engine runs, refused before anything
# changes where the tuner cannot make it (before, the stage planned the tensor-parallel split under expert
# parallelism and stopped with E_AUTOTUNE after the host and image stages had run).
@pytest.mark.parametrize("weights", ["hub", "dummy"])
def test_a_moe_tune_of_the_recipe_is_the_split_the_engine_runs(weights):
    for gpus in ([0], [0, 1], GPUS4):  # vLLM, expert parallel: 128 experts, whole, on each of 1, 2 or 4 GPUs
        assert check(llm_weights=weights, llm_gpus=gpus, autotune_moe="reduced") == [], gpus
    findings = check(SGLANG, llm_weights=weights, llm_gpus=GPUS4, autotune_moe="full", llm_vision=False)
    assert codes(findings) == [("E_UNSUPPORTED", "autotune_moe")], findings
    message = findings[0]["message"]
    assert message.startswith("autotune_moe is full on sglang but for ")
    assert "tensor-parallel split only" in message and "whole experts" in message
    assert message.endswith("set autotune_moe: 'off', or llm_expert_parallel: false")
    assert findings[0]["details"]["value"] == "full" and findings[0]["details"]["allowed"] == "off"
    # SGLang over one GPU has no split to differ: the tune is its shape.
    assert check(SGLANG, llm_weights=weights, llm_gpus=[0], autotune_moe="full", llm_vision=False) == []


def test_a_moe_tune_of_experts_the_gpus_do_not_divide_or_of_a_dense_model_is_refused():
    # 100 experts over 8 GPUs: vLLM places them (the first get one more), its tuner asserts they divide.
    odd = {"weights_dummy_preset": "glm4_moe", "llm_vision": False, "llm_weights": "dummy",
           "weights_dummy_config": {"n_routed_experts": 100}}
    assert check(llm_gpus=GPUS8, **odd) == []
    findings = check(llm_gpus=GPUS8, autotune_moe="reduced", **odd)
    assert codes(findings) == [("E_UNSUPPORTED", "autotune_moe")], findings
    assert "8 GPUs do not divide 100 experts" in findings[0]["message"]
    assert findings[0]["message"].endswith("set autotune_moe: 'off', or llm_gpus to a count that divides them")
    dense = {"architectures": ["Qwen2ForCausalLM"], "num_attention_heads": 28, "num_key_value_heads": 4,
             "intermediate_size": 18944}

    def read(repo, revision):
        return (dense, "/cache/config.json") if repo == "acme/dense" else None
    findings = check(model_config=read, llm_model="acme/dense", llm_gpus=[0], llm_vision=False, autotune_moe="full")
    assert codes(findings) == [("E_UNSUPPORTED", "autotune_moe")], findings
    assert "has no routed experts" in findings[0]["message"] and "nothing to tune" in findings[0]["message"]


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    """The hub double (tests/hub_double, test plumbing) serving two repos' config.json behind a token."""
    root = tmp_path_factory.mktemp("hub")
    for repo, config in (("acme/dense", {"architectures": ["Qwen2ForCausalLM"], "num_attention_heads": 28,
                                         "num_key_value_heads": 4, "intermediate_size": 18944}),
                         ("acme/vision-moe", json.loads(dummy_hf.folder_files(
                             "{{ messages }}", "glm4v_moe", None, FP8_BLOCKS)["config.json"]))):
        (root / repo).mkdir(parents=True)
        (root / repo / "config.json").write_text(json.dumps(config))
    proc = subprocess.Popen([sys.executable, os.path.join(ROOT, "tests", "hub_double", "hub_server.py"), "--root",
                             str(root), "--token", "hf_sekrit_token", "--port", "0"], stdout=subprocess.PIPE, text=True)
    yield "http://127.0.0.1:%d" % int(proc.stdout.readline().split()[1])
    proc.terminate()
    proc.wait()


def test_a_hub_models_shape_is_read_from_the_hub_before_anything_changes(hub):
    """Issue 38 item 2: with hub weights, a config.json neither the workstation's cache holds nor the collection
    carries is read from the hub the weights stage would fetch from (weights_hf_endpoint, with llm_hf_token), so
    a GPU count the model cannot be split over is refused before any stage runs, not at the weights stage."""
    def hub_check(**changes):
        settings = dict(llm_model="acme/dense", weights_hf_endpoint=hub, llm_hf_token="hf_sekrit_token",
                        llm_vision=False)
        settings.update(changes)
        return check(hub_config=hub_config.read, **settings)

    findings = hub_check(llm_gpus=GPUS3, llm_expert_parallel=False)
    assert codes(findings) == [("E_UNSUPPORTED", "llm_gpus")], findings
    assert "acme/dense@main (config.json from %s)" % hub in findings[0]["message"]
    assert "3 does not divide its 28 attention heads" in findings[0]["message"]
    assert hub_check(llm_gpus=GPUS4, llm_expert_parallel=False) == []
    # A vision checkpoint read the same way: its tower is known, so images on pass.
    assert hub_check(llm_gpus=GPUS4, llm_model="acme/vision-moe", llm_vision=True) == []
    # Without the token (a gated repo): the checks are not made, said with the hub's answer; no token shown.
    findings = hub_check(llm_gpus=GPUS3, llm_expert_parallel=False, llm_hf_token="")
    assert codes(findings) == [("W_CHECK_SKIPPED", "llm_model")]
    assert "the hub did not give it (%s answered HTTP 401" % hub in findings[0]["message"]
    assert "a gated or private repo needs llm_hf_token" in findings[0]["message"]
    wrong = hub_check(llm_gpus=GPUS3, llm_expert_parallel=False, llm_hf_token="hf_wrong_one")
    assert codes(wrong) == [("W_CHECK_SKIPPED", "llm_model")] and "hf_wrong_one" not in json.dumps(wrong)
    # An endpoint that does not answer: said, and validation goes on.
    findings = hub_check(llm_gpus=GPUS3, weights_hf_endpoint="http://127.0.0.1:9")
    assert codes(findings) == [("W_CHECK_SKIPPED", "llm_model")]
    assert "http://127.0.0.1:9 could not be reached" in findings[0]["message"]
    # Weights from a folder: the hub is not what the stage reads, so it is not asked.
    findings = hub_check(llm_gpus=GPUS3, weights_source="folder", weights_source_dir="/srv/models/dense")
    assert codes(findings) == [("W_CHECK_SKIPPED", "llm_model")] and "the hub" not in findings[0]["message"]


def test_the_hub_is_asked_only_for_a_check_asked_for_and_only_with_settings_that_passed():
    asked = []

    def hub_read(repo, revision, endpoint, token):
        asked.append((repo, endpoint))
        return None, "not asked here"
    # One GPU, no images, no tune: nothing needs the shape, so the hub is not asked.
    assert check(hub_config=hub_read, llm_model="acme/unknown", llm_gpus=[0], llm_vision=False) == [] and not asked
    # A refused endpoint: the token must not go to the default hub instead.
    findings = check(hub_config=hub_read, llm_model="acme/unknown", llm_gpus=GPUS3, llm_hf_token="hf_sekrit",
                     weights_hf_endpoint="https://hub.internal:8o80")
    assert ("E_CONFIG", "weights_hf_endpoint") in codes(findings) and not asked
    check(hub_config=hub_read, llm_model="acme/unknown", llm_gpus=GPUS3)
    assert asked == [("acme/unknown", "")]


def test_the_token_goes_to_the_endpoint_only_never_where_it_redirects():
    """huggingface.co answers resolve/ with redirects to a CDN: the token stays with the endpoint it was set for."""
    seen = {}

    class Target(BaseHTTPRequestHandler):
        def do_GET(self):  # pylint: disable=invalid-name
            seen["authorization"] = self.headers.get("Authorization")
            body = json.dumps({"num_attention_heads": 28, "intermediate_size": 18944}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    target = HTTPServer(("127.0.0.1", 0), Target)

    class Hub(Target):
        def do_GET(self):  # pylint: disable=invalid-name
            seen["hub"] = self.headers.get("Authorization")
            self.send_response(302)
            self.send_header("Location", "http://127.0.0.1:%d/blob" % target.server_port)
            self.send_header("Content-Length", "0")
            self.end_headers()

    hub = HTTPServer(("127.0.0.1", 0), Hub)
    for server in (target, hub):
        threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        read, why = hub_config.read("acme/dense", "main", "http://127.0.0.1:%d" % hub.server_port, "hf_sekrit")
    finally:
        for server in (target, hub):
            server.shutdown()
            server.server_close()
    assert why is None and read[0]["num_attention_heads"] == 28
    assert seen == {"hub": "Bearer hf_sekrit", "authorization": None}
    # A token urllib refuses as a header value: said without the token.
    read, why = hub_config.read("acme/dense", "main", "http://127.0.0.1:9", "hf_sekrit\nX-Other: 1")
    assert read is None and "hf_sekrit" not in why
