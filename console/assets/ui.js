// Small DOM helpers.  Every value reaches the page as text (textContent,
// attributes), never as HTML: what a saga or a dead letter carries cannot
// become markup or script.

export function h(tag, attrs, ...kids) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  for (const kid of kids.flat(Infinity)) {
    if (kid === null || kid === undefined || kid === false) continue;
    el.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
  }
  return el;
}

// A time in the viewer's zone, UTC in its title (hover) and datetime.
export function time(iso) {
  if (!iso) return h('span', { class: 'muted' }, '-');
  const d = new Date(iso);
  if (isNaN(d)) return h('span', {}, iso);
  return h('time', { datetime: d.toISOString(), title: d.toISOString().replace('.000Z', 'Z') + ' (UTC)' },
    d.toLocaleString());
}

export function ago(seconds) {
  const s = Math.max(0, Math.round(seconds));
  if (s < 90) return s + ' s';
  if (s < 5400) return Math.round(s / 60) + ' min';
  if (s < 172800) return Math.round(s / 3600) + ' h';
  return Math.round(s / 86400) + ' d';
}

const KIND = {
  completed: 'ok', ok: 'ok', succeeded: 'ok', compensated: 'warn', approved: 'ok', replayed: 'ok',
  running: 'run', awaiting_approval: 'warn', compensating: 'warn', cancelling: 'warn', held: 'warn',
  pending: 'run', partial: 'warn',
  failed: 'bad', error: 'bad', timeout: 'bad', compensation_failed: 'bad', unknown: 'bad',
  cancelled: '', skipped: '', discarded: '',
  closed: 'ok', open: 'bad', half_open: 'warn',
};
export function badge(status) {
  return h('span', { class: 'badge ' + (KIND[status] || '') }, status || '-');
}

export function table(headers, rows, caption) {
  // A table wider than the screen scrolls in its box, which the keyboard
  // must reach too (axe: scrollable-region-focusable).
  return h('div', { class: 'scroll', tabindex: '0', role: 'region', 'aria-label': caption || 'table' },
    h('table', {},
      caption ? h('caption', { class: 'sr' }, caption) : null,
      h('thead', {}, h('tr', {}, headers.map((t) => h('th', { scope: 'col' }, t)))),
      h('tbody', {}, rows.length ? rows.map((r) => h('tr', {}, r.map((c) => c instanceof Node && c.tagName === 'TD' ? c : h('td', {}, c))))
        : h('tr', {}, h('td', { colspan: headers.length, class: 'muted' }, 'nothing here')))));
}

export function message(kind, text) {
  return h('div', { class: 'msg ' + kind, role: kind === 'error' ? 'alert' : 'status' }, text);
}

// Secrets out of what is shown: a member whose name says it holds one.
const SECRET = /pass(word)?|secret|token|api[_-]?key|authorization|cookie|credential|private|card|cvv|iban|ssn/i;
export function mask(v) {
  if (Array.isArray(v)) return v.map(mask);
  if (v && typeof v === 'object') {
    const o = {};
    for (const [k, x] of Object.entries(v)) o[k] = SECRET.test(k) && x !== null && typeof x !== 'object' ? '***' : mask(x);
    return o;
  }
  return v;
}

export function json(v, limit) {
  let text = JSON.stringify(v, null, 2);
  if (text === undefined) text = 'null';
  if (limit && text.length > limit) text = text.slice(0, limit) + '\n… (' + (text.length - limit) + ' more characters)';
  return h('pre', { class: 'json', tabindex: '0' }, text);
}

// A button that cannot be used says why, next to it and to a screen reader.
export function actionButton(label, why, onclick, cls) {
  const id = 'why-' + Math.random().toString(36).slice(2);
  const b = h('button', { type: onclick ? 'button' : 'submit', class: cls || '', disabled: !!why,
    'aria-describedby': why ? id : null, onclick: why ? null : onclick }, label);
  return why ? h('span', { class: 'row' }, b, h('span', { id, class: 'muted' }, why)) : b;
}

export function download(name, text) {
  const a = h('a', { href: URL.createObjectURL(new Blob([text], { type: 'application/json' })), download: name });
  document.body.append(a);
  a.click();
  setTimeout(() => { URL.revokeObjectURL(a.href); a.remove(); }, 1000);
}
