#!/usr/bin/env bash
# What the scripts in tests/gpu/ need on a lent GPU machine (no package registry there, Python 3.12,
# torch 2.11.0), made here from PyPI into one ignored folder that a device call carries. The one
# place that says what each script needs: tests/gpu/RESULTS.md, "Carrying what the scripts need".
#
#   bash tests/gpu/carry.sh [PART ...]       PART: preflight (default), sglang, vllm, engine, front, tune
#
# Into CARRY_DIR (default: .whl/ in the checkout, ignored by .gitignore):
#   preflight  ansible/     ansible-core 2.19.14 and what the machine lacks of its needs (wheels)
#              collections/ community.docker from the `ansible` package requirements.txt pins for 2.19
#              host/        every pin of requirements-host.txt (the host_venv role's wheelhouse)
#   sglang     sglang/      SGLang's wheel (the engine profile's version) and the packages its
#                           server_args imports that the machine lacks or has at another version
#   vllm       vllm/        vLLM 0.26.0 and the packages it lacks there, installed into site/ and
#                           packed as vllm-part-NN (<= 40 MiB each: a call carries 64 MiB, the checkout's
#                           own ~4 MB included) + SHA256SUMS;
#                           on the machine: bash tests/gpu/unpack_vllm.sh CARRY_DIR/vllm
#   engine     engine/      beside vllm, what vLLM's image has on an H200 and the vllm part leaves out, so that vLLM
#                           runs with its own defaults (no VLLM_USE_DEEP_GEMM=0, no VLLM_USE_FLASHINFER_SAMPLER=0):
#                           DeepGEMM's JIT headers (vllm/third_party/deep_gemm/include, from the same vLLM wheel)
#                           and flashinfer-python at the version vLLM's wheel pins (0.6.14 for 0.26.0), laid over
#                           site/ and packed as engine-part-NN (<= 40 MiB) + SHA256SUMS;
#                           on the machine: ENGINE_DIR=CARRY_DIR/engine bash tests/gpu/unpack_vllm.sh ...
#                           (flashinfer-cubin at that version is not on PyPI, and flashinfer-jit-cache never is:
#                           flashinfer compiles its sm90 kernels with the machine's nvcc at the engine's first start)
#   front      front/       for front_vllm.py: Debian's packages of the front's image (the suite the front role builds from,
#                           FRONT_SUITE, default sid) as .debs: nginx, nginx-common, libnginx-mod-http-js and the libraries
#                           they link that an Ubuntu 24.04 machine lacks at those versions, and libc6 (used there only
#                           where the machine's glibc is older than the packages need); apt-get download through a private
#                           sources list (this workstation's apt configuration is left alone) + SHA256SUMS; 7.5 MB
#   tune       tune/        for tune_moe_reduced.py, beside vllm: Ray 2.60.0's wheel as ray-part-NN (79 MB, <= 40 MiB each)
#                           and benchmark_moe.py, given as BENCHMARK_MOE_PY (vLLM 0.26.0's
#                           benchmarks/kernels/benchmark_moe.py, from its source tree or sdist, as the
#                           autotune stage takes it: its serving wheel and image lack it)
# Each part is made again only when missing; delete its folder to refresh it.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
CARRY=$(realpath -m "${CARRY_DIR:-$REPO/.whl}")
PARTS=("${@:-preflight}")
PY=${PYTHON:-python3}
# The GPU machine's Python: CPython 3.12 on x86_64 manylinux (pip matches each glibc tag exactly).
PLATFORM=(--only-binary=:all: --python-version 3.12 --implementation cp)
for tag in manylinux_2_39 manylinux_2_35 manylinux_2_34 manylinux_2_31 manylinux_2_28 manylinux_2_27 \
           manylinux_2_26 manylinux_2_24 manylinux_2_17 manylinux2014 manylinux1 manylinux_2_5; do
  PLATFORM+=(--platform "${tag}_x86_64")
done
download() {  # download DIR PIN...: exactly these wheels, none of their needs
  local dir=$1
  shift
  PIP_CONSTRAINT="" "$PY" -m pip download --quiet --disable-pip-version-check --no-deps "${PLATFORM[@]}" \
    -d "$dir" "$@"
}
sglang_version() {
  sed -n '/"sglang": {/,/}/s/.*"version": "\([^"]*\)".*/\1/p' "$REPO/plugins/module_utils/engines.py" | head -1
}

preflight() {
  if [[ ! -d $CARRY/ansible ]]; then
    # ansible-core 2.19's needs that the machine lacks (it has jinja2, PyYAML, MarkupSafe, packaging).
    download "$CARRY/ansible.tmp" ansible-core==2.19.14 resolvelib==1.2.1 cryptography==50.0.2 cffi==2.1.1 \
      pycparser==3.12
    mv "$CARRY/ansible.tmp" "$CARRY/ansible"
  fi
  if [[ ! -d $CARRY/collections/ansible_collections/community/docker ]]; then
    # The `ansible` package pinned for ansible-core 2.19 bundles the collection: plain files, no build.
    local ansible_pin tmp
    ansible_pin=$(sed -n 's/^\(ansible==[0-9.]*\); python_version < "3.12"$/\1/p' "$REPO/requirements.txt")
    tmp=$(mktemp -d)
    PIP_CONSTRAINT="" "$PY" -m pip download --quiet --disable-pip-version-check --no-deps -d "$tmp" "$ansible_pin"
    mkdir -p "$CARRY/collections"
    "$PY" - "$tmp"/ansible-*.whl "$CARRY/collections" <<'EOF'
import sys, zipfile
wheel, dest = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    names = [n for n in z.namelist() if n.startswith("ansible_collections/community/docker/")
             and "/tests/" not in n and "__pycache__" not in n]
    z.extractall(dest, names)
print("community.docker: %d files" % len(names))
EOF
    rm -rf "$tmp"
  fi
  if [[ ! -d $CARRY/host ]]; then
    download "$CARRY/host.tmp" -r "$REPO/requirements-host.txt"
    mv "$CARRY/host.tmp" "$CARRY/host"
  fi
}

sglang() {
  [[ -d $CARRY/sglang ]] && return
  # server_args' imports that the machine lacks (pydantic, fastapi, openai, zmq, ...), and the
  # transformers/tokenizers/huggingface_hub versions SGLang 0.5.5 pins (the machine's transformers 5
  # needs torchvision operators at import time of sglang's config registry). compressed-tensors,
  # loguru and gguf: ServerArgs reaches the quantization registry through the model config.
  download "$CARRY/sglang.tmp" "sglang==$(sglang_version)" transformers==4.57.1 tokenizers==0.22.1 \
    huggingface_hub==0.36.0 pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 \
    typing-inspection==0.4.5 fastapi==0.121.0 starlette==0.49.3 openai==2.6.1 distro==1.9.0 sniffio==1.3.1 \
    orjson==3.13.0 pybase64==1.5.1 pyzmq==27.3.0 partial-json-parser==0.2.1.1.post7 dill==0.4.1 \
    ipython==9.18.1 traitlets==5.16.1 compressed-tensors==0.20.1 loguru==0.7.3 gguf==0.19.0
  mv "$CARRY/sglang.tmp" "$CARRY/sglang"
}

vllm() {
  [[ -f $CARRY/vllm/SHA256SUMS ]] && return
  local work py312
  work=$(mktemp -d /tmp/vllm-bundle.XXXX)
  py312=$(find /root/.pyenv/versions -path '*/3.12*/bin/python' 2>/dev/null | sort | tail -1 || true)
  py312=${py312:-$(command -v python3.12 || true)}
  [[ -n $py312 ]] || { echo "carry.sh vllm: no Python 3.12 here to install the wheels with" >&2; exit 2; }
  download "$work/whl" vllm==0.26.0
  download "$work/whl" -r "$REPO/tests/gpu/vllm-deps.txt"
  "$py312" -m venv "$work/venv"
  "$work/venv/bin/python" -m pip install -q --no-deps --no-index --no-compile --target "$work/site" "$work"/whl/*.whl
  # What a bf16/fp8 model on an H200 (sm90, FlashAttention 3) never loads, and DeepGEMM's headers (flashinfer is
  # not downloaded): without the engine part, VLLM_USE_FLASHINFER_SAMPLER=0 VLLM_USE_DEEP_GEMM=0. vLLM's defaults on
  # sm90 use both (block-FP8 linears, sampler; h200-engine-as-served-2026-12-02): the engine part carries them.
  rm -f "$work"/site/vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so "$work"/site/vllm/vllm-rs \
    "$work"/site/vllm/third_party/deep_gemm/_C.cpython-31[0134]-*.so "$work"/site/vllm/_qutlass_C.abi3.so \
    "$work"/site/vllm/_flashmla_C.abi3.so "$work"/site/vllm/_flashmla_extension_C.abi3.so
  rm -rf "$work"/site/vllm/third_party/fmha_sm100/cutlass "$work"/site/vllm/third_party/deep_gemm/include \
    "$work"/site/vllm/entrypoints/serve/instrumentator/static "$work"/site/pycountry/locales
  rm -f "$work"/site/mistral_common/data/*
  find "$work/site" -name "*.so" -size +1M -exec strip --strip-unneeded {} \;
  mkdir -p "$CARRY/vllm"
  tar -C "$work" -cf - site | xz -9e -T2 | split -b 40M -d -a 2 - "$CARRY/vllm/vllm-part-"
  (cd "$CARRY/vllm" && sha256sum vllm-part-* > SHA256SUMS)
  rm -rf "$work"
}

engine() {
  [[ -f $CARRY/engine/SHA256SUMS ]] && return
  local work flashinfer
  work=$(mktemp -d /tmp/vllm-engine.XXXX)
  download "$work/whl" vllm==0.26.0
  # The flashinfer-python that this vLLM wheel pins (Requires-Dist: flashinfer-python==X).
  flashinfer=$(unzip -p "$work"/whl/vllm-*.whl '*.dist-info/METADATA' |
    sed -n 's/^Requires-Dist: \(flashinfer-python==[^; ]*\).*/\1/p' | head -1)
  [[ -n $flashinfer ]] || { echo "carry.sh engine: vLLM's wheel pins no flashinfer-python" >&2; exit 2; }
  download "$work/fi" "$flashinfer"
  "$PY" -m pip install -q --disable-pip-version-check --no-deps --no-index --no-compile --target "$work/site" \
    "$work"/fi/*.whl
  # DeepGEMM's JIT headers (the vllm part drops them), from the same wheel; its _C for 3.12 is in the vllm part.
  (cd "$work" && unzip -q whl/vllm-*.whl 'vllm/third_party/deep_gemm/include/*' -d site)
  rm -rf "$CARRY/engine.tmp" && mkdir -p "$CARRY/engine.tmp"
  tar -C "$work" -cf - site | xz -9e -T2 | split -b 40M -d -a 2 - "$CARRY/engine.tmp/engine-part-"
  (cd "$CARRY/engine.tmp" && echo "$flashinfer" > versions && sha256sum engine-part-* versions > SHA256SUMS)
  rm -rf "$work" "$CARRY/engine"
  mv "$CARRY/engine.tmp" "$CARRY/engine"
}

front() {
  [[ -f $CARRY/front/SHA256SUMS ]] && return
  local apt o
  apt=$(mktemp -d /tmp/front-apt.XXXX)
  mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial"
  echo "deb ${FRONT_MIRROR:-http://deb.debian.org/debian} ${FRONT_SUITE:-sid} main" > "$apt/sources.list"
  o=(-o "Dir::Etc::SourceList=$apt/sources.list" -o Dir::Etc::SourceParts=/dev/null -o "Dir::State::Lists=$apt/lists"
     -o "Dir::Cache=$apt/cache" -o APT::Architecture=amd64 -o APT::Architectures=amd64)
  apt-get "${o[@]}" -qq update
  rm -rf "$CARRY/front.tmp" && mkdir -p "$CARRY/front.tmp"
  # nginx 1.30.6 links libssl3t64 (>= 3.5), libpcre2-8-0 (>= 10.47), libcrypt1, zlib1g, libzstd1; its JavaScript module
  # libqjs0 and libxml2-16; sid's names for these sonames (2026-12).
  (cd "$CARRY/front.tmp" && apt-get "${o[@]}" -qq download nginx nginx-common libnginx-mod-http-js libqjs0 libxml2-16 \
    libpcre2-8-0 libssl3t64 libcrypt1 zlib1g libzstd1 libc6)
  (cd "$CARRY/front.tmp" && ls ./*.deb > /dev/null && sha256sum ./*.deb > SHA256SUMS)
  rm -rf "$apt"
  mv "$CARRY/front.tmp" "$CARRY/front"
}

tune() {
  [[ -f $CARRY/tune/SHA256SUMS ]] && return
  local benchmark=${BENCHMARK_MOE_PY:-}
  [[ -f $benchmark ]] || { echo "carry.sh tune: set BENCHMARK_MOE_PY to vLLM 0.26.0's benchmark_moe.py" >&2; exit 2; }
  rm -rf "$CARRY/tune.tmp"
  download "$CARRY/tune.tmp" ray==2.60.0
  (cd "$CARRY/tune.tmp" && basename ray-*.whl > ray-wheel-name && split -b 40M -d -a 2 ray-*.whl ray-part- &&
    rm ray-*.whl && cp "$benchmark" benchmark_moe.py && sha256sum ray-part-* ray-wheel-name benchmark_moe.py > SHA256SUMS)
  mv "$CARRY/tune.tmp" "$CARRY/tune"
}

mkdir -p "$CARRY"
for part in "${PARTS[@]}"; do
  case $part in
    preflight | sglang | vllm | engine | front | tune) "$part" ;;
    *) echo "carry.sh: no part $part (preflight, sglang, vllm, engine, front, tune)" >&2; exit 2 ;;
  esac
  echo "$part: $(du -sh "$CARRY/$part" "$CARRY/ansible" "$CARRY/collections" "$CARRY/host" 2>/dev/null |
    awk -v p="$part" '$2 ~ ("/" p "$") || (p == "preflight" && $2 !~ /(sglang|vllm)$/) {printf "%s %s  ", $1, $2}')"
done
echo "carry: $(du -sh "$CARRY" | cut -f1) in $CARRY (a device call carries 64 MiB with the checkout)"
