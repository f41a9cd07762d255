#!/usr/bin/env bash
# Build the standalone `kubectl-pko` executable and its krew archive into a cache outside the repository:
#   $PKO_BIN_DIR/kubectl-pko-<version>-<source hash>/kubectl-pko
#   $PKO_BIN_DIR/kubectl-pko-<version>-<source hash>/kubectl-pko_v<version>_linux_amd64.tar.gz
# keyed like the agent (tools/agent-bin/sources.py --target kubectl-pko: the import closure of `pko.cli.ctl`,
# pyproject.toml and this directory), so an edit the ctl never imports rebuilds nothing. Prints that directory as
# its last line; `python -m pko.deploy.krew` writes the krew manifest for the archive. Needs the dev venv with
# pyinstaller 6.22 (PYTHON overrides it).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
BIN_DIR="${PKO_BIN_DIR:-$HOME/.cache/pko/bin}"

"$PYTHON" -c 'import PyInstaller' 2>/dev/null || {
  echo "pyinstaller is not installed in $PYTHON: pip install 'pyinstaller==6.22.*'" >&2
  exit 1
}

VERSION="$(PYTHONPATH="$ROOT/src" "$PYTHON" -c 'import pko; print(pko.__version__)')"
HASH="$("$PYTHON" "$ROOT/tools/agent-bin/sources.py" --target kubectl-pko hash "$ROOT")"
OUT="$BIN_DIR/kubectl-pko-$VERSION-$HASH"
ARCHIVE="kubectl-pko_v${VERSION}_linux_amd64.tar.gz"

if [[ ! -f "$OUT/$ARCHIVE" ]]; then
  WORK="$(mktemp -d "${TMPDIR:-/tmp}/kubectl-pko-build.XXXXXX")"
  trap 'rm -rf "$WORK"' EXIT
  echo "building the standalone kubectl-pko into $OUT" >&2
  PYTHONPATH="$ROOT/src${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" -m PyInstaller --noconfirm --clean --log-level WARN \
    --distpath "$WORK/dist" --workpath "$WORK/build" "$ROOT/tools/kubectl-pko/kubectl-pko.spec" >&2
  "$WORK/dist/kubectl-pko" --help >/dev/null  # it starts, or the build fails
  rm -rf "$OUT.partial" && mkdir -p "$OUT.partial"
  install -m 0755 "$WORK/dist/kubectl-pko" "$OUT.partial/kubectl-pko"
  tar -C "$OUT.partial" --owner=0 --group=0 --numeric-owner --mtime=@0 -czf "$OUT.partial/$ARCHIVE" kubectl-pko
  rm -rf "$OUT"
  mv "$OUT.partial" "$OUT"
fi
for old in "$BIN_DIR"/kubectl-pko-"$VERSION"-*; do  # superseded builds of this version
  [[ "$old" != "$OUT" && -d "$old" ]] && rm -rf "$old"
done
echo "$OUT"
