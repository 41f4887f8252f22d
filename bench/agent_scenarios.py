"""The agent benchmark's situations: ten things an agent meets in a terminal, each a list of
steps with what a correct answer must show.

A step is what an agent does next (type a command, answer a question, press a key, wait) and
what it must learn from the answer: the terminal's `state` after it, text that must be in
what it was given, the exit code of a command that ended. A driver that answers with the wrong
state, without the text, with a wrong or missing exit code, or with a secret in it, gave a
misleading answer.

States:
  input   a program waits for input (a question, a REPL prompt, a read without a prompt)
  screen  a full-screen program waits for a key; its screen must be given as rendered lines
  done    the command ended and the shell is back at its prompt (with `exit_code` when given)
  busy    the command still runs and does not wait for input (working, or hung)
"""

from __future__ import annotations

from dataclasses import dataclass, field

INSTALLER = r"""#!/bin/bash
echo "Installing demo 1.0"
read -r -p "Install to /opt/demo? [Y/n] " dir
read -r -p "Create a desktop shortcut? [y/N] " shortcut
read -r -p "Proceed with the installation? [Y/n] " proceed
sleep 0.5
echo "installed: dir=$dir shortcut=$shortcut proceed=$proceed"
"""

# A full-screen program: the alternate screen, a drawn status line and a key in raw mode.
FULLSCREEN = r"""import os, sys, termios, tty
out = sys.stdout
out.write("\x1b[?1049h\x1b[H\x1b[2J")
out.write("\x1b[2;3H+------------------------------+")
out.write("\x1b[4;5Hstatus: waiting for a key")
out.write("\x1b[4;5Hstatus: ")
out.write("\x1b[12;5H[r] reset   [q] quit")
out.write("\x1b[4;13H")
out.flush()
fd = sys.stdin.fileno()
old = termios.tcgetattr(fd)
try:
    tty.setraw(fd)
    while os.read(fd, 1) != b"q":
        pass
finally:
    termios.tcsetattr(fd, termios.TCSADRAIN, old)
    out.write("\x1b[?1049l")
    out.flush()
print("left the full-screen program")
"""

SECRET = "hunter2-SECRET"


@dataclass
class Step:
    """One thing the agent does, and what it must learn."""

    what: str
    # The text typed; `submit` presses Enter after it. None: just wait for news.
    text: str | None
    state: str
    submit: bool = True
    # `command` steps are shell commands an agent would run with exec; `interactive` ones
    # start or answer programs that talk back (an agent would use send).
    kind: str = "interactive"
    contains: list[str] = field(default_factory=list)
    # Lines that must appear whole (a rendered screen, not a flattened drawing).
    lines: list[str] = field(default_factory=list)
    exit_code: int | None = None
    # The agent thinks this long before the step (output printed meanwhile must not be lost).
    pause_before: float = 0.0
    # How long the agent is willing to wait for this step.
    deadline: float = 30.0


@dataclass
class Scenario:
    name: str
    about: str
    steps: list[Step]
    files: dict[str, str] = field(default_factory=dict)
    # Text that must never appear in anything the agent is given.
    secret: str | None = None


SCENARIOS = [
    Scenario("installer", "an installer asking three questions", [
        Step("start the installer", "bash installer.sh", "input", contains=["[Y/n]"]),
        Step("answer the first question", "y", "input", contains=["shortcut"]),
        Step("answer the second question", "n", "input", contains=["Proceed"]),
        Step("answer the last question", "y", "done", exit_code=0,
             contains=["installed: dir=y shortcut=n proceed=y"]),
    ], files={"installer.sh": INSTALLER}),
    Scenario("password", "a password prompt (the secret never comes back)", [
        Step("run a command that asks for a password",
             "read -r -s -p 'Password: ' pw; echo; echo length=${#pw}", "input",
             contains=["Password:"]),
        Step("type the password", SECRET, "done", exit_code=0, contains=["length=14"]),
    ], secret=SECRET),
    Scenario("pager", "a pager holding the terminal", [
        Step("page a long output", "seq 1 300 | less", "screen", lines=["1", "2", "3"]),
        Step("leave the pager", "q", "done", submit=False),
    ]),
    Scenario("repl", "a Python REPL with an exception", [
        Step("start Python", "python3 -q", "input", contains=[">>>"]),
        Step("run failing code", "1/0", "input", contains=["ZeroDivisionError"]),
        Step("leave the REPL", "exit()", "done"),
    ]),
    Scenario("build", "a 20-second build ending with exit code 2", [
        Step("run the build",
             "for i in $(seq 1 20); do echo \"compiling unit $i\"; sleep 1; done; "
             "echo 'error: unit 20 failed'; (exit 2)",
             "done", kind="command", exit_code=2, contains=["error: unit 20 failed"],
             deadline=90),
    ]),
    Scenario("runaway", "200 MB of runaway output", [
        Step("run a command that prints 200 MB",
             "head -c 200000000 /dev/zero | tr '\\0' 'x' | fold -w 100; echo RUNAWAY-END",
             "done", kind="command", exit_code=0, contains=["RUNAWAY-END"], deadline=120),
    ]),
    Scenario("hung", "a command hung without output (a network call)", [
        Step("run a command that hangs on a socket",
             "python3 -c \"import socket; a = socket.socket(); a.bind(('127.0.0.1', 0)); "
             "a.listen(); b = socket.create_connection(a.getsockname()); b.recv(1)\"",
             "busy", kind="command", deadline=8),
        Step("interrupt it", "\x03", "done", submit=False, exit_code=130),
    ]),
    Scenario("fullscreen", "a full-screen program waiting for a key", [
        Step("start the program", "python3 fullscreen.py", "screen",
             lines=["status: waiting for a key", "[r] reset   [q] quit"]),
        Step("press q", "q", "done", submit=False, contains=["left the full-screen program"]),
    ], files={"fullscreen.py": FULLSCREEN}),
    Scenario("stdin", "a program reading stdin without a prompt", [
        Step("run a program that reads a line",
             "python3 -c \"import sys; line = sys.stdin.readline(); "
             "print('read', len(line.strip()))\"", "input"),
        Step("give it the line", "hello", "done", exit_code=0, contains=["read 5"]),
    ]),
    Scenario("background", "a background job printing later", [
        Step("start a background job", "(sleep 3; echo BG-DONE) &", "done", kind="command",
             exit_code=0),
        Step("look again later", None, "done", pause_before=4.5, contains=["BG-DONE"]),
    ]),
]
