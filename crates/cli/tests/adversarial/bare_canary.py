"""A canary on a bare PTY: an interactive bash the script drives itself, timing `true` round
trips (the command typed, its echo and the next output seen) until the file named by the
first argument exists (`<it>.ready` says the canary runs). Prints one JSON line: the round
trips' count, p50, p99 and max in ms.

It runs beside ptyhub's canary in the adversarial suite's L1, under the same flood, so the
two figures tell what the machine costs from what ptyhub adds."""

import json
import os
import pty
import select
import sys
import time


def main() -> int:
    stop = sys.argv[1]
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
    open(stop + ".ready", "w").close()
    times = []
    i = 0
    while not os.path.exists(stop):
        i += 1
        started = time.monotonic()
        os.write(fd, f"true; echo c''{i}\n".encode())
        read_until(f"c{i}\r\n".encode())
        times.append((time.monotonic() - started) * 1000)
        time.sleep(0.02)
    os.write(fd, b"exit\n")
    os.waitpid(pid, 0)
    times.sort()
    pick = lambda p: times[min(len(times) - 1, round((len(times) - 1) * p))] if times else 0
    print(json.dumps({"n": len(times), "p50": pick(0.5), "p99": pick(0.99),
                      "max": times[-1] if times else 0}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
