// The console's shell: sign-in, the hash router (each page deep-linkable:
// #/now, #/sagas?status=failed, #/sagas/ID, #/approvals,
// #/dead-letters?code=..., #/dead-letters/ID, #/tools), and the auto-refresh
// every page has, with its "updated N s ago" and a pause toggle.
import * as api from './api.js';
import { h, message } from './ui.js';
import { pages } from './pages.js';

const REFRESH_S = 10;
const $ = (id) => document.getElementById(id);
const state = { session: null, loadedAt: 0, paused: false, busy: false, again: false, shown: false };

function route() {
  const hash = location.hash.startsWith('#/') ? location.hash.slice(2) : 'now';
  const [path, query] = hash.split('?');
  const parts = path.split('/').map(decodeURIComponent);
  const params = Object.fromEntries(new URLSearchParams(query || ''));
  return { parts, params };
}

function pageOf(parts) {
  if (parts[0] === 'sagas' && parts[1]) return [pages.saga, parts[1]];
  if (parts[0] === 'dead-letters' && parts[1]) return [pages.deadLetter, parts[1]];
  return [pages[{ now: 'now', sagas: 'sagas', approvals: 'approvals', 'dead-letters': 'deadLetters', tools: 'tools' }[parts[0]] || 'now'], null];
}

// Someone typing a reason must not lose it to a refresh.
function typing() {
  const main = $('main');
  const a = document.activeElement;
  if (a && main.contains(a) && /^(INPUT|TEXTAREA|SELECT)$/.test(a.tagName)) return true;
  return [...main.querySelectorAll('textarea, input[type=text]:not([data-filter])')].some((e) => e.value);
}

async function render(initial) {
  if (!state.session) return;
  // A navigation while a page loads is done once that load ends.
  if (state.busy) { state.again = state.again || initial; return; }
  if (!initial && typing()) return;
  const { parts, params } = route();
  const [page, id] = pageOf(parts);
  const ctx = { session: state.session, params, id, refresh: () => render(true), navigate };
  state.busy = true;
  try {
    const view = await page(ctx);
    const main = $('main');
    main.replaceChildren(view);
    if (initial) {
      document.title = (view.dataset.title || 'console') + ' - sagad';
      // After a navigation the new content has the focus; on the first
      // page the keyboard starts at the top (Skip to content).
      if (state.shown) main.focus({ preventScroll: true });
      state.shown = true;
    }
    state.loadedAt = Date.now();
  } catch (e) {
    if (e.status === 401) return signedOut('Your session ended: sign in again.');
    $('main').replaceChildren(h('h1', {}, 'Could not load this page'), message('error', e.message));
  } finally {
    state.busy = false;
  }
  if (state.again) {
    state.again = false;
    return render(true);
  }
  for (const a of document.querySelectorAll('#nav a')) {
    const cur = a.getAttribute('href').slice(2) === parts[0];
    if (cur) a.setAttribute('aria-current', 'page'); else a.removeAttribute('aria-current');
  }
  tick();
}

function navigate(hash) {
  if (location.hash === hash) render(true); else location.hash = hash;
}

function tick() {
  if (!state.loadedAt) return;
  const s = Math.round((Date.now() - state.loadedAt) / 1000);
  $('updated').textContent = 'updated ' + s + ' s ago' + (state.paused ? ' (auto-refresh paused)' : typing() ? ' (auto-refresh waits while you type)' : '');
  if (!state.paused && s >= REFRESH_S) render(false);
}

function showShell(s) {
  $('nav').hidden = false;
  $('who').hidden = false;
  $('bar').hidden = false;
  $('who-name').textContent = 'signed in as ' + s.user;
  const banner = $('banner');
  banner.hidden = !s.read_only;
  banner.textContent = s.read_only
    ? 'Read-only console: this gateway refuses every action made through the console (console.read_only). Buttons are disabled; use the API with a token, sagactl or dlq-tool to act.'
    : '';
}

function signedOut(note) {
  state.session = null;
  state.shown = false;
  $('nav').hidden = true;
  $('who').hidden = true;
  $('bar').hidden = true;
  $('banner').hidden = true;
  const err = h('div', { id: 'login-error' });
  const input = h('input', { id: 'token', name: 'token', type: 'password', autocomplete: 'off', required: true,
    spellcheck: 'false', 'aria-describedby': 'token-help' });
  const form = h('form', { class: 'login', method: 'post', action: '/console/login', onsubmit: async (ev) => {
    ev.preventDefault();
    err.replaceChildren();
    try {
      await api.login(input.value);
      input.value = '';
      start();
    } catch (e) {
      err.replaceChildren(message('error', e.message));
    }
  } },
  h('label', { for: 'token' }, 'Gateway token', input),
  h('p', { id: 'token-help', class: 'note' }, 'A token of this gateway\'s users file (sagad-gateway token new). It is sent once; the browser then holds only an HttpOnly session cookie.'),
  h('button', { type: 'submit' }, 'Sign in'), err);
  $('main').replaceChildren(...[h('h1', {}, 'Sign in to the sagad console'), note && message('info', note), form].filter(Boolean));
  document.title = 'Sign in - sagad';
  input.focus();
}

async function start() {
  const s = await api.session();
  if (!s) return signedOut();
  state.session = s;
  showShell(s);
  render(true);
}

$('pause').addEventListener('click', () => {
  state.paused = !state.paused;
  $('pause').setAttribute('aria-pressed', String(state.paused));
  $('pause').textContent = state.paused ? 'Resume auto-refresh' : 'Pause auto-refresh';
  tick();
});
$('reload').addEventListener('click', () => render(true));
$('skip').addEventListener('click', () => $('main').focus());
$('logout').addEventListener('click', async () => {
  try { await api.logout(); } catch (e) { /* the session is gone either way */ }
  signedOut('Signed out.');
});
window.addEventListener('hashchange', () => render(true));
setInterval(tick, 1000);
start().catch((e) => $('main').replaceChildren(message('error', 'The console could not start: ' + e.message)));
