#!/usr/bin/env python3
"""ptyhub benchmark harness: ptyhub, a bare PTY reader and tmux, side by side in one run.

Usage: python3 bench/run.py [--quick] [--ptyhub PATH] [options]   (see bench/README.md)

Workloads (each system measured in every round, the order of systems rotating per round):
  throughput  `seq 1 3000000` and `cat` of a generated 100 MB ANSI/UTF-8 file
  roundtrip   `echo hi` plus its exit code, one op after another, p50/p99
  memory      PSS of N idle terminals (holders, shells, server deltas)
  create      create rate, ptyhub and tmux taking turns in small batches
  fanout      `cat` of a 10 MB mixed file with 0 … 100 watchers (ptyhub) / attach -r clients (tmux)
  replay      a watcher's 10 MiB restore (JSON and binary) until `terminal_restored`
  history     exec, send, observe, snapshot and scrollback of a terminal with a 60 MB log
              next to one with none

Writes bench/results/<UTC timestamp>.md and .json and prints the Markdown.
Python 3 standard library only (bench/live_client.py is the WebSocket client); tmux must be on
PATH.
"""

from __future__ import annotations

import argparse
import json
import resource
import signal
import sys
from datetime import datetime, timezone
from pathlib import Path

from common import HERE, SYSTEMS, WORKLOADS, add_scrub, log, scrub
from report import summarize
from rounds import Run


# --------------------------------------------------------------------------------------------

def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help="2 rounds, 50 round-trip ops, memory at N=20 and 50")
    p.add_argument("--ptyhub", help="ptyhub binary (default $PTYHUB_BIN, "
                   "$CARGO_TARGET_DIR/release/ptyhub, target/release/ptyhub)")
    p.add_argument("--build", action="store_true",
                   help="run `cargo build --release -p ptyhub` first (default: only if missing)")
    p.add_argument("--rounds", type=int, help="rounds (default 5, quick 2)")
    p.add_argument("--ops", type=int, help="round-trip ops per round (default 200, quick 50)")
    p.add_argument("--warmup-ops", type=int, default=5)
    p.add_argument("--mem-n", type=int, nargs="+",
                   help="terminal counts for memory (default 100 500, quick 20 50)")
    p.add_argument("--mem-rounds", type=int, help="memory rounds (default 3, quick 1)")
    p.add_argument("--create-n", type=int, help="terminals each system creates in the "
                   "alternated create workload (default 500, quick 100)")
    p.add_argument("--create-batch", type=int, default=25,
                   help="creates per batch; the systems take turns batch by batch (25)")
    p.add_argument("--seq-n", type=int, default=3_000_000)
    p.add_argument("--cat-mb", type=float, default=100.0, help="size of the mixed file in MB")
    p.add_argument("--throughput-watchers", type=int, default=1,
                   help="WebSocket watchers on ptyhub's terminal in its second throughput run "
                        "(`ptyhub_w1`; default 1, 0 for none)")
    p.add_argument("--fanout-watchers", type=int, nargs="+",
                   help="watcher counts for fanout (default 0 1 10 50 100, quick 0 1 10)")
    p.add_argument("--fanout-mb", type=float, default=10.0,
                   help="size of the fan-out producer's file in MB (a mixed file like cat's)")
    p.add_argument("--fanout-rounds", type=int,
                   help="fan-out rounds (default 15, quick 2): one producer run is ~0.1 s and "
                        "varies 2x between rounds on its own, so five give no stable median")
    p.add_argument("--fanout-clients", nargs="+", choices=("ws", "cli"), default=["ws", "cli"],
                   help="ptyhub watchers: ws = one process multiplexing WebSockets, cli = "
                        "`ptyhub terminal watch` processes")
    p.add_argument("--replay-runs", type=int, help="replays per transport (default 10, quick 3)")
    p.add_argument("--replay-mb", type=float, default=16.0,
                   help="output of the replayed terminal in MB (at least the replay)")
    p.add_argument("--replay-bytes", type=int, default=10 * 1024 * 1024)
    p.add_argument("--history-mb", type=float, default=45.0,
                   help="output printed into the long-history terminal, MB (45 MB of mixed "
                        "output is about 60 MB of event log)")
    p.add_argument("--history-ops", type=int, help="calls of each kind per terminal (default "
                   "20, quick 5)")
    p.add_argument("--workloads", "--only", nargs="+", choices=WORKLOADS, default=list(WORKLOADS),
                   help="run only some workloads (e.g. --only fanout replay)")
    p.add_argument("--systems", nargs="+", choices=SYSTEMS, default=list(SYSTEMS))
    p.add_argument("--out", help="results directory (default bench/results next to this script)")
    p.add_argument("--keep-tmp", action="store_true", help="keep temp dirs (debugging)")
    a = p.parse_args(argv)
    a.rounds = a.rounds or (2 if a.quick else 5)
    a.ops = a.ops or (50 if a.quick else 200)
    a.mem_n = a.mem_n or ([20, 50] if a.quick else [100, 500])
    a.mem_rounds = a.mem_rounds or (1 if a.quick else 3)
    a.fanout_rounds = a.fanout_rounds or (2 if a.quick else 15)
    a.fanout_watchers = a.fanout_watchers or ([0, 1, 10] if a.quick else [0, 1, 10, 50, 100])
    a.replay_runs = a.replay_runs or (3 if a.quick else 10)
    a.history_ops = a.history_ops or (5 if a.quick else 20)
    a.create_n = a.create_n or (100 if a.quick else 500)
    return a


def main(argv=None) -> int:
    a = parse_args(argv)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, max(soft, 4 * max(a.mem_n) + 256))
    if want > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))

    def on_term(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGHUP, on_term)

    run = Run(a)
    try:
        run.run()
    except KeyboardInterrupt:
        log("interrupted; cleaning up")
        return 130
    finally:
        run.env.cleanup()
    summary, md = summarize(run)
    out_dir = Path(a.out) if a.out else HERE / "results"
    out_dir.mkdir(parents=True, exist_ok=True)
    if a.out:
        # The results directory asked for is this machine's path (the arguments are kept).
        add_scrub(a.out, "<out>")
        add_scrub(out_dir.resolve(), "<out>")
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    doc = {"meta": run.meta, "summary": summary, "raw": run.results, "errors": run.errors}
    (out_dir / f"{stamp}.json").write_text(json.dumps(scrub(doc), indent=1, default=str) + "\n")
    md = scrub(md)
    (out_dir / f"{stamp}.md").write_text(md + "\n")
    print(md)
    try:
        shown = (out_dir / f"{stamp}.md").resolve().relative_to(Path.cwd())
    except ValueError:
        shown = out_dir / f"{stamp}.md"
    log(f"wrote {shown} and .json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
