// Playback of a terminal's recorded history (what its event log keeps), with the timing it
// happened with: output, resizes and the program's end, paged from
// GET /v2/pty/sessions/{id}/events. Pauses longer than IDLE_MAX_S are shortened, as asciinema
// does. Works for closed terminals too (their history stays).
'use strict';

(() => {
  const PAGE_EVENTS = 1000;
  const IDLE_MAX_S = 2;
  const query = new URLSearchParams(location.search);
  const id = query.get('session_id') || '';
  const status = document.getElementById('status');
  const clock = document.getElementById('clock');
  const playButton = document.getElementById('play');
  const speedSelect = document.getElementById('speed');
  const initialSpeed = query.get('speed');
  if (initialSpeed !== null) speedSelect.value = initialSpeed;

  const term = new Terminal({
    allowProposedApi: true, // the unicode11 addon registers through a proposed API
    disableStdin: true,
    scrollback: 10000,
    fontFamily: 'ui-monospace, "DejaVu Sans Mono", "Liberation Mono", Menlo, Consolas, monospace',
    fontSize: 14,
  });
  term.loadAddon(new Unicode11Addon.Unicode11Addon());
  term.unicode.activeVersion = '11';

  let isPaused = false;
  let wake = null; // resolves a pause or a wait early (play pressed, speed changed)
  window.ptyhub = { terminal: term, get state() { return status.dataset.state; } };

  function setStatus(state, text) {
    status.dataset.state = state;
    status.textContent = text;
  }

  function decode(base64) {
    const text = atob(base64);
    const bytes = new Uint8Array(text.length);
    for (let i = 0; i < text.length; i += 1) bytes[i] = text.charCodeAt(i);
    return bytes;
  }

  function sleep(ms) {
    return new Promise((resolve) => {
      const timer = setTimeout(resolve, ms);
      wake = () => { clearTimeout(timer); resolve(); };
    });
  }

  async function untilPlaying() {
    while (isPaused) await sleep(3600 * 1000);
  }

  async function pages() {
    const all = [];
    let after = 0;
    for (;;) {
      const response = await ptyhubLogin.whenSignedIn(() => fetch(
        `/v2/pty/sessions/${encodeURIComponent(id)}/events?after_seq=${after}&limit=${PAGE_EVENTS}`));
      const body = await response.json().catch(() => null);
      if (!response.ok || !body) throw new Error((body && body.message) || `HTTP ${response.status}`);
      all.push(...body.data.events);
      if (!body.data.has_more || body.data.next_seq <= after) return all;
      after = body.data.next_seq;
    }
  }

  async function play(events) {
    let previous = null;
    let elapsed = 0;
    setStatus('playing', 'playing');
    for (const event of events) {
      await untilPlaying();
      if (previous !== null) {
        const gap = Math.min(IDLE_MAX_S, Math.max(0, event.ts - previous));
        elapsed += gap;
        const speed = Number(speedSelect.value);
        if (speed > 0 && gap > 0) await sleep((gap * 1000) / speed);
      }
      previous = event.ts;
      clock.textContent = `${elapsed.toFixed(1)} s`;
      switch (event.type) {
        case 'pty.output':
          await new Promise((resolve) => term.write(decode(event.data_b64), resolve));
          break;
        case 'process.start':
        case 'pty.resize':
          if (event.cols && event.rows) term.resize(event.cols, event.rows);
          break;
        case 'process.exit':
          term.write(`\r\n\x1b[2m[exited: ${event.signal ? `signal ${event.signal}` : `code ${event.exit_code}`}]\x1b[0m\r\n`);
          break;
        default:
          break;
      }
    }
    setStatus('ended', `end (${events.length} events)`);
    playButton.disabled = true;
  }

  playButton.addEventListener('click', () => {
    isPaused = !isPaused;
    playButton.textContent = isPaused ? 'play' : 'pause';
    if (!isPaused && wake) wake();
  });
  speedSelect.addEventListener('change', () => { if (wake) wake(); });

  (async () => {
    document.title = `${id} · playback · ptyhub`;
    term.open(document.getElementById('terminal'));
    if (!id) {
      setStatus('error', 'no session_id in the address');
      return;
    }
    try {
      await play(await pages());
    } catch (error) {
      setStatus('error', `cannot play: ${error.message}`);
    }
  })();
})();
