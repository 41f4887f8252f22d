#!/usr/bin/env python3
"""The agent benchmark: ten situations an agent meets in a terminal (agent_scenarios.py),
each driven through ptyhub (REST), ptyhub's MCP server and tmux scraping (agent_drivers.py),
side by side in one run. Per scenario and driver: success, calls, calls that returned nothing
new, characters returned, wall time, and misleading answers (a wrong state such as "waits for
input" for a hung command, a missing or wrong exit code, text never returned, a flattened
screen, a secret given back).

Usage: python3 bench/agent.py [--ptyhub PATH] [--drivers ptyhub ptyhub-mcp tmux]
       [--scenarios NAME ...] [--out DIR]

Writes bench/results/<UTC timestamp>-agent.md and .json and prints the Markdown. Needs bash,
python3, less and tmux; the MCP driver needs the `mcp` Python package (pip install mcp) and is
skipped, with a note, without it.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from datetime import datetime, timezone
from pathlib import Path

from agent_drivers import PtyhubMcp, PtyhubRest, StepResult, TmuxScraper
from agent_scenarios import SCENARIOS, Scenario, Step
from common import HERE, Env, log, scrub
from ptyhub_system import Ptyhub, ensure_binary, resolve_binary
from tmux_system import Tmux

DRIVERS = ("ptyhub", "ptyhub-mcp", "tmux")


def judge(step: Step, result: StepResult, secret: str | None) -> list[str]:
    """What was misleading in one step's answer (empty: a correct answer)."""
    wrong = []
    # A full-screen program waiting for a key does wait for input: what matters then is that
    # its screen is given as rendered lines (checked below).
    same = result.state == step.state or (step.state == "screen" and result.state == "input")
    if not same:
        wrong.append(f"state {result.state}, not {step.state}")
    for text in step.contains:
        if text not in result.text:
            wrong.append(f"{text!r} never returned")
    for line in step.lines:
        if not re.search(rf"^\s*{re.escape(line)}\s*$", result.text, re.M):
            wrong.append(f"line {line!r} not on the screen as given")
    if step.exit_code is not None and result.exit_code != step.exit_code:
        wrong.append(f"exit code {result.exit_code}, not {step.exit_code}")
    if secret and secret in result.text:
        wrong.append("the secret was given back")
    return wrong


def run_scenario(driver, scenario: Scenario, work: Path) -> dict:
    try:
        steps = driver.run(scenario, work)
    except Exception as e:  # a driver that breaks fails the scenario, the run goes on
        return {"error": f"{type(e).__name__}: {e}", "success": False, "steps": []}
    judged = []
    for step, result in zip(scenario.steps, steps):
        wrong = judge(step, result, scenario.secret)
        judged.append({"step": step.what, "state": result.state, "exit_code": result.exit_code,
                       "calls": result.calls, "empty_calls": result.empty_calls,
                       "chars": result.chars, "seconds": round(result.seconds, 3),
                       "misleading": wrong})
    return {
        "success": len(steps) == len(scenario.steps) and not any(j["misleading"] for j in judged),
        "calls": sum(j["calls"] for j in judged),
        "empty_calls": sum(j["empty_calls"] for j in judged),
        "chars": sum(j["chars"] for j in judged),
        "seconds": round(sum(j["seconds"] for j in judged), 3),
        "misleading": sum(len(j["misleading"]) for j in judged),
        "steps": judged,
    }


def report(results: dict, drivers: list[str], notes: list[str], meta: dict) -> str:
    out = [f"# Agent benchmark — {meta['when']}", "",
           f"Commit {meta['commit']}; {meta['machine']}.", ""]
    out += ["| scenario | " + " | ".join(drivers) + " |",
            "|---|" + "---|" * len(drivers)]
    for name, by_driver in results.items():
        cells = []
        for d in drivers:
            r = by_driver.get(d)
            if r is None:
                cells.append("–")
            elif "error" in r:
                cells.append(f"error: {r['error'][:60]}")
            else:
                mark = "ok" if r["success"] else f"**{r['misleading']} misleading**"
                cells.append(f"{mark}; {r['calls']} calls ({r['empty_calls']} empty), "
                             f"{r['chars']:,} chars, {r['seconds']:.1f} s")
        out.append(f"| {name} | " + " | ".join(cells) + " |")
    out += ["", "| total | " + " | ".join(drivers) + " |", "|---|" + "---|" * len(drivers)]
    for key, label in (("success", "scenarios right"), ("calls", "calls"),
                       ("empty_calls", "calls with nothing new"), ("chars", "characters"),
                       ("misleading", "misleading answers"), ("seconds", "wall time (s)")):
        cells = []
        for d in drivers:
            values = [r.get(key, 0) for r in (results[s].get(d) for s in results) if r]
            total = sum(int(v) if isinstance(v, bool) else v for v in values)
            cells.append(f"{total:,.1f}" if key == "seconds" else f"{total:,}")
        out.append(f"| {label} | " + " | ".join(cells) + " |")
    out += ["", "## Misleading answers", ""]
    for name, by_driver in results.items():
        for d in drivers:
            r = by_driver.get(d) or {}
            for step in r.get("steps", []):
                for wrong in step["misleading"]:
                    out.append(f"- {name} / {d} / {step['step']}: {wrong}")
    if notes:
        out += ["", "## Notes", ""] + [f"- {n}" for n in notes]
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ptyhub", help="ptyhub binary (as bench/run.py finds it by default)")
    p.add_argument("--drivers", nargs="+", choices=DRIVERS, default=list(DRIVERS))
    p.add_argument("--scenarios", nargs="+", choices=[s.name for s in SCENARIOS])
    p.add_argument("--out", help="results directory (default bench/results)")
    a = p.parse_args(argv)
    notes: list[str] = []
    binary, how = resolve_binary(a.ptyhub)
    if ensure_binary(binary, how, False, notes) is None:
        print("\n".join(notes), file=sys.stderr)
        return 1
    scenarios = [s for s in SCENARIOS if not a.scenarios or s.name in a.scenarios]
    env = Env(keep=False)
    results: dict[str, dict] = {}
    try:
        for scenario in scenarios:
            for name, text in scenario.files.items():
                (env.work / name).write_text(text)
        drivers = {}
        server = None
        if "ptyhub" in a.drivers or "ptyhub-mcp" in a.drivers:
            server = Ptyhub(env, binary, "agent")
        if "ptyhub" in a.drivers:
            drivers["ptyhub"] = PtyhubRest(server)
        if "ptyhub-mcp" in a.drivers:
            try:
                import mcp  # noqa: F401
                drivers["ptyhub-mcp"] = PtyhubMcp(binary, server.socket)
            except ImportError:
                notes.append("ptyhub-mcp skipped: the `mcp` Python package is not installed")
        if "tmux" in a.drivers:
            drivers["tmux"] = TmuxScraper(Tmux(env, "agent tmux"))
        for scenario in scenarios:
            results[scenario.name] = {}
            for name, driver in drivers.items():
                log(f"{scenario.name} / {name}")
                results[scenario.name][name] = run_scenario(driver, scenario, env.work)
    finally:
        env.cleanup()
    meta = {"when": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "commit": _commit(), "machine": _machine()}
    text = report(results, [d for d in DRIVERS if d in a.drivers], notes, meta)
    out = Path(a.out) if a.out else HERE / "results"
    out.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    (out / f"{stamp}-agent.md").write_text(text)
    (out / f"{stamp}-agent.json").write_text(json.dumps(scrub({"meta": meta, "results": results,
                                                               "notes": notes}), indent=1))
    print(text)
    return 0


def _commit() -> str:
    import subprocess
    r = subprocess.run(["git", "-C", str(HERE), "rev-parse", "--short", "HEAD"],
                       capture_output=True, text=True)
    return r.stdout.strip() or "unknown"


def _machine() -> str:
    import os
    return f"{os.cpu_count()} cores, Linux {os.uname().release}"


if __name__ == "__main__":
    sys.exit(main())
