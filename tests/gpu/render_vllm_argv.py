"""Render the vLLM command of the example recipe (and variants) to JSON, for check_vllm_args.py to
parse with vLLM's own argument parser on the GPU machine.

    python3 tests/gpu/render_vllm_argv.py > tests/gpu/vllm-argv.json
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
RECIPE.update(llm_api_key="sk-not-a-real-key", llm_model_dense="fp8")

VARIANTS = {
    "recipe": {},
    # MTP drafting for a text model (vLLM 0.26.0 has none for GLM-4.6V's vision model)
    "recipe-text-model": {"llm_vision": False, "llm_drafter": "mtp"},
    "drafter-ngram": {"llm_drafter": "ngram"},
    "drafter-model": {"llm_drafter": "org/draft-model"},
    "thinking-on": {"llm_thinking": True},
    "bf16-kv-no-cap": {"llm_kv": "bf16", "llm_kv_cap_gib": 0},
    "media-domains": {"llm_media_urls": ["example.com", "cdn.example.org"]},
    "quantize-at-load": {"llm_model_dense": "bf16"},
}

out = {}
for name, change in VARIANTS.items():
    paths = {"model_dir": "/models/zai-org/GLM-4.6V-FP8", "draft_dir": "/models/org/draft-model", "dummy": True}
    rendered = engine_command(dict(RECIPE, **change), paths, {"gpu_memory_total_mib": 143771})
    out[name] = {"argv": rendered["argv"], "env": sorted(rendered["env"])}
json.dump(out, sys.stdout, indent=1)
print()
