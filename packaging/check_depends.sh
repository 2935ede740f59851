#!/usr/bin/env bash
# Warn, never fail, when this system lacks packages the app needs (the window's libraries above all): the `Depends:`
# lines of depends.txt that dpkg lists neither as installed nor as provided by an installed package, with the one
# apt-get line that installs them. Headless use works without the display libraries, so installing goes on anyway.
# Usage: bash check_depends.sh DEPENDS_TXT        (always exits 0; prints nothing when all are there)
set -u
list="${1:?usage: check_depends.sh DEPENDS_TXT}"
if ! command -v dpkg-query >/dev/null 2>&1; then
  echo "note: no dpkg here to check the window's system libraries; the app names any it lacks when it starts"
  exit 0
fi
have="$(dpkg-query -W -f='${db:Status-Abbrev} ${Package} ${Provides}\n' 2>/dev/null \
  | awk '$1 == "ii" { $1 = ""; print }' | tr ' ,' '\n\n' | sed -e 's/:.*//' | grep -v '^$' | sort -u)"
missing=()
while read -r key name _; do
  [ "$key" = "Depends:" ] || continue
  grep -qxF "$name" <<<"$have" || missing+=("$name")
done <"$list"
if [ ${#missing[@]} -gt 0 ]; then
  echo "warning: Nightschool's window needs packages this system lacks: ${missing[*]}"
  echo "  install them: sudo apt-get install ${missing[*]}"
  echo "  (without them only the headless school runs: nightschool --headless)"
fi
exit 0
