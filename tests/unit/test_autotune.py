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


def test_under_expert_parallelism_each_gpu_tunes_its_whole_experts():
    """The recipe's split (llm_expert_parallel, default on): 4 GPUs hold 32 whole experts each, the file vLLM reads
    then (FusedMoE's w2 shape: E local, N the expert's width) and what benchmark_moe.py --enable-expert-parallel
    writes (E // tp_size, shard_intermediate_size 2 x the width, saved as N = its half)."""
    for gpus, experts in ((2, 64), (4, 32)):
        shapes = autotune.moe_shapes(glm_config(FP8), gpus, expert_parallel=True)
        assert (shapes["E"], shapes["N"], shapes["ep"]) == (experts, 1408, True)
        assert autotune.moe_file_name(shapes, "NVIDIA H200") == \
            "E=%d,N=1408,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128,128].json" % experts
        argv = autotune.vllm_command("/models/main", gpus, shapes, "reduced", "/autotune")
        assert "--enable-expert-parallel" in argv and argv[argv.index("--tp-size") + 1] == str(gpus)
        # The whole model's shape, which the tuner splits itself.
        assert argv[argv.index("--moe") + 1] == "128,8,1408,4096"
    one = autotune.moe_shapes(glm_config(FP8), 1, expert_parallel=True)  # one GPU: nothing is split
    assert "ep" not in one and (one["E"], one["N"]) == (128, 1408)
    assert "--enable-expert-parallel" not in autotune.vllm_command("/m", 1, one, "full", "/autotune")
    with pytest.raises(ValueError) as refused:
        autotune.moe_shapes(glm_config(dict(FP8, n_routed_experts=100)), 8, expert_parallel=True)
    assert "8 GPUs do not divide 100 experts" in str(refused.value)
    with pytest.raises(ValueError) as refused:
        autotune.moe_shapes(glm_config(FP8), 4, expert_parallel=True, engine="sglang")
    assert "tensor-parallel split only" in str(refused.value)


def test_vllm_and_sglang_commands():
    shapes = autotune.moe_shapes(glm_config(FP8), 1)
    argv = autotune.vllm_command("/models/main", 1, shapes, "reduced", "/autotune")
    assert argv[:4] == ["python3", "/gpuserve/tune_moe.py", "--search", "reduced"] and argv[6] == "--"
    assert argv[4:6] == ["--moe", "128,8,1408,4096"]  # the tuner is given the shape the plan read
    assert argv[7:14] == ["/gpuserve/benchmark_moe.py", "--model", "/models/main", "--tp-size", "1", "--tune",
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


@pytest.mark.parametrize("moe, gemv", [(True, False), (False, True), (True, True)])
def test_a_plans_key_follows_the_model_shape_it_tunes_for(tmp_path, moe, gemv):
    """A result made for one shape is never taken for another: the MoE file's and the GEMV table's key changes with
    the experts' width, the hidden size, the GPUs the layers are split over and expert parallelism, and stays with a
    change the tuned kernels do not see (the vocabulary)."""
    model = tmp_path / "model"
    model.mkdir()

    def key(change=None, **given):
        config = dict(glm_config(FP8), moe_intermediate_size=1536)  # 1408 splits over no two GPUs in 128 blocks
        config.update(change or {})
        (model / "config.json").write_text(json.dumps(config))
        got = module(tmp_path, "autotune_plan", engine="vllm", base_dir=str(tmp_path / "autotune"),
                     model_dir=str(model), gpu_name="NVIDIA H200", search="reduced", container_model="/models/main",
                     moe=moe, gemv=gemv, **dict(dict(tp_size=1, expert_parallel=False), **given))
        assert not got.get("failed"), got
        return got["key"]

    base = key()
    assert key() == base and key({"vocab_size": 151000}) == base
    changed = {key({"moe_intermediate_size": 2048}) if moe else None, key({"hidden_size": 5120}),
               key(tp_size=2), key({"num_attention_heads": 64}) if gemv else None}
    changed.discard(None)
    assert base not in changed and len(changed) == (2 + moe + gemv), changed
    if moe:  # at one GPU expert parallelism splits nothing; at two it is another tune
        assert key(tp_size=2, expert_parallel=True) != key(tp_size=2)
    assert key(expert_parallel=True) == base
    if not gemv:  # the attention heads are no MoE shape
        assert key({"num_attention_heads": 64}) == base


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


# SYNTHETIC, laid out as vLLM 0.26.0's benchmark_moe.py reads a model: get_model_params' branches by architecture
# (GLM-4.6V's Glm4vMoeForConditionalGeneration is in none, so the Mixtral branch reads the text config's
# num_local_experts, which transformers maps to n_routed_experts, and intermediate_size, the dense MLP's width), and
# main's split under --enable-expert-parallel; it writes the file name save_configs would.
MODEL_TUNER = '''
import argparse, json, os

def get_model_params(config):
    text = config.get("text_config") or config
    if config["architectures"][0] in ("Glm4MoeForCausalLM", "DeepseekV3ForCausalLM"):
        return text["n_routed_experts"], text["num_experts_per_tok"], text["moe_intermediate_size"], text["hidden_size"]
    return text["n_routed_experts"], text["num_experts_per_tok"], text["intermediate_size"], text["hidden_size"]

def main(args):
    with open(os.path.join(args.model, "config.json")) as f:
        E, topk, intermediate_size, hidden_size = get_model_params(json.load(f))
    if args.enable_expert_parallel:
        E, shard = E // args.tp_size, 2 * intermediate_size
    else:
        shard = 2 * intermediate_size // args.tp_size
    open(os.path.join(args.save_dir, "E=%d,N=%d.json" % (E, shard // 2)), "w").close()

if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--model")
    parser.add_argument("--tp-size", type=int)
    parser.add_argument("--enable-expert-parallel", action="store_true")
    parser.add_argument("--save-dir")
    parser.add_argument("--tune", action="store_true")
    parser.add_argument("--dtype")
    parser.add_argument("--batch-size", type=int, nargs="+")
    main(parser.parse_args())
'''


@pytest.mark.parametrize("gpus,ep", [(1, False), (2, True), (4, True)])
def test_the_driver_tunes_the_shape_the_plan_read_from_a_glm_4_6v_config(tmp_path, gpus, ep):
    """vLLM 0.26.0's tuner reads GLM-4.6V's config by its Mixtral branch (10944, the dense MLP, for the experts'
    1408): the driver gives it the shape the plan read, and the file written is the one the plan expects."""
    config = json.loads(dummy_hf.folder_files(TEMPLATE, "glm4v_moe", None, FP8)["config.json"])
    assert config["architectures"] == ["Glm4vMoeForConditionalGeneration"]
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text(json.dumps(config))
    (tmp_path / "out").mkdir()
    tuner = tmp_path / "benchmark_moe.py"
    tuner.write_text(MODEL_TUNER)
    shapes = autotune.moe_shapes(config, gpus, expert_parallel=ep)
    argv = autotune.vllm_command(str(tmp_path / "model"), gpus, shapes, "full", str(tmp_path / "out"),
                                 benchmark=str(tuner))
    argv[:2] = [sys.executable, os.path.join(ROOT, "roles", "autotune", "files", "tune_moe.py")]
    driven = subprocess.run(argv, stdout=subprocess.PIPE, text=True, check=True)
    assert "the MoE shape read from config.json: 128 experts, top-8, intermediate size 1408" in driven.stdout
    expected = "E=%d,N=%d.json" % (shapes["E"], shapes["N"])
    assert os.listdir(str(tmp_path / "out")) == [expected]
    assert expected == ("E=%d,N=1408.json" % (128 // gpus))
    # Unchanged, the same tuner tunes the dense MLP's width: a file the engine never reads.
    os.remove(str(tmp_path / "out" / expected))
    subprocess.run([sys.executable, str(tuner)] + argv[argv.index("--") + 2:], check=True)
    assert os.listdir(str(tmp_path / "out")) != [expected]


def test_the_driver_stops_when_the_tuner_has_no_model_reading_to_replace(tmp_path):
    tuner = tmp_path / "tuner.py"
    tuner.write_text(FAKE_TUNER)
    run = subprocess.run([sys.executable, os.path.join(ROOT, "roles", "autotune", "files", "tune_moe.py"), "--moe",
                          "128,8,1408,4096", "--", str(tuner), "--save-dir", str(tmp_path)],
                         stderr=subprocess.PIPE, text=True, check=False)
    assert run.returncode != 0 and "has no get_model_params" in run.stderr
    assert not (tmp_path / "out.json").exists()


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


def test_the_gemv_tune_covers_every_block_fp8_linear_a_decode_step_runs_on_each_gpu():
    """GLM-4.6V-FP8's text shape (the burn-in config): the four linears the H200 run served the GEMV on at one GPU
    (tests/gpu/h200-splitk-serve-2026-12-04: 46 attention layers, 45 with the shared expert; layer 0's dense MLP
    stays bf16), the attention's and the shared expert's split at 2 and 4 GPUs, and only shapes the patch's guard
    takes (the down projection's 704 and 352 columns at 2 and 4 GPUs are no whole 128-column blocks)."""
    fp8 = glm_config(FP8)
    assert autotune.gemv_shapes(fp8, 1) == [{"N": 2816, "K": 4096, "calls": 45}, {"N": 4096, "K": 1408, "calls": 45},
                                            {"N": 4096, "K": 12288, "calls": 46}, {"N": 14336, "K": 4096, "calls": 46}]
    assert autotune.gemv_shapes(fp8, 2) == [{"N": 1408, "K": 4096, "calls": 45}, {"N": 4096, "K": 6144, "calls": 46},
                                            {"N": 7168, "K": 4096, "calls": 46}]
    assert [(s["N"], s["K"]) for s in autotune.gemv_shapes(fp8, 4)] == [(704, 4096), (3584, 4096), (4096, 3072)]
    assert autotune.gemv_shapes(glm_config(), 1) == []  # bf16: no block-FP8 linear
    assert autotune.gemv_shapes(glm_config({"quantization_config": {"quant_method": "fp8"}}), 1) == []  # per tensor
    # A dense layer whose MLP the checkpoint quantizes (its intermediate size whole blocks): its two linears too
    dense = glm_config(dict(FP8, intermediate_size=10240))
    assert "ignored_layers" not in dense["quantization_config"]
    assert {"N": 20480, "K": 4096, "calls": 1} in autotune.gemv_shapes(dense, 1)
    assert {"N": 4096, "K": 10240, "calls": 1} in autotune.gemv_shapes(dense, 1)


def test_vllm_tunes_the_gemv_after_the_moe_in_one_container_and_its_file_must_name_every_shape(tmp_path):
    import shlex
    fp8 = glm_config(FP8)
    gemv = autotune.gemv_shapes(fp8, 1)
    sh = autotune.vllm_command("/models/main", 1, autotune.moe_shapes(fp8, 1), "reduced", "/autotune", gemv=gemv)
    assert sh[:2] == ["sh", "-c"] and sh[2].startswith("set -e; python3 /gpuserve/tune_moe.py --search reduced --moe 128,8,1408,4096 -- ")
    gemv_argv = shlex.split(sh[2].split("; exec ", 1)[1])
    assert gemv_argv == ["python3", "/gpuserve/tune_gemv.py", "--out", "/autotune/gemv.json", "--shape", "2816x4096:45",
                         "--shape", "4096x1408:45", "--shape", "4096x12288:46", "--shape", "14336x4096:46"]
    assert autotune.vllm_command("/m", 1, autotune.moe_shapes(fp8, 1), "full", "/autotune", gemv=[])[0] == "python3"

    def problems(data):
        (tmp_path / "gemv.json").write_text(json.dumps(data) if not isinstance(data, str) else data)
        return autotune.validate_gemv(str(tmp_path), gemv)

    assert problems("{") and "gemv.json is missing or unreadable" in problems("{")[0]
    entries = {"%dx%d" % (s["N"], s["K"]): {"config": [64, 512, 8, 1, "direct"]} for s in gemv}
    assert problems({"format": 1, "device_name": "NVIDIA H200", "shapes": entries}) == []
    entries["2816x4096"] = {"config": None}  # vLLM's kernel kept for it: complete
    assert problems({"format": 1, "device_name": "NVIDIA H200", "shapes": entries}) == []
    entries["4096x1408"] = {"config": [128, 128, 4, 11, "sum"]}
    del entries["14336x4096"]
    assert problems({"format": 1, "device_name": "NVIDIA H200", "shapes": entries}) == [
        "gemv.json lacks shapes 14336x4096", "gemv.json: shape 4096x1408 has no valid config ([128, 128, 4, 11, 'sum'])"]
    assert problems({"format": 2, "shapes": {}}) == ["gemv.json is not tune_gemv.py's format 1"]
    # The image's vLLM lacks patch 0004: tune_gemv.py says so in the file, which is complete
    assert problems({"format": 1, "device_name": "NVIDIA H200", "shapes": {}, "skipped": "lacks patch 0004"}) == []


def test_a_vllm_plan_for_a_block_fp8_model_is_ready_only_with_its_gemv_table(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(glm_config(FP8)))

    def plan(**given):
        return module(tmp_path, "autotune_plan", engine="vllm", base_dir=str(tmp_path / "autotune"),
                      model_dir=str(model), gpu_name="NVIDIA H200", tp_size=1, search="reduced",
                      container_model="/models/main", **dict(dict(moe=True, gemv=True), **given))

    first = plan()
    assert first["gemv"]["file"] == "gemv.json" and len(first["gemv"]["shapes"]) == 4, first
    assert first["inputs"]["gemv"] == first["gemv"]["shapes"] and "tune_gemv.py" in first["command"][2]
    os.makedirs(first["dir"])
    with open(os.path.join(first["dir"], first["moe"]["file"]), "w") as f:
        json.dump(tuned(first["moe"]["batch_sizes"]), f)
    incomplete = module(tmp_path, "autotune_stamp", plan=first, tuned_on="g0")
    assert incomplete["failed"] and "gemv.json is missing or unreadable" in incomplete["msg"], incomplete
    with open(os.path.join(first["dir"], "gemv.json"), "w") as f:
        json.dump({"format": 1, "device_name": "NVIDIA H200", "shapes": {
            "%dx%d" % (s["N"], s["K"]): {"config": [64, 512, 8, 1, "direct"]} for s in first["gemv"]["shapes"]}}, f)
    done = module(tmp_path, "autotune_stamp", plan=first, tuned_on="g0")
    assert done["ready"] and sorted(done["stamp"]["files"]) == sorted([first["moe"]["file"], "gemv.json"]), done
    assert plan()["ready"]
    os.unlink(os.path.join(first["dir"], "gemv.json"))  # the table gone: the result no longer counts
    assert not plan()["ready"]
    # The MoE tune off (autotune_moe's default), the GEMV on (autotune_gemv's): tune_gemv.py alone, its own key,
    # its table alone makes the result
    alone = plan(moe=False)
    assert "moe" not in alone and alone["key"] != first["key"] and alone["command"] == [
        "python3", "/gpuserve/tune_gemv.py", "--out", "/autotune/gemv.json", "--shape", "2816x4096:45", "--shape",
        "4096x1408:45", "--shape", "4096x12288:46", "--shape", "14336x4096:46"], alone
    os.makedirs(alone["dir"])
    with open(os.path.join(alone["dir"], "gemv.json"), "w") as f:
        json.dump({"format": 1, "device_name": "NVIDIA H200", "shapes": {
            "%dx%d" % (s["N"], s["K"]): {"config": None} for s in alone["gemv"]["shapes"]}}, f)
    done = module(tmp_path, "autotune_stamp", plan=alone, tuned_on="g0")
    assert done["ready"] and list(done["stamp"]["files"]) == ["gemv.json"], done
    assert plan(moe=False)["ready"] and not plan(moe=False, gemv=False)["ready"]
    # Nothing to tune: no MoE tune, no block-FP8 linear (a bf16 checkpoint)
    (model / "config.json").write_text(json.dumps(glm_config()))
    empty = plan(moe=False)
    assert empty["empty"] and not empty["ready"] and empty["command"] == [] and "no 128 x 128 block-FP8" in empty["why"]
    assert "gemv" not in plan()  # the MoE tune of a bf16 checkpoint: no table


def test_the_engine_is_given_the_gemv_table_only_where_its_stamped_result_holds_one(tmp_path):
    """roles/service/vars/main.yml's service_autotune_env and service_volumes, rendered by ansible-playbook for four
    results: the stamped folder mounted read-only at /autotune, where the variables point."""
    results = [("vllm", {"ready": True, "dir": "/a", "stamp": {"files": {"E=128.json": "1", "gemv.json": "2"}}}),
               ("vllm", {"ready": True, "dir": "/a", "stamp": {"files": {"E=128.json": "1"}}}),
               ("sglang", {"ready": True, "dir": "/a", "stamp": {"files": {"gemv.json": "2"}}}),
               ("vllm", {"ready": False})]
    play = [{"hosts": "localhost", "gather_facts": False,
             "vars_files": [os.path.join(ROOT, "roles", "service", "vars", "main.yml")],
             "tasks": [{"ansible.builtin.copy": {
                 "content": "{{ [service_autotune_env, service_volumes] | to_json }}\n",
                 "dest": str(tmp_path / "env-{{ index }}.json")},
                 "vars": {"llm_engine": "{{ item.0 }}", "autotune_result": "{{ item.1 }}",
                          "weights_model": {"volumes": ["/w:/models:ro"]}, "service_cache_dir": "/c"},
                 "loop": [list(r) for r in results], "loop_control": {"index_var": "index"}}]}]
    (tmp_path / "play.yml").write_text(json.dumps(play))
    ran = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", "localhost,", "-c",
                          "local", "-e", "ansible_python_interpreter=" + sys.executable, str(tmp_path / "play.yml")],
                         capture_output=True, text=True, cwd=ROOT, check=False)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    rendered = [json.loads((tmp_path / ("env-%d.json" % i)).read_text()) for i in range(len(results))]
    assert [volumes for _env, volumes in rendered] == [["/w:/models:ro", "/c:/cache", "/a:/autotune:ro"]] * 3 + [
        ["/w:/models:ro", "/c:/cache"]]
    envs = [env for env, _volumes in rendered]
    assert envs == [{"VLLM_TUNED_CONFIG_FOLDER": "/autotune", "GPUSERVE_GEMV_CONFIGS": "/autotune/gemv.json"},
                    {"VLLM_TUNED_CONFIG_FOLDER": "/autotune"}, {"SGLANG_MOE_CONFIG_DIR": "/autotune"}, {}]


def test_the_table_tune_gemv_wrote_on_an_h200_is_complete_for_the_plan():
    """tune_gemv.py's real output (tests/gpu/h200-gemv-tune-2026-12-05/gemv.json) for GLM-4.6V-FP8 at one GPU: what the
    stamp validates, as the plan names the shapes; the table's choice as measured there."""
    folder = os.path.join(TESTS, "gpu", "h200-gemv-tune-2026-12-05")
    assert autotune.validate_gemv(folder, autotune.gemv_shapes(glm_config(FP8), 1)) == []
    assert autotune.validate_gemv(folder, autotune.gemv_shapes(glm_config(FP8), 2))[0].startswith("gemv.json lacks")
    with open(os.path.join(folder, "gemv.json")) as f:
        table = json.load(f)
    assert table["device_name"] == "NVIDIA H200" and {s: e["config"] for s, e in table["shapes"].items()} == {
        "14336x4096": None, "4096x12288": [64, 512, 8, 4, "atomic"], "2816x4096": [64, 256, 4, 16, "atomic"],
        "4096x1408": [16, 512, 4, 1, "direct"]}


def _tune_gemv():
    """roles/autotune/files/tune_gemv.py, which runs in the engine's image, loaded by its path."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "tune_gemv", os.path.join(os.path.dirname(__file__), "..", "..", "roles", "autotune", "files", "tune_gemv.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_gemv_is_written_where_it_beats_vllms_kernel_beyond_the_spread_of_its_repeats():
    """tune_gemv.py's choice, with the H200's timings (tests/gpu/h200-gemv-tune-2026-12-05/report.md): a fixed 2 %
    margin kept vLLM's kernel for qkv, which served slower (152.7 tok/s at one request against 154.0 with the GEMV,
    tests/gpu/h200-gemv-serve-2026-12-05/); a GEMV whose repeats overlap vLLM's is no gain to write."""
    tune_gemv = _tune_gemv()

    def us(median, low, high):
        return {"median": median, "min": low, "max": high}
    # qkv 14336 x 4096: 0.7 % faster, every repeat
    assert tune_gemv.gemv_pays(us(18.434, 18.405, 18.500), us(18.566, 18.552, 18.647))
    # o_proj 4096 x 12288: far faster
    assert tune_gemv.gemv_pays(us(16.797, 16.755, 16.869), us(21.444, 21.426, 21.473))
    # faster at the median, but its slowest repeat is slower than vLLM's fastest: within the noise
    assert not tune_gemv.gemv_pays(us(18.50, 18.40, 18.60), us(18.56, 18.52, 18.70))
    assert not tune_gemv.gemv_pays(us(19.0, 18.9, 19.1), us(18.566, 18.552, 18.647))  # slower


def test_a_shape_whose_tuned_config_does_not_pay_keeps_the_built_in_config_unless_vllm_beats_it():
    """The table tuned on an H200 under gemv_pays alone (tests/gpu/h200-attention-gemv-2026-12-05/gemv.json) sent qkv
    to vLLM's kernel - its best config, the built-in one, did not beat vLLM's beyond the spread - and served slower
    than no table, twice (153.1 and 153.0 tok/s against 154.5 and 154.1). A shape keeps its built-in config unless
    vLLM's kernel beats that beyond the spread."""
    tune_gemv = _tune_gemv()
    with open(os.path.join(TESTS, "gpu", "h200-attention-gemv-2026-12-05", "gemv.json")) as f:
        qkv = json.load(f)["shapes"]["14336x4096"]
    assert qkv["config"] is None and qkv["built_in_us"] == qkv["gemv_us"]  # as written then
    assert not tune_gemv.gemv_pays(qkv["gemv_us"], qkv["vllm_us"])
    assert tune_gemv.keeps_built_in(qkv["built_in_us"], qkv["vllm_us"])  # now: the built-in config written
    # vLLM's kernel faster beyond the spread: it is kept; a built-in config never timed is not written
    assert not tune_gemv.keeps_built_in({"median": 19.0, "min": 18.9, "max": 19.1}, qkv["vllm_us"])
    assert not tune_gemv.keeps_built_in(None, qkv["vllm_us"])


def test_a_shape_keeps_its_built_in_config_though_a_grid_config_was_faster_alone():
    """The H100's tune (tests/gpu/h100-gemv-table-2026-12-06/gemv.json): grid configs 0.5-8 % faster a call than the
    built-in ones on three shapes; served, the table was slower than the built-in configs beyond the spread in two
    pairs of starts of three. choose() writes the built-in config, on a GPU of its SM count, wherever vLLM's kernel
    does not beat it; a grid config where there is none, where vLLM's kernel beats it, or on another SM count; the
    load check still decides."""
    tune_gemv = _tune_gemv()
    with open(os.path.join(TESTS, "gpu", "h100-gemv-table-2026-12-06", "gemv.json")) as f:
        table = json.load(f)["shapes"]

    def passes(_cfg):
        return True

    for shape, entry in table.items():
        built_in = tuple(entry["built_in"])
        grid = (entry["gemv_us"], tuple(entry["config"]))
        final = sorted([grid, (entry["built_in_us"], built_in)], key=lambda t: t[0]["median"])
        cfg, times, kept = tune_gemv.choose(final, entry["vllm_us"], built_in, passes)
        assert (cfg, times, kept) == (built_in, entry["built_in_us"], True), shape
    # No built-in config for the shape (another GPU count's split): the fastest that beats vLLM's kernel
    o_proj = table["4096x12288"]
    final = [(o_proj["gemv_us"], tuple(o_proj["config"]))]
    assert tune_gemv.choose(final, o_proj["vllm_us"], None, passes) == (tuple(o_proj["config"]), o_proj["gemv_us"], False)
    # The built-in config refused by the load check: the next that pays

    def refuse_built_in(cfg):
        return tuple(cfg) != tuple(o_proj["built_in"])

    final = [(o_proj["gemv_us"], tuple(o_proj["config"])), (o_proj["built_in_us"], tuple(o_proj["built_in"]))]
    assert tune_gemv.choose(final, o_proj["vllm_us"], tuple(o_proj["built_in"]), refuse_built_in)[0] == tuple(
        o_proj["config"])
    # vLLM's kernel beats the built-in config beyond the spread while a grid config beats vLLM's: the grid config
    built_in_slow = {"median": 25.0, "min": 24.9, "max": 25.1}
    final = [(o_proj["gemv_us"], tuple(o_proj["config"])), (built_in_slow, tuple(o_proj["built_in"]))]
    assert tune_gemv.choose(final, o_proj["vllm_us"], tuple(o_proj["built_in"]), passes)[0] == tuple(o_proj["config"])
    # The built-in config slower than vLLM's kernel at the median but within the spread: kept
    close = {"median": 24.33, "min": 24.30, "max": 24.36}  # vLLM's: 24.314 [24.288, 24.354]
    final = [(o_proj["gemv_us"], tuple(o_proj["config"])), (close, tuple(o_proj["built_in"]))]
    assert tune_gemv.choose(final, o_proj["vllm_us"], tuple(o_proj["built_in"]), passes) == (
        tuple(o_proj["built_in"]), close, True)
    # A GPU of another SM count: the built-in configs' K splits are not its own; the fastest that pays
    assert tune_gemv.choose(final, o_proj["vllm_us"], tuple(o_proj["built_in"]), passes, sms=78)[0] == tuple(
        o_proj["config"])
    # vLLM's kernel beats everything beyond the spread: none written
    slow = {"median": 30.0, "min": 29.9, "max": 30.1}
    assert tune_gemv.choose([(slow, (64, 512, 8, 1, "direct"))], o_proj["vllm_us"], (64, 512, 8, 1, "direct"),
                            passes) == (None, None, False)
