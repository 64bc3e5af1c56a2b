#!/usr/bin/env bash
# The workstation's virtualenv, for the main command (scripts/bring-up-local.sh: requirements.txt)
# and the test command (tests/run.sh: requirements-test.txt and requirements-lint.txt), which share
# .venv. One stamp, DIR/.stamp, says what DIR holds: its Python (major.minor) and every requirements
# file installed (with those it takes in by -r), each with a hash of its pins. A command adds what it
# needs and the stamp lacks; DIR is made anew only when its Python is not PYTHON's major.minor or an
# installed file's pins changed (so a pin taken out leaves nothing behind). Either command leaves
# the other's packages in place.
#   scripts/venv.sh DIR PYTHON REQUIREMENTS...
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:?usage: venv.sh DIR PYTHON REQUIREMENTS...}
python=$(readlink -f "$(command -v "${2:?usage: venv.sh DIR PYTHON REQUIREMENTS...}")")  # not DIR's own link
shift 2

files() {  # files FILE...: each file and those it takes in with -r, relative to here
  local f inc
  for f in "$@"; do
    realpath --relative-to=. "$f"
    while read -r inc; do files "$(dirname "$f")/$inc"; done < <(sed -n 's/^-r[[:space:]]*//p' "$f")
  done
}
pins() { echo "$1 $(sha256sum "$1" | cut -c1-16)"; }

version='import sys; print("%d.%d" % sys.version_info[:2])'
mapfile -t need < <(files "$@" | sort -u)
want=()
for f in "${need[@]}"; do want+=("$(pins "$f")"); done
have=()  # the stamp's "file hash" lines; a folder without them (made by hand) is taken as it is
if [[ -f $dir/.stamp ]]; then mapfile -t have < <(grep -E '^[^ ]+ [0-9a-f]{16}$' "$dir/.stamp" || true); fi

python_line="python $("$python" -c "$version")"
fresh=0 missing=()
[[ "python $("$dir/bin/python" -c "$version" 2>/dev/null)" == "$python_line" ]] || fresh=1
for line in "${have[@]}"; do  # an installed file whose pins changed, or that is gone
  [[ -f ${line%% *} && $(pins "${line%% *}") == "$line" ]] || fresh=1
done
for line in "${want[@]}"; do
  printf '%s\n' "${have[@]}" | grep -qxF "$line" || missing+=("${line%% *}")
done
if [[ $fresh == 0 && ${#missing[@]} == 0 ]]; then
  echo "$dir is current ($python_line, ${need[*]})"
  exit 0
fi
if [[ $fresh == 1 ]]; then
  echo "$dir: made anew with $python for ${need[*]}"
  rm -rf "$dir"
  "$python" -m venv "$dir"
  have=()
else
  echo "$dir: adding ${missing[*]}"
fi
args=()
for f in "$@"; do args+=(-r "$f"); done
# --no-compile: Python compiles what is imported, when first imported; pip would compile every file
# (the ansible package's collections alone: 15,000 files, 23 s of CPU of a 30 s install).
"$dir/bin/python" -m pip install --quiet --disable-pip-version-check --no-compile "${args[@]}"
echo "$python_line" > "$dir/.stamp.part"
printf '%s\n' "${have[@]}" "${want[@]}" | sed '/^$/d' | sort -u >> "$dir/.stamp.part"
mv "$dir/.stamp.part" "$dir/.stamp"
if [[ -x $dir/bin/ansible ]]; then "$dir/bin/ansible" --version | sed -n 1p; fi  # sed reads it all: head would break the pipe
