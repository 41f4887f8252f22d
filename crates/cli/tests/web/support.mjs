// What the browser tests of ptyhub's pages share: the environment the Rust test passes, REST
// with the token, a Chromium with a fresh profile, waiting on a page's xterm buffer, and pixel
// checks of what a page's terminal drew (a screenshot read back through a canvas).

import { chromium } from 'playwright-core';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export const BASE = process.env.PTYHUB_URL;
export const WEB_URL = process.env.PTYHUB_WEB_URL;
export const TOKEN = process.env.PTYHUB_TOKEN;
export const CHROMIUM = process.env.PTYHUB_CHROMIUM || '/usr/bin/chromium';
export const TIMEOUT = Number(process.env.PTYHUB_TIMEOUT_MS || 30000);

const profiles = [];
const contexts = [];

export function check(condition, what) {
  if (!condition) throw new Error(`FAILED: ${what}`);
}

export async function rest(method, path, body) {
  const response = await fetch(`${BASE}${path}`, {
    method,
    headers: { Authorization: `Bearer ${TOKEN}`, 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: response.status, body: await response.json() };
}

export async function exec(id, command) {
  const ran = await rest('POST', `/v2/pty/sessions/${id}/exec`, { command, timeout: 60 });
  check(ran.status === 200, `exec ${command}: ${JSON.stringify(ran.body)}`);
  return ran.body.data;
}

// A browser with a fresh profile (no cookies), signed in through the banner's address.
export async function signedInBrowser() {
  const profile = mkdtempSync(join(tmpdir(), 'ptyhub-chromium-'));
  profiles.push(profile);
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    viewport: { width: 1000, height: 700 },
  });
  context.setDefaultTimeout(TIMEOUT);
  contexts.push(context);
  const page = context.pages()[0] || (await context.newPage());
  page.on('pageerror', (error) => console.error(`page error: ${error.message}`));
  await page.goto(WEB_URL);
  await page.waitForFunction(() => !location.hash);
  return { context, page };
}

export async function newPage(context) {
  const page = await context.newPage();
  page.on('pageerror', (error) => console.error(`page error: ${error.message}`));
  return page;
}

export async function closeAll() {
  for (const context of contexts) await context.close().catch(() => {});
  for (const profile of profiles) rmSync(profile, { recursive: true, force: true });
}

// Every line of the page's xterm buffer (scrollback included), trailing blanks trimmed.
export function bufferLines(page) {
  return page.evaluate(() => {
    const buffer = window.ptyhub.terminal.buffer.active;
    const lines = [];
    for (let i = 0; i < buffer.length; i += 1) lines.push(buffer.getLine(i).translateToString(true));
    return lines;
  });
}

export async function waitForLine(page, wanted, what) {
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
    const shown = await page
      .evaluate(() => `${document.querySelector('#status').textContent}, lastSeq ${window.ptyhub.lastSeq}\n${(window.wsTrace || []).join('\n')}`)
      .catch(() => '?');
    throw new Error(`FAILED: ${what}: no line "${wanted}" (${error.message})\nthe page shows: ${shown}\n${lines.join('\n')}`);
  });
}

export async function waitForState(page, state, element = '#status') {
  await page.waitForFunction(
    ([selector, wanted]) => document.querySelector(selector).dataset.state === wanted,
    [element, state],
    { timeout: TIMEOUT },
  ).catch(async (error) => {
    const shown = await page.evaluate((s) => document.querySelector(s).textContent, element).catch(() => '?');
    throw new Error(`FAILED: waiting for "${state}", the page shows "${shown}" (${error.message})`);
  });
}

// The viewport row (0 = top) of the last line whose text is `wanted`, or -1.
export function viewportRow(page, wanted) {
  return page.evaluate((line) => {
    const term = window.ptyhub.terminal;
    const buffer = term.buffer.active;
    let found = -1;
    for (let row = 0; row < term.rows; row += 1) {
      const text = buffer.getLine(buffer.viewportY + row)?.translateToString(true).trim();
      if (text === line) found = row;
    }
    return found;
  }, wanted);
}

// Counts lit pixels (the foreground on the dark background) in rectangles given in cell units
// of the page's terminal: each `{col, row, x0, x1, y0, y1}` covers columns `col + x0 … col + x1`
// and rows `row + y0 … row + y1` (fractions of a cell). `perLine` counts, instead of pixels,
// the pixel rows (`"y"`) or columns (`"x"`) of the rectangle that hold any lit pixel.
export async function ink(page, boxes) {
  await page.evaluate(() => new Promise((resolve) => requestAnimationFrame(() => requestAnimationFrame(resolve))));
  const shot = (await page.screenshot()).toString('base64');
  return page.evaluate(async ([png, wanted]) => {
    const image = new Image();
    image.src = `data:image/png;base64,${png}`;
    await image.decode();
    const canvas = document.createElement('canvas');
    canvas.width = image.width;
    canvas.height = image.height;
    const context = canvas.getContext('2d');
    context.drawImage(image, 0, 0);
    const scale = image.width / window.innerWidth;
    const cell = window.ptyhub.terminal._core._renderService.dimensions.css.cell;
    const screen = window.ptyhub.terminal.element.querySelector('.xterm-screen').getBoundingClientRect();
    return wanted.map((box) => {
      const left = Math.round((screen.left + (box.col + (box.x0 ?? 0)) * cell.width) * scale);
      const right = Math.round((screen.left + (box.col + (box.x1 ?? 1)) * cell.width) * scale);
      const top = Math.round((screen.top + (box.row + (box.y0 ?? 0)) * cell.height) * scale);
      const bottom = Math.round((screen.top + (box.row + (box.y1 ?? 1)) * cell.height) * scale);
      const { data } = context.getImageData(left, top, Math.max(1, right - left), Math.max(1, bottom - top));
      const width = Math.max(1, right - left);
      const lit = (i) => data[i] + data[i + 1] + data[i + 2] > 240;
      if (box.perLine === 'y' || box.perLine === 'x') {
        const lines = new Set();
        for (let i = 0; i < data.length; i += 4) {
          if (lit(i)) lines.add(box.perLine === 'y' ? Math.floor(i / 4 / width) : (i / 4) % width);
        }
        return { count: lines.size, of: box.perLine === 'y' ? bottom - top : width };
      }
      let count = 0;
      for (let i = 0; i < data.length; i += 4) if (lit(i)) count += 1;
      return { count, of: data.length / 4 };
    });
  }, [shot, boxes]);
}
