"""A canary: a process of its own that times round trips until the file named by its first
argument exists (`<it>.ready` says the canary runs), then prints one JSON line: the round
trips' count, p50, p99 and max in ms, the slowest's start in s after the first, and each
round trip over 100 ms as [start in s, ms].

    canary.py STOP bare                       an interactive bash on a bare PTY the script
                                              drives itself: `true; echo cN` typed, its
                                              output seen
    canary.py STOP ptyhub URL TOKEN TERMINAL  an agent of ptyhub's: `true` through
                                              POST /v2/pty/sessions/TERMINAL/exec on one
                                              persistent HTTP connection, exit code checked

The adversarial suite's L1 runs both beside a flood of other terminals. Each is its own
process, as an agent is, so the figures are what the machine and ptyhub cost, not the test's
own busy client; the bare PTY's figure tells the first from the second."""

import http.client
import json
import os
import pty
import select
import sys
import time
import urllib.parse


def bare_round_trips():
    pid, fd = pty.fork()
    if pid == 0:
        os.environ["PS1"] = "$ "
        os.execvp("bash", ["bash", "--norc", "--noprofile", "-i"])
    buffer = b""

    def read_until(marker: bytes, timeout: float = 60.0) -> None:
        nonlocal buffer
        deadline = time.monotonic() + timeout
        while marker not in buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(marker)
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                buffer += os.read(fd, 65536)
        buffer = buffer[buffer.index(marker) + len(marker):]

    os.write(fd, b"echo rea''dy\n")
    read_until(b"ready\r\n")
    i = 0

    def one() -> None:
        nonlocal i
        i += 1
        os.write(fd, f"true; echo c''{i}\n".encode())
        read_until(f"c{i}\r\n".encode())

    def end() -> None:
        os.write(fd, b"exit\n")
        os.waitpid(pid, 0)

    return one, end


def ptyhub_round_trips(url: str, token: str, terminal: str):
    address = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(address.hostname, address.port, timeout=120)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    body = json.dumps({"command": "true"})

    def one() -> None:
        connection.request("POST", f"/v2/pty/sessions/{terminal}/exec", body, headers)
        response = connection.getresponse()
        answer = json.loads(response.read())
        if response.status != 200 or answer["data"]["exit_code"] != 0:
            raise RuntimeError(f"exec answered {response.status}: {answer}")

    one()
    return one, connection.close


def main() -> int:
    stop, kind = sys.argv[1], sys.argv[2]
    one, end = bare_round_trips() if kind == "bare" else ptyhub_round_trips(*sys.argv[3:6])
    open(stop + ".ready", "w").close()
    times = []
    first = time.monotonic()
    slowest_at = 0.0
    slow = []
    while not os.path.exists(stop):
        started = time.monotonic()
        one()
        elapsed = (time.monotonic() - started) * 1000
        if not times or elapsed > max(times):
            slowest_at = started - first
        if elapsed > 100:
            slow.append([round(started - first, 2), round(elapsed, 1)])
        times.append(elapsed)
        time.sleep(0.02)
    end()
    ordered = sorted(times)
    pick = lambda p: ordered[min(len(ordered) - 1, round((len(ordered) - 1) * p))] if ordered else 0
    print(json.dumps({"n": len(ordered), "p50": pick(0.5), "p99": pick(0.99),
                      "max": ordered[-1] if ordered else 0, "slowest_at": slowest_at, "over_100_ms": slow}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
