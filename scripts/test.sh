#!/usr/bin/env bash
# Every check and test: formatting, lints, unit and integration tests (real binary, real bash).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
cargo test --workspace
