// The web terminal page (crates/server/assets/terminal.js) against the frame fixtures of
// crates/protocol/tests/fixtures/live/: the page's own code runs in a Node `vm` context with
// stand-ins for the browser (xterm.js, WebSocket, fetch, timers), no browser needed.
//
// Run by the Rust test `live_frames::the_web_page_sends_and_handles_the_fixture_shapes` with
// PTYHUB_FIXTURES (the fixtures folder) and PTYHUB_PAGE (terminal.js); node's built-in test
// runner, no packages.
//
// 1. Every frame the page sends (input, resize, ping, lease_take, lease_release) has a client
//    fixture and its shape: the same fields with the same JSON types.
// 2. Every frame type the page switches on is a server frame with a fixture, and every server
//    frame is either handled or listed below as one the page ignores on purpose.
// 3. Fed each server fixture, the page does what the frame says with the fixture's fields
//    (writes output and remembers its seq, follows a resize when watching, shows an exit's
//    code or signal, shows an error's text, clears the pong timer).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import vm from 'node:vm';

const FIXTURES = process.env.PTYHUB_FIXTURES;
const PAGE = process.env.PTYHUB_PAGE;
assert.ok(FIXTURES && PAGE, 'PTYHUB_FIXTURES and PTYHUB_PAGE must be set');

// Server frames the page has no use for (its `default:` branch).
const IGNORED = new Set(['terminal_restored', 'session_id', 'relay_replaced', 'exec_result']);
// Client frames for programs (an agent's commands), which a person's page never sends.
const NOT_SENT = new Set(['exec']);

function loadFixtures(side) {
  const frames = new Map();
  for (const file of readdirSync(join(FIXTURES, side))) {
    if (!file.endsWith('.json')) continue;
    frames.set(file.slice(0, -'.json'.length), JSON.parse(readFileSync(join(FIXTURES, side, file), 'utf8')));
  }
  return frames;
}

const serverFrames = loadFixtures('server');
const clientFrames = loadFixtures('client');
const serverTypes = new Set([...serverFrames.values()].map((f) => f.type));
const pageSource = readFileSync(PAGE, 'utf8');

function jsonType(value) {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'array';
  return typeof value;
}

// The frame's fields and their JSON types, e.g. {type: 'string', cols: 'number'}.
function shape(frame) {
  return Object.fromEntries(Object.entries(frame).map(([k, v]) => [k, jsonType(v)]).sort());
}

// The client fixtures of a type (its usual shape and other cases, e.g. `ping.no_timestamp`).
function clientShapes(type) {
  return [...clientFrames.entries()]
    .filter(([name]) => name.split('.')[0] === type)
    .map(([, frame]) => shape(frame));
}

// Runs terminal.js in a fresh context; returns what it did and handles to drive it.
async function openPage(mode) {
  const sockets = [];
  const writes = [];
  const resizes = [];
  const timers = new Map();
  let nextTimer = 1;
  const terminal = {
    cols: 120,
    rows: 40,
    unicode: {},
    onDataHandler: null,
    onResizeHandler: null,
  };
  class Terminal {
    constructor() {
      return Object.assign(this, terminal);
    }
    loadAddon() {}
    open() {}
    focus() {}
    reset() {}
    write(data) { writes.push(data); }
    resize(cols, rows) { resizes.push({ cols, rows }); }
    onData(handler) { this.onDataHandler = handler; }
    onResize(handler) { this.onResizeHandler = handler; }
  }
  class FakeSocket {
    static OPEN = 1;
    constructor(url) {
      this.url = url;
      this.readyState = FakeSocket.OPEN;
      this.sent = [];
      sockets.push(this);
    }
    send(text) { this.sent.push(JSON.parse(text)); }
    close() { this.readyState = 3; }
  }
  const status = { dataset: {}, textContent: '' };
  const window = { addEventListener() {} };
  const schedule = (kind) => (callback, ms) => {
    const id = nextTimer++;
    timers.set(id, { kind, callback, ms });
    return id;
  };
  const cancel = (id) => { timers.delete(id); };
  const context = vm.createContext({
    window,
    // Any other element of the page (the "replay this command" link, say) takes listeners.
    document: {
      getElementById: (id) => (id === 'status' ? status : { dataset: {}, addEventListener() {} }),
      title: '',
    },
    location: { search: `?session_id=work-1&mode=${mode}`, protocol: 'http:', host: 'localhost:1' },
    Terminal,
    FitAddon: { FitAddon: class { fit() {} } },
    Unicode11Addon: { Unicode11Addon: class {} },
    WebSocket: FakeSocket,
    URLSearchParams,
    fetch: async () => ({ status: 200, ok: true, json: async () => ({ data: { state: 'running', closed: false } }) }),
    ptyhubLogin: { whenSignedIn: (request) => request() },
    requestAnimationFrame: (callback) => callback(),
    setInterval: schedule('interval'),
    setTimeout: schedule('timeout'),
    clearInterval: cancel,
    clearTimeout: cancel,
    console,
  });
  vm.runInContext(pageSource, context, { filename: PAGE });
  for (let i = 0; i < 10 && sockets.length === 0; i += 1) await new Promise((resolve) => setImmediate(resolve));
  assert.equal(sockets.length, 1, `the ${mode} page connected`);
  const socket = sockets[0];
  const term = window.ptyhub.terminal;
  return {
    socket,
    term,
    writes,
    resizes,
    timers,
    status,
    page: window.ptyhub,
    deliver(frame) { socket.onmessage({ data: JSON.stringify(frame) }); },
    runTimers(kind) {
      for (const timer of [...timers.values()]) if (timer.kind === kind) timer.callback();
    },
  };
}

function checkSent(sent) {
  assert.ok(sent.length > 0, 'the page sent frames');
  for (const frame of sent) {
    const shapes = clientShapes(frame.type);
    assert.ok(shapes.length > 0, `the page sends \`${frame.type}\`, which has no client fixture`);
    assert.ok(
      shapes.some((s) => JSON.stringify(s) === JSON.stringify(shape(frame))),
      `the page's \`${frame.type}\` frame ${JSON.stringify(frame)} is shaped like none of its fixtures ${JSON.stringify(shapes)}`,
    );
  }
}

test('every frame type the page reads is a server frame, and every server frame is handled or ignored on purpose', () => {
  const read = new Set([
    ...[...pageSource.matchAll(/case '([a-z_]+)':/g)].map((m) => m[1]),
    ...[...pageSource.matchAll(/frame\.type === '([a-z_]+)'/g)].map((m) => m[1]),
  ]);
  assert.ok(read.size > 0, 'found the page\'s frame switch');
  for (const type of read) assert.ok(serverTypes.has(type), `the page handles \`${type}\`, which the server never sends`);
  for (const type of serverTypes) {
    assert.ok(read.has(type) || IGNORED.has(type), `the server sends \`${type}\`, which the page neither handles nor ignores on purpose`);
  }
  for (const type of IGNORED) {
    assert.ok(serverTypes.has(type), `\`${type}\` is ignored but is no server frame`);
    assert.ok(!read.has(type), `\`${type}\` is both ignored and handled`);
  }
  for (const name of serverFrames.keys()) {
    assert.ok(serverTypes.has(name.split('.')[0]), `fixture ${name} names its type`);
  }
});

test('an attach page sends input, resize and ping shaped as their fixtures and handles every server frame', async () => {
  const page = await openPage('attach');
  assert.match(page.socket.url, /\/v2\/pty\/sessions\/work-1\/ws\?mode=attach&restore=true$/);
  page.deliver(serverFrames.get('ready'));
  assert.equal(page.status.dataset.state, 'connected');
  assert.ok(page.socket.sent.some((f) => f.type === 'resize'), 'ready makes an attach page send its size');
  page.term.onDataHandler('ls\n');
  page.term.onResizeHandler({ cols: 99, rows: 33 });
  page.runTimers('interval');
  // The keyboard: free, it takes it plainly; held by another, it takes it over (force); held
  // by the page, typing goes out; someone else's lease refuses typing on the page.
  page.deliver(serverFrames.get('presence.alone'));
  page.page.takeKeyboard();
  assert.deepEqual(page.socket.sent.at(-1), { type: 'lease_take' });
  const presence = serverFrames.get('presence');
  page.deliver(presence);
  assert.equal(JSON.stringify(page.page.presence), JSON.stringify(presence), 'the page keeps the last presence');
  const before = page.socket.sent.length;
  page.term.onDataHandler('refused\n');
  assert.equal(page.socket.sent.length, before, 'typing while another holds the keyboard is not sent');
  assert.match(page.status.textContent, new RegExp(`typing refused: ${presence.lease.by}`));
  page.page.takeKeyboard();
  assert.deepEqual(page.socket.sent.at(-1), { type: 'lease_take', force: true });
  page.deliver({ ...presence, you: presence.lease.connection });
  page.page.releaseKeyboard();
  assert.deepEqual(page.socket.sent.at(-1), { type: 'lease_release' });
  page.deliver(serverFrames.get('presence.alone'));
  const sentTypes = new Set(page.socket.sent.map((f) => f.type));
  for (const type of ['input', 'resize', 'ping']) assert.ok(sentTypes.has(type), `the page sent ${type}`);
  assert.deepEqual(page.socket.sent.find((f) => f.type === 'input'), { type: 'input', data: 'ls\n' });
  checkSent(page.socket.sent);
  for (const type of new Set([...clientFrames.values()].map((f) => f.type))) {
    if (NOT_SENT.has(type)) continue;
    assert.ok(sentTypes.has(type), `the client frame \`${type}\` has a fixture but the page never sends it`);
  }

  const pongTimers = () => [...page.timers.values()].filter((t) => t.kind === 'timeout' && t.ms === 10000);
  assert.equal(pongTimers().length, 1, 'a ping waits for its pong');
  page.deliver(serverFrames.get('pong'));
  assert.equal(pongTimers().length, 0, 'the pong cleared the wait');

  for (const name of ['restore_output', 'output']) {
    const frame = serverFrames.get(name);
    page.deliver(frame);
    assert.equal(page.writes.at(-1), frame.data, `${name}: its data is written`);
    assert.equal(page.page.lastSeq, frame.seq, `${name}: its seq is remembered`);
  }
  const writes = page.writes.length;
  for (const name of ['terminal_restored', 'session_id', 'relay_replaced', 'resize']) page.deliver(serverFrames.get(name));
  assert.equal(page.writes.length, writes, 'frames without output write nothing');
  assert.equal(page.resizes.length, 0, 'an attach page keeps its own size');

  page.deliver(serverFrames.get('lagged'));
  assert.match(page.status.textContent, /catching up/);
  const error = serverFrames.get('error');
  page.deliver(error);
  assert.equal(page.status.textContent, `error: ${error.data}`);

  // A server that stops says why and up to where the page has every byte; the page shows the
  // reason, reconnects with that `since_seq`, and says it resumed after it.
  const stopping = serverFrames.get('server_stopping');
  page.deliver(stopping);
  assert.equal(page.status.textContent, `${stopping.reason}: reconnecting…`);
  assert.equal(page.page.stopReason, stopping.reason);
  assert.equal(page.page.lastSeq, stopping.seq, 'the page resumes from the seq the server names');
  page.deliver(serverFrames.get('server_stopping.nothing_sent'));
  assert.equal(page.page.lastSeq, stopping.seq, 'a stop that names no seq keeps the page\'s own');
  page.deliver(serverFrames.get('ready'));
  assert.equal(page.status.textContent, `connected, resumed after: ${stopping.reason}`);

  const exit = serverFrames.get('exit');
  page.deliver(exit);
  assert.equal(page.status.dataset.state, 'exited');
  assert.equal(page.status.textContent, `exited (code ${exit.exit_code})`);
});

test('a watch page follows the server\'s size, sends nothing but pings, and shows a signal exit', async () => {
  const page = await openPage('watch');
  const ready = serverFrames.get('ready');
  page.deliver(ready);
  assert.deepEqual(page.resizes, [{ cols: ready.cols, rows: ready.rows }]);
  const resize = serverFrames.get('resize');
  page.deliver(resize);
  assert.deepEqual(page.resizes.at(-1), { cols: resize.cols, rows: resize.rows });
  page.runTimers('interval');
  assert.deepEqual(page.socket.sent.map((f) => f.type), ['ping']);
  checkSent(page.socket.sent);
  const exit = serverFrames.get('exit.signal');
  page.deliver(exit);
  assert.equal(page.status.textContent, `exited (signal ${exit.signal})`);
});
