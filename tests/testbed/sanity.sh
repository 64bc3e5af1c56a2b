#!/usr/bin/env bash
# ansible-test sanity --local, offline-capable: ansible-test wants to download a pip bootstrap
# script from a host CI cannot reach; it reads it from ~/.ansible/test/cache first, and a script
# that calls ensurepip is enough there (docs/engines.md). The collection's tracked files are copied to a
# path ending in ansible_collections/gpuserve/llm, as ansible-test requires.
#   tests/testbed/sanity.sh VENV [ANSIBLE-TEST OPTIONS...]   (e.g. --test pep8 --test line-endings)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
VENV=$(cd "${1:?usage: sanity.sh VENV}" && pwd)
PY=$VENV/bin/python
PYV=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
SRC=$("$PY" -c 'import ansible_test, os; print(os.path.dirname(ansible_test.__file__))')/_internal/python_requirements.py
PIP=$(grep -oE "pip='[0-9.]+'" "$SRC" | head -1 | grep -oE "[0-9.]+")
CACHE=~/.ansible/test/cache/get_pip_${PIP//./_}.py
mkdir -p "$(dirname "$CACHE")"
[[ -f $CACHE ]] || printf 'import ensurepip\nensurepip.bootstrap(upgrade=True)\n' > "$CACHE"

WORK=$ROOT/.work/sanity-$PYV/ansible_collections/gpuserve/llm
rm -rf "$WORK" && mkdir -p "$WORK"
(cd "$ROOT" && git ls-files -z --cached --others --exclude-standard | grep -zv '^\.collections/' \
  | xargs -0 tar -cf - 2>/dev/null) | tar -C "$WORK" -xf -
cd "$WORK"
git init -q && git add -A && git -c user.email=t@t -c user.name=t commit -qm sanity
PATH=$VENV/bin:$PATH ansible-test sanity --local --python "$PYV" --color no "${@:2}"
