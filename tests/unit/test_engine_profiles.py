"""Engine profiles: the recipe's command for vLLM, SGLang and llama.cpp (golden files), every vLLM flag
in vLLM 0.26.0's own --help=all and every SGLang flag in SGLang 0.5.5's launch_server --help, secrets kept
off argv, and the pool figures each engine reports."""
import json
import os
import re
import shlex

import pytest
import yaml

from ansible_collections.gpuserve.llm.plugins.filter.engines import engine_command, serving_api_key, serving_engine
from ansible_collections.gpuserve.llm.plugins.module_utils import engines
from ansible_collections.gpuserve.llm.plugins.module_utils.settings import ATTENTION_BACKENDS

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GOLDEN = os.path.join(ROOT, "tests", "golden")
VLLM_HELP = os.path.join(ROOT, "tests", "fixtures", "vllm-0.26.0-serve-help.txt")
# SGLang's parser (ServerArgs.add_cli_args) printed on the GPU machine by tests/gpu/check_sglang_args.py.
SGLANG_HELP = os.path.join(ROOT, "tests", "fixtures",
                           "sglang-%s-server-help.txt" % engines.PROFILES["sglang"]["version"])
# Debian's llama-server 0.7.0 (build 11669) --help, from the engine image's root (chroot ROOT llama-server --help).
LLAMA_HELP = os.path.join(ROOT, "tests", "fixtures", "llama-server-0.7.0-help.txt")
UPDATE = os.environ.get("GPUSERVE_UPDATE_GOLDEN") == "1"

with open(os.path.join(ROOT, "inventories", "example", "group_vars", "llm_hosts", "settings.yml")) as f:
    EXAMPLE = yaml.safe_load(f)
with open(os.path.join(ROOT, "inventories", "local", "group_vars", "llm_hosts", "settings.yml")) as f:
    LOCAL = yaml.safe_load(f)
with open(os.path.join(ROOT, "roles", "llm", "defaults", "main.yml")) as f:
    DEFAULTS = {k: v for k, v in yaml.safe_load(f).items() if "{{" not in str(v)}
    DEFAULTS["llm_engine_port"] = DEFAULTS["llm_port"] + 10000  # its default: "{{ llm_port | int + 10000 }}"

RECIPE = dict(DEFAULTS, **EXAMPLE)
RECIPE.update(llm_api_key="sk-recipe-SECRET", llm_model_dense="fp8")
MODEL = {"model_dir": "/models/zai-org/GLM-4.6V-FP8"}
RTX_PRO_6000 = {"gpu_memory_total_mib": 97887}
CASES = {
    "vllm-recipe": (RECIPE, MODEL, RTX_PRO_6000),
    # SGLang with the media setting it can honour, its pool sized by fraction, the model's thinking default.
    "sglang-recipe": (dict(RECIPE, llm_engine="sglang", llm_media_urls="any", llm_kv_cap_gib=0, llm_thinking=True),
                      MODEL, RTX_PRO_6000),
    "llamacpp-cpu": (dict(DEFAULTS, **dict(LOCAL, llm_api_key="sk-recipe-SECRET", llm_model_dense=LOCAL["llm_dense"])),
                     {"model_file": "/models/tiny/tiny.gguf", "threads": 2, "batch_size": 512}, {}),
}


def rendered(name):
    settings, paths, facts = CASES[name]
    return engine_command(settings, paths, facts)


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden_command_line(name):
    out = rendered(name)
    text = out["display"] + "\n# environment: %s\n" % ", ".join(sorted(out["env"]))
    path = os.path.join(GOLDEN, "%s.cmd" % name)
    if UPDATE:
        with open(path, "w") as f:
            f.write(text)
    with open(path) as f:
        assert text == f.read(), "regenerate with GPUSERVE_UPDATE_GOLDEN=1 and review the diff"
    # What is displayed is what runs: the display (less its environment lines) parses back to argv.
    shown = out["display"].split("\n")
    command = "\n".join(line for line in shown if not re.match(r"^[A-Z_]+=", line))
    assert shlex.split(command.replace("\\\n", " ")) == out["argv"]


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_api_key_goes_to_the_environment_never_to_argv(name):
    out = rendered(name)
    assert "sk-recipe-SECRET" not in " ".join(out["argv"])
    assert "sk-recipe-SECRET" not in out["display"]
    assert "<llm_api_key>" in out["display"]
    assert list(out["env"].values()) == ["sk-recipe-SECRET"]
    # The variable each engine reads its key from (SGLang's through a shell: it takes --api-key only), as
    # the profile names it for the drain, which reads a serving engine's key out of its container.
    engine = CASES[name][0]["llm_engine"]
    assert list(out["env"]) == [{"vllm": "VLLM_API_KEY", "sglang": "GPUSERVE_API_KEY", "llamacpp": "LLAMA_API_KEY"}[engine]]
    assert list(out["env"]) == [engines.PROFILES[engine]["api_key_env"]]


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_key_a_container_was_started_with_is_read_back_from_its_environment(name):
    """What the drain and the rollback's health gate ask an old engine with: its own key, found through its
    engine's label, even when the run now names another engine or no key."""
    out = rendered(name)
    engine = CASES[name][0]["llm_engine"]
    other = [e for e in sorted(engines.PROFILES) if e != engine][0]
    container = {"Config": {"Labels": {"gpuserve.llm.engine": engine, "gpuserve.llm.config": "0123"},
                            "Env": ["PATH=/usr/bin"] + ["%s=%s" % kv for kv in out["env"].items()]}}
    assert serving_engine(container, other) == engine
    assert serving_api_key(container, other) == "sk-recipe-SECRET"
    settings, paths, facts = CASES[name]
    keyless = engine_command(dict(settings, llm_api_key=""), paths, facts)
    container["Config"]["Env"] = ["%s=%s" % kv for kv in keyless["env"].items()]
    assert serving_api_key(container, other) == ""
    # A container without the label: the engine given decides which variable is read.
    unlabelled = {"Config": {"Labels": None, "Env": ["%s=%s" % kv for kv in out["env"].items()]}}
    assert serving_engine(unlabelled, engine) == engine and serving_api_key(unlabelled, engine) == "sk-recipe-SECRET"
    assert serving_api_key(unlabelled, other) == ""


def test_no_api_key_no_environment():
    settings, paths, facts = CASES["vllm-recipe"]
    out = engine_command(dict(settings, llm_api_key=""), paths, facts)
    assert out["env"] == {} and "<llm_api_key>" not in out["display"]


def _help_flags(path=VLLM_HELP):
    with open(path) as f:
        text = f.read()
    flags = set(re.findall(r"(?m)^\s+(--[a-z0-9][a-z0-9-]*)", text))
    flags |= set(re.findall(r",\s+(--[a-z0-9][a-z0-9-]*)", text))
    choices = {}
    for flag, options in re.findall(r"(?m)^\s+(--[a-z0-9-]+)\s+\{([^}]+)\}", text):
        choices[flag] = set(options.split(","))
    return flags, choices


@pytest.mark.parametrize("variant", [
    {}, {"llm_drafter": "ngram"}, {"llm_drafter": "org/draft-model"}, {"llm_drafter": "off"},
    {"llm_vision": False}, {"llm_media_urls": ["example.com"]}, {"llm_kv": "bf16"}, {"llm_kv_cap_gib": 0},
    {"llm_model_dense": "bf16"}, {"llm_thinking": True}, {"llm_tool_call_parser": "glm47", "llm_reasoning_parser": "glm45"},
    {"llm_expert_parallel": False}, {"llm_gpus": [0]}, {"llm_attention_backend": "TRITON_ATTN"},
])
def test_every_vllm_flag_and_choice_is_in_vllm_0_26_help(variant):
    flags, choices = _help_flags()
    settings, paths, facts = CASES["vllm-recipe"]
    out = engine_command(dict(settings, **variant), dict(paths, draft_dir="/models/org/draft-model", dummy=True), facts)
    argv = out["argv"]
    assert argv[:2] == ["vllm", "serve"]
    used = [a for a in argv if a.startswith("--")]
    assert [a for a in used if a not in flags] == []
    for i, arg in enumerate(argv):
        if arg in choices:
            assert argv[i + 1] in choices[arg], (arg, argv[i + 1], sorted(choices[arg]))
    assert {"--tool-call-parser", "--kv-cache-dtype"} <= set(choices)


def _sglang_flags(argv):
    """What sglang.launch_server gets: the flags after the launcher; the shell form appends --api-key."""
    if argv[:2] == ["sh", "-c"]:
        assert argv[2] == 'exec python3 -m sglang.launch_server "$@" --api-key "$GPUSERVE_API_KEY"'
        assert argv[3] == "sglang"
        return argv[4:] + ["--api-key", "KEY"]
    assert argv[:3] == ["python3", "-m", "sglang.launch_server"]
    return argv[3:]


@pytest.mark.parametrize("variant", [
    {}, {"llm_drafter": "mtp", "llm_vision": False}, {"llm_drafter": "org/draft-model"}, {"llm_drafter": "off"},
    {"llm_vision": False}, {"llm_kv": "bf16"}, {"llm_model_dense": "bf16"}, {"llm_api_key": ""},
    {"llm_tool_call_parser": "glm", "llm_reasoning_parser": "glm45"}, {"llm_expert_parallel": False},
    {"llm_gpus": [0]},
] + [{"llm_attention_backend": backend} for backend in ATTENTION_BACKENDS["sglang"]])
def test_every_sglang_flag_and_choice_is_in_sglang_0_5_5_help(variant):
    """SGLang 0.5.5's parser refuses a flag it does not know (it refused --default-chat-template-kwargs:
    tests/gpu/RESULTS.md), so every flag the template renders, and every value of a flag with choices, must
    be in its help text."""
    with open(SGLANG_HELP) as f:
        assert f.readline().startswith("usage: python3 -m sglang.launch_server ")
    flags, choices = _help_flags(SGLANG_HELP)
    settings, paths, facts = CASES["sglang-recipe"]
    out = engine_command(dict(settings, **variant), dict(paths, draft_dir="/models/org/draft-model", dummy=True), facts)
    argv = _sglang_flags(out["argv"])
    used = [a for a in argv if a.startswith("--")]
    assert [a for a in used if a not in flags] == []
    for i, arg in enumerate(argv):
        if arg in choices:
            assert argv[i + 1] in choices[arg], (arg, argv[i + 1], sorted(choices[arg]))
    assert {"--tool-call-parser", "--reasoning-parser", "--kv-cache-dtype", "--speculative-algorithm",
            "--grammar-backend", "--load-format", "--quantization"} <= set(choices)


def test_the_argv_checked_by_sglang_on_the_gpu_is_what_the_template_renders_now():
    """tests/gpu/sglang-argv.json went through SGLang 0.5.5's own parser and ServerArgs (tests/gpu/RESULTS.md); a
    template change must regenerate it (python3 tests/gpu/render_sglang_argv.py) and rerun that check."""
    import subprocess
    import sys
    rendered = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "gpu", "render_sglang_argv.py")],
                              stdout=subprocess.PIPE, text=True, check=True).stdout
    with open(os.path.join(ROOT, "tests", "gpu", "sglang-argv.json")) as f:
        assert json.loads(rendered) == json.load(f)


def test_vllm_recipe_flags_say_what_the_recipe_says():
    argv = rendered("vllm-recipe")["argv"]
    opts = dict(zip(argv, argv[1:]))
    assert opts["--tensor-parallel-size"] == "4" and opts["--max-num-seqs"] == "40"
    assert opts["--max-model-len"] == "131072" and opts["--kv-cache-dtype"] == "fp8"
    # No drafter by default: vLLM 0.26.0 has no MTP drafting for GLM-4.6V (it exits), the text models have it, and
    # n-gram drafting cost a third of the throughput where it found nothing to draft (tests/gpu/h200-ngram-cost-2026-12-03)
    assert "--speculative-config" not in opts
    settings, paths, facts = CASES["vllm-recipe"]
    ngram = engine_command(dict(settings, llm_drafter="ngram"), paths, facts)["argv"]
    assert json.loads(ngram[ngram.index("--speculative-config") + 1]) == {
        "method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}
    text = engine_command(dict(settings, llm_vision=False, llm_drafter="mtp"), paths, facts)["argv"]
    assert json.loads(text[text.index("--speculative-config") + 1])["method"] == "mtp"
    assert opts["--tool-call-parser"] == "glm45" and opts["--reasoning-parser"] == "glm45"
    assert json.loads(opts["--structured-outputs-config"]) == {"backend": "xgrammar"}
    assert json.loads(opts["--default-chat-template-kwargs"]) == {"enable_thinking": False}
    assert json.loads(opts["--override-generation-config"]) == {"top_k": 20, "max_new_tokens": 32768}
    assert opts["--allowed-media-domains"] == "data-urls-only/"  # data: URLs only: no URL's host has a "/"
    assert opts["--kv-cache-memory-bytes"] == str(60 * 1024 ** 3)
    assert float(opts["--gpu-memory-utilization"]) == pytest.approx(1 - 7.5 * 1024 / 97887, abs=1e-4)
    assert "--quantization" not in opts  # the checkpoint is FP8 already
    assert "--enable-auto-tool-choice" in argv and "--enable-prefix-caching" in argv
    assert "--enable-expert-parallel" in argv  # vLLM's recipe for GLM-4.6V-FP8: --tensor-parallel-size 4 -ep


@pytest.mark.parametrize("name, flag", [("vllm-recipe", ["--enable-expert-parallel"]),
                                        ("sglang-recipe", ["--ep-size", "4"])])
def test_expert_parallelism_is_rendered_on_more_than_one_gpu_only(name, flag):
    """llm_expert_parallel (default true) keeps whole experts on each GPU. On one GPU there is nothing to place, and
    vLLM would still refuse the flag for a dense model, so neither template renders it there; nor with it off."""
    settings, paths, facts = CASES[name]
    assert settings["llm_expert_parallel"] is True and len(settings["llm_gpus"]) == 4

    def argv(**change):
        return engine_command(dict(settings, **change), paths, facts)["argv"]
    recipe = argv()
    at = recipe.index(flag[0])
    assert recipe[at:at + len(flag)] == flag
    assert recipe[at - 2] in ("--tensor-parallel-size", "--tp-size") and recipe[at - 1] == "4"
    assert argv(llm_gpus=[0, 1])[at:at + len(flag)] == flag[:1] + ["2"] * (len(flag) - 1)
    assert flag[0] not in argv(llm_gpus=[0])
    assert argv(llm_expert_parallel=False) == recipe[:at] + recipe[at + len(flag):]  # that flag alone


def test_vllm_media_domains_are_fetched_without_redirects():
    settings, paths, facts = CASES["vllm-recipe"]
    out = engine_command(dict(settings, llm_media_urls=["cdn.example.org"]), paths, facts)
    opts = dict(zip(out["argv"], out["argv"][1:]))
    assert opts["--allowed-media-domains"] == "cdn.example.org"
    # vLLM would follow a redirect from an allowed domain to any host
    assert out["env"]["VLLM_MEDIA_URL_ALLOW_REDIRECTS"] == "0"
    assert out["display"].startswith("VLLM_API_KEY=<llm_api_key> \\\nVLLM_MEDIA_URL_ALLOW_REDIRECTS=0 \\\nvllm serve")
    for media in ("data_only", "any"):
        assert "VLLM_MEDIA_URL_ALLOW_REDIRECTS" not in engine_command(dict(settings, llm_media_urls=media), paths,
                                                                      facts)["env"]
    assert "VLLM_MEDIA_URL_ALLOW_REDIRECTS" not in engine_command(
        dict(settings, llm_media_urls=["cdn.example.org"], llm_vision=False), paths, facts)["env"]


def test_llamacpp_context_is_per_slot():
    argv = rendered("llamacpp-cpu")["argv"]
    opts = dict(zip(argv, argv[1:]))
    assert int(opts["--ctx-size"]) == LOCAL["llm_context"] * LOCAL["llm_parallel"]
    assert opts["--host"] == "127.0.0.1" and opts["--port"] == str(LOCAL["llm_port"] + 10000)


LLAMA_VISION = {"llm_weights": "dummy", "llm_vision": True, "llm_media_urls": "any"}


def test_llamacpp_with_vision_loads_the_projector_and_without_loads_none():
    settings, paths, facts = CASES["llamacpp-cpu"]
    argv = engine_command(dict(settings, **LLAMA_VISION), dict(paths, mmproj_file="/models/main/mmproj.gguf"), facts)["argv"]
    assert argv[argv.index("--mmproj") + 1] == "/models/main/mmproj.gguf" and "--no-mmproj" not in argv
    text = rendered("llamacpp-cpu")["argv"]
    assert "--no-mmproj" in text and "--mmproj" not in text


def test_the_projector_the_weights_stage_records_is_the_one_the_service_stage_renders():
    """weights_model.serve_mmproj_file (roles/weights/tasks/dummy.yml) -> service_paths.mmproj_file
    (roles/service/vars/main.yml) -> --mmproj: the expressions rendered as Jinja, with and without vision."""
    from jinja2 import Environment
    with open(os.path.join(ROOT, "roles", "weights", "tasks", "dummy.yml")) as f:
        block = yaml.safe_load(f)[0]["block"]
    made = next(t for t in block if t.get("register") == "weights_dummy_main")
    assert "llm_vision" in made["gpuserve.llm.dummy_weights"]["vision"]
    record = next(t for t in block if "ansible.builtin.set_fact" in t)["ansible.builtin.set_fact"]["weights_model"]
    assert record["volumes"].strip().startswith("{{ [weights_dummy_main.path ~ ':/models/main:ro']")
    with open(os.path.join(ROOT, "roles", "service", "vars", "main.yml")) as f:
        service = yaml.safe_load(f)["service_paths"]["mmproj_file"]
    env = Environment()
    settings, paths, facts = CASES["llamacpp-cpu"]
    for result, vision in (({"path": "/d", "mmproj_file": "/d/mmproj.gguf"}, True), ({"path": "/d"}, False)):
        serve = env.from_string(record["serve_mmproj_file"]).render(weights_dummy_main=result)
        mmproj = env.from_string(service).render(weights_model={"serve_mmproj_file": serve})
        argv = engine_command(dict(settings, **dict(LLAMA_VISION, llm_vision=vision)), dict(paths, mmproj_file=mmproj),
                              facts)["argv"]
        if vision:
            assert argv[argv.index("--mmproj") + 1] == "/models/main/mmproj.gguf"
        else:
            assert mmproj == "" and "--no-mmproj" in argv
    # hub weights record no projector: the service stage's default
    assert env.from_string(service).render(weights_model={}) == ""


@pytest.mark.parametrize("variant", [{}, LLAMA_VISION, {"llm_drafter": "org/draft-model"}, {"llm_drafter": "mtp"},
                                     {"llm_thinking": True}, {"llm_api_key": ""}])
def test_every_llamacpp_flag_is_in_llama_server_0_7_0_help(variant):
    with open(LLAMA_HELP) as f:
        text = f.read()
    assert text.startswith("----- common params -----")
    flags = set(re.findall(r"(?<![\w-])(--[a-z0-9][a-z0-9-]*)", text))
    settings, paths, facts = CASES["llamacpp-cpu"]
    paths = dict(paths, mmproj_file="/models/main/mmproj.gguf", draft_file="/models/draft/model.gguf")
    argv = engine_command(dict(settings, **variant), paths, facts)["argv"]
    assert argv[0] == "llama-server"
    assert [a for a in argv if a.startswith("--") and a not in flags] == []


# Pool figures, from payloads in each engine's documented format (synthetic values).

def test_pool_from_vllm_metrics():
    text = """# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",cache_dtype="fp8",enable_prefix_caching="True",num_gpu_blocks="81920"} 1.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="glm-4.6v"} 0.25
"""
    assert engines.pool_vllm_metrics(text) == {"pool_tokens": 1310720, "free_tokens": 983040}
    assert engines.pool_vllm_metrics("# nothing\n") is None


def test_pool_from_sglang_server_info():
    info = {"max_total_num_tokens": 500000, "model_path": "/models/m"}
    assert engines.pool_sglang_server_info(info) == {"pool_tokens": 500000, "free_tokens": 500000}
    assert engines.pool_sglang_server_info({"internal_states": [{"max_total_num_tokens": 1000}]},
                                           'sglang:token_usage{model_name="m"} 0.1\n') == \
        {"pool_tokens": 1000, "free_tokens": 900}


def test_pool_from_llamacpp_slots():
    slots = [{"id": 0, "n_ctx": 2048, "is_processing": False},
             {"id": 1, "n_ctx": 2048, "is_processing": True, "n_past": 300}]
    assert engines.pool_llamacpp_slots(slots) == {"pool_tokens": 4096, "free_tokens": 3796}
    assert engines.pool_llamacpp_slots({"error": "slots disabled"}) is None


def _readme_engine_table():
    """The engine table of docs/service.md (it was the README's)."""
    with open(os.path.join(ROOT, "docs", "service.md")) as f:
        text = f.read()
    block = text.split("<!-- engine-table -->")[1].split("<!-- /engine-table -->")[0]
    rows = [r.strip().strip("|").split("|") for r in block.strip().splitlines()[2:]]
    return {r[0].strip(): dict(zip(("vllm", "sglang", "llamacpp"), (c.strip() for c in r[1:]))) for r in rows}


# For each cell of the engine table (docs/service.md) that says "refused", a value of that setting the engine refuses.
REFUSALS = {
    ("`llm_gpus`", "vllm"): {"llm_gpus": []},
    ("`llm_gpus`", "sglang"): {"llm_gpus": []},
    ("`llm_dense`", "vllm"): {"llm_dense": "q4"},
    ("`llm_dense`", "sglang"): {"llm_dense": "q4"},
    ("`llm_dense`", "llamacpp"): {"llm_dense": "fp8"},
    ("`llm_kv`", "llamacpp"): {"llm_kv": "fp8"},
    ("`llm_attention_backend`", "llamacpp"): {"llm_attention_backend": "TRITON_ATTN"},
    ("`llm_drafter`", "llamacpp"): {"llm_drafter": "ngram"},
    ("`llm_vision`", "llamacpp"): {"llm_vision": True, "llm_weights": "hub", "llm_media_urls": "any"},
    ("`llm_media_urls`", "llamacpp"): {"llm_vision": True, "llm_media_urls": "data_only"},
    ("`llm_media_urls`", "sglang"): {"llm_media_urls": "data_only"},
    ("`llm_reserve_gib`", "llamacpp"): {"llm_reserve_gib": 7.5},
    ("`llm_kv_cap_gib`", "sglang"): {"llm_kv_cap_gib": 60},
    ("`llm_thinking`, `llm_reasoning_effort`", "sglang"): {"llm_thinking": False},
    ("`llm_kv_cap_gib`", "llamacpp"): {"llm_kv_cap_gib": 60},
}


def test_readme_engine_table_refusals_are_what_validation_refuses():
    from ansible_collections.gpuserve.llm.plugins.module_utils.settings import load_specs, validate
    options = load_specs(ROOT).options
    table = _readme_engine_table()
    refused = {(row, engine) for row, cells in table.items() for engine, cell in cells.items() if "E_UNSUPPORTED" in cell}
    assert refused == set(REFUSALS)
    base = {"vllm": CASES["vllm-recipe"][0], "sglang": CASES["sglang-recipe"][0], "llamacpp": CASES["llamacpp-cpu"][0]}
    for (row, engine), change in REFUSALS.items():
        settings = dict(base[engine], llm_context=2048 if engine == "llamacpp" else 131072, **change)
        settings.pop("llm_api_key")
        codes = [(f["code"], f["details"].get("engine"), f["subject"]) for f in validate(settings, options)[0]]
        # refused for the row's own setting, not for another one the change happens to trip
        assert [c for c in codes if c[:2] == ("E_UNSUPPORTED", engine) and "`%s`" % c[2] in row], (row, engine, codes)


def test_readme_engine_table_vllm_flags_are_real():
    flags, _choices = _help_flags()
    table = _readme_engine_table()
    cited = set()
    for cells in table.values():
        cited |= set(re.findall(r"--[a-z0-9-]+", cells["vllm"]))
    assert cited and [f for f in sorted(cited) if f not in flags] == []


def test_the_argv_checked_by_vllm_on_the_gpu_is_what_the_template_renders_now():
    """tests/gpu/vllm-argv.json went through vLLM 0.26.0's own parser (tests/gpu/RESULTS.md); a template
    change must regenerate it (python3 tests/gpu/render_vllm_argv.py) and rerun that check."""
    import subprocess
    import sys
    rendered = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "gpu", "render_vllm_argv.py")],
                              stdout=subprocess.PIPE, text=True, check=True).stdout
    with open(os.path.join(ROOT, "tests", "gpu", "vllm-argv.json")) as f:
        assert json.loads(rendered) == json.load(f)


def test_settings_given_as_text_render_as_their_types():
    """-e llm_parallel=2 arrives as the string '2': validation types it, and the command, rendered from what
    validation handed on, says 2, and 2 x context."""
    from ansible_collections.gpuserve.llm.plugins.module_utils.settings import load_specs, validate
    settings, paths, facts = CASES["llamacpp-cpu"]
    specs = load_specs(ROOT)
    findings, typed = validate(dict(settings, llm_parallel="2", llm_context="2048"), specs.options, specs.internal)
    assert findings == []
    argv = engine_command(typed, paths, facts)["argv"]
    assert argv[argv.index("--parallel") + 1] == "2"
    assert argv[argv.index("--ctx-size") + 1] == "4096"


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("drafter", ["mtp", "ngram", "acme/tiny-draft"])
def test_taking_the_drafter_flags_out_gives_the_undrafted_command(name, drafter):
    """verify's undrafted twin: the engine's argv without DRAFTER_FLAGS is the command the template renders with
    llm_drafter off, on the twin's port. A drafter flag added to a template without the table fails here."""
    settings, paths, facts = CASES[name]
    paths = dict(paths, draft_dir="/models/draft", draft_file="/models/draft/model.gguf")
    if settings["llm_engine"] == "llamacpp" and drafter == "ngram":
        pytest.skip("llama.cpp's template renders no ngram drafter")
    drafted = engine_command(dict(settings, llm_drafter=drafter), paths, facts)["argv"]
    undrafted = engine_command(dict(settings, llm_drafter="off", llm_engine_port=9021), paths, facts)["argv"]
    assert drafted != undrafted
    assert engines.undrafted_argv(drafted, settings["llm_engine"], 9021) == undrafted
