#!/usr/bin/env bash
# Install Nightschool for this user without root: the app in ~/.local/opt/nightschool, the `nightschool` command in
# ~/.local/bin, the launcher, icons and .jsonl type in ~/.local/share. Installing over an older version keeps your
# data dir (its store migrates on the next start).
# Usage: ./install.sh [--autostart] [--prefix DIR]      (DIR default ~/.local)
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
PREFIX="$HOME/.local"
AUTOSTART=()
while [ $# -gt 0 ]; do
  case "$1" in
    --autostart) AUTOSTART=(--autostart) ;;
    --prefix) PREFIX="$2"; shift ;;
    -h|--help) sed -n '2,6p' "$0"; exit 0 ;;
    *) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
DEST="$PREFIX/opt/nightschool"
SHARE="$PREFIX/share"
[ "$PREFIX" = "$HOME/.local" ] && SHARE="${XDG_DATA_HOME:-$HOME/.local/share}"
mkdir -p "$PREFIX/opt" "$PREFIX/bin"
rm -rf "$DEST.new" "$DEST.old"
cp -a "$HERE/nightschool" "$DEST.new"
[ -d "$DEST" ] && { echo "replacing the installed app (your data dir stays)"; mv "$DEST" "$DEST.old"; }
mv "$DEST.new" "$DEST"
rm -rf "$DEST.old"
ln -sfn "$DEST/nightschool" "$PREFIX/bin/nightschool"
"$DEST/nightschool" desktop install --prefix "$SHARE" --exec "$PREFIX/bin/nightschool" "${AUTOSTART[@]}"
echo "installed: $PREFIX/bin/nightschool ($("$DEST/nightschool" --version))"
bash "$HERE/check_depends.sh" "$HERE/depends.txt"  # warns with the apt-get line for missing window libraries
case ":$PATH:" in *":$PREFIX/bin:"*) ;; *) echo "note: add $PREFIX/bin to your PATH to type 'nightschool'" ;; esac
echo "next: open Nightschool from your menu; the first start sets up the training engine (a few minutes, once)"
