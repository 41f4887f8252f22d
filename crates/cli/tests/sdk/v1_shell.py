"""Drives ptyhub's v1 shell API with the published agent-sandbox SDK, unmodified.

Run by the Rust integration test `suite::v1_sdk` with PTYHUB_URL and PTYHUB_TOKEN pointing at a
real server; exits non-zero (with the failing check) on any mismatch.
"""

import atexit
import os
import shutil
import sys
import tempfile

from agent_sandbox import Sandbox


def scratch_dir(prefix):
    """A temporary directory removed when the script ends, however it ends."""
    path = tempfile.mkdtemp(prefix=prefix)
    atexit.register(shutil.rmtree, path, True)
    return path


def check(condition, what):
    if not condition:
        print(f"FAILED: {what}", file=sys.stderr)
        sys.exit(1)


def main():
    client = Sandbox(
        base_url=os.environ["PTYHUB_URL"],
        headers={"Authorization": f"Bearer {os.environ['PTYHUB_TOKEN']}"},
        timeout=60,
    )
    shell = client.shell

    workdir = scratch_dir("ptyhub-sdk-")
    created = shell.create_session(id="sdk-1", exec_dir=workdir).data
    check(created.session_id == "sdk-1", f"create_session id: {created}")
    check(created.working_dir == os.path.realpath(workdir), f"working_dir: {created}")
    again = shell.create_session(id="sdk-1").data
    check(again.session_id == "sdk-1", "an existing id returns the existing session")

    result = shell.exec_command(id="sdk-1", command="pwd; echo out; (exit 3)").data
    check(result.status == "completed", f"exec status: {result}")
    check(result.output == f"{os.path.realpath(workdir)}\nout", f"exec output: {result.output!r}")
    check(result.exit_code == 3, f"exec exit code: {result}")
    check(result.console and result.console[-1].command == "pwd; echo out; (exit 3)", "console record")

    script = "cd /tmp\nexport SDK_VAR=héllo\ncat <<'EOF'\nheredoc $SDK_VAR\nEOF"
    result = shell.exec_command(id="sdk-1", command=script).data
    check(result.output == "heredoc $SDK_VAR", f"heredoc: {result.output!r}")
    result = shell.exec_command(id="sdk-1", command="pwd; echo $SDK_VAR").data
    check(result.output == "/tmp\nhéllo", f"cd/export persist: {result.output!r}")

    # A session made on first use of an unknown id.
    fresh = shell.exec_command(id="sdk-auto", command="echo auto").data
    check(fresh.session_id == "sdk-auto" and fresh.output == "auto", f"auto-created: {fresh}")

    # Interactive input answered with write_to_process.
    started = shell.exec_command(
        id="sdk-1",
        command="python3 -c \"name = input('Name: '); print('Hello', name)\"",
        async_mode=True,
    ).data
    check(started.status == "running", f"async exec: {started}")
    for _ in range(200):
        view = shell.view(id="sdk-1").data
        if view.output.endswith("Name: "):
            break
        import time

        time.sleep(0.05)
    check(view.status == "running" and view.output.endswith("Name: "), f"prompt visible: {view}")
    written = shell.write_to_process(id="sdk-1", input="Alice", press_enter=True).data
    check(written.status in ("running", "completed"), f"write: {written}")
    waited = shell.wait_for_process(id="sdk-1", seconds=10).data
    check(waited.status == "completed", f"wait: {waited}")
    view = shell.view(id="sdk-1").data
    check(view.output == "Name: Alice\nHello Alice" and view.exit_code == 0, f"view after: {view}")

    # Timeouts press ^C and leave the session usable.
    quiet = shell.exec_command(id="sdk-1", command="sleep 30", no_change_timeout=1).data
    check(quiet.status == "no_change_timeout" and quiet.exit_code is None, f"no_change: {quiet}")
    hard = shell.exec_command(id="sdk-1", command="while true; do :; done", hard_timeout=0.5).data
    check(hard.status == "hard_timeout", f"hard_timeout: {hard}")
    result = shell.exec_command(id="sdk-1", command="echo usable").data
    check(result.output == "usable", f"usable after timeouts: {result}")

    # One running command per session.
    shell.exec_command(id="sdk-1", command="sleep 120", async_mode=True)
    try:
        shell.exec_command(id="sdk-1", command="echo second")
        check(False, "a second exec while one runs must fail")
    except Exception as error:  # the SDK raises its BadRequestError
        check("already has a running command" in str(error), f"busy message: {error}")

    # Truncation.
    long = shell.exec_command(id="sdk-auto", command="seq 1 20000").data
    check("[... Observation truncated due to length ...]" in long.output, "truncated")
    full = shell.exec_command(id="sdk-auto", command="seq 1 20000", truncate=False).data
    check(full.output == "\n".join(str(i) for i in range(1, 20001)), "truncate=False is whole")

    # strict exec_dir.
    try:
        shell.exec_command(id="sdk-auto", command="pwd", exec_dir="/no/such/dir", strict=True)
        check(False, "strict with a missing exec_dir must fail")
    except Exception as error:
        check("exec_dir" in str(error), f"strict message: {error}")
    lenient = shell.exec_command(id="sdk-auto", command="echo fallback", exec_dir="/no/such/dir").data
    check(lenient.output == "fallback", f"non-strict falls back: {lenient}")

    # 2 MB of output, byte-exact, and UTF-8 both ways.
    big = shell.exec_command(
        id="sdk-auto", command="head -c 1500000 /dev/zero | base64 -w 76", truncate=False
    ).data
    import base64

    expected = base64.encodebytes(bytes(1500000)).decode().rstrip("\n")
    check(len(big.output) > 2_000_000 and big.output == expected, f"2 MB output ({len(big.output)} chars)")
    utf8 = shell.exec_command(id="sdk-auto", command="echo 'héllo wörld 日本語 🎉'").data
    check(utf8.output == "héllo wörld 日本語 🎉", f"utf-8: {utf8.output!r}")

    # Session settings, stats, links and capabilities.
    shell.update_session(id="sdk-auto", no_change_timeout=1)
    quiet = shell.exec_command(id="sdk-auto", command="sleep 20").data
    check(quiet.status == "no_change_timeout", f"update_session no_change_timeout: {quiet}")
    stats = shell.get_session_stats().data
    check(stats.total_sessions >= 2 and stats.max_sessions == 20, f"stats: {stats}")
    check(stats.session_timeout == 3600 and 0 < stats.usage_ratio <= 1, f"stats: {stats}")
    check(stats.active_sessions + stats.idle_sessions == stats.total_sessions, f"stats: {stats}")
    url = shell.get_terminal_url().data
    check("/terminal?session_id=" in url, f"terminal url: {url}")
    capabilities = client._client_wrapper.httpx_client.request("v1/capabilities", method="GET").json()
    check(capabilities["data"]["exec"]["pty"] is True, f"capabilities: {capabilities}")

    # Server-sent events: output as it arrives, then the result.
    import httpx
    import json as jsonlib

    def sse(path, body):
        events = []
        with httpx.stream(
            "POST",
            f"{os.environ['PTYHUB_URL']}{path}",
            json=body,
            headers={
                "Accept": "text/event-stream",
                "Authorization": f"Bearer {os.environ['PTYHUB_TOKEN']}",
            },
            timeout=30,
        ) as response:
            check(response.headers["content-type"].startswith("text/event-stream"), "sse content type")
            kind = None
            for line in response.iter_lines():
                if line.startswith("event: "):
                    kind = line[len("event: "):]
                elif line.startswith("data: ") and kind:
                    events.append((kind, jsonlib.loads(line[len("data: "):])))
        return events

    events = sse(
        "/v1/shell/exec",
        {"id": "sdk-auto", "command": "for i in 1 2 3; do echo $i; sleep 0.3; done"},
    )
    outputs = [data["output"] for kind, data in events if kind == "output"]
    check(len(outputs) >= 2, f"sse streams output as it comes: {events}")
    check(events[-1][0] == "result", f"sse ends with the result: {events}")
    final = events[-1][1]["data"]
    check(final["status"] == "completed" and final["exit_code"] == 0, f"sse result: {final}")
    check("".join(outputs) == final["output"] == "1\n2\n3", f"sse output: {outputs} / {final}")
    viewed = sse("/v1/shell/view", {"id": "sdk-auto"})
    check(viewed[-1][0] == "result" and viewed[-1][1]["data"]["output"] == "1\n2\n3", f"sse view: {viewed}")

    listed = shell.list_sessions().data
    check({"sdk-1", "sdk-auto"} <= set(listed.sessions), f"list: {listed}")
    check(listed.sessions["sdk-1"].current_command is not None, "list shows the running command")

    # kill ends the command and closes the session; a second kill is 404.
    killed = shell.kill_process(id="sdk-1").data
    check(killed.status == "terminated", f"kill: {killed}")
    try:
        shell.kill_process(id="sdk-1")
        check(False, "a second kill must fail")
    except Exception as error:
        check("404" in str(error) or "not found" in str(error), f"second kill: {error}")
    check("sdk-1" not in shell.list_sessions().data.sessions, "killed session left the list")
    reopened = shell.create_session(id="sdk-1").data
    check(reopened.session_id == "sdk-1", "the killed id starts a new instance")
    result = shell.exec_command(id="sdk-1", command="echo again").data
    check(result.output == "again", f"new instance works: {result}")

    # preserve_symlinks keeps the path as given; otherwise it is resolved.
    link = os.path.join(scratch_dir("ptyhub-link-"), "link")
    os.symlink(workdir, link)
    kept = shell.create_session(id="sdk-link", exec_dir=link, preserve_symlinks=True).data
    check(kept.working_dir == link, f"preserve_symlinks: {kept}")
    resolved = shell.create_session(id="sdk-real", exec_dir=link).data
    check(resolved.working_dir == os.path.realpath(workdir), f"resolved: {resolved}")

    cleaned = shell.cleanup_session("sdk-auto")
    check(cleaned.success, f"cleanup: {cleaned}")
    shell.create_session(id="sdk-x")
    shell.create_session(id="sdk-y")
    shell.cleanup_all_sessions()
    check(shell.list_sessions().data.sessions == {}, "cleanup_all_sessions")

    # 20 live terminals at most: the least recently used idle one makes room; when every one
    # runs a command, creating another is refused with 429.
    for i in range(20):
        shell.create_session(id=f"lru-{i}")
    shell.exec_command(id="lru-1", command="echo touch")  # lru-0 is now the least recently used
    shell.create_session(id="lru-20")
    live = set(shell.list_sessions().data.sessions)
    check("lru-0" not in live and "lru-20" in live and len(live) == 20, f"lru: {sorted(live)}")
    for name in sorted(live):
        shell.exec_command(id=name, command="sleep 60", async_mode=True)
    try:
        shell.create_session(id="lru-21")
        check(False, "a 21st terminal while all 20 are busy must be refused")
    except Exception as error:
        check("429" in str(error) and "LIMIT_EXCEEDED" in str(error), f"limit: {error}")
    stats = shell.get_session_stats().data
    check(stats.total_sessions == 20 and stats.usage_ratio == 1.0, f"stats at the limit: {stats}")
    shell.cleanup_all_sessions()
    print("v1 sdk: all checks passed")


if __name__ == "__main__":
    main()
