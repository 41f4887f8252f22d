#!/usr/bin/env bash
# Every check and test: formatting, lints, unit and integration tests (the real binary with
# real bash, dash and zsh). Installs the shells the tests drive when they are missing.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
for program in bash dash zsh setsid; do
  command -v "$program" >/dev/null || missing+=("$program")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    packages=()
    for program in "${missing[@]}"; do
      case "$program" in
        setsid) packages+=(util-linux) ;;
        *) packages+=("$program") ;;
      esac
    done
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${packages[@]}" >/dev/null
  else
    echo "missing programs the tests need: ${missing[*]}" >&2
    exit 1
  fi
fi

cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
cargo test --workspace
