#!/usr/bin/env bash
# The adversarial suite (docs/reliability.md) with the figures each case measured.
#
#   scripts/adversarial.sh           the CI tier (the scale ./scripts/test.sh runs it at), one
#                                    case at a time, figures printed
#   scripts/adversarial.sh --long    every case at full scale on a release build, one at a
#                                    time, then every fuzz target (scripts/fuzz.sh, FUZZ_SECONDS
#                                    each, 120 by default); the figures are written to
#                                    bench/results/adversarial-<date>.md
#
# The cases other modules of the suite prove (docs/reliability.md names them) run too, so
# one run covers the whole table. Run ./scripts/test.sh once first: it installs what the
# tests need.
set -euo pipefail
cd "$(dirname "$0")/.."

tier=ci
profile=()
if [ "${1:-}" = "--long" ]; then
  tier=long
  profile=(--release)
  shift
fi
export PTYHUB_ADVERSARIAL=$tier

# The table's cases proved elsewhere in the suite (docs/reliability.md).
elsewhere=(
  suite::ws::a_terminal_query_gets_exactly_one_answer
  suite::bad_input::input_to_a_program_that_never_reads_is_refused_not_dropped
  suite::crash::
  suite::cgroups::
  suite::storage::
  suite::rotation::
  suite::exec::exec_dir_is_one_submission_whatever_the_prompt_costs
  suite::exec::a_shell_whose_start_hangs_is_reported_not_waited_for
  suite::exec::a_command_that_ignores_ctrl_c_is_answered_at_its_timeout_and_the_next_exec_waits
  suite::send::
  suite::send_truth::
  suite::jobs::
  suite::bad_input::
  suite::connections::
  suite::ws::protocol_errors_close_with_their_codes_and_only_objects_are_frames
  suite::ws::a_slow_watcher_lags_and_catches_up_without_losing_a_byte
  suite::ws::live_connections_older_than_the_kept_log_are_told_so
  suite::lifecycle::
  suite::capabilities::
  suite::grants::
  suite::origins::
  suite::web::
  suite::tls::
  suite::trust::
  suite::users::
  suite::mcp::an_mcp_session_belongs_to_the_principal_that_opened_it
)

log=$(mktemp)
trap 'rm -f "$log"' EXIT
set +e
cargo test "${profile[@]}" -p ptyhub --test all -- suite::adversarial:: "${elsewhere[@]}" \
  --test-threads=1 --nocapture 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e

if [ "$tier" = long ]; then
  # Every fuzz target too; its summary lines go into the report.
  set +e
  scripts/fuzz.sh "${FUZZ_SECONDS:-120}" 2>&1 | tee -a "$log"
  fuzz_status=${PIPESTATUS[0]}
  set -e
  if [ "$fuzz_status" -ne 0 ]; then
    status=1
  fi
  mkdir -p bench/results
  out="bench/results/adversarial-$(date -u +%Y%m%d).md"
  {
    echo "# Adversarial suite, long tier, $(date -u +%Y-%m-%d)"
    echo
    echo "$(nproc) cores, $(uname -r), release build, one case at a time."
    echo
    echo '| case | figure | value |'
    echo '| --- | --- | --- |'
    # A case's first figure is printed on the harness's `test … ... ` line.
    sed -n 's/^\(test .* \.\.\. \)\{0,1\}figure \([A-Z][0-9]*\): \(.*\) = \(.*\)$/| \2 | \3 | \4 |/p' "$log"
    echo
    echo '## Fuzz'
    echo
    echo "| target | ${FUZZ_SECONDS:-120} s |"
    echo '| --- | --- |'
    sed -n 's/^fuzz: \([a-z_]*\) ok: \(.*\)$/| \1 | \2 |/p
            s/^fuzz: \([a-z_]*\) FAILED.*$/| \1 | **failed** (fuzz\/artifacts\/\1) |/p' "$log"
    echo
    echo '## Tests'
    echo
    # Every test the harness started; FAILED when the summary lists it under `failures:`.
    awk '/^test .* \.\.\. / { order[++n] = $2 }
         /^failures:$/ { in_list = 1; next }
         in_list && /^    / { failed[$1] = 1; next }
         in_list && !/^    / { in_list = 0 }
         END { for (i = 1; i <= n; i++) print "- " order[i] (order[i] in failed ? " FAILED" : " ok") }' "$log"
  } >"$out"
  echo "figures written to $out"
fi
exit "$status"
