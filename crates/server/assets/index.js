// The terminal list: the owner's terminals from GET /v2/pty/sessions with state, directory and
// last activity, each openable read-write (attach), read-only (watch) or as a playback of its
// history; closed ones (history only) on request. Refreshed every few seconds.
'use strict';

(() => {
  const REFRESH_MS = 5000;
  const table = document.getElementById('terminals');
  const rows = table.querySelector('tbody');
  const empty = document.getElementById('empty');
  const status = document.getElementById('status');
  const newTerminal = document.getElementById('new-terminal');
  const signOut = document.getElementById('sign-out');
  const showClosed = document.getElementById('show-closed');

  function ago(unixSeconds) {
    const seconds = Math.max(0, Math.round(Date.now() / 1000 - unixSeconds));
    if (seconds < 60) return `${seconds} s ago`;
    if (seconds < 3600) return `${Math.floor(seconds / 60)} min ago`;
    if (seconds < 86400) return `${Math.floor(seconds / 3600)} h ago`;
    return `${Math.floor(seconds / 86400)} d ago`;
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

  function row(terminal) {
    const tr = document.createElement('tr');
    tr.dataset.sessionId = terminal.session_id;
    const state = cell('state', terminal.running_command
      ? `running: ${terminal.running_command}`
      : terminal.closed ? `closed (${terminal.state})` : terminal.state);
    state.dataset.state = terminal.state;
    const activity = cell('activity', ago(terminal.last_activity));
    activity.title = new Date(terminal.last_activity * 1000).toLocaleString();
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
    tr.append(cell('id', terminal.session_id), state, cell('cwd', terminal.working_dir), activity, open);
    return tr;
  }

  async function refresh() {
    const closed = showClosed.checked ? '?include_closed=true' : '';
    const response = await ptyhubLogin.whenSignedIn(() => fetch(`/v2/pty/sessions${closed}`));
    if (!response.ok) {
      status.textContent = `cannot list terminals (HTTP ${response.status})`;
      return;
    }
    const sessions = (await response.json()).data.sessions;
    sessions.sort((a, b) => b.last_activity - a.last_activity);
    rows.replaceChildren(...sessions.map(row));
    table.hidden = sessions.length === 0;
    empty.hidden = sessions.length !== 0;
    newTerminal.hidden = false;
    signOut.hidden = false;
    status.textContent = '';
  }

  newTerminal.addEventListener('click', async () => {
    const response = await fetch('/v2/pty/sessions', {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: '{}',
    });
    const body = await response.json().catch(() => null);
    if (!response.ok || !body) {
      status.textContent = (body && body.message) || `cannot create a terminal (HTTP ${response.status})`;
      return;
    }
    location.href = `/terminal?${new URLSearchParams({ session_id: body.data.session_id })}`;
  });

  showClosed.addEventListener('change', () => refresh().catch(() => {}));

  signOut.addEventListener('click', async () => {
    await ptyhubLogin.signOut();
    location.reload();
  });

  (async () => {
    for (;;) {
      try {
        await refresh();
      } catch (error) {
        status.textContent = `the server does not answer (${error.message})`;
      }
      await new Promise((resolve) => setTimeout(resolve, REFRESH_MS));
    }
  })();
})();
