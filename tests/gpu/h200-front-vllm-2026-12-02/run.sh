#!/usr/bin/env bash
# The device calls of 2026-12-02 (nvidia-h200, issue 36 item 7), back to back on one lease, each from the checkout's
# root with carry [".whl/gN"]: bash tests/gpu/h200-front-vllm-2026-12-02/run.sh MODE .whl/gN
# On the workstation, before the calls (.whl/ is ignored):
#   bash tests/gpu/carry.sh vllm        # vllm-part-00..02 (<= 40 MiB each) + SHA256SUMS
#   Debian's packages of the front image (sid, the suite the front role builds from; the versions of its
#   gpuserve-front-1.30.6-2 root): nginx 1.30.6-2, nginx-common, libnginx-mod-http-js 1.0.2-2 and what they link
#   (libqjs0, libxml2-16, libpcre2-8-0, libssl3t64, libcrypt1, zlib1g, libzstd1) and libc6 2.43-7 (used only where
#   the machine's glibc is older than 2.38, which libssl3t64 and the module need), with apt-get download through a
#   private sources list: o="-o Dir::Etc::SourceList=L -o Dir::Etc::SourceParts=/dev/null -o Dir::State::Lists=D
#   -o Dir::Cache=C -o APT::Architecture=amd64"; apt-get $o update; apt-get $o download nginx ... libc6
#   (now `bash tests/gpu/carry.sh front`, which makes the same 11 .debs: checksums compared on 2026-12-02)
#   .whl/g1: vllm/ {vllm-part-00, SHA256SUMS}            (hard links)
#   .whl/g2: vllm/ {vllm-part-01}
#   .whl/g3: vllm/ {vllm-part-02}, debs/ (the 11 .debs, 7.5 MB), repo/ = `git archive HEAD` of the commit named in
#            report.md (the branch's tree as committed: other sessions' uncommitted edits stay out)
# The calls:
#   g1: CALL=g1 bash tests/gpu/h200-front-vllm-2026-12-02/run.sh stash .whl/g1
#   g2: CALL=g2 bash tests/gpu/h200-front-vllm-2026-12-02/run.sh stash .whl/g2
#   g3: CALL=g3 bash tests/gpu/h200-front-vllm-2026-12-02/run.sh run .whl/g3
#   g4: CALL=g4 bash tests/gpu/h200-front-vllm-2026-12-02/run.sh run .whl/g3   (the same machine, still warm: vLLM
#       already unpacked; .whl/g3/repo/tests/gpu/front_vllm.py with the cases written into front-vllm.json)
#       joins and unpacks the vLLM bundle (the trimmed one: no engine part, VLLM_USE_DEEP_GEMM=0 and
#       VLLM_USE_FLASHINFER_SAMPLER=0, as serve_vision_glm.py ran; the engine part's DeepGEMM warm-up alone outlasts a
#       call on a cold machine, h200-engine-as-served-2026-12-02), then tests/gpu/front_vllm.py OUT run with
#       FRONT_DEBS=.whl/g3/debs.
# Everything lands in $OUT: device-CALL.log, front-vllm.json, front-vllm.md, front.conf, nginx-front.log,
# vllm-front.log. No GPU setting is changed.
set -uo pipefail
MODE=${1:?usage: run.sh stash|run CARRIED}
C=$(cd "${2:?the carried folder}" && pwd)
TAG=${CALL:-$MODE}
T0=$(date +%s)
exec > >(tee "$OUT/device-$TAG.log") 2>&1
echo "== $(date -u +%FT%TZ) $TAG: $(nproc) cores, $(uname -r), $(ldd --version | head -1); $(nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader)"
mkdir -p /root/stash
[[ -d $C/vllm ]] && cp "$C"/vllm/* /root/stash/
ls -la /root/stash
[[ $MODE == stash ]] && exit 0
start=$(date +%s)
if [[ ! -f /root/vllm/site/vllm/__init__.py ]]; then
  (cd /root/stash && sha256sum -c SHA256SUMS) || exit 3
  rm -rf /root/vllm && mkdir -p /root/vllm
  cat /root/stash/vllm-part-* | xz -dc -T0 | tar -C /root/vllm -xf - || exit 3
fi
echo "== vLLM unpacked in $(( $(date +%s) - start )) s"
cd "$C/repo" || exit 3
left=$(( 580 - $(date +%s) + T0 ))
FRONT_DEBS=$C/debs DEADLINE=$(( left - 15 )) PYTHONUNBUFFERED=1 timeout -k 10 "$left" python3 tests/gpu/front_vllm.py "$OUT" run
echo "== front_vllm.py rc=$?"
ls -la "$OUT"
echo "== $TAG done in $(( $(date +%s) - T0 )) s"
