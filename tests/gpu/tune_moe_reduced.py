"""On a GPU machine with vLLM and Ray importable: the autotune stage's reduced MoE tune, for real.

The model folder is the burn-in GLM-4.5-Air FP8 config the weights stage makes
(plugins/module_utils/dummy_hf.py, the FP8 block quantization of roles/weights/defaults); the command
is the one the autotune stage renders (plugins/module_utils/autotune.py: roles/autotune/files/tune_moe.py
--search reduced -- vLLM 0.26.0's benchmarks/kernels/benchmark_moe.py --tune ...); the output is checked
by the stage's own validation, then timed. Writes tune.log, the tuned file and results.json to OUTDIR.

    python3 tests/gpu/tune_moe_reduced.py OUTDIR BENCHMARK_MOE_PY [TP_SIZE=4]
"""
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, ".collections"))
from ansible_collections.gpuserve.llm.plugins.module_utils import autotune, dummy_hf  # noqa: E402

OUT, BENCHMARK = sys.argv[1], sys.argv[2]
TP = int(sys.argv[3]) if len(sys.argv) > 3 else 4
FP8 = {"quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                               "weight_block_size": [128, 128]}}
os.makedirs(OUT, exist_ok=True)
model = os.path.join(OUT, "model")
os.makedirs(model, exist_ok=True)
with open(os.path.join(ROOT, "templates", "chat", "glm45.jinja")) as f:
    for name, text in dummy_hf.folder_files(f.read(), "glm4_moe", None, FP8).items():
        with open(os.path.join(model, name), "w") as out:
            out.write(text)
with open(os.path.join(model, "config.json")) as f:
    shapes = autotune.moe_shapes(json.load(f), TP)
import torch  # noqa: E402  (after the folder: only the tune needs the GPU)
gpu = torch.cuda.get_device_name(0)
expected = autotune.moe_file_name(shapes, gpu)
saved = os.path.join(OUT, "tuned")
argv = autotune.vllm_command(model, TP, shapes, "reduced", saved, benchmark=BENCHMARK)
argv[1] = os.path.join(ROOT, "roles", "autotune", "files", "tune_moe.py")
argv[0] = sys.executable
start = time.time()
with open(os.path.join(OUT, "tune.log"), "w") as log:
    rc = subprocess.call(argv, stdout=log, stderr=subprocess.STDOUT)
seconds = round(time.time() - start, 1)
problems, path = autotune.validate_moe(saved, expected, autotune.batch_sizes("reduced"))
result = {"gpu": gpu, "tp_size": TP, "shapes": shapes, "expected_file": expected, "rc": rc, "seconds": seconds,
          "problems": problems, "argv": argv}
if path:
    with open(path) as f:
        result["tuned"] = json.load(f)
    # What vLLM 0.26.0 would pick without the file: its defaults for this shape, for the record.
    try:
        from vllm.model_executor.layers.fused_moe.fused_moe import get_default_config
        result["vllm_default_config"] = dict(
            (str(m), get_default_config(m, shapes["E"], shapes["N"], shapes["hidden"], shapes["topk"],
                                        shapes["dtype"], shapes["block_shape"]))
            for m in autotune.batch_sizes("reduced"))
    except Exception as e:  # noqa: BLE001 - a record, not a check
        result["vllm_default_config"] = "not read: %s" % e
with open(os.path.join(OUT, "results.json"), "w") as f:
    json.dump(result, f, indent=1)
print(json.dumps({k: v for k, v in result.items() if k not in ("tuned", "vllm_default_config", "argv")}, indent=1))
tail = open(os.path.join(OUT, "tune.log")).read().splitlines()[-15:]
print("\n".join(tail))
sys.exit(0 if rc == 0 and not problems else 1)
