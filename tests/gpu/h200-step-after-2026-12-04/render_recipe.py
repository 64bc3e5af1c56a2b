"""The recipe's vLLM command as templates/vllm.j2 renders it now (the example inventory, one GPU, text only, no
drafter: bench_recipe_vs_defaults.py's recipe-no-mtp settings), written as an argv JSON for profile_step.py's ARGV
mode, with the burn-in GLM folder (46 layers: GLM-4.6V-FP8's text shape) written where the argv serves it from.
On the GPU machine, vLLM's site on the path (pynvml gives the GPU's memory the template sizes by):

    LAYERS=46 python3 tests/gpu/h200-step-after-2026-12-04/render_recipe.py ARGV.json [SITE]

Why not profile_step.py's own rendering: it gives the template no llm_engine_host / llm_engine_port (the front's
commit made the engine bind those), so it stops on an undefined variable; bench_recipe_vs_defaults.py's settings set
them (to 127.0.0.1:8020), and this is that rendering.
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
GPU = os.path.dirname(HERE)
DEST = sys.argv[1]
SITE = sys.argv[2] if len(sys.argv) > 2 else "/root/vllm/site"
os.environ.setdefault("LAYERS", "46")
sys.argv = [sys.argv[0], os.path.join(os.path.dirname(os.path.abspath(DEST)), "render-out"), "recipe-no-mtp", SITE]
sys.path.insert(0, GPU)
import bench_recipe_vs_defaults as bench  # noqa: E402
from ansible_collections.gpuserve.llm.plugins.module_utils import engines  # noqa: E402

config = bench.make_folder()
settings = bench.settings_recipe()
settings["llm_drafter"] = "off"
with open(os.path.join(bench.ROOT, "templates", "vllm.j2")) as f:
    rendered = engines.render(f.read(), engines.command_context(
        settings, {"model_dir": bench.FOLDER, "dummy": True}, {"gpu_memory_total_mib": bench.gpu_memory_mib()}),
        {"llm_api_key": bench.KEY})
with open(DEST, "w") as f:
    json.dump(rendered["argv"], f)
print("layers %d; env %s (left out: the server runs without an API key)" % (
    config["num_hidden_layers"], sorted(rendered["env"])))
print(" ".join(rendered["argv"]))
