#!/usr/bin/env bash
# `make test`'s runner: every tier, in three streams at once, so both cores work while tiers wait on pods, leases
# and the Pulumi CLI.
#
#   cluster: tests/cluster tests/interop   (the real single-node cluster, one boot shared by both tiers)
#   e2e:     tests/e2e tests/chaos         (a local control plane)
#   local:   tests/unit tests/deploy tests/integration   (another local control plane), then a few e2e files
#            (`moved` below) and the interop file that needs no cluster
#
# The streams share nothing: the cluster tier owns the machine's cluster lock, its node and its network; each
# local stream is its own pytest session with its own etcd + kube-apiserver on free loopback ports, git server and
# Pulumi homes, and runs agents as local processes. Why three: one tier alone keeps this 2-core machine only about
# 45% busy (it mostly waits), so the wall time is the longest stream, not the sum; three keep it about 90% busy
# (process accounting in a full run: 1.82 cores).
# The chaos tier, whose faults race timers, runs last in its stream, when the local stream has ended and the
# machine is less loaded (measured: all three streams at once keep it at 95-100%). PKO_TEST_SERIAL=1 runs the
# streams one after the other instead.
#
# The last stream prints as it goes; the others write to logs printed when all are done. Each ends with its own
# slowest steps and cost table per tier; then, when run as root, a table of the CPU every command of the run used
# (process accounting: pko.testing.cpuacct); the last line sums every stream: "N passed, N failed, N skipped".
#
# Usage: tools/run-tiers.sh PYTHON [PYTEST ARGS...]
set -uo pipefail

py=${1:?usage: run-tiers.sh PYTHON [PYTEST ARGS...]}
shift
out=$(mktemp -d "${TMPDIR:-/tmp}/pko-tiers.XXXXXX")
# Process accounting (root only) for the CPU table the run ends with (pko.testing.cpuacct); always turned off again.
trap '"$py" -m pko.testing.cpuacct stop; rm -rf "$out"; rmdir "$cgroups"/pko-tests-*-$$ 2>/dev/null' EXIT
# Each stream in a cgroup of its own (root only), for the table of CPU per test each stream ends with
# (pko.testing.testcpu): v1's cpuacct hierarchy, else v2's; none when neither can be written.
cgroups=""
for base in /sys/fs/cgroup/cpuacct /sys/fs/cgroup; do
  if [ -w "$base" ] && { [ -f "$base/cpuacct.usage" ] || [ -f "$base/cgroup.controllers" ]; }; then
    cgroups=$base; break
  fi
done
names=(cluster e2e local)
declare -A tiers=(
  [cluster]="tests/cluster tests/interop"
  [e2e]="tests/e2e tests/chaos"
  [local]="tests/unit tests/deploy tests/integration"
)
# e2e tests that run at the end of the local stream instead, to even out the streams' wall time (the local stream
# ends about a quarter of an hour before the others without them; with them, a few minutes before); the e2e stream
# skips them.
moved=(tests/e2e/test_shards.py tests/e2e/test_stack_restart.py tests/e2e/test_stack_git_auth.py tests/e2e/test_stack_flux.py
       tests/e2e/test_stack_drift.py tests/e2e/test_stack_failures.py tests/e2e/test_stack_lifecycle.py
       tests/e2e/test_kubectl_krew.py tests/e2e/test_stack_ttl.py)
for file in "${moved[@]}"; do
  tiers[e2e]+=" --ignore=$file"
  tiers[local]+=" $file"
done
# The interop files that need no cluster (the Go agent as the local runtime's agent, the benchmark's local fleet)
# run in the local stream too: the cluster stream is the longest.
for file in tests/interop/test_01_local_go_agent.py tests/interop/test_02_local_runtime_bench.py; do
  tiers[cluster]+=" --ignore=$file"
  tiers[local]+=" $file"
done

for dir in tests/*/; do  # a new tier must be named in a stream, or make test would silently skip it
  dir=${dir%/}
  [[ " ${tiers[*]} " == *" $dir "* ]] || { echo "[make test] $dir is in no stream" >&2; exit 2; }
done

run() {  # run NAME : one pytest session over the stream's tiers, its JUnit report in $out/NAME.xml
  local name=$1 metered="" group
  if [ -n "$cgroups" ]; then
    group=$cgroups/pko-tests-$name-$$
    if mkdir -p "$group" 2>/dev/null && echo "$BASHPID" >"$group/cgroup.procs" 2>/dev/null; then
      metered=$group
      # the real cluster's pods live in the cgroups its kubelet and containerd make, not in the stream's
      [ "$name" = cluster ] && metered+=":$cgroups/kubepods:$cgroups/k8s.io"
    fi
  fi
  # shellcheck disable=SC2086  # the tier list is words
  PKO_TEST_CPU_CGROUPS=$metered "$py" -m pytest ${tiers[$name]} --junitxml="$out/$name.xml" -ra --durations=25 \
    -p pko.testing.testcpu "${extra[@]}"
}
extra=("$@")
# The Go processes the test bed starts (the Pulumi CLI, its language hosts and providers in the local runtime,
# etcd, kube-apiserver, the real cluster's node) collect their garbage less often: the Pulumi CLI spends much of
# each short run in its start-up allocations, and GOGC=400 took 18% off the CPU of a stack init + config set + up
# + stack output (median of 8 interleaved runs, 2026-11-28), for a few MB more per process. Workspace pods do not
# inherit it, and pko itself sets nothing: it is the test bed's, not the product's (set GOGC to override).
export GOGC=${GOGC:-400}

# pko's own modules compiled once, before the run: an environment that sets PYTHONDONTWRITEBYTECODE (CI's does) has
# every process of the run (about a thousand local agents, operators, CLI commands) compile them again from source,
# about 0.08 s of CPU each; what pip installed is compiled already.
"$py" -m compileall -q src bench >/dev/null

"$py" -m pko.testing.cpuacct start "$out/pacct"
start=$SECONDS
declare -A status pids
# The lint command (`make test` passes `make lint`): beside the streams, so the cluster stream, the longest, does not
# wait the minute lint takes; with PKO_TEST_SERIAL, first, and a failure stops the run there.
lint_status=0 lint_pid=""
if [ -n "${PKO_LINT:-}" ]; then
  if [ -n "${PKO_TEST_SERIAL:-}" ]; then
    bash -c "$PKO_LINT" || exit 1
  else
    bash -c "$PKO_LINT" >"$out/lint.log" 2>&1 &
    lint_pid=$!
  fi
fi
if [ -n "${PKO_TEST_SERIAL:-}" ]; then
  for name in "${names[@]}"; do
    run "$name"; status[$name]=$?
  done
else
  last=${names[-1]}
  for name in "${names[@]}"; do
    [ "$name" = "$last" ] && continue
    (started=$SECONDS; run "$name"; rc=$?
     printf '\n[make test] the %s stream took %dm%02ds\n' "$name" $(((SECONDS - started) / 60)) \
       $(((SECONDS - started) % 60)); exit "$rc") >"$out/$name.log" 2>&1 &
    pids[$name]=$!
  done
  (run "$last"); status[$last]=$?  # a subshell: the stream's cgroup is its own, not this script's
  printf '\n[make test] the %s stream took %dm%02ds\n' "$last" $(((SECONDS - start) / 60)) $(((SECONDS - start) % 60))
  for name in "${!pids[@]}"; do
    wait "${pids[$name]}"; status[$name]=$?
  done
  for name in "${names[@]}"; do
    [ "$name" = "$last" ] && continue
    printf '\n=============== the %s stream (%s), run beside the others ===============\n' "$name" "${tiers[$name]}"
    cat "$out/$name.log"
  done
fi
summary=""
failed_streams=0
if [ -n "$lint_pid" ]; then
  wait "$lint_pid"; lint_status=$?
  printf '\n=============== lint (%s), run beside the streams: exit %d ===============\n' "$PKO_LINT" "$lint_status"
  cat "$out/lint.log"
  summary+="lint exit $lint_status, "
  [ "$lint_status" -eq 0 ] || failed_streams=$((failed_streams + 1))
fi
for name in "${names[@]}"; do
  summary+="$name exit ${status[$name]}, "
  [ "${status[$name]}" -eq 0 ] || failed_streams=$((failed_streams + 1))
done
wall=$((SECONDS - start))
"$py" -m pko.testing.cpuacct stop
"$py" -m pko.testing.cpuacct report "$out/pacct" "$wall"
printf '\n[make test] every tier in %dm%02ds of wall time (%s)\n' \
  $((wall / 60)) $((wall % 60)) "${summary%, }"
reports=()
for name in "${names[@]}"; do reports+=("$out/$name.xml"); done
"$py" - "${reports[@]}" <<'EOF'
import sys
import xml.etree.ElementTree as ET

total = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
for path in sys.argv[1:]:
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        print(f"[make test] no report from {path.rsplit('/', 1)[-1]}: that stream did not finish")
        total["errors"] += 1
        continue
    for suite in root.iter("testsuite"):
        for key in total:
            total[key] += int(suite.get(key, 0))
failed = total["failures"] + total["errors"]
passed = total["tests"] - failed - total["skipped"]
print(f"{passed} passed, {failed} failed, {total['skipped']} skipped")
EOF
[ "$failed_streams" -eq 0 ]
