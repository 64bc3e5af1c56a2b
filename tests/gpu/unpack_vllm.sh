#!/usr/bin/env bash
# On the GPU machine: join the vLLM parts that tests/gpu/carry.sh vllm made (this call's, in DIR, and any
# an earlier call of the same lease stashed in STASH), unpack them into DEST and check that vLLM imports.
# Two parts need two calls back to back (a call carries 64 MiB): stash the first, unpack with the second.
#
#   [ENGINE_DIR=DIR2] bash tests/gpu/unpack_vllm.sh DIR [STASH=/root/stash] [DEST=/root/vllm]
#
# ENGINE_DIR: where carry.sh engine's parts are (this call's or, stashed earlier, STASH/engine): laid over
# DEST/site after vLLM, so that vLLM runs with its own defaults (DeepGEMM, flashinfer); without it the bundle
# is the trimmed one. Then:
#   trimmed: PYTHONPATH=DEST/site VLLM_USE_FLASHINFER_SAMPLER=0 VLLM_USE_DEEP_GEMM=0 HF_HUB_OFFLINE=1
#   engine:  PYTHONPATH=DEST/site HF_HUB_OFFLINE=1, with nvcc on PATH (flashinfer and DeepGEMM compile there)
set -euo pipefail
DIR=${1:?usage: unpack_vllm.sh DIR [STASH] [DEST]}
STASH=${2:-/root/stash}
DEST=${3:-/root/vllm}
mkdir -p "$STASH"
cp "$DIR"/vllm-part-* "$DIR"/SHA256SUMS "$STASH"/ 2>/dev/null || true
cd "$STASH"
sha256sum -c SHA256SUMS
rm -rf "$DEST" && mkdir -p "$DEST"
cat vllm-part-* | xz -dc | tar -C "$DEST" -xf -
FLAGS="VLLM_USE_FLASHINFER_SAMPLER=0"
if [[ -n ${ENGINE_DIR:-} ]]; then
  mkdir -p "$STASH/engine"
  cp "$ENGINE_DIR"/engine-part-* "$ENGINE_DIR"/SHA256SUMS "$ENGINE_DIR"/versions "$STASH/engine/" 2>/dev/null || true
  (cd "$STASH/engine" && sha256sum -c SHA256SUMS && cat engine-part-* | xz -dc | tar -C "$DEST" -xf -)
  FLAGS="PATH=${CUDA_HOME:-/usr/local/cuda}/bin:$PATH"
fi
env PYTHONPATH="$DEST/site" "$FLAGS" python3 -c \
  "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__, torch.cuda.get_device_name(0))"
if [[ -n ${ENGINE_DIR:-} ]]; then
  env PYTHONPATH="$DEST/site" "$FLAGS" python3 -c "
import shutil, flashinfer
from vllm.utils.deep_gemm import is_deep_gemm_supported
from vllm.utils.flashinfer import has_flashinfer, has_flashinfer_fp8_blockscale_gemm
print('flashinfer', flashinfer.__version__, 'nvcc', shutil.which('nvcc'), 'has_flashinfer', has_flashinfer(),
      'fp8 blockscale sm90', has_flashinfer_fp8_blockscale_gemm(), 'deep_gemm supported', is_deep_gemm_supported())"
fi
