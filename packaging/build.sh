#!/usr/bin/env bash
# Build the packaged app in one command: the PyInstaller onedir bundle, a .deb (dpkg-deb) and a portable tar.gz.
# Usage: bash packaging/build.sh [OUT_DIR]       (default dist/; needs `bash packaging/install.sh --dev` first)
# It builds whatever tree it is given: a dirty tree is said in the build info, not refused (tests are CI's job).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="$(mkdir -p "${1:-dist}" && cd "${1:-dist}" && pwd)"
PY=.venv/bin/python
WORK=build/package
VERSION="$("$PY" -c "import tomllib; print(tomllib.load(open('pyproject.toml', 'rb'))['project']['version'])")"
ARCH="$(dpkg --print-architecture 2>/dev/null || echo amd64)"
NAME="nightschool_${VERSION}_${ARCH}"
START=$SECONDS
step() { printf '\n==> %s\n' "$*"; }

step "PyInstaller"
"$PY" -c "import PyInstaller" 2>/dev/null || "$PY" -m pip install -q -c packaging/constraints.txt "pyinstaller>=6.10"

step "the engine's payload: Nightschool's wheel, its requirements and the tested versions (resources/engine)"
rm -rf resources/engine && mkdir -p resources/engine
"$PY" -m pip wheel -q --no-deps --no-build-isolation . -w resources/engine
"$PY" - <<'PY'
import tomllib
deps = tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]
open("resources/engine/requirements.txt", "w").write("\n".join(deps) + "\n")
PY
cp packaging/constraints.txt resources/engine/constraints.txt
dirty="$(git status --porcelain 2>/dev/null | head -c1 || true)"
printf '{"version": "%s", "commit": "%s", "dirty": %s}\n' "$VERSION" "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" \
  "$([ -n "$dirty" ] && echo true || echo false)" > resources/engine/build.json

step "bundle (onedir)"
BUNDLE_START=$SECONDS
"$PY" -m PyInstaller packaging/nightschool.spec --distpath "$WORK/dist" --workpath "$WORK/pyi" -y --log-level WARN
BUNDLE="$WORK/dist/nightschool"
"$BUNDLE/nightschool" --version
BUNDLE_S=$((SECONDS - BUNDLE_START))

step "system packages the bundle needs (packaging/deb/depends.txt)"
"$PY" packaging/depends.py "$BUNDLE" >/dev/null \
  || echo "warning: the .deb declares the checked-in packaging/deb/depends.txt, which differs from this bundle (above)"
DEPENDS="$(sed -n 's/^Depends: //p' packaging/deb/depends.txt | paste -sd, - | sed 's/,/, /g')"
RECOMMENDS="$(sed -n 's/^Recommends: /, /p' packaging/deb/depends.txt | tr -d '\n')"

step ".deb"
DEB="$WORK/deb"
rm -rf "$DEB" && mkdir -p "$DEB/opt" "$DEB/usr/bin" "$DEB/DEBIAN"
cp -a "$BUNDLE" "$DEB/opt/nightschool"
ln -s /opt/nightschool/nightschool "$DEB/usr/bin/nightschool"
NIGHTSCHOOL_HOME="$WORK/home" "$BUNDLE/nightschool" desktop install --prefix "$DEB/usr/share" \
  --exec /usr/bin/nightschool --no-refresh >/dev/null
sed -e "s/@VERSION@/$VERSION/" -e "s/@ARCH@/$ARCH/" -e "s/@SIZE@/$(du -sk "$DEB" | cut -f1)/" \
  -e "s/@DEPENDS@/$DEPENDS/" -e "s/@RECOMMENDS@/$RECOMMENDS/" \
  packaging/deb/control > "$DEB/DEBIAN/control"
install -m 0755 packaging/deb/postinst packaging/deb/postrm "$DEB/DEBIAN/"
dpkg-deb --root-owner-group -Zgzip --build "$DEB" "$OUT/$NAME.deb" >/dev/null

step "portable tar.gz (install.sh under ~/.local, no root)"
TAR="$WORK/tar/nightschool-$VERSION"
rm -rf "$WORK/tar" && mkdir -p "$TAR"
cp -a "$BUNDLE" "$TAR/nightschool"
install -m 0755 packaging/portable/install.sh packaging/portable/uninstall.sh packaging/check_depends.sh "$TAR/"
install -m 0644 packaging/deb/depends.txt "$TAR/"
tar -C "$WORK/tar" -czf "$OUT/nightschool-$VERSION-linux-$ARCH.tar.gz" "nightschool-$VERSION"

step "done in $((SECONDS - START)) s (bundle $BUNDLE_S s)"
printf '  bundle   %s\n' "$(du -sh "$BUNDLE" | cut -f1)"
ls -l "$OUT/$NAME.deb" "$OUT/nightschool-$VERSION-linux-$ARCH.tar.gz" | awk '{printf "  %-9s %s\n", $5, $9}'
