// The input lease between the web terminal and an API client, in headless Chromium against the
// real server (docs/web.md, docs/rest-v2.md#the-input-lease).
//
// Run by the Rust test `suite::web_browser::the_page_and_an_api_client_share_the_keyboard_in_chromium`
// with the environment of `support.mjs`; exits non-zero with the failing check.
//
// 1. The page takes the keyboard (its button); it shows that it holds it.
// 2. An API client's send is refused with INPUT_LEASED naming the holder; the page still types.
// 3. The API client takes the keyboard over (force): the page shows the new holder, and what is
//    typed on the page is refused visibly (its status line), not sent.
// 4. The page takes it back, then releases it; the API client's send then works.

import { tmpdir } from 'node:os';

import { BASE, check, rest, exec, signedInBrowser, closeAll, waitForLine } from './support.mjs';

async function waitForKeyboard(page, wanted, what) {
  await page.waitForFunction(
    (state) => document.querySelector('#presence').dataset.keyboard === state,
    wanted,
  ).catch(async (error) => {
    const shown = await page.evaluate(() => document.querySelector('#presence').textContent).catch(() => '?');
    throw new Error(`FAILED: ${what}: the page shows "${shown}" (${error.message})`);
  });
  return page.evaluate(() => document.querySelector('#keyboard').textContent);
}

async function send(id, text) {
  return rest('POST', `/v2/pty/sessions/${id}/send`, { text, submit: true, deadline: 10 });
}

async function main() {
  const created = await rest('POST', '/v2/pty/sessions', { id: 'lease-1', cwd: tmpdir() });
  check(created.status === 201, `create: ${JSON.stringify(created.body)}`);
  const id = created.body.data.session_id;
  await exec(id, 'true');

  const { page } = await signedInBrowser();
  await page.goto(`${BASE}/terminal?session_id=${id}`);
  await page.waitForFunction(() => document.querySelector('#status').dataset.state === 'connected');
  await waitForKeyboard(page, 'free', 'the keyboard starts free');
  const button = page.locator('#lease');
  check((await button.textContent()) === 'take the keyboard', 'the button offers the keyboard');

  // 1. The page takes the keyboard.
  await button.click();
  const mine = await waitForKeyboard(page, 'you', 'the page holds the keyboard');
  check(mine === 'keyboard: you', `the page says it holds it: ${mine}`);
  check((await button.textContent()) === 'release the keyboard', 'the button offers to release it');

  // 2. An API client is refused; the page types.
  const refused = await send(id, 'echo api-refused');
  check(refused.status === 409 && refused.body.error.code === 'INPUT_LEASED', `the API's send is refused: ${JSON.stringify(refused.body)}`);
  check(/the keyboard is held by .+\/server \(via ws\)/.test(refused.body.message), `the refusal names the holder: ${refused.body.message}`);
  const lease = await rest('GET', `/v2/pty/sessions/${id}/lease`);
  check(lease.body.data.lease && lease.body.data.lease.via === 'ws', `the lease is the page's: ${JSON.stringify(lease.body)}`);
  await page.locator('.xterm').click();
  await page.keyboard.type('echo page-$((40+2))\n');
  await waitForLine(page, 'page-42', 'the page types while it holds the keyboard');

  // 3. The API client takes it over: the page shows the holder and refuses typing visibly.
  const taken = await rest('POST', `/v2/pty/sessions/${id}/lease`, { force: true, ttl_secs: 120 });
  check(taken.status === 200, `the API takes the keyboard over: ${JSON.stringify(taken.body)}`);
  const other = await waitForKeyboard(page, 'other', 'the page sees the new holder');
  check(/keyboard: .+\/server \(rest\)/.test(other), `the page names the holder: ${other}`);
  await page.locator('.xterm').click();
  await page.keyboard.type('echo page-lost\n');
  await page.waitForFunction(() => document.querySelector('#status').dataset.state === 'refused');
  const said = await page.evaluate(() => document.querySelector('#status').textContent);
  check(/typing refused: .+ holds the keyboard/.test(said), `the status line says typing is refused: ${said}`);
  const typedByApi = await send(id, 'echo api-$((20+1))');
  check(typedByApi.status === 200 && typedByApi.body.data.output.includes('api-21'), `the holder types: ${JSON.stringify(typedByApi.body)}`);

  // 4. The page takes it back, releases it, and the API's send works.
  check((await button.textContent()) === 'take the keyboard', 'the button offers to take it back');
  await button.click();
  await waitForKeyboard(page, 'you', 'the page took the keyboard back');
  const refusedAgain = await send(id, 'echo api-refused');
  check(refusedAgain.status === 409, `refused again: ${JSON.stringify(refusedAgain.body)}`);
  await button.click();
  await waitForKeyboard(page, 'free', 'the page released the keyboard');
  const works = await send(id, 'echo api-$((30+3))');
  check(works.status === 200 && works.body.data.output.includes('api-33'), `the send works after the release: ${JSON.stringify(works.body)}`);
  await waitForLine(page, 'api-33', 'the page shows what the API typed');
  const lines = await page.evaluate(() => {
    const buffer = window.ptyhub.terminal.buffer.active;
    const all = [];
    for (let i = 0; i < buffer.length; i += 1) all.push(buffer.getLine(i).translateToString(true));
    return all.join('\n');
  });
  check(!lines.includes('page-lost') && !lines.includes('api-refused'), `refused input never reached the terminal:\n${lines}`);
}

main()
  .then(() => closeAll())
  .catch(async (error) => {
    console.error(error.stack || String(error));
    await closeAll();
    process.exit(1);
  });
