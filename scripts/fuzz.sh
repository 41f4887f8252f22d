#!/usr/bin/env bash
# Runs every cargo-fuzz target in fuzz/ for SECONDS each (default 120), one after another,
# one job each at the lowest priority. Each run starts from the kept seeds and regression
# inputs (fuzz/seeds/<target>, fuzz/regressions/<target>) plus the working corpus
# (fuzz/corpus/<target>, not committed); a crash is saved under fuzz/artifacts/<target>.
# Exits non-zero when any target failed. Not part of scripts/test.sh: the long tier of the
# adversarial suite calls it. docs/reliability.md, "Fuzzing", says what the targets cover.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]
set -euo pipefail

seconds="${1:-120}"
shift || true
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root/fuzz"

if ! rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
    echo "fuzz: the nightly toolchain is needed (rustup toolchain install nightly)" >&2
    exit 2
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz: installing cargo-fuzz" >&2
    cargo install cargo-fuzz --locked
fi

if [ "$#" -gt 0 ]; then
    targets=("$@")
else
    mapfile -t targets < <(cargo +nightly fuzz list)
fi

nice -n 19 cargo +nightly fuzz build

failed=()
for target in "${targets[@]}"; do
    mkdir -p "corpus/$target" "artifacts/$target"
    dirs=("corpus/$target")
    for kept in "seeds/$target" "regressions/$target"; do
        if [ -d "$kept" ]; then dirs+=("$kept"); fi
    done
    log="artifacts/$target/last-run.log"
    echo "fuzz: $target for ${seconds}s" >&2
    if nice -n 19 cargo +nightly fuzz run "$target" "${dirs[@]}" -- \
        -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=16384 \
        -print_final_stats=1 >"$log" 2>&1; then
        runs="$(grep -Eo 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -Eo '[0-9]+$' || echo '?')"
        cov="$(grep -Eo 'cov: [0-9]+' "$log" | tail -1 || true)"
        echo "fuzz: $target ok: $runs runs, $cov" >&2
    else
        echo "fuzz: $target FAILED (see fuzz/$log):" >&2
        grep -E 'panicked at|ERROR: libFuzzer|Test unit written' "$log" | head -5 >&2 || true
        failed+=("$target")
    fi
done

if [ "${#failed[@]}" -gt 0 ]; then
    echo "fuzz: ${#failed[@]} of ${#targets[@]} targets failed: ${failed[*]}" >&2
    exit 1
fi
echo "fuzz: ${#targets[@]} targets ran ${seconds}s each without a failure" >&2
