#!/usr/bin/env python3
"""A minimal WebSocket client for ptyhub's live connections (docs/websocket.md), and the
watcher process of the fan-out benchmark. Python 3 standard library only.

As a module (bench/run.py imports it): `connect()` opens a WebSocket (RFC 6455, client side)
over a unix socket or TCP, `FrameParser` turns the bytes the server sends into messages
(binary payloads are handed over piece by piece, never reassembled or copied).

As a program, `python3 bench/live_client.py drain CONFIG_JSON` is the watcher side of the
fan-out workload: one process reading many live streams at once, so that the watchers'
own CPU stays small next to the server's. The streams are either W WebSocket connections it
opens itself (`"kind": "ws"`: binary transport, read-only `mode=watch`) or file descriptors it
inherits (`"kind": "fds"`: stdout pipes of `ptyhub terminal watch` processes, PTY masters of
`tmux attach -r` clients). For every stream it counts the bytes, finds the end marker and
notes when it arrived (CLOCK_MONOTONIC, comparable with the harness's `time.monotonic()`),
and for WebSocket streams counts `lagged` and `error` frames.

Protocol with the harness, one JSON line each on stdout:
  1. {"event": "ready", ...} once every stream is live (WebSocket: its `ready` frame arrived;
     fds: the first byte arrived, i.e. the client is connected and has drawn its first screen);
  2. the harness writes `finish SECONDS\\n` on stdin once the producer is done;
  3. {"event": "report", ...} once every stream has shown the marker (or ended, or the time
     is up); streams listed in "keep" are written whole to the files named there.
"""

from __future__ import annotations

import base64
import errno
import hashlib
import json
import os
import selectors
import socket
import sys
import time

WS_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
OP_CONT, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0, 1, 2, 8, 9, 10
READ_BYTES = 256 * 1024
# The end marker is followed only by the next prompt, so it lies within this many bytes of
# the end of the read that brings it; scanning only there keeps the cost per byte flat.
MARKER_SCAN_BYTES = 64 * 1024


class WsError(Exception):
    pass


def connect(path_query: str, unix: str | None = None, tcp: tuple[str, int] | None = None,
            token: str | None = None, timeout: float = 30.0) -> tuple[socket.socket, bytes]:
    """Opens a WebSocket and completes the handshake. Returns the (blocking) socket and the
    bytes that arrived after the handshake's answer (the start of the first frames)."""
    if unix:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        host = "localhost"
        target = unix
    elif tcp:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        host = f"{tcp[0]}:{tcp[1]}"
        target = tcp
    else:
        raise ValueError("connect needs unix or tcp")
    sock.settimeout(timeout)
    try:
        sock.connect(target)
        key = base64.b64encode(os.urandom(16))
        lines = [f"GET {path_query} HTTP/1.1", f"Host: {host}", "Upgrade: websocket",
                 "Connection: Upgrade", f"Sec-WebSocket-Key: {key.decode()}",
                 "Sec-WebSocket-Version: 13"]
        if token:
            lines.append(f"Authorization: Bearer {token}")
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        buf = b""
        while b"\r\n\r\n" not in buf:
            chunk = sock.recv(65536)
            if not chunk:
                raise WsError(f"connection closed during the handshake: {buf[:300]!r}")
            buf += chunk
        head, rest = buf.split(b"\r\n\r\n", 1)
        status, *header_lines = head.decode("latin-1").split("\r\n")
        parts = status.split()
        if len(parts) < 2 or parts[1] != "101":
            raise WsError(f"handshake refused: {status!r} {rest[:300]!r}")
        headers = {}
        for line in header_lines:
            if ":" in line:
                k, v = line.split(":", 1)
                headers[k.strip().lower()] = v.strip()
        accept = base64.b64encode(hashlib.sha1(key + WS_GUID).digest()).decode()
        if headers.get("sec-websocket-accept") != accept:
            raise WsError("handshake answer has a wrong Sec-WebSocket-Accept")
        return sock, rest
    except BaseException:
        sock.close()
        raise


def send_frame(sock: socket.socket, opcode: int, payload: bytes = b"") -> None:
    """Sends one whole client frame (masked, as RFC 6455 requires of clients)."""
    n = len(payload)
    head = bytearray([0x80 | opcode])
    if n < 126:
        head.append(0x80 | n)
    elif n < 1 << 16:
        head.append(0x80 | 126)
        head += n.to_bytes(2, "big")
    else:
        head.append(0x80 | 127)
        head += n.to_bytes(8, "big")
    mask = os.urandom(4)
    head += mask
    masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    sock.sendall(bytes(head) + masked)


class FrameParser:
    """Incremental parser of the frames a server sends (never masked).

    `feed(data)` returns the messages completed by `data` as (opcode, payload) pairs: text,
    close, ping and pong payloads whole; for a binary message (OP_BINARY, None) once its last
    frame ends, its payload having gone to `on_binary(memoryview)` piece by piece.
    """

    def __init__(self, on_binary):
        self.on_binary = on_binary
        self.head = bytearray()
        self.left = 0          # payload bytes left in the current frame
        self.op = None         # the current frame's opcode (a continuation's message opcode)
        self.fin = False
        self.message_op = None  # opcode of the fragmented data message in progress
        self.text = bytearray()
        self.control = bytearray()

    def feed(self, data) -> list[tuple[int, bytes | None]]:
        out: list[tuple[int, bytes | None]] = []
        mv = memoryview(data)
        i, n = 0, len(mv)
        while i < n:
            if self.op is not None:  # inside a payload
                take = min(self.left, n - i)
                piece = mv[i:i + take]
                if self.op == OP_BINARY:
                    self.on_binary(piece)
                elif self.op == OP_TEXT:
                    self.text += piece
                else:
                    self.control += piece
                self.left -= take
                i += take
                if self.left == 0:
                    self._end_frame(out)
                continue
            h = self.head
            want = 2
            if len(h) >= 2:
                l7 = h[1] & 0x7F
                want = 2 + (2 if l7 == 126 else 8 if l7 == 127 else 0) + (4 if h[1] & 0x80 else 0)
            if len(h) < want:
                take = min(want - len(h), n - i)
                h += mv[i:i + take]
                i += take
                if len(h) < want or want == 2:
                    continue  # with two bytes, look again: the length may need more
            if h[1] & 0x80:
                raise WsError("the server sent a masked frame")
            l7 = h[1] & 0x7F
            length = (int.from_bytes(h[2:4], "big") if l7 == 126 else
                      int.from_bytes(h[2:10], "big") if l7 == 127 else l7)
            op = h[0] & 0x0F
            self.fin = bool(h[0] & 0x80)
            self.head = bytearray()
            if op == OP_CONT:
                if self.message_op is None:
                    raise WsError("a continuation frame outside a message")
                op = self.message_op
            elif op in (OP_TEXT, OP_BINARY):
                if self.message_op is not None:
                    raise WsError("a new data message inside a fragmented one")
                self.message_op = op
            elif op not in (OP_CLOSE, OP_PING, OP_PONG):
                raise WsError(f"unknown opcode {op}")
            self.op = op
            self.left = length
            if length == 0:
                self._end_frame(out)
        return out

    def _end_frame(self, out):
        op = self.op
        self.op = None
        if op in (OP_TEXT, OP_BINARY):
            if self.fin:
                self.message_op = None
                if op == OP_TEXT:
                    out.append((OP_TEXT, bytes(self.text)))
                    self.text = bytearray()
                else:
                    out.append((OP_BINARY, None))
        else:
            out.append((op, bytes(self.control)))
            self.control = bytearray()


# --------------------------------------------------------------------------------------------
# the fan-out watcher process
# --------------------------------------------------------------------------------------------

class Stream:
    """One watcher's stream: byte count, end-marker arrival, control frames."""

    def __init__(self, index: int, fd: int, marker: bytes, keep: bool, sock=None):
        self.index = index
        self.fd = fd
        self.sock = sock
        self.marker = marker
        self.carry = b""
        self.bytes = 0
        self.first_at = None
        self.last_at = None
        self.marker_at = None
        self.bytes_to_marker = None
        self.kept = bytearray() if keep else None
        self.is_ready = sock is None  # fds: ready at their first byte
        self.is_ended = False
        self.end_reason = None
        self.lagged = 0
        self.errors: list[str] = []
        self.exit = None
        self.frames = 0
        self.now = 0.0
        self.parser = FrameParser(self.on_data) if sock is not None else None

    def on_data(self, piece) -> None:
        n = len(piece)
        if not n:
            return
        self.bytes += n
        self.last_at = self.now
        if self.first_at is None:
            self.first_at = self.now
        if self.kept is not None:
            self.kept += piece
        if self.marker_at is None:
            m = len(self.marker)
            if n <= MARKER_SCAN_BYTES:
                window = self.carry + bytes(piece)
            else:
                window = bytes(piece[-MARKER_SCAN_BYTES:])
            at = window.find(self.marker)
            if at >= 0:
                self.marker_at = self.now
                # What follows the marker (the next prompt) may still be on its way when the
                # report is made: streams are compared up to the marker's end.
                self.bytes_to_marker = self.bytes - (len(window) - at - m)
            self.carry = window[-(m - 1):]

    def on_read(self, data: bytes, now: float) -> None:
        self.now = now
        if self.parser is None:
            self.on_data(memoryview(data))
            return
        for op, payload in self.parser.feed(data):
            if op == OP_BINARY:
                self.frames += 1
            elif op == OP_TEXT:
                self.on_text(payload)
            elif op == OP_PING:
                send_frame(self.sock, OP_PONG, payload)
            elif op == OP_CLOSE:
                self.end("close frame")

    def on_text(self, payload: bytes) -> None:
        try:
            frame = json.loads(payload)
        except ValueError:
            self.errors.append(f"not JSON: {payload[:100]!r}")
            return
        kind = frame.get("type")
        if kind == "ready":
            self.is_ready = True
        elif kind == "lagged":
            self.lagged += 1
        elif kind == "error":
            self.errors.append(f"{frame.get('code')}: {frame.get('data')}")
        elif kind == "exit":
            self.exit = frame
        elif kind in ("output", "restore_output"):
            self.errors.append("a JSON output frame on the binary transport")
        elif kind in ("terminal_restored", "presence"):
            # presence: who else is connected, sent on joins and leaves (docs/websocket.md).
            pass
        else:
            self.errors.append(f"unexpected frame {kind!r}")

    def end(self, reason: str) -> None:
        if not self.is_ended:
            self.is_ended = True
            self.end_reason = reason

    def report(self) -> dict:
        return {"index": self.index, "bytes": self.bytes, "bytes_to_marker": self.bytes_to_marker,
                "first_at": self.first_at,
                "last_at": self.last_at, "marker_at": self.marker_at, "ended": self.end_reason,
                "lagged": self.lagged, "errors": self.errors[:5], "frames": self.frames}


def emit(doc: dict) -> None:
    sys.stdout.write(json.dumps(doc) + "\n")
    sys.stdout.flush()


def drain(config: dict) -> int:
    cpu0 = time.process_time()
    marker = config["marker"].encode()
    keep = {int(k): v for k, v in (config.get("keep") or {}).items()}
    streams: list[Stream] = []
    sel = selectors.DefaultSelector()
    started = time.monotonic()
    if config["kind"] == "ws":
        for i in range(config["n"]):
            sock, rest = connect(config["path"], unix=config.get("unix"),
                                 tcp=tuple(config["tcp"]) if config.get("tcp") else None,
                                 token=config.get("token"))
            sock.setblocking(False)
            s = Stream(i, sock.fileno(), marker, i in keep, sock=sock)
            streams.append(s)
            if rest:
                s.on_read(rest, time.monotonic())
    else:
        for i, fd in enumerate(config["fds"]):
            os.set_blocking(fd, False)
            streams.append(Stream(i, fd, marker, i in keep))
    by_fd = {s.fd: s for s in streams}
    for s in streams:
        sel.register(s.fd, selectors.EVENT_READ, s)
    sel.register(sys.stdin.fileno(), selectors.EVENT_READ, None)
    connected_s = time.monotonic() - started
    ready_deadline = time.monotonic() + float(config.get("ready_timeout", 60))
    is_ready_sent = False
    finish_deadline = None
    finish_at = None
    stdin_buf = b""
    while True:
        now = time.monotonic()
        if not is_ready_sent:
            waiting = [s.index for s in streams if not s.is_ready]
            if not waiting or now > ready_deadline:
                emit({"event": "ready", "streams": len(streams), "not_ready": waiting,
                      "connect_s": connected_s, "ready_s": now - started})
                is_ready_sent = True
        if finish_deadline is not None:
            pending = [s for s in streams if s.marker_at is None and not s.is_ended]
            if not pending or now > finish_deadline:
                break
            timeout = max(0.0, finish_deadline - now)
        else:
            timeout = None if is_ready_sent else max(0.0, ready_deadline - now)
        for key, _ in sel.select(timeout):
            s = key.data
            if s is None:
                chunk = os.read(sys.stdin.fileno(), 4096)
                if not chunk:  # the harness went away
                    finish_deadline = finish_deadline or time.monotonic()
                    continue
                stdin_buf += chunk
                while b"\n" in stdin_buf:
                    line, stdin_buf = stdin_buf.split(b"\n", 1)
                    words = line.decode().split()
                    if words and words[0] == "finish":
                        finish_at = time.monotonic()
                        finish_deadline = finish_at + float(words[1] if len(words) > 1 else 60)
                continue
            try:
                data = os.read(s.fd, READ_BYTES)
            except BlockingIOError:
                continue
            except OSError as e:
                if e.errno != errno.EIO:  # EIO: a PTY whose client is gone
                    s.errors.append(f"read: {e}")
                data = b""
            if not data:
                s.end("eof")
                sel.unregister(s.fd)
                continue
            try:
                s.on_read(data, time.monotonic())
            except (WsError, OSError) as e:
                s.errors.append(str(e))
                s.end("protocol error")
                sel.unregister(s.fd)
    done = time.monotonic()
    for i, path in keep.items():
        if i < len(streams):
            with open(path, "wb") as f:
                f.write(streams[i].kept)
    cpu = time.process_time() - cpu0
    emit({"event": "report", "streams": [s.report() for s in streams],
          "finish_wait_s": (done - finish_at) if finish_at else None, "cpu_s": cpu})
    for s in by_fd.values():
        try:
            if s.sock is not None:
                s.sock.close()
            else:
                os.close(s.fd)
        except OSError:
            pass
    return 0


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[1] == "drain":
        return drain(json.loads(argv[2]))
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
