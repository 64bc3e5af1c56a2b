"""Parse each rendered SGLang command (tests/gpu/sglang-argv.json) with SGLang's own argument parser, as
`python3 -m sglang.launch_server` does (sglang.srt.server_args.prepare_server_args: the parser, then
ServerArgs, whose __post_init__ checks and completes the values against the model's config and the GPU).
Run where SGLang imports (the GPU machine: tests/gpu/carry.sh sglang). Writes to OUTDIR the parser's help
text (COLUMNS=100) and check-sglang-args.json; prints one line per command; exits 1 on any refusal.
ServerArgs runs only where sgl_kernel (SGLang's CUDA kernels) imports, as in SGLang's image: the lent GPU
machine lacks it, so there the parser alone decides.

    python3 tests/gpu/check_sglang_args.py OUTDIR [ARGV.json ...]

The model path is replaced by a stand-in folder made with the weights stage's code (config and tokenizer of
GLM-4.6V or GLM-4.5-Air, FP8 unless the command quantizes at load), since ServerArgs reads the config.
"""
import argparse
import contextlib
import io
import json
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, ".collections"))
os.environ.setdefault("COLUMNS", "100")  # the help text's width, so that the fixture does not depend on a terminal

OUT = sys.argv[1]
FILES = sys.argv[2:] or [os.path.join(ROOT, "tests", "gpu", "sglang-argv.json")]
os.makedirs(OUT, exist_ok=True)

t0 = time.time()
import sglang  # noqa: E402
from sglang.srt.server_args import ServerArgs  # noqa: E402
VERSION = sglang.__version__
IMPORT_S = round(time.time() - t0, 1)
print("sglang %s (server_args) imported in %.1f s" % (VERSION, IMPORT_S), flush=True)


def parser():
    p = argparse.ArgumentParser(prog="python3 -m sglang.launch_server")
    ServerArgs.add_cli_args(p)
    return p


with open(os.path.join(OUT, "sglang-%s-server-help.txt" % VERSION), "w") as f:
    f.write(parser().format_help())


STAND_INS = tempfile.mkdtemp(prefix="sglang-model-")


def stand_in(kind, quantized):
    """A model folder of that shape (config, tokenizer, chat template), made once."""
    import yaml
    from ansible_collections.gpuserve.llm.plugins.module_utils import dummy_hf
    folder = os.path.join(STAND_INS, "%s-%s" % (kind, "fp8" if quantized else "bf16"))
    if not os.path.isdir(folder):
        with open(os.path.join(ROOT, "roles", "weights", "defaults", "main.yml")) as f:
            fp8 = yaml.safe_load(f)["weights_fp8_quantization"]
        name, preset = ("glm46v.jinja", "glm4v_moe") if kind == "vision" else ("glm45.jinja", "glm4_moe")
        with open(os.path.join(ROOT, "templates", "chat", name)) as f:
            template = f.read()
        os.makedirs(folder)
        for fname, text in dummy_hf.folder_files(template, preset, 4, fp8 if quantized else None).items():
            with open(os.path.join(folder, fname), "w") as f:
                f.write(text)
    return folder


def flags_of(argv):
    """What sglang.launch_server gets: the flags after the launcher (the shell form appends --api-key)."""
    if argv[:2] == ["sh", "-c"]:
        assert argv[3] == "sglang" and "sglang.launch_server" in argv[2], argv[:4]
        return argv[4:] + ["--api-key", "sk-stand-in"]
    assert argv[:3] == ["python3", "-m", "sglang.launch_server"], argv[:3]
    return argv[3:]


PICK = ("tensor_parallel_size", "tp_size", "max_running_requests", "context_length", "quantization", "kv_cache_dtype",
        "mem_fraction_static", "load_format", "speculative_algorithm", "speculative_num_steps",
        "speculative_eagle_topk", "speculative_num_draft_tokens", "speculative_draft_model_path",
        "tool_call_parser", "reasoning_parser", "grammar_backend", "preferred_sampling_params",
        "enable_multimodal", "chat_template", "disable_overlap_schedule", "attention_backend", "device")


results, bad = {"sglang": VERSION, "import_s": IMPORT_S, "cases": {}}, 0
parsed = {}
for path in FILES:  # the parser, for every command
    with open(path) as f:
        cases = json.load(f)
    label = os.path.splitext(os.path.basename(path))[0]
    for name, case in cases.items():
        key = "%s/%s" % (label, name)
        flags = flags_of(case["argv"])
        entry = results["cases"][key] = {"flags": flags}
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                args = parser().parse_args(flags)
        except SystemExit as e:
            bad += 1
            entry.update(stage="parser", refused=err.getvalue().strip().splitlines()[-1:], exit=e.code)
            print("FAIL %-36s parser: %s" % (key, " ".join(entry["refused"])), flush=True)
            continue
        entry.update(stage="parsed", parsed={k: getattr(args, k) for k in PICK if hasattr(args, k)})
        parsed[key] = (args, case.get("model", "vision"), flags)
        print("OK   %-36s parser" % key, flush=True)

try:  # then ServerArgs, which reaches SGLang's quantization registry: that needs SGLang's CUDA kernels
    import sgl_kernel  # noqa: F401
    results["server_args"] = "checked (sgl_kernel %s)" % getattr(sgl_kernel, "__version__", "?")
except ImportError as e:
    results["server_args"] = "not checked: %s (SGLang's kernels, built for the image's torch)" % e
    parsed = {}
for key, (args, model, flags) in parsed.items():
    entry = results["cases"][key]
    args.model_path = stand_in(model, "--quantization" not in flags)
    if args.speculative_draft_model_path:
        args.speculative_draft_model_path = stand_in("text", True)
    log = io.StringIO()
    try:
        with contextlib.redirect_stderr(log):
            server_args = ServerArgs.from_cli_args(args)
        entry.update(stage="ok", server_args={k: getattr(server_args, k, None) for k in PICK})
        print("OK   %-36s ServerArgs %s" % (key, json.dumps(entry["server_args"], default=str)), flush=True)
    except SystemExit as e:
        bad += 1
        entry.update(stage="server_args", refused=["SystemExit %s" % e.code])
        print("FAIL %-36s ServerArgs: exit %s" % (key, e.code), flush=True)
    except Exception as e:  # a value SGLang refuses once it knows the model and the GPU
        bad += 1
        entry.update(stage="server_args", refused=["%s: %s" % (type(e).__name__, e)])
        print("FAIL %-36s ServerArgs: %s: %s" % (key, type(e).__name__, e), flush=True)
    entry["log"] = [line for line in log.getvalue().splitlines() if line.strip()][-12:]

with open(os.path.join(OUT, "check-sglang-args.json"), "w") as f:
    json.dump(results, f, indent=1, default=str)
print("ServerArgs: %s" % results["server_args"])
print("%d of %d commands refused" % (bad, len(results["cases"])))
sys.exit(1 if bad else 0)
