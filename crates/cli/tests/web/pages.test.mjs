// ptyhub's pages for people who watch agents, in headless Chromium against the real server.
//
// Run by the Rust test `suite::web_browser::the_pages_for_watchers_work_in_chromium` with the
// environment of `support.mjs`; exits non-zero with the failing check.
//
// 1. Glyphs: in the web terminal and in the playback, at the default settings, the underscore
//    of `container_info.json` is drawn (lit pixels in the lower part of its cell, none in a
//    blank cell), box drawing joins (a `│` lights every pixel row of its cell, a `─` every
//    pixel column), CJK and emoji take two cells each and are drawn in both.

import {
  BASE, check, rest, exec, signedInBrowser, newPage, closeAll, waitForLine, waitForState,
  viewportRow, ink,
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

async function main() {
  const { context } = await signedInBrowser();
  await glyphs(context);
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
