#!/usr/bin/env bash
# The test command (README): sets up what it needs on a fresh Debian 12 machine, then runs every
# check and test, printing each phase's time. Re-runs reuse the virtualenvs, the test-host image
# and the wheelhouse while their inputs are unchanged, and a check that passed on the same inputs
# is reported as such, not run again (check_phase; GPUSERVE_TEST_FRESH=1 runs everything).
#   bash tests/run.sh
set -euo pipefail
cd "$(dirname "$0")/.."
T0=$SECONDS
PHASES=()
# numpy's BLAS one thread a process (the burn-in weights' unit tests, the modules that write them on local test
# hosts): its extra threads spin while they wait, on the two cores the other streams need (test_dummy_hf_weights:
# 27.5 s of CPU with a thread a core, 18.0 s with one).
export OPENBLAS_NUM_THREADS=1

ended() {  # ended NAME SECONDS RC [CPU]: the phase's line for the summary; its pass recorded
  PHASES+=("$(printf '%-52s %4ss %5s  %s' "$1" "$2" "${4:+${4}s}" "$([[ $3 == 0 ]] && echo ok || echo "FAILED (rc $3)")")")
  [[ $3 != 0 ]] || record_pass "$1" "$2"
}

# The CPU seconds (user and system) of this shell's children that ended, from the `times` builtin, in CPU_NOW:
# a phase's own processes (its containers' CPU is the Docker daemon's, in the run's total from /proc/stat only).
# `times` runs in the shell itself and writes a file of that shell's own: in a $( ) subshell it would count the
# subshell's children.
CPU_TIMES=$(mktemp -d)
children_cpu() {
  local file=$CPU_TIMES/$BASHPID
  times > "$file"
  CPU_NOW=$(awk 'NR == 2 {s = 0; for (i = 1; i <= 2; i++) {split($i, a, "m"); s += a[1] * 60 + a[2]}
                 printf "%d\n", s}' "$file")
}
busy_cpu() {  # the machine's busy CPU seconds so far (every core: user, nice, system, irq, steal)
  awk '/^cpu / {printf "%d\n", ($2 + $3 + $4 + $7 + $8 + $9) / 100}' /proc/stat
}
BUSY0=$(busy_cpu)

run_phase() {  # run_phase NAME COMMAND...: run it, time it, keep the line for the summary; its rc
  local name=$1 start=$SECONDS rc=0 cpu stream running=()
  shift
  echo "=== ${name}"
  # A background stream that ends meanwhile is reaped by this shell at once, its whole CPU then counted among this
  # shell's children: taken out again (the stream writes its total as it ends).
  for stream in "${!BG_PID[@]}"; do kill -0 "${BG_PID[$stream]}" 2>/dev/null && running+=("$stream"); done
  children_cpu
  cpu=$CPU_NOW
  "$@" || rc=$?
  children_cpu
  cpu=$((CPU_NOW - cpu))
  for stream in "${running[@]}"; do
    kill -0 "${BG_PID[$stream]}" 2>/dev/null || cpu=$((cpu - $(cat "${BG_DIR[$stream]}/cpu" 2>/dev/null || echo 0)))
  done
  ended "$name" $((SECONDS - start)) "$rc" "$cpu"
  return "$rc"
}

phase() {  # phase NAME COMMAND...: run_phase, and the end of the run if it fails
  local rc=0
  run_phase "$@" || rc=$?
  if [[ $rc != 0 ]]; then summary; exit "$rc"; fi
}

# Phases side by side (the setup waits on the network and debootstrap more than on the cores):
# together NAME COMMAND -- NAME COMMAND -- ...; each its own log, printed
# when all have ended, each its own phase line; a phase that passed on these inputs is not run.
together() {
  local dir names=() pids=() name i rc=0 code secs cpu cmd=()
  dir=$(mktemp -d)
  while [[ $# -gt 0 ]]; do
    name=$1 cmd=()
    shift
    while [[ $# -gt 0 && $1 != -- ]]; do cmd+=("$1"); shift; done
    [[ $# -gt 0 ]] && shift
    cached "$name" && continue
    names+=("$name")
    ( start=$SECONDS c=0; "${cmd[@]}" > "$dir/${#names[@]}.log" 2>&1 || c=$?
      children_cpu
      echo "$c $((SECONDS - start)) $CPU_NOW" > "$dir/${#names[@]}.rc" ) &
    pids+=($!)
  done
  for i in "${!pids[@]}"; do wait "${pids[$i]}" || true; done
  for i in "${!names[@]}"; do
    echo "=== ${names[$i]} (side by side)"
    cat "$dir/$((i + 1)).log"
    read -r code secs cpu < "$dir/$((i + 1)).rc"
    ended "${names[$i]}" "$secs" "$code" "$cpu"
    [[ $code == 0 ]] || rc=$code
  done
  rm -rf "$dir"
  if [[ $rc != 0 ]]; then summary; exit "$rc"; fi
}

# Checks' results by their inputs, the way Bazel caches test results: a check that passed is not
# run again while every input is the same - each file of the tree (tracked, and untracked but not
# ignored), the virtualenvs' pins and interpreters, the test-host image, the llama.cpp roots made
# from Debian's packages, the Docker daemon and kernel. A change to any file runs every check
# again. A fresh clone (CI) has no results. Every input is made before the key is computed: one
# that a check made later would change the key between the first run and the second.
RESULTS=.work/test-results
INPUTS=""

# The checks (lint, sanity, unit tests) read the tree and the virtualenvs only: `inputs_key checks` leaves the
# test-host image, the roots and the daemon out, so they start before those are made (at a lower priority, on the
# cores the roots' debootstrap leaves idle). Each phase is recorded under the key it was looked up with (KEY_OF).
declare -A KEY_OF=()
inputs_key() {  # inputs_key [checks]: one key for the inputs above; empty outside a git checkout (no cache then)
  local index
  [[ ${GPUSERVE_TEST_FRESH:-0} == 1 ]] && { echo "GPUSERVE_TEST_FRESH=1: every check runs"; return 0; }
  git rev-parse --git-dir >/dev/null 2>&1 || { echo "not a git checkout: every check runs"; return 0; }
  index=$(mktemp)
  cp "$(git rev-parse --git-path index)" "$index"  # a copy: the files unchanged since are not read again
  INPUTS=$({ GIT_INDEX_FILE=$index git add -A . && GIT_INDEX_FILE=$index git write-tree
             cat .venv/.stamp .venv-latest/.stamp 2>/dev/null
             [[ ${1:-} == checks ]] || { echo "${GPUSERVE_TESTHOST_IMAGE:-}"; llamacpp_roots; dockerd --version; }
             uname -r; } | sha256sum | cut -c1-16)
  rm -f "$index"
  mkdir -p "$RESULTS"
  echo "inputs${1:+ of the $1} $INPUTS"
}

record_file() {  # record_file NAME [KEY]: where NAME's pass on these inputs is recorded
  echo "$RESULTS/$(printf '%s %s' "${2:-$INPUTS}" "$1" | sha256sum | cut -c1-16)"
}

record_pass() {  # record_pass NAME SECONDS: under the key NAME was looked up with
  local key=${KEY_OF[$1]:-$INPUTS}
  [[ -n $key ]] || return 0
  printf 'passed %s in %ss\n' "$(date -u +%Y-%m-%dT%H:%MZ)" "$2" > "$(record_file "$1" "$key")"
}

cached() {  # cached NAME: true, with NAME's summary line, when it passed on these inputs
  local record before
  [[ -n $INPUTS ]] || return 1
  KEY_OF[$1]=$INPUTS
  record=$(record_file "$1")
  [[ -f $record ]] || return 1
  before=$(cat "$record")
  echo "=== ${1}: ${before} on these inputs, not run again"
  PHASES+=("$(printf '%-52s %4ss  %s' "$1" 0 "cached (${before})")")
}

check_phase() {  # check_phase NAME COMMAND...: a phase, unless it passed on these inputs
  cached "$1" || phase "$@"
}

# Streams in the background, each its phases one after the other, each phase its own log and time,
# collected by join_background: `molecule` (molecule's scenarios, then a share of the playbook
# tests) and `checks` (lint, the collection's build, sanity and the unit tests, one after the
# other). Their hosts wait on containers and Ansible's polling while the foreground waits on
# engines, so on 2 cores the streams together take less than one after the other; the shares are
# sized so that the playbook streams end near the same time. They share the daemon (and the
# llama.cpp root, written by rename), never a port or a container name: the playbook tests of each
# stream use ports the other's do not.
declare -A MOLECULE=(
  [default]="molecule default (1 container host: site.yml, verify, bench, stop), beside"
  [preflight]="molecule preflight (2 container hosts), beside"
)
declare -A BG_PID=() BG_DIR=()
# shellcheck disable=SC2034  # read through the namerefs below (local -n)
BG_NAMES_molecule=() BG_CMDS_molecule=() BG_NAMES_checks=() BG_CMDS_checks=()

queue_background() {  # queue_background STREAM NAME COMMAND...: queued unless it passed on these inputs
  # shellcheck disable=SC2178  # namerefs to the stream's arrays
  local -n names=BG_NAMES_$1 cmds=BG_CMDS_$1
  shift
  cached "$1" && return 0
  names+=("$1")
  shift
  cmds+=("$(printf '%q ' "$@")")
}

start_background() {  # start_background STREAM [NICENESS]: its phases, one after the other, in the background
  # shellcheck disable=SC2178  # namerefs to the stream's arrays
  local -n names=BG_NAMES_$1 cmds=BG_CMDS_$1
  local dir listed niceness=${2:-0}
  [[ ${#names[@]} -gt 0 ]] || return 0
  dir=$(mktemp -d)
  BG_DIR[$1]=$dir
  (
    renice -n "$niceness" -p "$BASHPID" >/dev/null
    # Each phase runs even after one failed: one CI run names every failure, not the first one only.
    first_rc=0
    for i in "${!names[@]}"; do
      start=$SECONDS rc=0
      children_cpu
      cpu=$CPU_NOW
      eval "${cmds[$i]}" > "$dir/$i.log" 2>&1 || rc=$?
      children_cpu
      echo "$rc $((SECONDS - start)) $((CPU_NOW - cpu))" > "$dir/$i.rc"
      [[ $first_rc != 0 ]] || first_rc=$rc
    done
    children_cpu
    echo "$CPU_NOW" > "$dir/cpu"  # the stream's whole CPU, for run_phase (above)
    exit "$first_rc"
  ) &
  BG_PID[$1]=$!
  listed=$(printf '%s; ' "${names[@]}")
  echo "=== started in the background ($1): ${listed%; }"
}

join_background() {  # join_background STREAM: wait for it; print its logs and its phase lines; its rc
  # shellcheck disable=SC2178  # a nameref to the stream's array
  local -n names=BG_NAMES_$1
  local rc=0 i code secs cpu dir=${BG_DIR[$1]:-}
  [[ -n ${BG_PID[$1]:-} ]] || return 0
  wait "${BG_PID[$1]}" || rc=$?
  unset "BG_PID[$1]"
  for i in "${!names[@]}"; do
    [[ -f $dir/$i.rc ]] || continue
    echo "=== ${names[$i]} (ran in the background)"
    cat "$dir/$i.log"
    read -r code secs cpu < "$dir/$i.rc"
    [[ $code == 0 ]] || recap "${names[$i]}" "$dir/$i.log"
    measured_lines "$dir/$i.log"
    ended "${names[$i]}" "$secs" "$code" "$cpu"
  done
  rm -rf "$dir"
  return "$rc"
}

kill_tree() {  # kill_tree PID...: the processes and everything they started
  local pids=("$@") all=() next=()
  while [[ ${#pids[@]} -gt 0 ]]; do
    all+=("${pids[@]}")
    mapfile -t next < <(pgrep -P "$(IFS=,; echo "${pids[*]}")" || true)
    pids=("${next[@]}")
  done
  kill "${all[@]}" 2>/dev/null || true
}

# A failed run's tail names what failed: the lines of a failed phase's log that say which test and
# why (pytest's short summary and assertion lines, molecule's failed task, ansible-test's ERROR: lines),
# printed again before the phase lines - the log itself may be thousands of lines above.
RECAP=$(mktemp)
plain_log() {  # plain_log LOG: without colours and without molecule's box (its lines start "  │ ")
  sed -E 's/\x1b\[[0-9;]*m//g; s/^ *│ ?//' "$1"
}
recap() {  # recap NAME LOG: what NAME's log says of its failure, kept for the summary
  local lines
  lines=$(plain_log "$2" | grep -E '^(FAILED|ERROR) |^ERROR: |^E  |pytest collected no tests|^fatal: |^failed: |=== molecule .* failed' \
    | cut -c1-400 | tail -n 60) || true
  { echo "--- ${1}"
    # A phase whose failure has none of those forms (a script's own message, ansible-lint's rules): its last lines.
    if [[ -n $lines ]]; then echo "$lines"; else plain_log "$2" | tail -n 15 | cut -c1-400; fi
    # A molecule play ends at its first failure not rescued: the last failed task, with its message.
    if grep -q '^=== molecule .* failed' "$2"; then
      plain_log "$2" | awk '/^TASK \[/ {task = $0} /^(fatal|failed): / {n = NR; head = task; body = ""}
        n && NR >= n && NR < n + 40 {body = body $0 "\n"} END {if (n) printf "the last failed task: %s\n%s", head, body}' \
        | cut -c1-3000 || true
    fi; } >> "$RECAP"
}

MEASURED=$(mktemp)
measured_lines() {  # measured_lines LOG: the figures the tests measured (conftest.measured), kept for the summary
  awk '/^=+ what the tests measured =+$/ {on=1; next} on && /^=+ .* =+$/ {on=0} on' "$1" | cut -c1-400 >> "$MEASURED" || true
}

logged() {  # logged LOG COMMAND...: its output shown and kept in LOG; its rc (pipefail)
  local log=$1
  shift
  "$@" 2>&1 | tee "$log"
}

summary() {
  if [[ -s $MEASURED ]]; then echo "=== what the tests measured (again, from the playbook tests' logs)"; cat "$MEASURED"; fi
  if [[ -s $RECAP ]]; then echo "=== what failed (again, from each failed phase's log)"; cat "$RECAP"; fi
  echo "=== phases (wall, and the CPU of each phase's own processes)"
  printf '%s\n' "${PHASES[@]}"
  echo "total $((SECONDS - T0))s; the machine's CPU busy meanwhile $(($(busy_cpu) - BUSY0))s of $(nproc) cores"
}

find_python() {  # find_python 3.12: an interpreter of that version, from PATH or pyenv
  local v=$1 p
  for p in "$(command -v "python$v" || true)" /root/.pyenv/versions/"$v".*/bin/python"$v" \
           "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$v".*/bin/python"$v"; do
    [[ -n $p && -x $p ]] && "$p" -c 'import venv' 2>/dev/null && { echo "$p"; return 0; }
  done
  return 1
}

run_pytest() {  # run_pytest VENV PATHS...: pytest's exit 5 (no tests collected) is a failure too
  local venv=$1 rc=0
  shift
  "$venv/bin/python" -m pytest -p no:cacheprovider -q "$@" || rc=$?
  if [[ $rc == 5 ]]; then echo "pytest collected no tests: that is a failure"; fi
  return "$rc"
}

unit_touching_ansible() {  # unit_touching_ansible VENV: the unit test files that touch Ansible's code; the others
  # answer the same under any ansible-core and run once, under the newest (Python 3.12, the GPU hosts' Python; the
  # Debian test hosts run the host-side code under 3.11 in the playbook tests): tests/core_touch.py
  GPUSERVE_UNIT_TOUCHING_ANSIBLE=1 run_pytest "$1" tests/unit
}

debian_packages() {  # docker.io, debootstrap, shellcheck, docker-registry, rsync, gpg from Debian's packages, when missing
  local missing=()
  command -v dockerd >/dev/null || missing+=(docker.io)
  command -v debootstrap >/dev/null || missing+=(debootstrap)
  command -v shellcheck >/dev/null || missing+=(shellcheck)
  command -v docker-registry >/dev/null || missing+=(docker-registry)
  command -v rsync >/dev/null || missing+=(rsync)  # the weights stage's fleet copy, between local test hosts
  command -v gpg >/dev/null || missing+=(gpg)  # signs the apt repository of the host stage's test
  [[ ${#missing[@]} == 0 ]] && { echo "docker.io, debootstrap, shellcheck, docker-registry, rsync and gpg present"; return 0; }
  [[ $(id -u) == 0 ]] || { echo "need root to apt-get install ${missing[*]}" >&2; return 1; }
  DEBIAN_FRONTEND=noninteractive apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
}

start_testbed() {  # the test bed's own Docker daemon, stopped when this script exits
  local line
  line=$(tests/testbed/dockerd.sh start) || return 1
  export GPUSERVE_TEST_DOCKER_HOST=${line#DOCKER_HOST=}
  export GPUSERVE_TEST_DOCKER_SOCKET=${GPUSERVE_TEST_DOCKER_HOST#unix://}
  # The llama.cpp root from Debian's packages is kept between runs, as a workstation keeps it.
  export GPUSERVE_TEST_IMAGE_CACHE=$PWD/.work/images-debian
  # Background phases (start_background) stop too: their hosts live on this daemon.
  trap '{ [[ ${#BG_PID[@]} == 0 ]] || kill_tree "${BG_PID[@]}"; } || true; rm -rf "$CPU_TIMES"; tests/testbed/dockerd.sh stop' EXIT
  echo "test bed daemon at $GPUSERVE_TEST_DOCKER_HOST"
}

# The llama.cpp root from Debian's packages (debian_rootfs: sid moves, so the package version names
# the tarball) is made here, before the inputs key, rather than by the first test that needs it: the
# key names the roots, and a root written after the key was computed made the second run after a
# clone rerun every check. The image role's own defaults give the packages, suite and mirror.
llamacpp_roots() {  # the roots the tests' image and router stages can take (each takes its newest)
  (cd "$GPUSERVE_TEST_IMAGE_CACHE" 2>/dev/null && ls llama.cpp-*.tar vllm-router-root-*.tar gpuserve-front-*.tar 2>/dev/null) || true
}

debian_root() {  # debian_root NAME VERSION_OF PACKAGES_VARIABLE DEFAULTS_FILE: made unless one is kept
  local roots
  roots=$(cd "$GPUSERVE_TEST_IMAGE_CACHE" 2>/dev/null && ls "$1"-*.tar 2>/dev/null) || true
  [[ -z $roots ]] || { echo "kept in $GPUSERVE_TEST_IMAGE_CACHE: $roots"; return 0; }
  .venv/bin/ansible localhost -c local -i localhost, -e "ansible_python_interpreter=$PWD/.venv/bin/python" \
    -e @roles/image/defaults/main.yml -e "@$4" -m gpuserve.llm.debian_rootfs -a '{"name": "'"$1"'",
      "version_of": "'"$2"'", "packages": "{{ '"$3"' }}", "suite": "{{ image_debian_suite }}",
      "mirror": "{{ image_debian_mirror }}", "cache_dir": "'"$GPUSERVE_TEST_IMAGE_CACHE"'"}'
}

in_venv() {  # in_venv COMMAND...: with .venv's tools first on PATH and the test bed's daemon as DOCKER_HOST
  env PATH="$PWD/.venv/bin:$PATH" DOCKER_HOST="$GPUSERVE_TEST_DOCKER_HOST" "$@"
}

# Where the playbook time goes: every task's wall time (tests/callback_plugins/task_times.py), a file a
# stream, summed at the end by tests/task_times.py.
TASK_TIMES=$PWD/.work/task-times
rm -rf "$TASK_TIMES" && mkdir -p "$TASK_TIMES"
task_timed() {  # task_timed NAME COMMAND...: its playbooks' task times into $TASK_TIMES/NAME.jsonl
  local name=$1
  shift
  ( export GPUSERVE_TASK_TIMES="$TASK_TIMES/$name.jsonl" ANSIBLE_CALLBACK_PLUGINS="$PWD/tests/callback_plugins" \
      ANSIBLE_CALLBACKS_ENABLED=task_times
    "$@" )
}

phase "Debian packages (docker.io, debootstrap, shellcheck, docker-registry, rsync, gpg)" debian_packages
phase "test bed Docker daemon" start_testbed

PY311=$(find_python 3.11 || command -v python3)
PY312=$(find_python 3.12 || true)
if [[ -z $PY312 && ${GPUSERVE_SKIP_LATEST:-0} != 1 ]]; then
  echo "no Python 3.12 found for the newest ansible-core; set GPUSERVE_SKIP_LATEST=1 to go on without" >&2
  exit 1
fi
[[ -n $PY312 ]] || echo "no Python 3.12: the newest ansible-core is not tested (GPUSERVE_SKIP_LATEST=1)"
# The test-host image's tag goes through a file: the phase runs in a subshell.
TESTHOST_TAG=$(mktemp)
testhost_image() {
  DOCKER_HOST=$GPUSERVE_TEST_DOCKER_HOST tests/testbed/images.sh > "$TESTHOST_TAG" || return 1
  cat "$TESTHOST_TAG"
}
LATEST=()  # the phase for the newest ansible-core, where Python 3.12 is
[[ -z $PY312 ]] || LATEST=(-- "venv .venv-latest ($("$PY312" -V 2>&1), newest ansible-core)"
                           scripts/venv.sh .venv-latest "$PY312" requirements-test.txt)
together "venv .venv ($("$PY311" -V 2>&1), ansible-core 2.19)" \
    scripts/venv.sh .venv "$PY311" requirements-test.txt requirements-lint.txt \
  -- "test-host image (debootstrap, cached by tag)" testhost_image "${LATEST[@]}"
GPUSERVE_TESTHOST_IMAGE=$(cat "$TESTHOST_TAG")
export GPUSERVE_TESTHOST_IMAGE
rm -f "$TESTHOST_TAG"
# The checks, one after the other and at a lower priority: they fill the cores the roots' debootstrap and the
# playbook tests leave idle while their hosts and engines wait, rather than holding both cores, and give way to
# the tests' engines (timed: health gates, the drain).
# pylint once, under the newest ansible-test when there is one: its verdict on the collection's Python does not hang on
# the ansible-core under test, and it was 59 of the 2.19 sanity run's ~65 s of CPU. Every other sanity test (compile
# and import on Python 3.11, validate-modules and ansible-doc against 2.19's own specs) runs under both.
SANITY_219_SKIP=()
[[ -z ${PY312:-} ]] || SANITY_219_SKIP=(--skip-test pylint)
lane_lint() {
  in_venv ansible-lint -q && tests/testbed/package.sh .venv && tests/testbed/sanity.sh .venv "${SANITY_219_SKIP[@]}"
}
if [[ ${GPUSERVE_TEST_SETUP_ONLY:-0} != 1 ]]; then
  inputs_key checks
  queue_background checks "ansible-lint, collection build and install, ansible-test sanity 2.19${PY312:+ (pylint under the newest)}, beside" lane_lint
  if [[ -n $PY312 ]]; then
    queue_background checks "pytest unit, ansible-core 2.19 (the files touching Ansible), beside" \
      unit_touching_ansible .venv
    queue_background checks "ansible-test sanity, newest ansible-core, beside" tests/testbed/sanity.sh .venv-latest
    queue_background checks "pytest unit, newest ansible-core, beside" run_pytest .venv-latest tests/unit
  else
    queue_background checks "pytest unit, ansible-core 2.19, beside" run_pytest .venv tests/unit
  fi
  start_background checks 10
fi
phase "test wheelhouse (requirements-host.txt + NVML double)" tests/testbed/wheelhouse.sh .venv/bin/python
together "llama.cpp root (debootstrap from Debian's packages, kept by version)" \
    debian_root llama.cpp llama.cpp-tools image_debian_packages roles/image/defaults/main.yml \
  -- "router root (debootstrap: python3, nginx; kept by version)" \
    debian_root vllm-router-root nginx router_debian_packages roles/router/defaults/main.yml \
  -- "front root (debootstrap: nginx, its JavaScript module; kept by version)" \
    debian_root gpuserve-front nginx front_debian_packages roles/front/defaults/main.yml
inputs_key
if [[ ${GPUSERVE_TEST_SETUP_ONLY:-0} == 1 ]]; then  # a developer's machine made ready, no check run
  echo "set up; to run a test file by hand: these, then .venv/bin/python -m pytest FILE (it starts the test bed's daemon)"
  printf 'export %s\n' "GPUSERVE_TEST_IMAGE_CACHE=$GPUSERVE_TEST_IMAGE_CACHE" \
    "GPUSERVE_TESTHOST_IMAGE=$GPUSERVE_TESTHOST_IMAGE"
  summary
  exit 0
fi

check_phase "yamllint" .venv/bin/yamllint -s .
check_phase "shellcheck" shellcheck tests/run.sh tests/testbed/*.sh tests/gpu/*.sh tests/gpu/*/*.sh scripts/*.sh .ci/run
# The playbook tests in two streams (the newest ansible-core, where Python 3.12 is): these files in the
# background after molecule's scenarios, every other file in the foreground (the SSH fleet test first, the longest),
# but PLAYBOOKS_EITHER (below); the checks in a third.
PLAYBOOKS_BESIDE=(tests/integration/test_autotune_play.py tests/integration/test_service_play.py
                  tests/integration/test_image_play.py tests/integration/test_weights_hub.py)
# Files either stream runs, each taken once by the first stream done with its own (longest first): the SSH fleet
# test, the foreground's, took 1,278 to 1,479 s in clean clones a day apart, so a fixed split left one stream
# running alone for 60 to 220 s at the end. Each of these runs safely beside any other file (ports of its own).
PLAYBOOKS_EITHER=(tests/integration/test_preflight_play.py tests/integration/test_main_command.py
                  tests/integration/test_weights_play.py)
EITHER_TAKEN=$(mktemp -d)
take_either() {  # take_either VENV: each file of PLAYBOOKS_EITHER that no stream took yet (mkdir is the lock); rc: the
  # first failure's
  local i rc=0 code took=0
  for i in "${!PLAYBOOKS_EITHER[@]}"; do
    mkdir "$EITHER_TAKEN/$i" 2>/dev/null || continue
    took=$((took + 1))
    echo "=== taken by this stream at $(date -u +%T): ${PLAYBOOKS_EITHER[$i]}"
    code=0
    run_pytest "$1" --durations=10 "${PLAYBOOKS_EITHER[$i]}" || code=$?
    echo "=== ${PLAYBOOKS_EITHER[$i]} ended at $(date -u +%T), rc $code"
    [[ $rc != 0 ]] || rc=$code
  done
  [[ $took -gt 0 ]] || echo "=== none left: the other stream took every one"
  return "$rc"
}
PLAYBOOK_VENV=.venv
PLAYBOOK_CORE="ansible-core 2.19"
[[ ! -x .venv-latest/bin/python ]] || PLAYBOOK_VENV=.venv-latest PLAYBOOK_CORE="newest ansible-core"
molecule_scenario() {  # molecule_scenario NAME: molecule test -s NAME; on failure, what the engine and front
  # containers it left on the test bed's daemon say (restarts, state, their logs' end), before the daemon stops:
  # molecule's destroy removes its hosts, not them, and its ephemeral folder with the logs stop.yml kept.
  in_venv molecule test -s "$1" && return 0
  local rc=$? c
  echo "=== molecule $1 failed (rc $rc): the gpuserve containers left on the test bed's daemon"
  for c in $(in_venv docker ps -a --format '{{.Names}}' | grep '^gpuserve-mol' || true); do
    in_venv docker inspect -f '--- {{.Name}}: {{.State.Status}}, restarts {{.RestartCount}}, exit {{.State.ExitCode}}, ''started {{.State.StartedAt}}, finished {{.State.FinishedAt}}, OOM {{.State.OOMKilled}}' "$c"
    in_venv docker logs --tail 40 "$c" 2>&1 | cut -c1-300
  done
  return "$rc"
}
for s in preflight default; do
  queue_background molecule "${MOLECULE[$s]}" task_timed "molecule-$s" molecule_scenario "$s"
done
queue_background molecule "pytest playbooks (${#PLAYBOOKS_BESIDE[@]} files), $PLAYBOOK_CORE, beside" \
  task_timed beside run_pytest "$PLAYBOOK_VENV" --durations=10 "${PLAYBOOKS_BESIDE[@]}"
EITHER_NAME="pytest playbooks, the files either stream runs: those left"
queue_background molecule "$EITHER_NAME, beside" task_timed beside-either take_either "$PLAYBOOK_VENV"
start_background molecule
declare -A NOT_FRONT=()
for f in "${PLAYBOOKS_BESIDE[@]}" "${PLAYBOOKS_EITHER[@]}"; do NOT_FRONT[$f]=1; done
FOREGROUND=()  # every other file (a new one runs here)
for f in tests/integration/test_*.py; do
  [[ -n ${NOT_FRONT[$f]:-} ]] || FOREGROUND+=("$f")
done
# Every stream is waited for and printed, a failed one or not; the first failure's rc is the run's.
RC=0
FG_NAME="pytest playbooks, $PLAYBOOK_CORE"
FG_LOG=$(mktemp)
cached "$FG_NAME" || run_phase "$FG_NAME" logged "$FG_LOG" task_timed foreground run_pytest "$PLAYBOOK_VENV" \
  --durations=25 "${FOREGROUND[@]}" || { RC=$?; recap "$FG_NAME" "$FG_LOG"; }
measured_lines "$FG_LOG"
cached "$EITHER_NAME" || run_phase "$EITHER_NAME" logged "$FG_LOG" task_timed foreground-either take_either \
  "$PLAYBOOK_VENV" || { code=$?; [[ $RC != 0 ]] || RC=$code; recap "$EITHER_NAME" "$FG_LOG"; }
measured_lines "$FG_LOG"
for stream in checks molecule; do
  join_background "$stream" || { code=$?; [[ $RC != 0 ]] || RC=$code; }
done
echo "=== where the playbook time went: the tasks with the most wall time, every stream"
.venv/bin/python tests/task_times.py "$TASK_TIMES"/*.jsonl --top 40 || true
summary
[[ $RC == 0 ]] || exit "$RC"
