// The console's one door to the gateway: same-origin fetches carrying the
// session cookie, and on every state-changing request the session's CSRF
// token.  Nothing is kept in localStorage or sessionStorage: the CSRF token
// lives in this module and is asked again (GET /console/session) on load.

let csrf = null;

export class ApiError extends Error {
  constructor(status, problem) {
    super((problem && (problem.detail || problem.title)) || ('HTTP ' + status));
    this.status = status;
    this.problem = problem || {};
  }
}

async function call(method, path, body) {
  const headers = { Accept: 'application/json' };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  if (method !== 'GET' && csrf) headers['X-CSRF-Token'] = csrf;
  const res = await fetch(path, { method, headers, credentials: 'same-origin',
    body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await res.text();
  let doc = null;
  try { doc = text ? JSON.parse(text) : null; } catch (e) { doc = { detail: text }; }
  if (!res.ok) throw new ApiError(res.status, doc);
  return { status: res.status, body: doc, headers: res.headers };
}

export const get = (path) => call('GET', path).then((r) => r.body);
export const post = (path, body) => call('POST', path, body === undefined ? {} : body);

export async function session() {
  try {
    const s = await get('/console/session');
    csrf = s.csrf_token;
    return s;
  } catch (e) {
    if (e.status === 401) return null;
    throw e;
  }
}

export async function login(token) {
  const r = await call('POST', '/console/login', { token });
  csrf = r.body.csrf_token;
  return r.body;
}

export async function logout() {
  try { await call('POST', '/console/logout'); } finally { csrf = null; }
}
