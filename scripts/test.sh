#!/usr/bin/env bash
# Every check and test: formatting, lints, unit and integration tests (the real binary with
# real bash, dash and zsh; tmux drives `attach` and `watch`; headless Chromium drives the web
# page; asciinema plays an export; bubblewrap and debootstrap run the rootfs backend, whose
# Debian root the tests provision once per machine into $HOME/.cache/ptyhub-test-rootfs, or
# PTYHUB_TEST_ROOTFS_DIR; nginx routes to three servers in the scale-out test, whose manifests
# kubernetes-validate checks; man renders the generated man page). Installs the programs and
# the browser test's npm packages when they are missing.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
for program in bash dash zsh setsid tmux less top python3 openssl curl asciinema bwrap debootstrap \
  nginx man groff; do
  [ "$program" = nginx ] && [ -x /usr/sbin/nginx ] && continue
  command -v "$program" >/dev/null || missing+=("$program")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    packages=()
    for program in "${missing[@]}"; do
      case "$program" in
        setsid) packages+=(util-linux) ;;
        top) packages+=(procps) ;;
        bwrap) packages+=(bubblewrap) ;;
        man) packages+=(man-db) ;;
        groff) packages+=(groff-base) ;;
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

# The published agent-sandbox SDK drives the v1 API in the tests (its shell client needs only
# httpx and pydantic, not the SDK's other dependencies).
if ! python3 -c 'import agent_sandbox.shell, httpx, pydantic' 2>/dev/null; then
  python3 -m pip install -q --disable-pip-version-check --no-deps agent-sandbox==0.0.30
  python3 -m pip install -q --disable-pip-version-check httpx pydantic
fi

# The official MCP client SDK drives `ptyhub mcp` in the tests.
if ! python3 -c 'import mcp.client.stdio' 2>/dev/null; then
  python3 -m pip install -q --disable-pip-version-check mcp
fi

# The Prometheus project's Python client parses /metrics in the tests, as a scraper would.
if ! python3 -c 'import prometheus_client.parser' 2>/dev/null; then
  python3 -m pip install -q --disable-pip-version-check prometheus-client
fi

# openapi-spec-validator checks /openapi.json in the tests, as API tools and client generators do.
if ! python3 -c 'import openapi_spec_validator' 2>/dev/null; then
  python3 -m pip install -q --disable-pip-version-check openapi-spec-validator==0.9.0
fi
# A client generated from it with openapi-python-client makes real calls in the tests.
if ! command -v openapi-python-client >/dev/null; then
  python3 -m pip install -q --disable-pip-version-check openapi-python-client==0.29.1
fi

# The scale-out test validates deploy/ offline: the Kubernetes schemas (kubernetes-validate),
# the Sandbox's schema (jsonschema) and the YAML itself (pyyaml).
if ! python3 -c 'import kubernetes_validate, jsonschema, yaml' 2>/dev/null; then
  python3 -m pip install -q --disable-pip-version-check kubernetes-validate==1.37.0 jsonschema pyyaml
fi

# Headless Chromium drives the web terminal in the tests, through playwright-core from npm.
if [ -z "${PTYHUB_CHROMIUM:-}" ] && [ ! -x /usr/bin/chromium ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "no /usr/bin/chromium (and not root): the browser test will be skipped" >&2
  fi
fi
# The browser test checks that CJK text is drawn, which needs a font that has it.
if command -v fc-list >/dev/null && [ -z "$(fc-list :lang=zh 2>/dev/null)" ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fonts-wqy-microhei >/dev/null
  else
    echo "no CJK font (fonts-wqy-microhei): the browser test's CJK check will fail" >&2
  fi
fi
if [ ! -d crates/cli/tests/web/node_modules ]; then
  if ! command -v npm >/dev/null; then
    echo "the browser test needs Node.js 20+ and npm" >&2
    exit 1
  fi
  (cd crates/cli/tests/web && npm ci --no-audit --no-fund --loglevel=error)
fi

cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps
# Panics print their message and place; a backtrace per failure would push the summary below
# out of what a CI log's tail shows.
export RUST_BACKTRACE=0
log=$(mktemp)
trap 'rm -f "$log"' EXIT
set +e
cargo test --workspace 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
# One closing line for the whole run (cargo prints one per test binary, the last often empty).
# Each failure's message again, short, so the log's tail says why as well as what.
if [ "$status" != 0 ]; then
  echo "failures, with their messages:"
  awk '/^thread .* panicked at / { print; n = 6; next } n > 0 { print "    " $0; n--; if ($0 == "") n = 0 }' "$log" | cut -c1-400
fi
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed;?$/) p += $i; if ($(i+1) ~ /^failed;?$/) f += $i } }
     END { printf "tests: %d passed, %d failed\n", p, f }' "$log"
exit "$status"
