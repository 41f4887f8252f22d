// ptyhub's pages for people who watch agents, in headless Chromium against the real server.
//
// Run by the Rust test `suite::web_browser::the_pages_for_watchers_work_in_chromium` with the
// environment of `support.mjs`; exits non-zero with the failing check.
//
// 1. Glyphs: in the web terminal and in the playback, at the default settings, the underscore
//    of `container_info.json` is drawn (lit pixels in the lower part of its cell, none in a
//    blank cell), box drawing joins (a `│` lights every pixel row of its cell, a `─` every
//    pixel column), CJK and emoji take two cells each and are drawn in both.
// 2. Playback with chapters: every command (exec'd and typed) is a chapter with its text, exit
//    code and duration, and a tick on the seek bar; a 3 s pause plays as 2 s; no mark or
//    nonce reaches the screen; a chapter jumps there (the screen holds what came before it,
//    not its output); the search finds output and jumps to it; a closed terminal's chapters
//    come from its log; the web terminal's "replay this command" opens at its last command.
// 3. The dashboard at `/`: grouped by owner / agent / session, the backend, a failed last
//    command, then live through one stream: a running command and for how long, a password
//    prompt, idle, a preview that follows the screen; filters waiting, running and failed.

import {
  BASE, check, rest, exec, signedInBrowser, newPage, closeAll, waitForLine, waitForState,
  viewportRow, ink, bufferLines,
} from './support.mjs';

async function checkGlyphs(page, where) {
  const row = await viewportRow(page, 'container_info.json');
  check(row >= 0, `${where}: the underscore line is on the screen`);
  const [under, blank, letter] = await ink(page, [
    { col: 9, row, y0: 0.6, y1: 1.07 },
    { col: 40, row, y0: 0.6, y1: 1.07 },
    { col: 0, row, y0: 0.3, y1: 0.8 },
  ]);
  check(letter.count > 0, `${where}: the page draws text (${JSON.stringify(letter)})`);
  check(blank.count === 0, `${where}: a blank cell stays dark (${JSON.stringify(blank)})`);
  check(under.count >= 3, `${where}: the underscore of container_info.json is drawn (${JSON.stringify(under)})`);

  const box = await viewportRow(page, '│ab│');
  check(box >= 1, `${where}: the box is on the screen`);
  const [vertical, horizontal] = await ink(page, [
    { col: 0, row: box, perLine: 'y' },
    { col: 1, row: box - 1, perLine: 'x' },
  ]);
  check(vertical.count === vertical.of, `${where}: │ joins from row to row (${JSON.stringify(vertical)})`);
  check(horizontal.count >= horizontal.of - 1, `${where}: ─ joins from cell to cell (${JSON.stringify(horizontal)})`);

  const wide = await viewportRow(page, '漢字 😀 end');
  check(wide >= 0, `${where}: the CJK and emoji line is on the screen`);
  const widths = await page.evaluate((r) => {
    const buffer = window.ptyhub.terminal.buffer.active;
    const line = buffer.getLine(buffer.viewportY + r);
    return [0, 2, 5, 8].map((col) => [line.getCell(col).getChars(), line.getCell(col).getWidth()]);
  }, wide);
  check(JSON.stringify(widths) === JSON.stringify([['漢', 2], ['字', 2], ['😀', 2], ['e', 1]]),
    `${where}: CJK and emoji take two cells: ${JSON.stringify(widths)}`);
  const cells = await ink(page, [0, 1, 2, 3, 5, 6, 8].map((col) => ({ col, row: wide })));
  check(cells.every((cell) => cell.count > 0), `${where}: both cells of each wide glyph are drawn: ${JSON.stringify(cells)}`);
}

async function glyphs(context) {
  const created = await rest('POST', '/v2/pty/sessions', { id: 'glyphs', cols: 80, rows: 24 });
  check(created.status === 201, `create: ${JSON.stringify(created.body)}`);
  await exec('glyphs', 'clear; echo container_info.json');
  await exec('glyphs', "printf '┌──┐\\n│ab│\\n└──┘\\n'");
  await exec('glyphs', "echo '漢字 😀 end'");
  const page = await newPage(context);
  await page.goto(`${BASE}/terminal?session_id=glyphs&mode=watch`);
  await waitForState(page, 'connected');
  await waitForLine(page, '漢字 😀 end', 'the watcher shows the glyphs');
  await checkGlyphs(page, 'web terminal');
  await page.goto(`${BASE}/play?session_id=glyphs&speed=0`);
  await waitForState(page, 'ended');
  await checkGlyphs(page, 'playback');
  await page.close();
}

async function chapters(context) {
  const created = await rest('POST', '/v2/pty/sessions', { id: 'chapters', cols: 80, rows: 24 });
  check(created.status === 201, `create: ${JSON.stringify(created.body)}`);
  await exec('chapters', 'echo one');
  await exec('chapters', 'sleep 3; echo two');
  const failed = await exec('chapters', 'ls /no-such-dir-ptyhub');
  check(failed.exit_code === 2, `ls fails: ${JSON.stringify(failed)}`);
  await rest('POST', '/v2/pty/sessions/chapters/input', { input: 'echo typed_$((6 * 7))', press_enter: true });
  const deadline = Date.now() + 30000;
  for (;;) {
    const page = await rest('GET', '/v2/pty/sessions/chapters/commands');
    const commands = page.body.data.commands;
    if (commands.length === 4 && commands[3].status === 'completed') break;
    check(Date.now() < deadline, `the typed command ends: ${JSON.stringify(commands)}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  const events = (await rest('GET', '/v2/pty/sessions/chapters/events?limit=1000')).body.data.events;
  const wall = events[events.length - 1].ts - events[0].ts;

  const page = await newPage(context);
  const expectChapters = async (where) => {
    await page.goto(`${BASE}/play?session_id=chapters&speed=0`);
    await waitForState(page, 'ended');
    const listed = await page.$$eval('#chapters li', (items) => items.map((item) => ({
      command: item.querySelector('.jump').textContent,
      exit: item.dataset.exitCode,
      duration: item.querySelector('.duration').textContent,
    })));
    check(JSON.stringify(listed.map((c) => [c.command, c.exit])) === JSON.stringify([
      ['echo one', '0'], ['sleep 3; echo two', '0'], ['ls /no-such-dir-ptyhub', '2'], ['echo typed_$((6 * 7))', '0'],
    ]), `${where}: the chapters: ${JSON.stringify(listed)}`);
    check(/^3\.\d s$/.test(listed[1].duration), `${where}: the sleep's duration: ${listed[1].duration}`);
    check((await page.$$('#ticks .tick')).length === 4, `${where}: a tick per command`);
    check((await page.$$('#ticks .tick[data-failed]')).length === 1, `${where}: the failed command's tick says so`);
  };
  await expectChapters('live');
  const duration = await page.evaluate(() => window.ptyhub.duration);
  check(duration < wall - 0.8 && duration >= 2, `the 3 s pause plays as 2 s: ${duration} s of ${wall} s`);
  const shown = (await bufferLines(page)).join('\n');
  check(!shown.includes('133;') && !shown.includes('k='), 'no mark reaches the screen');
  check(shown.includes('typed_42') && shown.includes('cannot access'), `the whole history plays: ${shown}`);

  // A chapter jumps to its command: what came before is on the screen, its output is not.
  await page.click('#chapters li:nth-child(3) .jump');
  await waitForState(page, 'paused');
  await page.waitForFunction(() => window.ptyhub.current && window.ptyhub.current.command === 'ls /no-such-dir-ptyhub');
  const atChapter = (await bufferLines(page)).map((line) => line.trim());
  check(atChapter.includes('two') && !atChapter.some((line) => line.includes('cannot access')),
    `at the chapter: ${atChapter.join('\n')}`);
  check(await page.$eval('#chapters li:nth-child(3)', (item) => item.dataset.current === 'true'), 'the chapter is marked current');

  // The search finds output and jumps to it.
  await page.fill('#search', 'typed_42');
  await page.locator('#results li button', { hasText: 'output' }).first().click();
  await waitForLine(page, 'typed_42', 'the search hit is on the screen');
  const hitCurrent = await page.evaluate(() => window.ptyhub.current.command);
  check(hitCurrent === 'echo typed_$((6 * 7))', `the hit is in the typed command: ${hitCurrent}`);
  await page.fill('#search', 'no-such-dir');
  await page.locator('#results li', { hasText: 'command: ls /no-such-dir-ptyhub' }).waitFor();

  // Speeds, and playing on from a chapter at the chosen one.
  const speeds = await page.$$eval('#speed option', (options) => options.map((o) => o.value));
  check(JSON.stringify(speeds) === JSON.stringify(['0.5', '1', '2', '4', '8', '16', '0']), `speeds: ${speeds}`);

  // The web terminal opens the playback at its current command.
  await page.goto(`${BASE}/terminal?session_id=chapters&mode=watch`);
  await waitForState(page, 'connected');
  await waitForLine(page, 'typed_42', 'the watcher shows the history');
  await page.click('#replay');
  await page.waitForURL((url) => url.pathname === '/play' && url.searchParams.get('at_seq') !== null);
  await page.waitForFunction(() => window.ptyhub.current && window.ptyhub.current.command === 'echo typed_$((6 * 7))');

  // A closed terminal: the chapters come from its log.
  const closed = await rest('DELETE', '/v2/pty/sessions/chapters');
  check(closed.status === 200, `close: ${JSON.stringify(closed.body)}`);
  await expectChapters('closed');
  await page.close();
}

async function dashboard(context) {
  for (const [id, agent] of [['dash-run', 'builder'], ['dash-pw', 'builder'], ['dash-fail', 'tester']]) {
    const created = await rest('POST', '/v2/pty/sessions', { id, agent, cols: 80, rows: 24 });
    check(created.status === 201, `create ${id}: ${JSON.stringify(created.body)}`);
  }
  await exec('dash-fail', 'ls /no-such-dir-ptyhub');
  await exec('dash-pw', 'echo ready');
  const page = await newPage(context);
  const streams = [];
  page.on('request', (request) => { if (request.url().includes('/v2/pty/events')) streams.push(request.url()); });
  await page.goto(`${BASE}/`);
  await page.locator('tr[data-session-id="dash-fail"] td.last[data-exit-code="2"]').waitFor();
  const groups = await page.$$eval('tr.group th', (ths) => ths.map((th) => th.textContent));
  check(groups.some((g) => g.endsWith('/ builder / default')) && groups.some((g) => g.endsWith('/ tester / default')),
    `grouped by owner / agent / session: ${groups}`);
  check(await page.$eval('tr[data-session-id="dash-run"] td.backend', (td) => td.textContent) === 'native', 'the backend shows');

  // Live, without a reload: a running command and for how long, a password prompt.
  await rest('POST', '/v2/pty/sessions/dash-run/input', { input: 'sleep 30', press_enter: true });
  await rest('POST', '/v2/pty/sessions/dash-pw/input', { input: "read -s -p 'Password: ' secret", press_enter: true });
  await page.locator('tr[data-session-id="dash-run"] td.now[data-kind="running"]', { hasText: /running for \d+ s/ }).waitFor();
  await page.locator('tr[data-session-id="dash-pw"] td.now[data-kind="password"]').waitFor();
  await page.locator('tr[data-session-id="dash-pw"] td.preview pre', { hasText: 'Password:' }).waitFor();
  check(await page.$eval('tr[data-session-id="dash-fail"] td.now', (td) => td.dataset.kind) === 'idle', 'an idle terminal says so');
  await exec('dash-fail', 'echo LIVE""_MARK; ls /no-such-dir-ptyhub');
  await page.locator('tr[data-session-id="dash-fail"] td.preview pre', { hasText: 'LIVE_MARK' }).waitFor();

  // Filters.
  const shownIds = () => page.$$eval('tbody tr[data-session-id]', (trs) => trs.map((tr) => tr.dataset.sessionId));
  await page.click('#filters button[data-filter="waiting"]');
  await page.waitForFunction(() => window.ptyhub.page && window.ptyhub.page.filter === 'waiting');
  check(JSON.stringify(await shownIds()) === '["dash-pw"]', `waiting: ${await shownIds()}`);
  await page.click('#filters button[data-filter="running"]');
  await page.waitForFunction(() => window.ptyhub.page && window.ptyhub.page.filter === 'running');
  const running = await shownIds();
  check(running.includes('dash-run') && running.includes('dash-pw') && !running.includes('dash-fail'), `running: ${running}`);
  await page.click('#filters button[data-filter="failed"]');
  await page.waitForFunction(() => window.ptyhub.page && window.ptyhub.page.filter === 'failed');
  await page.waitForFunction(() => document.querySelectorAll('tbody tr[data-session-id]').length === 1)
    .catch(async () => { throw new Error(`FAILED: failed: ${await shownIds()}`); });
  check(JSON.stringify(await shownIds()) === '["dash-fail"]', `failed: ${await shownIds()}`);
  const counts = await page.evaluate(() => window.ptyhub.page.counts);
  check(counts.waiting === 1 && counts.failed === 1 && counts.running === 2, `counts: ${JSON.stringify(counts)}`);
  // One stream at a time for the whole page (a new one only for a new filter).
  check(streams.length === 4, `one stream per query, not per terminal: ${streams.join(' ')}`);
  await rest('POST', '/v2/pty/sessions/dash-run/signal', { signal: 'INT' });
  await rest('POST', '/v2/pty/sessions/dash-pw/signal', { signal: 'INT' });
  await page.close();
}

async function main() {
  const { context } = await signedInBrowser();
  await glyphs(context);
  await chapters(context);
  await dashboard(context);
}

try {
  await main();
  console.log('pages: ok');
} catch (error) {
  console.error(error.stack || String(error));
  process.exitCode = 1;
} finally {
  await closeAll();
}
