#!/usr/bin/env bash
# Vendors asciinema-player from npm into assets/player at the version pinned
# in assets/player/VERSION, with its license.
#   player.sh refresh  fetch the pinned package and rewrite the vendored copy
#   player.sh check    fetch it and fail if the vendored copy differs
# The package's tarball is checked against the integrity pinned in
# assets/player/INTEGRITY (npm's sha512), so a republished or tampered
# package is refused, not vendored.
set -euo pipefail
cd "$(dirname "$0")"
dir=assets/player
version=$(cat "$dir/VERSION")
want=$(cat "$dir/INTEGRITY")
files=(dist/bundle/asciinema-player.min.js dist/bundle/asciinema-player.css LICENSE)

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "asciinema-player@$version" >/dev/null)
tgz="$tmp/asciinema-player-$version.tgz"
# node comes with npm: no other tool needed.
got=$(node -e 'const c = require("crypto"), f = require("fs");
  console.log("sha512-" + c.createHash("sha512").update(f.readFileSync(process.argv[1])).digest("base64"))' "$tgz")
if [ "$got" != "$want" ]; then
  echo "asciinema-player@$version: tarball integrity $got, pinned $want" >&2
  exit 1
fi
tar -xzf "$tgz" -C "$tmp"

case "${1:-}" in
refresh)
  for f in "${files[@]}"; do cp "$tmp/package/$f" "$dir/$(basename "$f")"; done
  echo "vendored asciinema-player@$version into gateway/console/$dir"
  ;;
check)
  rc=0
  for f in "${files[@]}"; do
    if ! cmp -s "$tmp/package/$f" "$dir/$(basename "$f")"; then
      echo "gateway/console/$dir/$(basename "$f") differs from asciinema-player@$version's $f: run make console-player" >&2
      rc=1
    fi
  done
  [ $rc -eq 0 ] && echo "gateway/console/$dir matches asciinema-player@$version"
  exit $rc
  ;;
*)
  echo "usage: $0 refresh|check" >&2
  exit 2
  ;;
esac
