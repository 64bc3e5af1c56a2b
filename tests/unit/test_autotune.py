"""The tuners' commands, what their outputs must hold and the choice they lead to.

llama.cpp: real llama-bench output (Debian's b11669 on the burn-in GGUF, tests/fixtures/llama-bench-b11669-*.json).
vLLM / SGLang: the shapes read from the burn-in GLM-4.5-Air config, file names checked against the names vLLM 0.26.0
ships in fused_moe/configs/, and tuner outputs that are SYNTHETIC - written here in the format benchmark_moe.py's
save_configs writes (a map from batch size to six Triton parameters, plus "triton_version")."""
import json
import os
import subprocess
import sys

import pytest

from ansible_collections.gpuserve.llm.plugins.module_utils import autotune, dummy_hf

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(TESTS)
TEMPLATE = open(os.path.join(ROOT, "templates", "chat", "glm45.jinja")).read()
FP8 = {"quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                               "weight_block_size": [128, 128]}}


def glm_config(extra=None):
    return json.loads(dummy_hf.folder_files(TEMPLATE, "glm4_moe", None, extra or {})["config.json"])


def tuned(batch_sizes):
    config = {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 1, "num_warps": 4,
              "num_stages": 3}
    return dict({"triton_version": "3.6.0"}, **dict((str(b), dict(config)) for b in batch_sizes))


def test_glm_shapes_give_the_file_name_vllm_looks_for():
    shapes = autotune.moe_shapes(glm_config(FP8), 1)
    assert (shapes["E"], shapes["N"], shapes["topk"], shapes["hidden"]) == (128, 1408, 8, 4096)
    # The name the tuner wrote on an H200 (tests/gpu/h200-tune-moe-2026-11-30/).
    assert autotune.moe_file_name(shapes, "NVIDIA H200") == \
        "E=128,N=1408,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128,128].json"
    assert os.path.exists(os.path.join(TESTS, "gpu", "h200-tune-moe-2026-11-30", autotune.moe_file_name(shapes, "NVIDIA H200")))
    # vLLM 0.26.0 ships E=128,N=704 (two GPUs) for the H100 with per-tensor FP8: the same spelling.
    tp2 = autotune.moe_shapes(glm_config({"quantization_config": {"quant_method": "fp8"}}), 2)
    assert autotune.moe_file_name(tp2, "NVIDIA H100 80GB HBM3") == \
        "E=128,N=704,device_name=NVIDIA_H100_80GB_HBM3,dtype=fp8_w8a8.json"


def test_block_fp8_experts_that_do_not_split_by_the_block_are_refused():
    """1408 / 4 = 352 is no multiple of 128: the tuner's FP8 quantisation asserted on it on an H200."""
    for gpus in (2, 4):
        with pytest.raises(ValueError) as refused:
            autotune.moe_shapes(glm_config(FP8), gpus)
        assert "not a multiple of the FP8 block 128" in str(refused.value)
    assert autotune.moe_file_name(autotune.moe_shapes(glm_config(), 4), "NVIDIA H200 NVL") == \
        "E=128,N=352,device_name=NVIDIA_H200.json"
    with pytest.raises(ValueError):
        autotune.moe_shapes({"hidden_size": 4096, "intermediate_size": 1}, 1)  # dense: nothing to tune


def test_vllm_and_sglang_commands():
    shapes = autotune.moe_shapes(glm_config(FP8), 1)
    argv = autotune.vllm_command("/models/main", 1, shapes, "reduced", "/autotune")
    assert argv[:5] == ["python3", "/gpuserve/tune_moe.py", "--search", "reduced", "--"]
    assert argv[5:12] == ["/gpuserve/benchmark_moe.py", "--model", "/models/main", "--tp-size", "1", "--tune",
                          "--save-dir"]
    assert argv[argv.index("--batch-size") + 1:argv.index("--dtype")] == [
        "1", "2", "4", "8", "16", "24", "32", "48", "64", "256", "1024"]
    assert argv[-2:] == ["--dtype", "fp8_w8a8"]
    full = autotune.vllm_command("/models/main", 1, shapes, "full", "/autotune")
    assert len(full[full.index("--batch-size") + 1:full.index("--dtype")]) == 18
    sh = autotune.sglang_command("/models/main", 1, shapes, "full", "/autotune")
    assert sh[:2] == ["sh", "-c"] and 'cd "$d"' in sh[2] and "/autotune/configs/triton_" in sh[2]
    assert "tuning_fused_moe_triton.py --model /models/main --tp-size 1 --tune" in sh[2]


@pytest.mark.parametrize("search", ["reduced", "full"])
def test_every_decode_batch_up_to_64_has_a_tuned_entry_near_it(search):
    # vLLM runs the entry nearest the batch: a tile tuned far from it can lose to vLLM's own default (the reduced
    # file with 16 and 64 alone lost 9.7 % at 40 sequences on an H200).
    sizes = autotune.batch_sizes(search)
    assert max(min(abs(size - batch) for size in sizes) for batch in range(1, 65)) <= 8, sizes
    assert [s for s in autotune.VLLM_BATCH_SIZES if s <= 64] == [s for s in sizes if s <= 64]


def test_moe_output_validates_only_with_every_batch_size_and_field(tmp_path):
    name = "E=128,N=1408,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128,128].json"
    sizes = autotune.batch_sizes("reduced")
    assert autotune.validate_moe(str(tmp_path), name, sizes)[0] == ["%s was not written under %s" % (name, tmp_path)]
    (tmp_path / name).write_text(json.dumps(tuned(sizes[:-1])))
    problems, _path = autotune.validate_moe(str(tmp_path), name, sizes)
    assert problems == ["%s lacks batch sizes 1024" % name]
    broken = tuned(sizes)
    del broken["16"]["num_stages"]
    (tmp_path / name).write_text(json.dumps(broken))
    assert autotune.validate_moe(str(tmp_path), name, sizes)[0] == ["%s: batch size 16 lacks num_stages" % name]
    nested = tmp_path / "configs" / "triton_3_6_0"  # SGLang's layout
    nested.mkdir(parents=True)
    (tmp_path / name).unlink()
    (nested / name).write_text(json.dumps(tuned(sizes)))
    assert autotune.validate_moe(str(tmp_path), name, sizes) == ([], str(nested / name))
    # The file the tuner wrote on an H200 (the reduced tune's six sizes of then) validates as it is for those, and a
    # stamp of it would be tuned again now: it lacks the decode sizes the reduced tune has since.
    real = os.path.join(TESTS, "gpu", "h200-tune-moe-2026-11-30")
    assert autotune.validate_moe(real, name, [1, 4, 16, 64, 256, 1024]) == ([], os.path.join(real, name))
    assert autotune.validate_moe(real, name, sizes)[0] == ["%s lacks batch sizes 2, 8, 24, 32, 48" % name]


def bench(name):
    with open(os.path.join(TESTS, "fixtures", "llama-bench-b11669-%s.json" % name)) as f:
        return json.load(f)


def test_llamacpp_choice_from_real_llama_bench_output():
    grid = {"threads": [1, 2], "batches": [64, 256], "ubatches": [32, 64]}
    choice, problems = autotune.choose_llamacpp(bench("tg"), bench("pp"), grid, 64, 16)
    assert problems == []
    tg = dict((r["n_threads"], r["avg_ts"]) for r in bench("tg"))
    pp = dict(((r["n_threads"], r["n_batch"], r["n_ubatch"]), r["avg_ts"]) for r in bench("pp"))
    assert choice["threads"] == max(tg, key=tg.get)
    assert (choice["threads_batch"], choice["batch_size"], choice["ubatch_size"]) == max(pp, key=pp.get)
    assert choice["grid_points"] == 2 + 8
    # A grid point the tuner never measured (a killed run's partial output): no choice.
    choice, problems = autotune.choose_llamacpp(bench("tg"), bench("pp")[:5], grid, 64, 16)
    assert choice is None and "prompt results lack 3 of 8 grid points" in problems[0]
    choice, problems = autotune.choose_llamacpp(bench("tg"), bench("pp"), dict(grid, threads=[1, 2, 4]), 64, 16)
    assert choice is None and "generation results lack threads [4]" in problems[0]


def test_llamacpp_grid_and_command():
    assert autotune.llamacpp_grid(12)["threads"] == [1, 2, 4, 8, 12]
    assert autotune.llamacpp_grid(1)["threads"] == [1]
    assert autotune.llamacpp_grid(8, threads=[4, 16])["threads"] == [4]  # not above the usable CPUs
    argv = autotune.llamacpp_command("/m/model.gguf", {"threads": [1, 2], "batches": [64], "ubatches": [32]},
                                     64, 16, 2, "/autotune")
    assert argv[:2] == ["sh", "-c"]
    assert "llama-bench -m /m/model.gguf -p 0 -n 16 -t 1,2 -r 2 -o json > /autotune/tg.json.part" in argv[2]
    assert "mv /autotune/pp.json.part /autotune/pp.json" in argv[2]


def test_key_changes_with_every_input():
    base = {"engine": "vllm", "gpu": "NVIDIA H200", "image": "sha256:1", "tp_size": 2, "search": "full"}
    keys = {autotune.key(base)}
    for change in ({"gpu": "NVIDIA H100"}, {"image": "sha256:2"}, {"tp_size": 4}, {"search": "reduced"}):
        keys.add(autotune.key(dict(base, **change)))
    assert len(keys) == 5 and autotune.key(dict(base)) in keys


FAKE_TUNER = '''
import argparse, json, os
from itertools import product

def get_configs_compute_bound():
    ranges = {"BLOCK_SIZE_M": [16, 32, 64, 128, 256], "BLOCK_SIZE_N": [32, 64, 128, 256], "BLOCK_SIZE_K": [64, 128, 256],
              "GROUP_SIZE_M": [1, 16, 32, 64], "num_warps": [4, 8], "num_stages": [2, 3, 4, 5]}
    return [dict(zip(ranges, v)) for v in product(*ranges.values())]

def main(args):
    space = get_configs_compute_bound()
    with open(os.path.join(args.save_dir, "out.json"), "w") as f:
        json.dump({"searched": len(space), "batch_sizes": args.batch_size}, f)

if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--save-dir")
    parser.add_argument("--batch-size", type=int, nargs="+")
    main(parser.parse_args())
'''


@pytest.mark.parametrize("search,searched", [("full", 1920), ("reduced", 96)])
def test_the_driver_runs_a_tuner_unchanged_or_with_the_reduced_search(tmp_path, search, searched):
    """A SYNTHETIC tuner laid out as benchmark_moe.py is (get_configs_compute_bound, a __main__ block)."""
    tuner = tmp_path / "benchmark_moe.py"
    tuner.write_text(FAKE_TUNER)
    subprocess.run([sys.executable, os.path.join(ROOT, "roles", "autotune", "files", "tune_moe.py"), "--search", search,
                    "--", str(tuner), "--save-dir", str(tmp_path), "--batch-size", "1", "64"], check=True)
    out = json.loads((tmp_path / "out.json").read_text())
    assert out == {"searched": searched, "batch_sizes": [1, 64]}


def module(tmp_path, name, check=False, **args):
    """Run one of the stage's modules as Ansible does (its arguments in a file), in check mode or not."""
    path = tmp_path / ("%s-args.json" % name)
    path.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": dict(args, _ansible_check_mode=check)}))
    out = subprocess.run([sys.executable, os.path.join(ROOT, "plugins", "modules", name + ".py"), str(path)],
                         stdout=subprocess.PIPE, text=True, check=False,
                         env=dict(os.environ, PYTHONPATH=os.path.join(ROOT, ".collections")))
    return json.loads(out.stdout)


def llamacpp_plan(tmp_path, check=False, model=True):
    gguf = tmp_path / "model.gguf"
    if model:
        gguf.write_bytes(b"GGUF" + b"\0" * 64)
    return module(tmp_path, "autotune_plan", check, engine="llamacpp", base_dir=str(tmp_path / "autotune"),
                  model_file=str(gguf), threads=[1], batch_sizes=[64, 256], ubatch_sizes=[32, 64],
                  n_prompt=64, n_gen=16, repetitions=2, container_model="/models/model.gguf")


def test_a_check_run_before_the_model_exists_plans_pending_and_writes_nothing(tmp_path):
    plan = llamacpp_plan(tmp_path, check=True, model=False)
    assert plan["pending"] and not plan["ready"] and not plan["changed"] and plan["command"] == []
    assert not (tmp_path / "autotune").exists()
    failed = llamacpp_plan(tmp_path, check=False, model=False)  # outside check mode a missing model is an error
    assert failed["failed"] and failed["finding"]["code"] == "E_AUTOTUNE"


def test_the_stamp_comes_only_after_the_output_validates_and_never_under_check(tmp_path):
    plan = llamacpp_plan(tmp_path)
    assert not plan["ready"] and not plan["changed"] and plan["grid"]["threads"] == [1]
    assert "llama-bench -m /models/model.gguf" in plan["command"][2]
    assert llamacpp_plan(tmp_path, check=True)["key"] == plan["key"]  # check mode plans the same tune
    os.makedirs(plan["dir"])
    incomplete = module(tmp_path, "autotune_stamp", plan=plan, tuned_on="k0")
    assert incomplete["failed"] and incomplete["finding"]["code"] == "E_AUTOTUNE"
    assert "tg.json is missing" in incomplete["msg"] and os.listdir(plan["dir"]) == []
    for name in ("tg", "pp"):
        with open(os.path.join(plan["dir"], name + ".json"), "w") as f:
            json.dump(bench(name), f)
    would = module(tmp_path, "autotune_stamp", check=True, plan=plan, tuned_on="k0")
    assert would["changed"] and would["ready"] and would["choice"]["tg_tokens_per_s"] > 0
    assert not os.path.exists(os.path.join(plan["dir"], autotune.STAMP))
    assert not llamacpp_plan(tmp_path)["ready"]
    done = module(tmp_path, "autotune_stamp", plan=plan, tuned_on="k0")
    assert done["changed"] and done["stamp"]["tuned_on"] == "k0" and done["choice"] == would["choice"]
    assert sorted(os.listdir(plan["dir"])) == sorted(["tg.json", "pp.json", autotune.STAMP])  # no temporary file
    again = llamacpp_plan(tmp_path)
    assert again["ready"] and again["choice"] == done["choice"] and again["stamp"]["files"] == done["stamp"]["files"]
    assert not module(tmp_path, "autotune_stamp", plan=plan, tuned_on="k0")["changed"]
    os.unlink(os.path.join(plan["dir"], "pp.json"))  # a result file gone: the stamp no longer counts
    assert not llamacpp_plan(tmp_path)["ready"]
