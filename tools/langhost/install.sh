#!/usr/bin/env bash
# Installs pko's Python language host for the Pulumi CLI (see the docstring of ./pulumi-language-python for why we
# have our own) together with the SDK's program runner `pulumi-language-python-exec`, which must sit next to it.
#
# Usage: tools/langhost/install.sh BIN_DIR PULUMI_VERSION   (tools/build.sh calls it after building the CLI)
# Copies both into BIN_DIR/python-host-PULUMI_VERSION/ on every run (cheap, so always fresh) and symlinks them into
# BIN_DIR. The runner comes from the github.com/pulumi/pulumi/sdk/v3 module that tools/pulumi pins.
set -euo pipefail

BIN_DIR=${1:?usage: $0 BIN_DIR PULUMI_VERSION}
PULUMI_VERSION=${2:?usage: $0 BIN_DIR PULUMI_VERSION}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

sdk=$(cd "$here/../pulumi" && GOTOOLCHAIN=local GOFLAGS=-mod=mod GONOSUMDB=${GONOSUMDB:-github.com/pulumi} \
  go list -m -f '{{.Dir}}' github.com/pulumi/pulumi/sdk/v3)
exec_script="$sdk/python/cmd/pulumi-language-python-exec"
[ -f "$exec_script" ] || { echo "install.sh: $exec_script not found" >&2; exit 1; }

dest="$BIN_DIR/python-host-$PULUMI_VERSION"
mkdir -p "$dest"
# install(1) replaces the files (new inodes), so a host that is running right now keeps its old copy.
install -m 755 "$here/pulumi-language-python" "$dest/pulumi-language-python"
install -m 755 "$exec_script" "$dest/pulumi-language-python-exec"
for f in pulumi-language-python pulumi-language-python-exec; do
  ln -sfn "$dest/$f" "$BIN_DIR/$f"
done
printf '[tools %s] python language host: installed in %s\n' "$(date +%H:%M:%S)" "$dest" >&2
