"""The settings the validation tests start from: the collection's specs, and the llm role's defaults as Ansible
templates them for the recipe's model (vLLM), the CPU profile (llama.cpp) and SGLang."""
import os

import yaml

from ansible_collections.gpuserve.llm.plugins.module_utils.settings import load_specs

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SPECS = load_specs(ROOT)
OPTIONS = SPECS.options
with open(os.path.join(ROOT, "roles", "llm", "defaults", "main.yml")) as f:
    DEFAULTS = yaml.safe_load(f)
DEFAULTS.update(llm_context=DEFAULTS["llm_model_max_context"], llm_engine_port=DEFAULTS["llm_port"] + 10000,
                llm_model_dense="fp8", llm_data_dir="/var/lib/gpuserve",
                llm_hf_cache_dir="/var/lib/gpuserve/hf", llm_cache_dir="/var/lib/gpuserve/cache")
CPU = dict(DEFAULTS, llm_engine="llamacpp", llm_gpus=[], llm_kv="bf16", llm_vision=False, llm_dense="q4",
           llm_model_dense="q4", llm_kv_cap_gib=0, llm_reserve_gib=0, llm_drafter="off")
# What SGLang can honour: any media URL, the pool by fraction, the model's own thinking default (GLM: on).
SGLANG = dict(DEFAULTS, llm_engine="sglang", llm_media_urls="any", llm_kv_cap_gib=0, llm_thinking=True)
