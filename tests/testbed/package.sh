#!/usr/bin/env bash
# Build the collection tarball and install it as docs/install.md tells a user to ("As a
# collection"), with ~/.ansible/collections replaced by an empty temporary path: offline, its
# dependencies (galaxy.yml) taken from the `ansible` package's collections. Fails if the install does
# nothing, if a collection the roles call is not declared, or if a declared one is missing or at a
# version out of range. Then, from a folder outside the checkout (no ansible.cfg) and with only the
# installed path configured: ansible-doc on a module and a role, every playbook's syntax check by its
# FQCN, and a module run.
#   tests/testbed/package.sh VENV
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
VENV=$(cd "${1:?usage: package.sh VENV}" && pwd)
WORK=$(mktemp -d /tmp/gpuserve-package.XXXX)
trap 'rm -rf "$WORK"' EXIT
export PATH=$VENV/bin:$PATH ANSIBLE_NOCOLOR=1 ANSIBLE_LOCALHOST_WARNING=0
# As a user's shell: no configuration but the folder's own ansible.cfg where there is one.
unset ANSIBLE_CONFIG ANSIBLE_COLLECTIONS_PATH ANSIBLE_COLLECTIONS_PATHS ANSIBLE_COLLECTIONS_SCAN_SYS_PATH

cd "$ROOT"
ansible-galaxy collection build --force --output-path "$WORK/dist" >/dev/null
TARBALL=$(ls "$WORK"/dist/gpuserve-llm-*.tar.gz)
SIZE_KIB=$(( $(stat -c %s "$TARBALL") / 1024 ))
echo "built $(basename "$TARBALL"): $(tar -tzf "$TARBALL" | wc -l) files, $SIZE_KIB KiB"
# What a working tree holds besides the collection (galaxy.yml's build_ignore): virtualenvs, the
# workstation's image and tuning cache (.gpuserve, also in molecule's scenario folders), a run's
# reports and logs, the real-GPU runs' result folders (tests/gpu/<machine>-<date>/), a downloaded wheel.
if tar -tzf "$TARBALL" | grep -E \
    '^(\.collections|\.work|\.venv[^/]*|\.whl|\.pytest_cache|tests/output|tests/gpu/[^/]+)/|(^|/)(\.gpuserve|reports|logs)/|\.whl$'; then
  echo "the tarball carries the paths above: galaxy.yml's build_ignore must keep them out" >&2; exit 1
fi
# 451 KiB measured on 2026-12-01 (a clean tree), 1,026 KiB on 2026-12-05 (the tests and their engine-help
# fixtures grew); 2 MiB leaves room to grow, and one cached image (the llama.cpp root made a 99 MB
# tarball) or a run's logs go far past it.
MAX_KIB=2048
if (( SIZE_KIB > MAX_KIB )); then
  echo "the tarball is $SIZE_KIB KiB, more than $MAX_KIB KiB: what is in it that the collection does not need?" >&2
  tar -tzvf "$TARBALL" | sort -k3 -n | tail -5 >&2
  exit 1
fi
# docs/install.md's install command, word for word but for the path: first from the checkout,
# whose ansible.cfg finds the checkout's own gpuserve.llm 0.1.0 (without --force and -p it says
# "Nothing to do"), then from a folder outside it into an empty path, the one the rest runs on.
install() {  # FOLDER PATH
  (cd "$1" && ansible-galaxy collection install --offline --force -p "$2" "$TARBALL" 2>&1)
}
installed() {  # LOG PATH: it says it installed gpuserve.llm, and it is there
  grep -q "gpuserve.llm:0.1.0 was installed successfully" <<<"$1" \
    && [[ -f $2/ansible_collections/gpuserve/llm/MANIFEST.json ]] && ! grep -q "Nothing to do" <<<"$1"
}
if ! log=$(install "$ROOT" "$WORK/from-checkout") || ! installed "$log" "$WORK/from-checkout"; then
  echo "$log" >&2; echo "the install from inside the checkout did not install into an empty path" >&2; exit 1
fi
echo "install from the checkout: gpuserve.llm into $WORK/from-checkout"
if ! log=$(install "$WORK" "$WORK/installed") || ! installed "$log" "$WORK/installed"; then
  echo "$log" >&2; echo "the install from outside the checkout did not install into an empty path" >&2; exit 1
fi
grep -E "^Installing|already installed" <<<"$log"
# Without the ansible package's collections the same install must fail on a dependency: galaxy.yml
# declares them and --offline does not reach past them.
if log=$(cd "$WORK" && ANSIBLE_COLLECTIONS_SCAN_SYS_PATH=false \
    ansible-galaxy collection install --offline --force -p "$WORK/bare" "$TARBALL" 2>&1); then
  echo "$log" >&2; echo "installed with no collection but its own: galaxy.yml declares no dependency?" >&2; exit 1
fi
grep -m1 -o "Could not satisfy the following requirements" <<<"$log" >/dev/null \
  || { echo "$log" >&2; echo "the install without the ansible package's collections failed, but not on a dependency" >&2; exit 1; }
echo "install without the ansible package's collections: refused ($(grep -m1 -oE '\* community\.[a-z_.]+:[^ ]+' <<<"$log"))"

cd "$WORK"  # no ansible.cfg here: only the installed copy can answer
export ANSIBLE_COLLECTIONS_PATH=$WORK/installed
# Every collection the installed roles, playbooks and plugins name is declared, and each declared
# one is found where ansible-playbook looks, at a version in its range.
ansible-galaxy collection list --format json >"$WORK/list.json"
"$VENV/bin/python" - "$WORK/installed/ansible_collections/gpuserve/llm" "$WORK/list.json" <<'PY'
import json, os, re, sys
from ansible.galaxy.dependency_resolution.versioning import meets_requirements
coll, listed = sys.argv[1], json.load(open(sys.argv[2]))
deps = json.load(open(os.path.join(coll, "MANIFEST.json")))["collection_info"]["dependencies"]
found = {}  # the first path that holds it, as ansible-playbook searches
for path, colls in listed.items():
    for name, info in colls.items():
        found.setdefault(name, (path, info["version"]))
known = {n for n in found if n not in ("gpuserve.llm", "ansible.builtin")}
named = {}
for top in ("roles", "playbooks", "plugins", "meta"):
    for d, _, files in os.walk(os.path.join(coll, top)):
        for f in files:
            text = open(os.path.join(d, f), errors="replace").read()
            pat = r"ansible_collections\.(\w+\.\w+)" if f.endswith(".py") else r"(?<![\w.])([a-z]\w*\.[a-z]\w*)\.\w"
            for m in re.finditer(pat, text):
                if m.group(1) in known:
                    named.setdefault(m.group(1), os.path.relpath(os.path.join(d, f), coll))
bad = ["%s (named in %s) is not in galaxy.yml's dependencies" % (n, where)
       for n, where in sorted(named.items()) if n not in deps]
for name, spec in sorted(deps.items()):
    if name not in found:
        bad.append("%s %s is declared but not found" % (name, spec))
    elif not meets_requirements(found[name][1], spec):
        bad.append("%s %s is declared but %s is at %s" % (name, spec, found[name][0], found[name][1]))
    else:
        print("dependency %s %s: %s in %s" % (name, spec, found[name][1], found[name][0]))
if bad:
    sys.exit("\n".join(bad))
PY
for doc in "gpuserve.llm.gpu_preflight" "-t role gpuserve.llm.service"; do
  # shellcheck disable=SC2086  # the type option and the name, split
  out=$(ansible-doc $doc)
  grep -q "($WORK/installed/ansible_collections/gpuserve/llm[/)]" <<<"${out%%$'\n'*}" \
    || { echo "$out" | head -3 >&2; echo "ansible-doc $doc did not answer from the installed copy" >&2; exit 1; }
  echo "${out%%$'\n'*}"
done
PLAYBOOKS=()
for f in "$WORK"/installed/ansible_collections/gpuserve/llm/playbooks/*.yml; do
  f=${f##*/}; PLAYBOOKS+=("gpuserve.llm.${f%.yml}")
done
if ! log=$(ansible-playbook --syntax-check -i localhost, "${PLAYBOOKS[@]}" 2>&1) \
    || [[ $(grep -cx "playbook: $WORK/installed/ansible_collections/gpuserve/llm/playbooks/.*\.yml" <<<"$log") != "${#PLAYBOOKS[@]}" ]]; then
  echo "$log" >&2; echo "the syntax check of ${PLAYBOOKS[*]} from the installed copy failed" >&2; exit 1
fi
echo "syntax check from the installed copy: ${PLAYBOOKS[*]}"
out=$(PYTHONPATH=$ROOT/tests/nvml_double NVML_REPLAY_SCENARIO=$ROOT/tests/fixtures/h200x2-nvml-probe.json \
  ansible localhost -c local -i localhost, -e "ansible_python_interpreter=$VENV/bin/python" \
  -m gpuserve.llm.gpu_preflight -a '{"gpus": [0, 1], "expected_power_w": 250}')
[[ -f $WORK/installed/ansible_collections/gpuserve/llm/MANIFEST.json ]] \
  || { echo "the collection was not installed under $WORK/installed" >&2; exit 1; }
echo "$out" | grep -cE "\"code\": \"W_POWER\"" | grep -qx 2 || { echo "$out" >&2; echo "module run from the tarball did not report W_POWER x2" >&2; exit 1; }
echo "module gpu_preflight from the installed tarball: W_POWER x2 on the replayed H200 reading"
