#!/usr/bin/env bash
# Fetches the web page's xterm.js files from the npm registry into
# crates/server/assets/vendor/<name>@<version>/ (UMD builds, CSS and LICENSE; no bundler, no
# source maps). Run it by hand after changing a version below, then review the diff; the build
# never runs npm.
set -euo pipefail
cd "$(dirname "$0")/.."

XTERM=6.0.0
FIT=0.11.0
UNICODE11=0.9.0

vendor=crates/server/assets/vendor
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# fetch <npm package> <version> <directory name> <file>...
fetch() {
  local package=$1 version=$2 name=$3
  shift 3
  local tarball
  tarball=$(cd "$work" && npm pack --silent "$package@$version")
  mkdir -p "$work/$name"
  tar xzf "$work/$tarball" -C "$work/$name"
  rm -rf "${vendor:?}/$name@"*
  local dest="$vendor/$name@$version"
  for file in LICENSE "$@"; do
    mkdir -p "$dest/$(dirname "$file")"
    cp "$work/$name/package/$file" "$dest/$file"
  done
  echo "$package@$version $(npm view "$package@$version" dist.integrity)"
}

{
  fetch @xterm/xterm "$XTERM" xterm lib/xterm.js css/xterm.css
  fetch @xterm/addon-fit "$FIT" addon-fit lib/addon-fit.js
  fetch @xterm/addon-unicode11 "$UNICODE11" addon-unicode11 lib/addon-unicode11.js
} >"$work/integrity"
table=$(awk -v tick='`' '{ printf "| %s | %s%s%s |\n", $1, tick, $2, tick }' "$work/integrity")

cat >"$vendor/README.md" <<README
# Vendored web libraries

The web pages (\`crates/server/assets/\`) load these files, embedded in the binary; nothing is
bundled or built. Each directory holds the package's UMD build (\`lib/*.js\`, which defines
\`Terminal\`, \`FitAddon.FitAddon\` and \`Unicode11Addon.Unicode11Addon\` on \`window\`),
its CSS where it has one, and its LICENSE (MIT), unchanged from the npm tarball.

Fetched by \`scripts/vendor-xterm.sh\` with \`npm pack\` (which checks each tarball against the
registry's integrity hash):

| package | npm integrity |
| --- | --- |
$table

To update: change the versions at the top of the script, run it, update the paths in
\`terminal.html\`, and review the diff.
README
