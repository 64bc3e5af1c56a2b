#!/usr/bin/env bash
# The device calls of 2026-12-06, third session (nvidia-h100-x1, issue 37 item 2): the candidates not yet served at
# 1, 16 and 40 requests, each against the recipe's command in alternating starts on one lease: asynchronous
# scheduling off (vLLM 0.26.0 turns it on by default) and --max-num-seqs 16 in place of the recipe's 40. Expected
# here: neither changes vLLM's torch.compile hash (its scheduler factor is max_num_batched_tokens alone; the capture
# sizes are pinned by the recipe's max_cudagraph_capture_size). Seen: --max-num-seqs 16 did not, async scheduling
# off did (a cache folder of its own; its first start compiled the graph in 6.35 s) - report.md.
# No H200 was lent for seven sessions, so this is an H100 at the depth that fits it, as ../h100-half-depth-2026-12-06/:
# GLM-4.6V-FP8's text shape at 24 of its 46 layers, random weights, the recipe's command as templates/vllm.j2 renders
# it (vLLM's own attention choice), MTP off, without the 60 GiB KV cap; vLLM 0.26.0 with
# patches/vllm/0004-splitk-gemv-one-token.patch as landed and the engine part; greedy prose, 5 timed passes a row.
# The calls, from the checkout's root, back to back on one lease (run tool, kind nvidia-h100-x1); .whl/ as in
# ../h200-triton-final-2026-12-05/run.sh (tests/gpu/carry.sh vllm engine), .whl/s4/jit-cache the H100 caches of
# ../h100-gemv-table-2026-12-06/ and ../h100-air-designed-2026-12-06/:
#   s1: CALL=s1 bash tests/gpu/h100-scheduling-2026-12-06/run.sh stash .whl/s1      carry [".whl/s1"]
#   s2: CALL=s2 bash tests/gpu/h100-scheduling-2026-12-06/run.sh stash .whl/s2      carry [".whl/s2"]
#   s3: SPARE_S=60 CALL=s3 LEASE_LEFT=S CALL_S=580 bash ... start .whl/s4             carry [".whl/s4"]
#   s4...: CALL=sN CALL_S=580 bash tests/gpu/h100-scheduling-2026-12-06/run.sh wait .
#   last:  CALL=sN bash tests/gpu/h100-scheduling-2026-12-06/run.sh collect .
# The driver: patch 0004 applied with the image stage's applier, then rounds of three starts (recipe, no-async,
# seqs-16), each a server start of bench_recipe_vs_defaults.py recipe-no-mtp at 1, 16, 40, as the deadline allows.
# No GPU setting is changed. Every vLLM server runs in a process group of its own (guarded), ended by its id.
set -uo pipefail
# shellcheck source=tests/gpu/device_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../device_lib.sh"
device_args "$@"  # MODE, C, SELF, HERE, REPO, TAG, T0, WORK
engine_env  # SITE, TARGET, PATCH_DIR, PATCH; bench and patch_on are the library's
export LAYERS=24  # bench's depth

if [[ $MODE == drive ]]; then  # detached (setsid) by start
  cd "$WORK" || exit 3
  echo "== $(date -u +%T) driver: $(until_deadline) s to the deadline; LAYERS=$LAYERS;" \
    "$(python3 -c 'import triton; print("triton", triton.__version__)')"
  patch_on 1
  FIRST_LIMIT=300
  [[ -d $C/jit-cache ]] || FIRST_LIMIT=820
  CONC=1,16,40 bench recipe-1 200 "$FIRST_LIMIT"
  for round in 1 2 3; do
    (( round > 1 )) && { CONC=1,16,40 bench "recipe-$round" 130 240 || break; }
    ADD='["--no-async-scheduling"]' CONC=1,16,40 bench "no-async-$round" 130 240 || break
    ADD='["--max-num-seqs", "16"]' CONC=1,16,40 bench "seqs-16-$round" 130 240 || break
  done
  echo "== $(date -u +%T) driver done; $(until_deadline) s to the deadline"
  exit 0
fi

if [[ $MODE == collect ]]; then  # the JIT caches for a later run, beside the results
  jit_cache_pack "$OUT/jit-cache" 40 || true
fi
run_mode
