// The web terminal page across a server restart, in headless Chromium (playwright-core).
//
// Run by the Rust test `suite::upgrade::the_web_page_shows_why_and_resumes_across_a_restart_in_chromium`
// with PTYHUB_URL, PTYHUB_WEB_URL, PTYHUB_TOKEN, PTYHUB_CHROMIUM and PTYHUB_TIMEOUT_MS. It
// prints `RESTART` on stdout when the server is to be restarted (SIGTERM, then a new server on
// the same address) and waits for a `RESTARTED` line on stdin; exits non-zero with the failing
// check.
//
// 1. The page attaches; a command prints numbered lines.
// 2. The server stops meanwhile: the page shows why ("server restarting").
// 3. The new server forgets browser logins: the page asks for the token, which is pasted.
// 4. The page says it resumed after the restart, and every numbered line is there exactly
//    once, in order (the resume starts at the `seq` the stopping server named).

import { createInterface } from 'node:readline';
import { tmpdir } from 'node:os';
import {
  BASE, TOKEN, TIMEOUT, bufferLines, check, closeAll, rest, signedInBrowser, waitForLine,
  waitForState,
} from './support.mjs';

const LINES = 200;

async function type(page, text) {
  await page.click('#terminal');
  await page.keyboard.type(text);
  await page.keyboard.press('Enter');
}

// Resolves with the next line on stdin.
function nextInputLine() {
  const lines = createInterface({ input: process.stdin });
  return new Promise((resolve) => {
    lines.once('line', (line) => {
      lines.close();
      resolve(line.trim());
    });
  });
}

async function main() {
  const created = await rest('POST', '/v2/pty/sessions', { id: 'restart-1', cwd: tmpdir() });
  check(created.status === 201, `create: ${JSON.stringify(created.body)}`);
  const id = created.body.data.session_id;

  // 1. Attached, with numbered lines on their way.
  const { page } = await signedInBrowser();
  await page.goto(`${BASE}/terminal?session_id=${id}`);
  await waitForState(page, 'connected');
  await type(page, `for i in $(seq 1 ${LINES}); do echo n$i; sleep 0.02; done; echo DO""NE`);
  await waitForLine(page, 'n20', 'the numbered lines start');

  // 2. The server stops and another one starts on the same address.
  const restarted = nextInputLine();
  console.log('RESTART');
  check((await restarted) === 'RESTARTED', 'the test restarted the server');
  await page.waitForFunction(() => window.ptyhub.stopReason === 'server restarting', null, { timeout: TIMEOUT });
  const shown = await page.evaluate(() => document.getElementById('status').textContent);
  check(shown.startsWith('server restarting: reconnecting'), `the page says why it reconnects: "${shown}"`);

  // 3. The new server asks the page to sign in again.
  await page.waitForSelector('form.login input[name=token]', { timeout: TIMEOUT });
  await page.fill('form.login input[name=token]', TOKEN);
  await page.click('form.login button[type=submit]');

  // 4. Resumed, and nothing lost or repeated.
  await waitForState(page, 'connected');
  const resumed = await page.evaluate(() => document.getElementById('status').textContent);
  check(resumed === 'connected, resumed after: server restarting', `the page says it resumed: "${resumed}"`);
  await waitForLine(page, 'DONE', 'the command finished after the restart');
  const numbered = (await bufferLines(page))
    .map((line) => line.trim())
    .filter((line) => /^n\d+$/.test(line))
    .map((line) => Number(line.slice(1)));
  const expected = Array.from({ length: LINES }, (_, i) => i + 1);
  check(
    JSON.stringify(numbered) === JSON.stringify(expected),
    `every numbered line once, in order; got ${numbered.length}: ${numbered.join(',')}`,
  );
  await type(page, 'echo TY""PED-AFTER');
  await waitForLine(page, 'TYPED-AFTER', 'the page types into the adopted terminal');
}

try {
  await main();
  console.log('OK');
} finally {
  await closeAll();
}
