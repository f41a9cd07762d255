#!/usr/bin/env bash
# Build the self-contained workspace agent executable (PyInstaller onefile) into a cache outside the repository:
#   $PKO_BIN_DIR/pko-agent-<version>-<source hash>/pko-agent, plus the symlink $PKO_BIN_DIR/pko-agent.
# The source hash covers src/pko and pyproject.toml, so a changed agent is rebuilt and an unchanged one is reused.
# Prints the executable's path as its last line. Needs the dev venv with pyinstaller 6.22 (PYTHON overrides it).
# What goes in follows the imports of `pko agent`: the agent, the shared protocol and the layers below them; the
# operator's controllers are never imported by the agent (an import-linter contract), so nothing pko needs excluding.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
BIN_DIR="${PKO_BIN_DIR:-$HOME/.cache/pko/bin}"

"$PYTHON" -c 'import PyInstaller' 2>/dev/null || {
  echo "pyinstaller is not installed in $PYTHON: pip install 'pyinstaller==6.22.*'" >&2
  exit 1
}

VERSION="$("$PYTHON" -c 'import pko; print(pko.__version__)')"
HASH="$(cd "$ROOT" && find src/pko pyproject.toml tools/agent-bin -type f \( -name '*.py' -o -name '*.pyi' \
          -o -name '*.proto' -o -name '*.toml' -o -name '*.sh' \) -print0 | LC_ALL=C sort -z \
        | xargs -0 sha256sum | sha256sum | cut -c1-12)"
OUT="$BIN_DIR/pko-agent-$VERSION-$HASH"

if [[ ! -x "$OUT/pko-agent" ]]; then
  WORK="$(mktemp -d "${TMPDIR:-/tmp}/pko-agent-build.XXXXXX")"
  trap 'rm -rf "$WORK"' EXIT
  echo "building the pko agent executable into $OUT" >&2
  "$PYTHON" -m PyInstaller --noconfirm --clean --onefile --name pko-agent --log-level WARN \
    --paths "$ROOT/src" \
    --collect-submodules pko.agent --collect-submodules pko.sources \
    --exclude-module pulumi --exclude-module grpc_tools --exclude-module pytest --exclude-module tkinter \
    --distpath "$WORK/dist" --workpath "$WORK/build" --specpath "$WORK" \
    "$ROOT/tools/agent-bin/pko_agent_main.py" >&2
  mkdir -p "$OUT.partial"
  cp "$WORK/dist/pko-agent" "$OUT.partial/pko-agent"
  chmod 755 "$OUT.partial/pko-agent"
  rm -rf "$OUT"
  mv "$OUT.partial" "$OUT"
fi
# Older builds of this version are superseded: keep the cache from growing with every edit.
for old in "$BIN_DIR"/pko-agent-"$VERSION"-*; do
  [[ "$old" != "$OUT" && -d "$old" ]] && rm -rf "$old"
done
ln -sfn "$OUT/pko-agent" "$BIN_DIR/pko-agent"
echo "$OUT/pko-agent"
