// One terminal in the browser: xterm.js (fit, unicode11) on the WebSocket of docs/websocket.md,
// as an `attach` peer (typing works) or, with `?mode=watch`, a read-only `watch` peer.
//
// Flow at a glance:
// 1. Sign in if needed (login.js) and check the terminal exists (GET /v2/pty/sessions/{id}).
// 2. Connect with `restore=true`: the retained history repaints the fresh xterm.
// 3. Write every `restore_output` and `output` frame and remember its `seq`.
// 4. When the socket drops, reconnect with backoff and `since_seq=<last seq>`: what was missed
//    arrives exactly once. If the log no longer has it (an `error` frame with
//    `CURSOR_EXPIRED`), reset and restore.
// 5. `exit` ends the connection for good; the connection state, `error` and `lagged` show in a
//    small status line. A server that stops (a restart, an upgrade) says why in a
//    `server_stopping` frame and its close (code 1012): the reason shows while the page
//    reconnects, and after it ("resumed after: server restarting").
// 6. "replay this command" opens the playback at the command running (or last run) at the
//    last event shown (`/play?…&at_seq=<last seq>`).
// 7. `presence` frames show who holds the keyboard (the input lease), who watches and who is
//    typing; the button takes the keyboard (from whoever holds it) or hands it back. While
//    someone else holds it, typing is refused on the page with a status line, not sent.
'use strict';

(() => {
  const RECONNECT_FIRST_MS = 250;
  const RECONNECT_MAX_MS = 8000;
  const PING_EVERY_MS = 20000;
  const PONG_WITHIN_MS = 10000;
  // The close code of a server that stops and asks its clients to come back (RFC 6455).
  const SERVER_RESTART_CODE = 1012;
  // Error codes that refuse a connection for good.
  const FATAL = new Set(['SESSION_NOT_FOUND', 'SESSION_NOT_RUNNING', 'PERMISSION_DENIED', 'INVALID_INPUT']);

  const query = new URLSearchParams(location.search);
  const id = query.get('session_id') || '';
  const mode = query.get('mode') === 'watch' ? 'watch' : 'attach';
  const isWatcher = mode === 'watch';
  const status = document.getElementById('status');

  const term = new Terminal({
    allowProposedApi: true, // the unicode11 addon registers through a proposed API
    disableStdin: isWatcher,
    cursorBlink: !isWatcher,
    scrollback: 10000,
    fontFamily: 'ui-monospace, "DejaVu Sans Mono", "Liberation Mono", Menlo, Consolas, monospace',
    fontSize: 14,
  });
  const fit = new FitAddon.FitAddon();
  term.loadAddon(fit);
  term.loadAddon(new Unicode11Addon.Unicode11Addon());
  term.unicode.activeVersion = '11';

  let socket = null;
  let lastSeq = null; // `seq` of the last output frame written to xterm
  let attempt = 0; // reconnects since the last `ready`
  let isFinished = false;
  let pingTimer = null;
  let pongTimer = null;
  let presence = null; // the last `presence` frame
  let stopReason = null; // why the server ended the last connection (it stopped), if it said
  const keyboard = document.getElementById('keyboard');
  const watchers = document.getElementById('watchers');
  const typing = document.getElementById('typing');
  const leaseButton = document.getElementById('lease');
  const presenceLine = document.getElementById('presence');

  // For tests and the browser console.
  window.ptyhub = {
    terminal: term,
    mode,
    get socket() { return socket; },
    get lastSeq() { return lastSeq; },
    get presence() { return presence; },
    get stopReason() { return stopReason; },
    takeKeyboard,
    releaseKeyboard,
  };

  // Whether this page holds the keyboard, and whether someone else does.
  function holdsKeyboard() {
    return Boolean(presence && presence.lease && presence.lease.connection === presence.you);
  }

  function otherHolder() {
    if (!presence || !presence.lease || holdsKeyboard()) return null;
    return presence.lease.by;
  }

  function takeKeyboard() {
    send(otherHolder() ? { type: 'lease_take', force: true } : { type: 'lease_take' });
  }

  function releaseKeyboard() {
    send({ type: 'lease_release' });
  }

  function showPresence(frame) {
    presence = frame;
    const lease = frame.lease;
    if (!lease) keyboard.textContent = 'keyboard: free';
    else if (holdsKeyboard()) keyboard.textContent = 'keyboard: you';
    else keyboard.textContent = `keyboard: ${lease.by} (${lease.via})`;
    presenceLine.dataset.keyboard = !lease ? 'free' : holdsKeyboard() ? 'you' : 'other';
    const others = (frame.connections || []).filter((c) => c.id !== frame.you);
    const watching = others.filter((c) => c.mode === 'watch').map((c) => c.by);
    const writing = others.filter((c) => c.mode !== 'watch').map((c) => c.by);
    const parts = [];
    if (writing.length) parts.push(`also typing here: ${writing.join(', ')}`);
    if (watching.length) parts.push(`watching: ${watching.join(', ')}`);
    watchers.textContent = parts.join(' · ');
    const last = frame.last_input;
    typing.textContent = last && last.is_typing ? `${last.by || 'someone'} is typing (${last.via || '?'})` : '';
    if (!isWatcher) {
      leaseButton.hidden = false;
      leaseButton.textContent = holdsKeyboard() ? 'release the keyboard' : 'take the keyboard';
    }
  }

  // Typing while someone else holds the keyboard: say so instead of losing keys silently.
  function typeOrRefuse(data) {
    const holder = otherHolder();
    if (holder) {
      setStatus('refused', `typing refused: ${holder} holds the keyboard (take it to type)`);
      return;
    }
    send({ type: 'input', data });
  }

  function setStatus(state, text) {
    status.dataset.state = state;
    status.textContent = text;
  }

  function socketUrl() {
    const scheme = location.protocol === 'https:' ? 'wss:' : 'ws:';
    const params = new URLSearchParams({ mode });
    if (lastSeq === null) params.set('restore', 'true');
    else params.set('since_seq', String(lastSeq));
    return `${scheme}//${location.host}/v2/pty/sessions/${encodeURIComponent(id)}/ws?${params}`;
  }

  function send(frame) {
    if (socket && socket.readyState === WebSocket.OPEN) socket.send(JSON.stringify(frame));
  }

  function finish(state, text) {
    isFinished = true;
    stopPing();
    setStatus(state, text);
    if (socket) socket.close();
    socket = null;
  }

  function connect() {
    const ws = new WebSocket(socketUrl());
    socket = ws;
    let isReady = false;
    let refusal = null;
    ws.onmessage = (event) => {
      if (ws !== socket || typeof event.data !== 'string') return;
      let frame;
      try {
        frame = JSON.parse(event.data);
      } catch {
        return;
      }
      if (frame.type === 'ready') isReady = true;
      if (frame.type === 'error' && (!isReady || frame.code === 'CURSOR_EXPIRED')) refusal = frame;
      handle(frame);
    };
    ws.onclose = (event) => {
      if (ws !== socket) return; // replaced or abandoned
      if (event && event.code === SERVER_RESTART_CODE && event.reason) stopReason = event.reason;
      socket = null;
      stopPing();
      if (!isFinished) reconnect(isReady, refusal);
    };
  }

  function handle(frame) {
    switch (frame.type) {
      case 'ready':
        attempt = 0;
        {
          const state = isWatcher ? 'watching (read-only)' : 'connected';
          setStatus('connected', stopReason ? `${state}, resumed after: ${stopReason}` : state);
        }
        if (isWatcher) term.resize(frame.cols, frame.rows);
        else send({ type: 'resize', cols: term.cols, rows: term.rows });
        startPing();
        break;
      case 'restore_output':
      case 'output':
        term.write(frame.data);
        lastSeq = frame.seq;
        break;
      case 'resize':
        if (isWatcher) term.resize(frame.cols, frame.rows);
        break;
      case 'server_stopping':
        // The server says up to where this page has every byte: resume from there.
        stopReason = frame.reason;
        if (frame.seq !== null && (lastSeq === null || frame.seq > lastSeq)) lastSeq = frame.seq;
        setStatus('reconnecting', `${frame.reason}: reconnecting…`);
        break;
      case 'lagged':
        setStatus('connected', 'catching up from the log…');
        break;
      case 'exit': {
        const how = frame.signal ? `signal ${frame.signal}` : `code ${frame.exit_code}`;
        finish('exited', `exited (${how})`);
        break;
      }
      case 'error':
        setStatus(status.dataset.state, `error: ${frame.data}`);
        break;
      case 'presence':
        showPresence(frame);
        if (status.dataset.state === 'refused' && !otherHolder()) setStatus('connected', 'connected');
        break;
      case 'pong':
        clearTimeout(pongTimer);
        pongTimer = null;
        break;
      default:
        break; // terminal_restored, session_id, and frames this page does not use
    }
  }

  // A connection that answers no `ping` is abandoned (a closing handshake on a dead link can
  // take minutes) and replaced.
  function startPing() {
    stopPing();
    pingTimer = setInterval(() => {
      send({ type: 'ping', timestamp: Date.now() });
      if (pongTimer === null) {
        pongTimer = setTimeout(() => {
          const dead = socket;
          if (!dead) return;
          socket = null;
          stopPing();
          dead.close();
          reconnect(true, null);
        }, PONG_WITHIN_MS);
      }
    }, PING_EVERY_MS);
  }

  function stopPing() {
    clearInterval(pingTimer);
    clearTimeout(pongTimer);
    pingTimer = null;
    pongTimer = null;
  }

  async function reconnect(wasReady, refusal) {
    if (refusal && FATAL.has(refusal.code)) {
      finish('error', `error: ${refusal.data}`);
      return;
    }
    if (refusal && refusal.code === 'CURSOR_EXPIRED') restoreAfresh();
    attempt += 1;
    const delay = Math.min(RECONNECT_MAX_MS, RECONNECT_FIRST_MS * 2 ** (attempt - 1));
    const again = attempt > 1 ? `reconnecting (attempt ${attempt})…` : 'reconnecting…';
    setStatus('reconnecting', stopReason ? `${stopReason}: ${again}` : again);
    await new Promise((resolve) => setTimeout(resolve, delay * (0.8 + 0.4 * Math.random())));
    if (isFinished) return;
    const there = await terminalIsThere(wasReady);
    if (there === false) return;
    connect();
  }

  // The next connection repaints from the retained history instead of resuming at `seq`.
  function restoreAfresh() {
    term.reset();
    lastSeq = null;
  }

  // Asks REST about the terminal, signing in again if the login ended (say, the server
  // restarted). Returns true (it is there), false (it is not; the page says why), or null (the
  // server does not answer).
  async function terminalIsThere(wasReady) {
    let response;
    try {
      response = await ptyhubLogin.whenSignedIn(() => fetch(`/v2/pty/sessions/${encodeURIComponent(id)}`));
    } catch {
      return null;
    }
    if (response.status === 404) {
      finish('error', `no terminal "${id}"`);
      return false;
    }
    if (!response.ok) return null;
    const info = (await response.json().catch(() => null) || {}).data;
    // An ended terminal still gets one connection (its last output and its `exit`).
    if (info && (info.closed || info.state === 'exited' || info.state === 'error') && !wasReady && attempt > 1) {
      finish('exited', `ended (${info.state})`);
      return false;
    }
    return true;
  }

  const replay = document.getElementById('replay');
  replay.addEventListener('click', () => {
    const params = new URLSearchParams({ session_id: id });
    if (lastSeq !== null) params.set('at_seq', String(lastSeq));
    replay.href = `/play?${params}`;
  });

  function fitToWindow() {
    if (!isWatcher) fit.fit();
  }

  (async () => {
    document.title = `${id} · ptyhub`;
    term.open(document.getElementById('terminal'));
    fitToWindow();
    let pending = false;
    window.addEventListener('resize', () => {
      if (pending) return;
      pending = true;
      requestAnimationFrame(() => {
        pending = false;
        fitToWindow();
      });
    });
    if (!isWatcher) {
      term.onData(typeOrRefuse);
      leaseButton.addEventListener('click', () => {
        if (holdsKeyboard()) releaseKeyboard();
        else takeKeyboard();
        term.focus();
      });
      term.onResize(({ cols, rows }) => send({ type: 'resize', cols, rows }));
    }
    if (!id) {
      finish('error', 'no session_id in the address');
      return;
    }
    if ((await terminalIsThere(false)) === false) return;
    connect();
    term.focus();
  })();
})();
