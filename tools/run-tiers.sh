#!/usr/bin/env bash
# `make test`'s runner: every tier, in two streams at once, so the second core works while a tier waits.
#
#   stream 1: tests/cluster tests/interop   (the real single-node cluster, one boot shared by both tiers)
#   stream 2: tests/unit tests/deploy tests/integration tests/e2e tests/chaos   (local control planes)
#
# The streams share nothing: the cluster tier owns the machine's cluster lock, its node and its network; the local
# tiers start their own etcd + kube-apiserver on free loopback ports and run agents as local processes. Measured on
# a 2-core machine: both streams together took about 35 minutes of wall time, against about 57 minutes of tier
# time one after the other. PKO_TEST_SERIAL=1 runs them one after the other instead.
#
# Stream 2 prints as it goes; stream 1 writes to a log that is printed when both are done. Each ends with its own
# slowest steps and cost table per tier; the last line sums both: "N passed, N failed" (and skipped).
#
# Usage: tools/run-tiers.sh PYTHON [PYTEST ARGS...]
set -uo pipefail

py=${1:?usage: run-tiers.sh PYTHON [PYTEST ARGS...]}
shift
out=$(mktemp -d "${TMPDIR:-/tmp}/pko-tiers.XXXXXX")
trap 'rm -rf "$out"' EXIT
cluster_tiers=(tests/cluster tests/interop)
local_tiers=(tests/unit tests/deploy tests/integration tests/e2e tests/chaos)

for dir in tests/*/; do  # a new tier must be named in one stream, or make test would silently skip it
  dir=${dir%/}
  [[ " ${cluster_tiers[*]} ${local_tiers[*]} " == *" $dir "* ]] || { echo "[make test] $dir is in no stream" >&2; exit 2; }
done

run() {  # run NAME TIER... : one pytest session, its JUnit report in $out/NAME.xml
  local name=$1
  shift
  "$py" -m pytest "$@" --junitxml="$out/$name.xml" -ra --durations=25 "${extra[@]}"
}
extra=("$@")

start=$SECONDS
if [ -n "${PKO_TEST_SERIAL:-}" ]; then
  run local "${local_tiers[@]}"; local_status=$?
  run cluster "${cluster_tiers[@]}"; cluster_status=$?
else
  run cluster "${cluster_tiers[@]}" >"$out/cluster.log" 2>&1 &
  cluster_pid=$!
  run local "${local_tiers[@]}"; local_status=$?
  wait "$cluster_pid"; cluster_status=$?
  printf '\n=============== the cluster and interop tiers (run beside the others) ===============\n'
  cat "$out/cluster.log"
fi
printf '\n[make test] every tier in %dm%02ds of wall time (local tiers exit %d, cluster tiers exit %d)\n' \
  $(((SECONDS - start) / 60)) $(((SECONDS - start) % 60)) "$local_status" "$cluster_status"
"$py" - "$out/local.xml" "$out/cluster.xml" <<'EOF'
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
[ "$local_status" -eq 0 ] && [ "$cluster_status" -eq 0 ]
