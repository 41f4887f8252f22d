// The dashboard: the owner's terminals grouped by owner / agent / session, each with what a
// person needs at a glance (the running command and for how long, waiting for input and
// whether it is a password prompt, a full-screen program, idle, exited with its code, the
// last command's exit code, the backend) and a small live preview of its screen.
//
// Flow at a glance:
// 1. Sign in if needed (login.js), then open ONE stream for the page: GET /v2/pty/events
//    (server-sent events) with the filter, the page and "closed too".
// 2. A `page` event replaces the table (the server sends one only when the page changed); a
//    `preview` event replaces one terminal's preview. Durations count on locally.
// 3. A filter, "closed too" or another page reopens the stream with the new query; a stream
//    the server ended (a login that expired) signs in again and reopens.
'use strict';

(() => {
  const PAGE_SIZE = 50;
  const table = document.getElementById('terminals');
  const rows = table.querySelector('tbody');
  const empty = document.getElementById('empty');
  const status = document.getElementById('status');
  const newTerminal = document.getElementById('new-terminal');
  const signOut = document.getElementById('sign-out');
  const showClosed = document.getElementById('show-closed');
  const paging = document.getElementById('paging');
  const pageInfo = document.getElementById('page-info');
  const filters = document.querySelectorAll('#filters button');

  let filter = 'all';
  let offset = 0;
  let source = null;
  let lastPage = null;
  const previews = new Map(); // session_id → the last preview event's data

  window.ptyhub = {
    get page() { return lastPage; },
    get source() { return source; },
    pageSize: PAGE_SIZE,
  };

  function setStatus(state, text) {
    status.dataset.state = state;
    status.textContent = text;
  }

  function ago(unixSeconds) {
    const seconds = Math.max(0, Math.round(Date.now() / 1000 - unixSeconds));
    if (seconds < 60) return `${seconds} s ago`;
    if (seconds < 3600) return `${Math.floor(seconds / 60)} min ago`;
    if (seconds < 86400) return `${Math.floor(seconds / 3600)} h ago`;
    return `${Math.floor(seconds / 86400)} d ago`;
  }

  function lasted(seconds) {
    const s = Math.max(0, Math.round(seconds));
    if (s < 60) return `${s} s`;
    if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
    return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
  }

  function cell(className, text) {
    const td = document.createElement('td');
    td.className = className;
    td.textContent = text;
    return td;
  }

  function link(text, id, mode, page = '/terminal') {
    const a = document.createElement('a');
    const query = new URLSearchParams({ session_id: id });
    if (mode) query.set('mode', mode);
    a.href = `${page}?${query}`;
    a.textContent = text;
    return a;
  }

  // What the terminal does now, in words, and the kind of fact it is (for styling and tests).
  function now(terminal, preview) {
    if (terminal.closed) return ['closed', 'closed'];
    if (terminal.state === 'exited' || terminal.state === 'error') {
      const how = terminal.signal ? `signal ${terminal.signal}` : `code ${terminal.exit_code}`;
      return ['exited', terminal.state === 'error' ? 'ended in error' : `exited with ${how}`];
    }
    if (terminal.is_waiting) {
      const who = terminal.waiting_program ? ` (${terminal.waiting_program})` : '';
      return [terminal.is_password_prompt ? 'password' : 'waiting',
        terminal.is_password_prompt ? `waiting for a password${who}` : `waiting for input${who}`];
    }
    if (preview && preview.is_full_screen) return ['full-screen', 'full-screen program'];
    if (terminal.running_since) return ['running', `running for ${lasted(Date.now() / 1000 - terminal.running_since)}`];
    if (terminal.is_idle) return ['idle', 'idle'];
    return [terminal.state, terminal.state];
  }

  function fillNow(td, terminal) {
    const [kind, text] = now(terminal, previews.get(terminal.session_id));
    td.dataset.kind = kind;
    td.textContent = text;
  }

  function row(terminal) {
    const tr = document.createElement('tr');
    tr.dataset.sessionId = terminal.session_id;
    const state = cell('state', terminal.running_command
      ? `running: ${terminal.running_command}`
      : terminal.closed ? `closed (${terminal.state})` : terminal.state);
    state.dataset.state = terminal.state;
    const doing = cell('now', '');
    fillNow(doing, terminal);
    const last = cell('last', '');
    if (terminal.last_command) {
      const code = terminal.last_command.exit_code;
      last.textContent = `${terminal.last_command.command} → ${code === null ? '?' : `exit ${code}`}`;
      if (code !== null) last.dataset.exitCode = String(code);
    }
    const activity = cell('activity', ago(terminal.last_activity));
    activity.title = new Date(terminal.last_activity * 1000).toLocaleString();
    const preview = cell('preview', '');
    const pre = document.createElement('pre');
    const known = previews.get(terminal.session_id);
    pre.textContent = known ? known.lines.join('\n') : '';
    preview.append(pre);
    const open = cell('open', '');
    if (terminal.closed) {
      open.append(link('replay', terminal.session_id, null, '/play'));
    } else {
      open.append(
        link('open', terminal.session_id),
        link('watch', terminal.session_id, 'watch'),
        link('replay', terminal.session_id, null, '/play'),
      );
    }
    if (terminal.is_failed) tr.dataset.failed = 'true';
    tr.append(cell('id', terminal.session_id), state, doing, last, cell('cwd', terminal.working_dir),
      cell('backend', terminal.backend), activity, preview, open);
    return tr;
  }

  function showPage(page) {
    lastPage = page;
    const children = [];
    let group = null;
    for (const terminal of page.terminals) {
      const name = `${terminal.owner} / ${terminal.agent} / ${terminal.session}`;
      if (name !== group) {
        group = name;
        const tr = document.createElement('tr');
        tr.className = 'group';
        const th = document.createElement('th');
        th.colSpan = 9;
        th.textContent = name;
        tr.append(th);
        children.push(tr);
      }
      children.push(row(terminal));
    }
    rows.replaceChildren(...children);
    table.hidden = page.terminals.length === 0;
    empty.hidden = page.terminals.length !== 0;
    empty.textContent = page.counts.all === 0 ? 'No terminals yet.' : `No ${page.filter} terminals.`;
    for (const button of filters) {
      button.querySelector('.count').textContent = String(page.counts[button.dataset.filter] ?? 0);
      button.setAttribute('aria-pressed', String(button.dataset.filter === filter));
    }
    paging.hidden = page.total <= page.limit && page.offset === 0;
    pageInfo.textContent = `${page.total === 0 ? 0 : page.offset + 1}–${Math.min(page.total, page.offset + page.limit)} of ${page.total}`;
    document.getElementById('previous-page').disabled = page.offset === 0;
    document.getElementById('next-page').disabled = page.offset + page.limit >= page.total;
  }

  function showPreview(preview) {
    previews.set(preview.session_id, preview);
    const tr = rows.querySelector(`tr[data-session-id="${CSS.escape(preview.session_id)}"]`);
    if (!tr || !lastPage) return;
    tr.querySelector('td.preview pre').textContent = preview.lines.join('\n');
    const terminal = lastPage.terminals.find((t) => t.session_id === preview.session_id);
    if (terminal) fillNow(tr.querySelector('td.now'), terminal);
  }

  async function open() {
    if (source) source.close();
    source = null;
    const probe = await ptyhubLogin.whenSignedIn(() => fetch('/v2/version'));
    if (!probe.ok) {
      setStatus('error', `cannot list terminals (HTTP ${probe.status})`);
      return;
    }
    newTerminal.hidden = false;
    signOut.hidden = false;
    const query = new URLSearchParams({ filter, offset: String(offset), limit: String(PAGE_SIZE) });
    if (showClosed.checked) query.set('include_closed', 'true');
    const stream = new EventSource(`/v2/pty/events?${query}`);
    source = stream;
    stream.addEventListener('open', () => setStatus('live', ''));
    stream.addEventListener('page', (event) => showPage(JSON.parse(event.data)));
    stream.addEventListener('preview', (event) => showPreview(JSON.parse(event.data)));
    stream.addEventListener('error', () => {
      if (stream !== source) return;
      if (stream.readyState === EventSource.CLOSED) {
        setStatus('reconnecting', 'the server ended the stream; reconnecting…');
        setTimeout(() => { if (stream === source) open().catch(() => {}); }, 1000);
      } else {
        setStatus('reconnecting', 'reconnecting…');
      }
    });
  }

  // Durations and "ago" count on between events.
  setInterval(() => {
    if (!lastPage) return;
    for (const terminal of lastPage.terminals) {
      const tr = rows.querySelector(`tr[data-session-id="${CSS.escape(terminal.session_id)}"]`);
      if (!tr) continue;
      fillNow(tr.querySelector('td.now'), terminal);
      tr.querySelector('td.activity').textContent = ago(terminal.last_activity);
    }
  }, 1000);

  for (const button of filters) {
    button.addEventListener('click', () => {
      filter = button.dataset.filter;
      offset = 0;
      open().catch(() => {});
    });
  }
  document.getElementById('previous-page').addEventListener('click', () => {
    offset = Math.max(0, offset - PAGE_SIZE);
    open().catch(() => {});
  });
  document.getElementById('next-page').addEventListener('click', () => {
    offset += PAGE_SIZE;
    open().catch(() => {});
  });
  showClosed.addEventListener('change', () => open().catch(() => {}));

  newTerminal.addEventListener('click', async () => {
    const response = await fetch('/v2/pty/sessions', {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: '{}',
    });
    const body = await response.json().catch(() => null);
    if (!response.ok || !body) {
      setStatus('error', (body && body.message) || `cannot create a terminal (HTTP ${response.status})`);
      return;
    }
    location.href = `/terminal?${new URLSearchParams({ session_id: body.data.session_id })}`;
  });

  signOut.addEventListener('click', async () => {
    if (source) source.close();
    await ptyhubLogin.signOut();
    location.reload();
  });

  open().catch((error) => setStatus('error', `the server does not answer (${error.message})`));
})();
