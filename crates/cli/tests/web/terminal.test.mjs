// ptyhub's web pages in headless Chromium (playwright-core), against the real server.
//
// Run by the Rust test `suite::web_browser` with PTYHUB_URL, PTYHUB_WEB_URL (the serve banner's
// `web:` address, `#token=…`), PTYHUB_TOKEN, PTYHUB_CHROMIUM and PTYHUB_TIMEOUT_MS; exits non-zero
// with the failing check.
//
// 1. The banner's address signs the browser in (an HttpOnly cookie that is not the token) and
//    leaves no token in the address; the index lists the terminal.
// 2. The terminal page attaches: typed `echo hi` + Enter comes back as `hi`.
// 3. A watch page shows the same output but cannot type.
// 4. The socket drops while a command prints numbered lines and stays down while more are
//    printed; the reconnect (since_seq) replays the missed lines exactly once.
// 5. The event log rotates past the away page: it restores afresh.
// 6. A terminal-url link (one-time ticket) opens in a fresh browser, once; then the pasted
//    token signs in.
// 7. The index's "New terminal" button opens a new terminal.
// 8. The playback page replays the first terminal's history to its end; a closed terminal is
//    listed (with "closed too") and replayed from its history.

import { chromium } from 'playwright-core';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const BASE = process.env.PTYHUB_URL;
const WEB_URL = process.env.PTYHUB_WEB_URL;
const TOKEN = process.env.PTYHUB_TOKEN;
const CHROMIUM = process.env.PTYHUB_CHROMIUM || '/usr/bin/chromium';
const TIMEOUT = Number(process.env.PTYHUB_TIMEOUT_MS || 30000);
const LINES = 300;

const profiles = [];
const contexts = [];

function check(condition, what) {
  if (!condition) throw new Error(`FAILED: ${what}`);
}

async function rest(method, path, body) {
  const response = await fetch(`${BASE}${path}`, {
    method,
    headers: { Authorization: `Bearer ${TOKEN}`, 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: response.status, body: await response.json() };
}

// A browser with a fresh profile (no cookies), as the brief for ptyhub's browser tests asks.
async function freshBrowser() {
  const profile = mkdtempSync(join(tmpdir(), 'ptyhub-chromium-'));
  profiles.push(profile);
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
    viewport: { width: 1000, height: 700 },
  });
  context.setDefaultTimeout(TIMEOUT);
  contexts.push(context);
  return context;
}

async function firstPage(context) {
  const page = context.pages()[0] || (await context.newPage());
  page.on('pageerror', (error) => console.error(`page error: ${error.message}`));
  return page;
}

// Every line of the page's xterm buffer (scrollback included), trailing blanks trimmed.
function bufferLines(page) {
  return page.evaluate(() => {
    const buffer = window.ptyhub.terminal.buffer.active;
    const lines = [];
    for (let i = 0; i < buffer.length; i += 1) lines.push(buffer.getLine(i).translateToString(true));
    return lines;
  });
}

async function waitForLine(page, wanted, what) {
  await page.waitForFunction(
    (line) => {
      const buffer = window.ptyhub.terminal.buffer.active;
      for (let i = 0; i < buffer.length; i += 1) {
        if (buffer.getLine(i).translateToString(true).trim() === line) return true;
      }
      return false;
    },
    wanted,
    { timeout: TIMEOUT },
  ).catch(async (error) => {
    const lines = await bufferLines(page).catch(() => []);
    throw new Error(`FAILED: ${what}: no line "${wanted}" (${error.message})\n${lines.join('\n')}`);
  });
}

async function waitForState(page, state) {
  await page.waitForFunction(
    (wanted) => document.getElementById('status').dataset.state === wanted,
    state,
    { timeout: TIMEOUT },
  ).catch(async (error) => {
    const shown = await page.evaluate(() => document.getElementById('status').textContent).catch(() => '?');
    throw new Error(`FAILED: waiting for "${state}", the page shows "${shown}" (${error.message})`);
  });
}

async function type(page, text) {
  await page.click('#terminal');
  await page.keyboard.type(text);
  await page.keyboard.press('Enter');
}

async function main() {
  const created = await rest('POST', '/v2/pty/sessions', { id: 'web-1', cwd: tmpdir() });
  check(created.status === 201, `create: ${JSON.stringify(created.body)}`);
  const id = created.body.data.session_id;

  // 1. The banner's address signs in; the index lists the terminal.
  check(WEB_URL.includes('#token='), `the banner's web address carries the token in the fragment: ${WEB_URL}`);
  const browser = await freshBrowser();
  const index = await firstPage(browser);
  await index.goto(WEB_URL);
  const row = index.locator(`tr[data-session-id="${id}"]`);
  await row.waitFor();
  check(!index.url().includes('#') && !index.url().includes(TOKEN), `the token left the address: ${index.url()}`);
  const cookies = await browser.cookies();
  check(cookies.length === 1, `one cookie: ${JSON.stringify(cookies)}`);
  const [cookie] = cookies;
  check(cookie.httpOnly && cookie.sameSite === 'Strict', `HttpOnly, SameSite=Strict: ${JSON.stringify(cookie)}`);
  check(!cookie.value.includes(TOKEN), 'the cookie is not the token');
  check((await index.evaluate(() => document.cookie)) === '', 'scripts cannot read the cookie');
  check((await row.locator('td.cwd').textContent()) === tmpdir(), 'the row shows the directory');
  check((await row.locator('td.state').textContent()).length > 0, 'the row shows the state');
  check(/ago$/.test(await row.locator('td.activity').textContent()), 'the row shows the last activity');
  const watchHref = await row.locator('a', { hasText: 'watch' }).getAttribute('href');
  check(watchHref === `/terminal?session_id=${id}&mode=watch`, `watch link: ${watchHref}`);

  // 2. Attach: typing works.
  await row.locator('a', { hasText: 'open' }).click();
  const attach = index;
  await attach.waitForURL((url) => url.pathname === '/terminal' && url.searchParams.get('session_id') === id);
  await waitForState(attach, 'connected');
  await type(attach, 'echo hi');
  await waitForLine(attach, 'hi', 'typed echo hi comes back');

  // 3. Watch: the same output, no typing.
  const watch = await browser.newPage();
  await watch.goto(`${BASE}/terminal?session_id=${id}&mode=watch`);
  await waitForState(watch, 'connected');
  await waitForLine(watch, 'hi', 'the watcher repaints the history');
  await watch.evaluate(() => {
    window.sentFrames = [];
    const send = WebSocket.prototype.send;
    WebSocket.prototype.send = function (data) {
      window.sentFrames.push(data);
      return send.call(this, data);
    };
  });
  await type(watch, 'echo WATCHER""TYPED');
  await type(attach, 'echo SY""NC');
  await waitForLine(attach, 'SYNC', 'the attached page still types');
  await waitForLine(watch, 'SYNC', 'the watcher sees live output');
  const sent = await watch.evaluate(() => window.sentFrames.map((f) => JSON.parse(f).type));
  check(!sent.includes('input') && !sent.includes('resize'), `the watcher sent ${sent}`);
  const seen = (await bufferLines(attach)).concat(await bufferLines(watch)).join('\n');
  check(!seen.includes('WATCHER'), 'what the watcher typed never reached the terminal');

  // 4. A dropped socket: the reconnect replays what was missed, exactly once.
  await attach.evaluate(() => {
    // Test instrumentation: while `holdReconnect` is set, the page's reconnects go to a route
    // that does not exist, so they fail like a network that is down.
    window.holdReconnect = false;
    const Real = window.WebSocket;
    // The trace of every connection (what it asked for, the frames it got, how it closed),
    // printed when a wait fails.
    window.wsTrace = [];
    const trace = (entry) => {
      window.wsTrace.push(entry);
      if (window.wsTrace.length > 80) window.wsTrace.shift();
    };
    window.WebSocket = class extends Real {
      constructor(url, protocols) {
        const held = window.holdReconnect;
        super(held ? url.replace('/ws?', '/no-such-ws?') : url, protocols);
        trace(`open ${held ? 'held ' : ''}${url.split('?')[1]}`);
        this.addEventListener('message', (event) => {
          if (typeof event.data !== 'string') return;
          const frame = JSON.parse(event.data);
          const bytes = typeof frame.data === 'string' ? ` ${frame.data.length}B` : '';
          trace(`  ${frame.type}${frame.seq !== undefined ? ` seq=${frame.seq}` : ''}${frame.code ? ` ${frame.code}` : ''}${bytes}`);
        });
        this.addEventListener('close', (event) => trace(`  close ${event.code} ${event.reason}`));
      }
    };
  });
  await type(attach, `for i in $(seq 1 ${LINES}); do echo n$i; sleep 0.02; done; echo DO""NE`);
  await waitForLine(attach, 'n20', 'the numbered lines start');
  const seqBefore = await attach.evaluate(() => {
    window.holdReconnect = true;
    window.ptyhub.socket.close();
    return window.ptyhub.lastSeq;
  });
  check(Number.isInteger(seqBefore), `frames carry seq: ${seqBefore}`);
  await waitForState(attach, 'reconnecting');
  const shownBefore = (await bufferLines(attach)).filter((l) => /^n\d+$/.test(l.trim())).length;
  // Stay disconnected until the terminal has printed well past what the page showed.
  const deadline = Date.now() + TIMEOUT;
  for (;;) {
    const snapshot = await rest('GET', `/v2/pty/sessions/${id}/snapshot`);
    const printed = snapshot.body.data.screen
      .map((line) => line.trim())
      .filter((line) => /^n\d+$/.test(line))
      .map((line) => Number(line.slice(1)));
    if (Math.max(0, ...printed) >= shownBefore + 40) break;
    check(Date.now() < deadline, `the terminal printed on while the page was away (${printed.slice(-1)})`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  await attach.evaluate(() => { window.holdReconnect = false; });
  await waitForState(attach, 'connected');
  await waitForLine(attach, 'DONE', 'the command finished after the reconnect');
  const numbered = (await bufferLines(attach))
    .map((line) => line.trim())
    .filter((line) => /^n\d+$/.test(line))
    .map((line) => Number(line.slice(1)));
  const expected = Array.from({ length: LINES }, (_, i) => i + 1);
  check(
    JSON.stringify(numbered) === JSON.stringify(expected),
    `every numbered line once, in order; got ${numbered.length}: ${numbered.join(',')}`,
  );
  check((await attach.evaluate(() => window.ptyhub.lastSeq)) > seqBefore, 'seq moved on');

  // 5. The event log rotates past the page while it is away (the server keeps 64 KiB): the
  //    resume is refused, and the page restores afresh instead of retrying for ever.
  const seqAway = await attach.evaluate(() => {
    window.holdReconnect = true;
    window.ptyhub.socket.close();
    return window.ptyhub.lastSeq;
  });
  await waitForState(attach, 'reconnecting');
  const flood = await rest('POST', `/v2/pty/sessions/${id}/exec`, {
    command: `head -c 400000 /dev/zero | tr '\\0' x; echo`,
    timeout: 60,
  });
  check(flood.body.data && flood.body.data.status === 'completed', `flood: ${JSON.stringify(flood.body).slice(0, 300)}`);
  // The marker is a command of its own: printed with the flood's tail, it could share one
  // event (one read of the PTY) with the x's, in a segment the 64 KiB limit then drops.
  const marker = await rest('POST', `/v2/pty/sessions/${id}/exec`, { command: 'echo FLO""ODED', timeout: 60 });
  check(marker.body.data && marker.body.data.output === 'FLOODED', `marker: ${JSON.stringify(marker.body).slice(0, 300)}`);
  const kept = (await rest('GET', `/v2/pty/sessions/${id}/events?after_seq=${seqAway}&limit=1`)).body.data;
  check(kept.events[0].seq > seqAway + 1, `the log rotated past the page: oldest kept ${kept.events[0].seq}, page at ${seqAway}`);
  await attach.evaluate(() => { window.holdReconnect = false; });
  await waitForState(attach, 'connected');
  await waitForLine(attach, 'FLOODED', 'the page restored afresh after the log moved on');
  await type(attach, 'echo AF""TER');
  await waitForLine(attach, 'AFTER', 'the restored page types');
  await waitForLine(watch, 'AFTER', 'the watcher followed the flood');

  // 6. A terminal-url link opens in a fresh browser, once.
  const link = (await rest('GET', `/v1/shell/terminal-url?session_id=${id}`)).body.data;
  check(link.includes('#ticket='), `terminal-url: ${link}`);
  const other = await freshBrowser();
  const linked = await firstPage(other);
  await linked.goto(link);
  await waitForState(linked, 'connected');
  await waitForLine(linked, 'AFTER', 'the linked page repaints the history');
  check(!linked.url().includes('ticket'), `the ticket left the address: ${linked.url()}`);
  const third = await freshBrowser();
  const reused = await firstPage(third);
  await reused.goto(link);
  await reused.locator('form.login').waitFor();
  const refusal = await reused.locator('form.login .error').textContent();
  check(/ticket/.test(refusal), `a used ticket is refused and the form says why: ${refusal}`);
  await reused.fill('form.login input', TOKEN);
  await reused.click('form.login button');
  await waitForState(reused, 'connected');
  await waitForLine(reused, 'AFTER', 'the pasted token signs in');

  // 7. The index's button makes a new terminal (a cookie POST from the page's own origin).
  await reused.goto(`${BASE}/`);
  await reused.click('#new-terminal');
  await reused.waitForURL((url) => url.pathname === '/terminal' && url.searchParams.get('session_id') !== id);
  await waitForState(reused, 'connected');
  await type(reused, 'echo NE""W');
  await waitForLine(reused, 'NEW', 'the new terminal types');
  const listed = (await rest('GET', '/v2/pty/sessions')).body.data.sessions.length;
  check(listed === 2, `the new terminal is listed: ${listed}`);

  // 8. Playback of the history, for a live terminal and a closed one.
  await reused.goto(`${BASE}/play?session_id=${id}&speed=0`);
  await waitForState(reused, 'ended');
  await waitForLine(reused, 'AFTER', 'the playback reaches the end of the history');
  const closed = await rest('DELETE', `/v2/pty/sessions/${id}`);
  check(closed.status === 200, `close: ${JSON.stringify(closed.body)}`);
  await reused.goto(`${BASE}/`);
  await reused.check('#show-closed');
  const closedRow = reused.locator(`tr[data-session-id="${id}"]`);
  await closedRow.waitFor();
  check(/^closed/.test(await closedRow.locator('td.state').textContent()), 'the closed terminal says so');
  await closedRow.locator('a', { hasText: 'replay' }).click();
  await reused.waitForURL((url) => url.pathname === '/play');
  await reused.selectOption('#speed', '0');
  await waitForState(reused, 'ended');
  await waitForLine(reused, 'AFTER', 'a closed terminal plays back from its history');
}

try {
  await main();
  console.log('web terminal: ok');
} catch (error) {
  console.error(error.stack || String(error));
  process.exitCode = 1;
} finally {
  for (const context of contexts) await context.close().catch(() => {});
  for (const profile of profiles) rmSync(profile, { recursive: true, force: true });
}
