// Playback of a terminal's recorded history (what its event log keeps), with the timing it
// happened with, paged from GET /v2/pty/sessions/{id}/events, and its commands as chapters.
// Works for closed terminals too (their history stays).
//
// Flow at a glance:
// 1. Read every event, and the command timeline (GET …/commands) while the terminal lives.
// 2. Clean the output as exports do (recording.js: no integration marks, no stray bells) and
//    lay the events on a playback clock where pauses longer than the idle limit (`?idle=`,
//    2 s) are shortened, as asciinema does.
// 3. Each command is a chapter: its text, exit code and duration, a tick on the seek bar and
//    an entry of the list; a closed terminal's chapters come from the log's notes and marks.
// 4. Play at the chosen speed; a seek (the bar, a chapter, a search hit, `?command=N` or
//    `?at_seq=N` from the web terminal) repaints the screen up to that point at once.
'use strict';

(() => {
  const PAGE_EVENTS = 1000;
  const COMMANDS_PAGE = 1000;
  const SEARCH_HITS_MAX = 100;
  const query = new URLSearchParams(location.search);
  const id = query.get('session_id') || '';
  const idleMax = Number(query.get('idle') || 2);
  const status = document.getElementById('status');
  const clock = document.getElementById('clock');
  const playButton = document.getElementById('play');
  const speedSelect = document.getElementById('speed');
  const seek = document.getElementById('seek');
  const ticks = document.getElementById('ticks');
  const list = document.getElementById('chapters');
  const search = document.getElementById('search');
  const results = document.getElementById('results');
  if (query.get('speed') !== null) speedSelect.value = query.get('speed');
  document.getElementById('idle').textContent = idleMax > 0 ? `pauses cut to ${idleMax} s` : '';

  const term = new Terminal({
    allowProposedApi: true, // the unicode11 addon registers through a proposed API
    disableStdin: true,
    scrollback: 10000,
    fontFamily: 'ui-monospace, "DejaVu Sans Mono", "Liberation Mono", Menlo, Consolas, monospace',
    fontSize: 14,
  });
  term.loadAddon(new Unicode11Addon.Unicode11Addon());
  term.unicode.activeVersion = '11';

  let frames = []; // {t, seq, kind: 'o' | 'r' | 'x', bytes, text, cols, rows}
  let chapters = []; // {id, command, exitCode, duration, seq, frame, t}
  let duration = 0;
  let position = 0; // the next frame to show
  let isPaused = false;
  let seekTarget = null;
  let wake = null; // resolves a wait early (play pressed, speed changed, a seek)

  window.ptyhub = {
    terminal: term,
    get state() { return status.dataset.state; },
    get chapters() { return chapters; },
    get duration() { return duration; },
    get position() { return position; },
    get current() { return chapters[currentChapter()] || null; },
  };

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

  function seconds(value) {
    if (value === null || value === undefined) return '';
    return value < 60 ? `${value.toFixed(1)} s` : `${Math.floor(value / 60)} min ${Math.round(value % 60)} s`;
  }

  function sleep(ms) {
    return new Promise((resolve) => {
      const timer = setTimeout(resolve, ms);
      wake = () => { clearTimeout(timer); resolve(); };
    });
  }

  async function getJson(path) {
    const response = await ptyhubLogin.whenSignedIn(() => fetch(path));
    const body = await response.json().catch(() => null);
    return { response, body };
  }

  async function readEvents() {
    const all = [];
    let after = 0;
    for (;;) {
      const { response, body } = await getJson(
        `/v2/pty/sessions/${encodeURIComponent(id)}/events?after_seq=${after}&limit=${PAGE_EVENTS}`);
      if (!response.ok || !body) throw new Error((body && body.message) || `HTTP ${response.status}`);
      all.push(...body.data.events);
      if (!body.data.has_more || body.data.next_seq <= after) return all;
      after = body.data.next_seq;
    }
  }

  // The timeline of a live terminal; null when the server has none (a closed terminal).
  async function readCommands() {
    const all = [];
    let after = 0;
    for (;;) {
      const { response, body } = await getJson(
        `/v2/pty/sessions/${encodeURIComponent(id)}/commands?after=${after}&limit=${COMMANDS_PAGE}`);
      if (!response.ok || !body) return null;
      all.push(...body.data.commands);
      if (!body.data.has_more || body.data.next_after <= after) return all;
      after = body.data.next_after;
    }
  }

  // Steps 2 and 3: frames on the playback clock, and the chapters the log itself tells.
  function build(events) {
    const filter = new ptyhubRecording.Filter();
    const fromLog = [];
    let open = null;
    let note = null;
    let t = 0;
    let previous = null;
    for (const event of events) {
      if (previous !== null) t += Math.min(idleMax > 0 ? idleMax : Infinity, Math.max(0, event.ts - previous));
      previous = event.ts;
      switch (event.type) {
        case 'command.note':
          filter.note(event.origin);
          // A typed line's note follows its start mark, and can follow its end too.
          if (event.origin === 'typed' && (open || fromLog.length > 0)
              && (open || fromLog[fromLog.length - 1]).command === null) {
            const chapter = open || fromLog[fromLog.length - 1];
            chapter.command = event.command;
            chapter.id = event.id;
          } else {
            note = event;
          }
          break;
        case 'pty.output': {
          const { bytes, marks } = filter.filter(decode(event.data_b64));
          frames.push({ t, seq: event.seq, kind: 'o', bytes, text: ptyhubRecording.plainText(bytes) });
          for (const mark of marks) {
            if (mark.kind === 'start') {
              const isExec = note && note.origin === 'exec';
              open = {
                id: isExec ? note.id : null,
                command: isExec ? note.command : null,
                seq: event.seq,
                frame: frames.length - 1,
                t,
                startedAt: event.ts,
                exitCode: null,
                duration: null,
              };
              note = null;
            } else if (mark.kind === 'end' && open) {
              open.exitCode = mark.exitCode;
              open.duration = Math.max(0, event.ts - open.startedAt);
              fromLog.push(open);
              open = null;
            }
          }
          break;
        }
        case 'process.start':
        case 'pty.resize':
          if (event.cols && event.rows) frames.push({ t, seq: event.seq, kind: 'r', cols: event.cols, rows: event.rows });
          break;
        case 'process.exit':
          frames.push({
            t,
            seq: event.seq,
            kind: 'x',
            text: `\r\n\x1b[2m[exited: ${event.signal ? `signal ${event.signal}` : `code ${event.exit_code}`}]\x1b[0m\r\n`,
          });
          break;
        default:
          break;
      }
    }
    if (open) fromLog.push(open);
    duration = t;
    fromLog.forEach((chapter, i) => {
      if (chapter.id === null) chapter.id = i + 1;
      if (chapter.command === null) chapter.command = `command ${i + 1}`;
    });
    return fromLog;
  }

  // The timeline's commands placed on the frames: each starts at its `start_seq` event.
  function placeCommands(commands) {
    const placed = [];
    let frame = 0;
    for (const command of commands) {
      while (frame < frames.length && frames[frame].seq < command.start_seq) frame += 1;
      if (frame >= frames.length) break; // older than what the log still keeps, or not yet there
      placed.push({
        id: command.id,
        command: command.command,
        exitCode: command.exit_code,
        duration: command.duration,
        seq: command.start_seq,
        frame,
        t: frames[frame].t,
      });
    }
    return placed;
  }

  function currentChapter() {
    let current = -1;
    chapters.forEach((chapter, i) => { if (chapter.frame <= position) current = i; });
    return current;
  }

  function showChapters() {
    ticks.replaceChildren(...chapters.map((chapter, i) => {
      const tick = document.createElement('button');
      tick.type = 'button';
      tick.className = 'tick';
      tick.dataset.index = String(i);
      if (chapter.exitCode !== null && chapter.exitCode !== 0) tick.dataset.failed = 'true';
      tick.style.left = `${duration > 0 ? (chapter.t / duration) * 100 : 0}%`;
      tick.title = chapter.command;
      tick.addEventListener('click', () => jump(chapter.frame));
      return tick;
    }));
    list.replaceChildren(...chapters.map((chapter, i) => {
      const item = document.createElement('li');
      item.dataset.index = String(i);
      item.dataset.commandId = String(chapter.id);
      const jumpButton = document.createElement('button');
      jumpButton.type = 'button';
      jumpButton.className = 'jump';
      jumpButton.textContent = chapter.command;
      jumpButton.addEventListener('click', () => jump(chapter.frame));
      const exit = document.createElement('span');
      exit.className = 'exit';
      exit.textContent = chapter.exitCode === null ? 'no exit code' : `exit ${chapter.exitCode}`;
      if (chapter.exitCode !== null) item.dataset.exitCode = String(chapter.exitCode);
      if (chapter.exitCode !== null && chapter.exitCode !== 0) item.classList.add('failed');
      const took = document.createElement('span');
      took.className = 'duration';
      took.textContent = seconds(chapter.duration);
      item.append(jumpButton, exit, took);
      return item;
    }));
  }

  function showPosition() {
    const t = position > 0 ? frames[Math.min(position, frames.length) - 1].t : 0;
    clock.textContent = `${t.toFixed(1)} / ${duration.toFixed(1)} s`;
    if (document.activeElement !== seek) seek.value = String(duration > 0 ? Math.round((t / duration) * 1000) : 0);
    const current = currentChapter();
    for (const item of list.children) {
      if (Number(item.dataset.index) === current) item.dataset.current = 'true';
      else delete item.dataset.current;
    }
  }

  function write(data) {
    return new Promise((resolve) => term.write(data, resolve));
  }

  async function show(frame) {
    if (frame.kind === 'o') await write(frame.bytes);
    else if (frame.kind === 'r') term.resize(frame.cols, frame.rows);
    else if (frame.kind === 'x') await write(frame.text);
  }

  // Frames [0, end) at once: output between two resizes goes to xterm as one write.
  async function repaint(end) {
    term.reset();
    let chunks = [];
    const flush = async () => {
      if (chunks.length === 0) return;
      const size = chunks.reduce((sum, chunk) => sum + chunk.length, 0);
      const joined = new Uint8Array(size);
      let at = 0;
      for (const chunk of chunks) { joined.set(chunk, at); at += chunk.length; }
      chunks = [];
      await write(joined);
    };
    for (let i = 0; i < end; i += 1) {
      const frame = frames[i];
      if (frame.kind === 'o') {
        chunks.push(frame.bytes);
      } else {
        await flush();
        await show(frame);
      }
    }
    await flush();
  }

  // Moves to frame `target`; a playback that had ended waits there, paused.
  function jump(target) {
    if (position >= frames.length) setPaused(true);
    seekTarget = Math.max(0, Math.min(frames.length, target));
    if (wake) wake();
  }

  function setPaused(paused) {
    isPaused = paused;
    playButton.textContent = isPaused ? 'play' : 'pause';
    if (wake) wake();
  }

  async function run() {
    for (;;) {
      if (seekTarget !== null) {
        const target = seekTarget;
        seekTarget = null;
        await repaint(target);
        position = target;
        showPosition();
        continue;
      }
      if (position >= frames.length) {
        setStatus('ended', `end (${frames.length} frames, ${chapters.length} commands)`);
        await sleep(3600 * 1000);
        continue;
      }
      if (isPaused) {
        setStatus('paused', 'paused');
        await sleep(3600 * 1000);
        continue;
      }
      setStatus('playing', 'playing');
      const frame = frames[position];
      const gap = frame.t - (position > 0 ? frames[position - 1].t : 0);
      const speed = Number(speedSelect.value);
      if (speed > 0 && gap > 0) {
        await sleep((gap * 1000) / speed);
        if (seekTarget !== null || isPaused) continue;
      }
      await show(frame);
      position += 1;
      showPosition();
    }
  }

  function searchHistory(text) {
    const wanted = text.trim().toLowerCase();
    if (!wanted) {
      results.hidden = true;
      results.replaceChildren();
      return;
    }
    const hits = [];
    for (const chapter of chapters) {
      if (hits.length >= SEARCH_HITS_MAX) break;
      if (chapter.command.toLowerCase().includes(wanted)) hits.push({ frame: chapter.frame, what: 'command', text: chapter.command });
    }
    for (let i = 0; i < frames.length && hits.length < SEARCH_HITS_MAX; i += 1) {
      const frame = frames[i];
      const at = frame.kind === 'o' ? frame.text.toLowerCase().indexOf(wanted) : -1;
      if (at >= 0) {
        const snippet = frame.text.slice(Math.max(0, at - 30), at + wanted.length + 30).replace(/\s+/g, ' ');
        hits.push({ frame: i + 1, what: 'output', text: snippet });
      }
    }
    results.replaceChildren(...hits.map((hit) => {
      const item = document.createElement('li');
      item.dataset.frame = String(hit.frame);
      const button = document.createElement('button');
      button.type = 'button';
      button.textContent = `${seconds(frames[Math.max(0, hit.frame - 1)]?.t || 0)} ${hit.what}: ${hit.text}`;
      button.addEventListener('click', () => { setPaused(true); jump(hit.frame); });
      item.append(button);
      return item;
    }));
    if (hits.length === 0) {
      const item = document.createElement('li');
      item.className = 'note';
      item.textContent = 'not found';
      results.append(item);
    }
    results.hidden = false;
  }

  playButton.addEventListener('click', () => {
    if (position >= frames.length) jump(0);
    setPaused(!isPaused);
  });
  document.getElementById('previous').addEventListener('click', () => {
    const current = currentChapter();
    const chapter = chapters[current];
    const target = chapter && chapter.frame < position - 1 ? chapter : chapters[current - 1];
    jump(target ? target.frame : 0);
  });
  document.getElementById('next').addEventListener('click', () => {
    const chapter = chapters[currentChapter() + 1];
    if (chapter) jump(chapter.frame);
  });
  speedSelect.addEventListener('change', () => { if (wake) wake(); });
  seek.addEventListener('input', () => {
    const t = (Number(seek.value) / 1000) * duration;
    let target = 0;
    while (target < frames.length && frames[target].t <= t) target += 1;
    jump(target);
  });
  let searchTimer = null;
  search.addEventListener('input', () => {
    clearTimeout(searchTimer);
    searchTimer = setTimeout(() => searchHistory(search.value), 150);
  });

  // Where the address asks to start: `command=N` (a timeline id) or `at_seq=N` (the command
  // running or last run at that event, as the web terminal passes it).
  function startFrame() {
    const command = query.get('command');
    if (command !== null) {
      const chapter = chapters.find((c) => String(c.id) === command);
      if (chapter) return chapter.frame;
    }
    const atSeq = query.get('at_seq');
    if (atSeq !== null) {
      let found = null;
      for (const chapter of chapters) if (chapter.seq <= Number(atSeq)) found = chapter;
      if (found) return found.frame;
    }
    return null;
  }

  (async () => {
    document.title = `${id} · playback · ptyhub`;
    term.open(document.getElementById('terminal'));
    if (!id) {
      setStatus('error', 'no session_id in the address');
      return;
    }
    try {
      const events = await readEvents();
      const fromLog = build(events);
      const commands = await readCommands();
      chapters = commands ? placeCommands(commands) : fromLog;
      showChapters();
      const start = startFrame();
      if (start !== null) seekTarget = start;
      showPosition();
      await run();
    } catch (error) {
      setStatus('error', `cannot play: ${error.message}`);
    }
  })();
})();
