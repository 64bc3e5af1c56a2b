"""Render the SGLang command of the example recipe (and variants) to JSON, for check_sglang_args.py to
parse with SGLang's own argument parser on the GPU machine.

    python3 tests/gpu/render_sglang_argv.py > tests/gpu/sglang-argv.json

The recipe here is tests/golden/sglang-recipe.cmd's: the example recipe on SGLang with what SGLang can honour
(any media URL, the pool sized by fraction, the model's own thinking default), on 4 GPUs of an H200's memory.
"""
import json
import os
import sys

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, ".collections"))

from ansible_collections.gpuserve.llm.plugins.filter.engines import engine_command  # noqa: E402

with open(os.path.join(ROOT, "roles", "llm", "defaults", "main.yml")) as f:
    DEFAULTS = {k: v for k, v in yaml.safe_load(f).items() if "{{" not in str(v)}
    DEFAULTS["llm_engine_port"] = DEFAULTS["llm_port"] + 10000  # its default: "{{ llm_port | int + 10000 }}"
with open(os.path.join(ROOT, "inventories", "example", "group_vars", "llm_hosts", "settings.yml")) as f:
    RECIPE = dict(DEFAULTS, **yaml.safe_load(f))
RECIPE.update(llm_engine="sglang", llm_media_urls="any", llm_kv_cap_gib=0, llm_thinking=True,
              llm_api_key="sk-not-a-real-key", llm_model_dense="fp8")

# Each variant: (what changes in the settings, which stand-in model folder the check gives SGLang:
# "vision" = GLM-4.6V's shape, "text" = GLM-4.5-Air's, the two the burn-in folders have).
VARIANTS = {
    "recipe": ({}, "vision"),
    "drafter-mtp": ({"llm_vision": False, "llm_drafter": "mtp"}, "text"),
    "drafter-ngram": ({"llm_drafter": "ngram"}, "vision"),
    "drafter-model": ({"llm_drafter": "org/draft-model"}, "vision"),
    "text-model": ({"llm_vision": False}, "text"),
    "bf16-kv": ({"llm_kv": "bf16"}, "vision"),
    "quantize-at-load": ({"llm_model_dense": "bf16"}, "vision"),
    "no-api-key": ({"llm_api_key": ""}, "vision"),
    "dummy-weights": ({}, "vision"),
}

out = {}
for name, (change, model) in VARIANTS.items():
    paths = {"model_dir": "/models/zai-org/GLM-4.6V-FP8", "draft_dir": "/models/org/draft-model",
             "dummy": name == "dummy-weights"}
    rendered = engine_command(dict(RECIPE, **change), paths, {"gpu_memory_total_mib": 143771})
    out[name] = {"argv": rendered["argv"], "env": sorted(rendered["env"]), "model": model}
json.dump(out, sys.stdout, indent=1)
print()
