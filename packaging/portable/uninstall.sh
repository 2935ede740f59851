#!/usr/bin/env bash
# Remove what install.sh put under ~/.local (or --prefix DIR). Your data dir stays unless you add --purge-data.
# Usage: ./uninstall.sh [--prefix DIR] [--purge-data]
set -euo pipefail
PREFIX="$HOME/.local"
PURGE=0
while [ $# -gt 0 ]; do
  case "$1" in
    --prefix) PREFIX="$2"; shift ;;
    --purge-data) PURGE=1 ;;
    -h|--help) sed -n '2,3p' "$0"; exit 0 ;;
    *) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
DEST="$PREFIX/opt/nightschool"
SHARE="$PREFIX/share"
[ "$PREFIX" = "$HOME/.local" ] && SHARE="${XDG_DATA_HOME:-$HOME/.local/share}"
[ -x "$DEST/nightschool" ] && "$DEST/nightschool" desktop uninstall --prefix "$SHARE" >/dev/null || true
rm -rf "$DEST"
[ -L "$PREFIX/bin/nightschool" ] && rm -f "$PREFIX/bin/nightschool"
DATA="${NIGHTSCHOOL_HOME:-${XDG_DATA_HOME:-$HOME/.local/share}/nightschool}"
if [ "$PURGE" = 1 ]; then rm -rf "$DATA"; echo "removed the app and its data dir $DATA"
else echo "removed the app; your data dir stays: $DATA (--purge-data removes it)"; fi
