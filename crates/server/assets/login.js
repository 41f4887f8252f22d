// Signing the browser in. The token or one-time ticket in the address's fragment (`#token=…`
// from the serve banner, `#ticket=…` from /v1/shell/terminal-url) is traded for the server's
// HttpOnly login cookie and removed from the address bar and history; fragments are never sent
// to the server. Without a login, a small form asks for the token.
//
// Pages call `ptyhubLogin.whenSignedIn(probe)` with a request that needs a login.
'use strict';

const ptyhubLogin = (() => {
  // Posts a token or ticket; returns null, or why it was refused.
  async function exchange(credential) {
    const response = await fetch('/auth/session', {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify(credential),
    });
    if (response.ok) return null;
    const body = await response.json().catch(() => null);
    return (body && body.message) || `sign-in failed (HTTP ${response.status})`;
  }

  // Trades the fragment's token or ticket for a login; returns null, or why it failed.
  async function fromFragment() {
    const fragment = new URLSearchParams(location.hash.slice(1));
    const token = fragment.get('token');
    const ticket = fragment.get('ticket');
    if (token === null && ticket === null) return null;
    history.replaceState(history.state, '', location.pathname + location.search);
    return exchange(token !== null ? { token } : { ticket });
  }

  // Shows the token form until a sign-in with it succeeds.
  function askForToken(problem) {
    return new Promise((resolve) => {
      const form = document.createElement('form');
      form.className = 'login';
      const text = document.createElement('p');
      text.textContent = 'Paste the token from the start banner of `ptyhub serve` (or <state dir>/token).';
      const input = document.createElement('input');
      input.type = 'password';
      input.name = 'token';
      input.autocomplete = 'off';
      input.placeholder = 'token';
      const button = document.createElement('button');
      button.type = 'submit';
      button.textContent = 'Sign in';
      const error = document.createElement('p');
      error.className = 'error';
      error.textContent = problem || '';
      form.append(text, input, button, error);
      form.addEventListener('submit', async (event) => {
        event.preventDefault();
        const refused = await exchange({ token: input.value.trim() }).catch((e) => String(e));
        if (refused) {
          error.textContent = refused;
          return;
        }
        form.remove();
        resolve();
      });
      document.body.append(form);
      input.focus();
    });
  }

  // Sends `probe()` (a fetch that needs a login) until it is answered with anything but 401,
  // signing in from the fragment or the form as needed; returns that answer.
  async function whenSignedIn(probe) {
    let problem = await fromFragment();
    for (;;) {
      const response = await probe();
      if (response.status !== 401) return response;
      await askForToken(problem);
      problem = null;
    }
  }

  async function signOut() {
    await fetch('/auth/logout', { method: 'POST' });
  }

  return { whenSignedIn, signOut };
})();
