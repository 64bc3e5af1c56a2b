#!/usr/bin/env bash
# On the GPU machine: join the vLLM parts that tests/gpu/carry.sh vllm made (this call's, in DIR, and any
# an earlier call of the same lease stashed in STASH), unpack them into DEST and check that vLLM imports.
# Two parts need two calls back to back (a call carries 64 MiB): stash the first, unpack with the second.
#
#   bash tests/gpu/unpack_vllm.sh DIR [STASH=/root/stash] [DEST=/root/vllm]
#
# Then: PYTHONPATH=DEST/site VLLM_USE_FLASHINFER_SAMPLER=0 VLLM_USE_DEEP_GEMM=0 HF_HUB_OFFLINE=1
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
PYTHONPATH=$DEST/site VLLM_USE_FLASHINFER_SAMPLER=0 python3 -c \
  "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__, torch.cuda.get_device_name(0))"
