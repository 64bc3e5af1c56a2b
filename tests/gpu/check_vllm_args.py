"""Parse each rendered vLLM command (tests/gpu/vllm-argv.json) with vLLM's own argument parser and
turn it into engine arguments, as `vllm serve` does before it loads anything. Run on the GPU machine
with vLLM importable (docs/engines.md); prints one line per variant and exits 1 on any rejection."""
import json
import os
import sys
import time

t0 = time.time()
from vllm.engine.arg_utils import AsyncEngineArgs  # noqa: E402
from vllm.entrypoints.openai.cli_args import make_arg_parser  # noqa: E402
try:
    from vllm.utils.argparse_utils import FlexibleArgumentParser  # noqa: E402
except ImportError:
    from vllm.utils import FlexibleArgumentParser  # noqa: E402
import vllm  # noqa: E402

print("vllm %s imported in %.1f s" % (vllm.__version__, time.time() - t0))
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "vllm-argv.json")) as f:
    cases = json.load(f)
# vLLM resolves the model path while it builds engine arguments: a folder with a config stands in.
import tempfile  # noqa: E402
model_dir = tempfile.mkdtemp()
with open(os.path.join(model_dir, "config.json"), "w") as f:
    json.dump({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256,
               "intermediate_size": 512, "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2,
               "vocab_size": 1024, "max_position_embeddings": 131072, "torch_dtype": "bfloat16"}, f)
bad = 0
for name, case in cases.items():
    argv = case["argv"]
    assert argv[:2] == ["vllm", "serve"], argv[:2]
    parser = make_arg_parser(FlexibleArgumentParser())
    try:
        args = parser.parse_args(["--model", model_dir] + argv[3:])
    except SystemExit as e:
        bad += 1
        print("FAIL %-18s vLLM's parser refused the command (exit %s)" % (name, e))
        continue
    try:
        engine = AsyncEngineArgs.from_cli_args(args)
        picked = {k: getattr(engine, k, None) for k in ("tensor_parallel_size", "max_num_seqs", "max_model_len",
                                                        "kv_cache_dtype", "kv_cache_memory_bytes", "load_format",
                                                        "speculative_config", "allowed_media_domains",
                                                        "language_model_only", "quantization")}
        picked["tool_call_parser"] = args.tool_call_parser
        picked["reasoning_parser"] = getattr(engine, "reasoning_parser", None) or getattr(args, "reasoning_parser", None)
        picked["default_chat_template_kwargs"] = args.default_chat_template_kwargs
        picked["override_generation_config"] = getattr(engine, "override_generation_config", None)
        picked["structured_outputs"] = str(getattr(engine, "structured_outputs_config", None))[:80]
        picked["limit_mm_per_prompt"] = getattr(engine, "limit_mm_per_prompt", None)
        print("OK   %-18s %s" % (name, json.dumps(picked, default=str)))
    except SystemExit as e:
        bad += 1
        print("FAIL %-18s argparse exit %s" % (name, e))
    except Exception as e:  # a value vLLM refuses
        bad += 1
        print("FAIL %-18s %s: %s" % (name, type(e).__name__, e))
sys.exit(1 if bad else 0)
