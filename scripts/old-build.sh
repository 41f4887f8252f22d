#!/usr/bin/env bash
# Builds the `ptyhub` binary of an older commit of this repository, once per machine, for the
# upgrade test (crates/cli/tests/suite/upgrade.rs): holders of that build, a server of this
# one. Prints the binary's path on stdout.
#
#   scripts/old-build.sh <commit>
#
# The binary lands in $HOME/.cache/ptyhub-test-old/<commit>/ptyhub (or under
# PTYHUB_TEST_OLD_DIR), outside the clone; a second call finds it and builds nothing. The
# commit's files are taken with `git archive` (the repository's worktrees and branches are not
# touched). Exits 3 when the clone does not have the commit (a shallow clone, say).
set -euo pipefail
cd "$(dirname "$0")/.."

commit=${1:?usage: scripts/old-build.sh <commit>}
if ! full=$(git rev-parse --verify --quiet "$commit^{commit}"); then
  echo "this clone has no commit $commit (a shallow clone?)" >&2
  exit 3
fi
cache=${PTYHUB_TEST_OLD_DIR:-$HOME/.cache/ptyhub-test-old}/$full
if [ -x "$cache/ptyhub" ]; then
  echo "$cache/ptyhub"
  exit 0
fi
mkdir -p "$cache"
# One build at a time per commit: tests that run at once wait for the first one.
exec 9>"$cache/build.lock"
flock 9
if [ ! -x "$cache/ptyhub" ]; then
  rm -rf "$cache/src"
  mkdir -p "$cache/src"
  git archive --format=tar "$full" | tar -x -C "$cache/src"
  started=$(date +%s)
  (
    cd "$cache/src"
    # The variables of the cargo that runs the tests (its target dir, its profile's flags)
    # are not this build's.
    env -u CARGO_TARGET_DIR -u CARGO_BUILD_TARGET_DIR -u RUSTFLAGS -u CARGO_ENCODED_RUSTFLAGS \
      CARGO_TARGET_DIR="$cache/target" cargo build --locked --quiet -p ptyhub --bin ptyhub >&2
  )
  cp "$cache/target/debug/ptyhub" "$cache/ptyhub.partial"
  mv "$cache/ptyhub.partial" "$cache/ptyhub"
  echo "built ptyhub at $full in $(($(date +%s) - started)) s" >&2
  rm -rf "$cache/src" "$cache/target"
fi
echo "$cache/ptyhub"
