"""Runs an engine's MoE tuner (vLLM's benchmarks/kernels/benchmark_moe.py, SGLang's
tuning_fused_moe_triton.py) unchanged, or with a narrower tile search for --search reduced.

    python3 tune_moe.py --search full|reduced [--moe E,TOPK,WIDTH,HIDDEN] -- TUNER.py TUNER-ARGS...

The tuner's module body runs as a module (its definitions), the reduced search replaces
get_configs_compute_bound with a filter of the tuner's own list, --moe replaces vLLM's
get_model_params with the MoE shape the collection read from config.json (vLLM 0.26.0's reads a
GLM-4.6V config by its Mixtral branch and tunes the dense MLP's width), then the tuner's
`if __name__ == "__main__":` block runs as it would from the command line.
"""
import ast
import sys

# The reduced tile search: a subset of the full grid (vLLM 0.26: 1,920 configs before the FP8
# block filter), the values tuned configs of H100/H200 files choose most often, and vLLM's own
# default from 17 tokens on (N 128, GROUP_SIZE_M 32), which a reduced file must be able to pick:
# without it the 11-size file lost 6.5-8.8 % at 40 requests (tests/gpu/h200-tune-11-2026-12-03).
REDUCED = {"BLOCK_SIZE_M": {16, 32, 64, 128}, "BLOCK_SIZE_N": {64, 128}, "BLOCK_SIZE_K": {128},
           "GROUP_SIZE_M": {1, 16, 32}, "num_warps": {4, 8}, "num_stages": {3, 4}}


def main(argv):
    sep = argv.index("--")
    search = argv[argv.index("--search") + 1] if "--search" in argv[:sep] else "full"
    moe = [int(v) for v in argv[argv.index("--moe") + 1].split(",")] if "--moe" in argv[:sep] else None
    script, args = argv[sep + 1], argv[sep + 2:]
    with open(script) as f:
        tree = ast.parse(f.read(), script)
    is_main = [n for n in tree.body if isinstance(n, ast.If) and "__main__" in ast.dump(n.test)]
    body = ast.Module(body=[n for n in tree.body if n not in is_main], type_ignores=[])
    namespace = {"__name__": "tuner", "__file__": script}
    sys.argv = [script] + args
    sys.path.insert(0, script.rsplit("/", 1)[0] if "/" in script else ".")
    exec(compile(body, script, "exec"), namespace)  # pylint: disable=exec-used
    if search == "reduced":
        full = namespace.get("get_configs_compute_bound")
        if full is None:
            print("tune_moe: %s has no get_configs_compute_bound; reduced = fewer batch sizes only" % script)
        else:
            def reduced(*a, **k):
                configs = [c for c in full(*a, **k) if all(c.get(key) in values for key, values in REDUCED.items())]
                print("tune_moe: reduced search, %d configurations" % len(configs), flush=True)
                return configs
            namespace["get_configs_compute_bound"] = reduced
    if moe:
        if "get_model_params" not in namespace:
            sys.exit("tune_moe: %s has no get_model_params to give the MoE shape %s: not the tuner this driver "
                     "knows (vLLM's benchmarks/kernels/benchmark_moe.py)" % (script, moe))

        def model_params(_config):
            return tuple(moe)
        namespace["get_model_params"] = model_params
        print("tune_moe: the MoE shape read from config.json: %d experts, top-%d, intermediate size %d, hidden %d"
              % tuple(moe), flush=True)
    for block in is_main:
        exec(compile(ast.Module(body=block.body, type_ignores=[]), script, "exec"), namespace)  # pylint: disable=exec-used


if __name__ == "__main__":
    main(sys.argv[1:])
