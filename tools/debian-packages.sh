#!/usr/bin/env bash
# Makes sure the Debian packages the test bed needs are installed (tools/build.sh runs it first, so both README
# commands do): git (test git servers), openssl (test PKI), OpenSSH (SSH git auth), runc and the CNI
# plugins (the single-node cluster), iptables and conntrack (kube-proxy and the egress guard), mmdebstrap and
# buildah (the test images), gcc with libc6-dev (the static pause binary) and tini (its static build goes into
# the images), make (the README commands themselves).
#
# Nothing missing: returns at once (one dpkg-query). Something missing: as root, installs it with apt-get; as
# another user, stops with the exact command to run as root.
set -euo pipefail

# Usage: debian-packages.sh [all|demo|demo-cluster]: `make demo` needs only openssl (the local control plane's
# certificates) and make; the rest is for the test servers and the single-node cluster.
case ${1:-all} in
  demo) packages=(openssl make) ;;
  *) packages=(
       git openssl openssh-server openssh-client make
       runc containernetworking-plugins iptables conntrack
       mmdebstrap buildah gcc libc6-dev tini
     ) ;;
esac

say() { printf '[tools] %s\n' "$*" >&2; }

if ! command -v dpkg-query >/dev/null; then
  say "WARNING: dpkg-query not found (not a Debian system?); make sure these packages or their equivalents are"
  say "installed, or the tests that need them fail: ${packages[*]}"
  exit 0
fi

# "ii" = wanted and installed. Unknown packages print nothing (and make dpkg-query exit 1), so read the names back.
installed=$(dpkg-query -W -f='${Package} ${db:Status-Abbrev}\n' "${packages[@]}" 2>/dev/null || true)
missing=()
for p in "${packages[@]}"; do
  grep -qx "$p ii *" <<<"$installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

install_cmd="apt-get install -y ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
  say "ERROR: the test bed needs Debian packages that are not installed: ${missing[*]}"
  say "Run as root, then re-run this command:"
  say "  apt-get update && $install_cmd"
  exit 1
fi
say "installing Debian packages: ${missing[*]}"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
