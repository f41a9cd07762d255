#!/usr/bin/env bash
# Build the self-contained workspace agent executable into a cache outside the repository:
#   $PKO_BIN_DIR/pko-agent-<version>-<source hash>/pko-agent, plus the symlink $PKO_BIN_DIR/pko-agent.
# The source hash (sources.py hash) covers what the agent is built from: the import closure of `pko agent` under
# src/pko, pyproject.toml and this directory. A changed agent is rebuilt and an unchanged one reused; an edit to code
# the agent never imports (the controllers, the test bed, the operator's command line) rebuilds nothing. Prints the
# executable's path as its last line. Needs the dev venv with pyinstaller 6.22 (PYTHON overrides it) and a C compiler
# that links statically (gcc and libc6-dev on Debian; CC overrides it).
# One file in three parts: launcher.c (static, runs in any Linux image), then PyInstaller's onedir tree of
# `pko agent` (pko-agent.spec) as an uncompressed archive, then a trailer (pack.py). The launcher unpacks the tree
# beside itself on the first run and only execs it afterwards, where a PyInstaller onefile would unpack ~60 MB on
# every run. What goes in the tree follows the imports of `pko agent`: the agent, the shared protocol and the layers
# below them; the operator's controllers are never imported by the agent (an import-linter contract).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
BIN_DIR="${PKO_BIN_DIR:-$HOME/.cache/pko/bin}"
CC="${CC:-cc}"

"$PYTHON" -c 'import PyInstaller' 2>/dev/null || {
  echo "pyinstaller is not installed in $PYTHON: pip install 'pyinstaller==6.22.*'" >&2
  exit 1
}

command -v "$CC" >/dev/null || {
  echo "no C compiler ($CC) for the agent's launcher: apt-get install gcc libc6-dev" >&2
  exit 1
}

# From the source tree, not an installed pko: the image's build venv holds only the dependencies.
VERSION="$(PYTHONPATH="$ROOT/src" "$PYTHON" -c 'import pko; print(pko.__version__)')"
HASH="$("$PYTHON" "$ROOT/tools/agent-bin/sources.py" hash "$ROOT")"
OUT="$BIN_DIR/pko-agent-$VERSION-$HASH"

if [[ ! -x "$OUT/pko-agent" ]]; then
  WORK="$(mktemp -d "${TMPDIR:-/tmp}/pko-agent-build.XXXXXX")"
  trap 'rm -rf "$WORK"' EXIT
  echo "building the pko agent executable into $OUT" >&2
  # pko from the source tree (the spec's collect_submodules imports its packages in a child interpreter): the
  # image's build venv has only the dependencies installed.
  PYTHONPATH="$ROOT/src${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" -m PyInstaller --noconfirm --clean --log-level WARN \
    --distpath "$WORK/dist" --workpath "$WORK/build" "$ROOT/tools/agent-bin/pko-agent.spec" >&2
  "$CC" -static -O2 -s -Wall -Wextra -Werror -o "$WORK/launcher" "$ROOT/tools/agent-bin/launcher.c" >&2
  mkdir -p "$OUT.partial"
  "$PYTHON" "$ROOT/tools/agent-bin/pack.py" "$WORK/launcher" "$WORK/dist/pko-agent" "$OUT.partial/pko-agent"
  rm -rf "$OUT"
  mv "$OUT.partial" "$OUT"
fi
# Older builds of this version are superseded: keep the cache from growing with every edit.
for old in "$BIN_DIR"/pko-agent-"$VERSION"-*; do
  [[ "$old" != "$OUT" && -d "$old" ]] && rm -rf "$old"
done
ln -sfn "$OUT/pko-agent" "$BIN_DIR/pko-agent"
echo "$OUT/pko-agent"
