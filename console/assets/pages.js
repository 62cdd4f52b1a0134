// The console's pages.  Each is an async function of its context ({session,
// params, id, refresh, navigate}) returning the element to show; the shell
// calls it again on auto-refresh.  Every action goes through the API, which
// decides (roles, four eyes, read-only): a refusal is shown as it said it.
import * as api from './api.js';
import { h, time, ago, badge, table, message, mask, json, actionButton, download } from './ui.js';

const enc = encodeURIComponent;
const may = (ctx, perm) => ctx.session.may.includes(perm);

// Why an action is not available to this session, or null when it is.
function whyNot(ctx, perm, what) {
  if (ctx.session.read_only) return 'read-only console (console.read_only)';
  if (perm && !may(ctx, perm)) return 'your roles do not allow ' + what;
  return null;
}

function page(title, ...kids) {
  const el = h('section', { 'aria-labelledby': 'page-title' }, h('h1', { id: 'page-title' }, title), kids);
  el.dataset.title = title;
  return el;
}

// A reason and a button: the API call, then its answer or its refusal
// where the person is looking.
function actForm(ctx, { label, perm, what, danger, onact, why: because }) {
  const out = h('div', { 'aria-live': 'polite' });
  const why = whyNot(ctx, perm, what) || because || null;
  const reason = h('textarea', { name: 'reason', rows: 2, required: true, disabled: !!why,
    'aria-label': 'Reason for ' + label.toLowerCase() });
  const form = h('form', { class: 'act', onsubmit: async (ev) => {
    ev.preventDefault();
    out.replaceChildren();
    if (!reason.value.trim()) return out.replaceChildren(message('error', 'A reason is required.'));
    try {
      const r = await onact(reason.value.trim());
      reason.value = '';
      out.replaceChildren(message('ok', label + ': ' + (r && r.body ? (r.body.outcome || r.body.status || 'done') + (r.body.detail ? ' - ' + r.body.detail : '') : 'done')));
    } catch (e) {
      out.replaceChildren(message('error', label + ' refused (' + e.status + '): ' + e.message));
    }
  } }, h('label', {}, 'Reason (required)', reason), actionButton(label, why, null, danger ? 'danger' : ''));
  return h('div', {}, form, out);
}

// ---- Now ---------------------------------------------------------------------

const TILES = [
  ['running', 'running', '#/sagas?status=running'],
  ['awaiting_approval', 'awaiting approval', '#/sagas?awaiting_approval=true'],
  ['compensating', 'compensating', '#/sagas?status=compensating'],
  ['held', 'held (dead letter)', '#/sagas?status=held'],
  ['failed', 'failed', '#/sagas?status=failed', true],
  ['compensated', 'compensated', '#/sagas?status=compensated'],
  ['cancelled', 'cancelled', '#/sagas?status=cancelled'],
  ['completed', 'completed', '#/sagas?status=completed'],
];

async function now(ctx) {
  const stuckFor = ctx.params.stuck_for || '15m';
  if (!may(ctx, 'read_all')) return page('Now', message('info', 'The Now page counts every saga: it needs a reader, approver or operator role.'));
  const s = await api.get('/v1/summary?stuck_for=' + enc(stuckFor));
  const by = s.sagas_by_status || {};
  const tile = (n, label, href, alert) => h('a', { class: 'tile' + (alert && n ? ' alert' : ''), href },
    h('span', { class: 'n' }, String(n)), h('span', { class: 'l' }, label));
  const tiles = TILES.map(([k, label, href, alert]) => tile(k === 'awaiting_approval' ? s.awaiting_approval : (by[k] || 0), label, href, alert));
  tiles.push(tile(s.stuck, 'no progress for ' + stuckFor, '#/sagas?stuck_for=' + enc(stuckFor), true));
  tiles.push(tile(s.dead_letters_pending, 'dead letters pending', '#/dead-letters', true));
  tiles.push(tile(s.dead_letters_new_1h, 'dead letters, last hour', '#/dead-letters?since=1h'));
  tiles.push(tile(s.breakers_open, 'tools with a circuit open', '#/tools', true));
  const relay = s.relay || [];
  const backlog = relay.reduce((n, r) => n + r.backlog, 0);
  const oldest = Math.max(0, ...relay.map((r) => r.oldest_age_s || 0));
  const dead = relay.filter((r) => !r.held || r.heartbeat_age_s === null || r.heartbeat_age_s > 30).length;
  tiles.push(h('div', { class: 'tile' + (oldest > 60 || dead ? ' alert' : '') },
    h('span', { class: 'n' }, String(backlog)), h('span', { class: 'l' }, 'outbox backlog' + (oldest ? ', oldest ' + ago(oldest) : '') + (dead ? '; ' + dead + ' shard(s) without a live relay' : ''))));
  const stuck = s.stuck ? await api.get('/v1/sagas?limit=10&stuck_for=' + enc(stuckFor)) : { items: [] };
  const pick = h('select', { 'aria-label': 'No progress for', onchange: (ev) => ctx.navigate('#/now?stuck_for=' + enc(ev.target.value)) },
    ['5m', '15m', '1h', '6h', '24h'].map((v) => h('option', { value: v, selected: v === stuckFor }, v)));
  return page('Now',
    h('p', { class: 'row' }, h('span', {}, 'A saga is stuck after no progress for'), pick),
    h('div', { class: 'tiles' }, tiles),
    h('h2', {}, 'Sagas with no progress for ' + stuckFor),
    sagaTable(stuck.items),
    h('h2', {}, 'Relay'),
    table(['Shard', 'Held', 'Holder', 'Heartbeat', 'Backlog', 'Oldest waiting'], relay.map((r) => [
      String(r.shard), r.held ? h('span', { class: 'badge ok' }, 'held') : h('span', { class: 'badge bad' }, 'not held'), r.holder || '-',
      r.heartbeat_age_s === null ? '-' : ago(r.heartbeat_age_s) + ' ago', String(r.backlog),
      r.oldest_age_s === null ? '-' : ago(r.oldest_age_s)]), 'Relay shards'),
    h('h2', {}, 'Workers'),
    table(['Topic', 'Partition', 'Owner', 'Lag', 'Next offset', 'Last commit'], (s.partitions || []).map((w) => [
      h('span', { class: 'wrap' }, w.topic), String(w.partition), w.owner || '-',
      w.lag === null ? h('span', { class: 'muted', title: 'not measured by its owner in the last 30 s' }, '-')
        : h('span', { title: 'high watermark ' + w.high_watermark + ', measured ' + ago(w.lag_age_s) + ' ago' }, String(w.lag)),
      String(w.next_offset), ago(w.idle_s) + ' ago']), 'Worker partitions'),
    h('p', { class: 'note' }, 'Counted by the gateway at ', time(s.at), '. Lag: messages on the partition the worker has not committed yet, as its owner measured it (every 5 s; - when not in the last 30 s). A worker commits a partition as it decides its messages: a quiet partition ages without anything being wrong.'));
}

// ---- Sagas -------------------------------------------------------------------

function sagaTable(items) {
  return table(['Saga', 'Name', 'Status', 'Steps ok/total', 'Now at', 'Created', 'Idle'],
    items.map((s) => [
      h('td', { class: 'id' }, h('a', { href: '#/sagas/' + enc(s.saga_id) }, s.saga_id)),
      s.name, badge(s.status), s.steps_succeeded + '/' + s.steps_total,
      s.at_step ? h('span', {}, s.at_step.name + ' ', badge(s.at_step.status)) : '-',
      time(s.created_at), ago(s.idle_s)]), 'Sagas');
}

const SAGA_FILTERS = ['status', 'name', 'error_code', 'stuck_for', 'created_after', 'created_before', 'awaiting_approval'];

async function sagas(ctx) {
  const p = ctx.params;
  const q = new URLSearchParams();
  for (const k of SAGA_FILTERS.concat(['before'])) if (p[k]) q.set(k, p[k]);
  q.set('limit', '50');
  const list = await api.get('/v1/sagas?' + q);
  // A time filter in the viewer's zone, sent as UTC.
  const local = (iso) => { const d = new Date(iso); return isNaN(d) ? '' : new Date(d - d.getTimezoneOffset() * 60000).toISOString().slice(0, 16); };
  const when = (name, label) => h('label', {}, label, h('input', { name, type: 'datetime-local', value: p[name] ? local(p[name]) : '', 'data-filter': '1' }));
  const field = (name, label, attrs) => h('label', {}, label, h('input', Object.assign({ name, value: p[name] || '', 'data-filter': '1', type: 'text' }, attrs || {})));
  const status = h('select', { name: 'status' }, ['', 'running', 'held', 'completed', 'compensating', 'compensated', 'failed', 'cancelling', 'cancelled']
    .map((v) => h('option', { value: v, selected: (p.status || '') === v }, v || 'any')));
  const awaiting = h('select', { name: 'awaiting_approval' }, [['', 'any'], ['true', 'yes']].map(([v, l]) => h('option', { value: v, selected: (p.awaiting_approval || '') === v }, l)));
  const go = h('form', { class: 'filters', role: 'search', onsubmit: (ev) => {
    ev.preventDefault();
    const fd = new FormData(ev.target);
    const id = (fd.get('id') || '').trim();
    if (id) return ctx.navigate('#/sagas/' + enc(id));
    const nq = new URLSearchParams();
    for (const k of SAGA_FILTERS) {
      let v = (fd.get(k) || '').trim();
      if (v && k.startsWith('created_')) v = new Date(v).toISOString();
      if (v) nq.set(k, v);
    }
    ctx.navigate('#/sagas' + (String(nq) ? '?' + nq : ''));
  } },
  field('id', 'Saga id (paste)', { value: '' }), h('label', {}, 'Status', status), field('name', 'Name'),
  field('error_code', 'Error code'), field('stuck_for', 'Stuck for (15m)'),
  when('created_after', 'Created after'), when('created_before', 'Created before'),
  h('label', {}, 'Awaiting approval', awaiting), h('button', { type: 'submit' }, 'Search'));
  const next = list.next_before ? (() => { const n = new URLSearchParams(q); n.delete('limit'); n.set('before', list.next_before); return h('a', { href: '#/sagas?' + n }, 'Older sagas →'); })() : h('span', { class: 'muted' }, 'end of the list');
  return page('Sagas', go, sagaTable(list.items), h('p', {}, p.before ? h('a', { href: '#/sagas' }, '← Newest') : null, ' ', next));
}

// ---- One saga ------------------------------------------------------------------

const streams = new Map();

// The saga's events (Server-Sent Events of /v1/sagas/{id}/events), kept
// while the page shows the saga; a new event re-renders the timeline.  The
// gateway ends a stream after the saga's last event or gateway.wait_max_ms:
// while the saga goes on, the next refresh opens it again after the last
// event read (after_seq), so none is lost or shown twice.
const TERMINAL = new Set(['saga.completed', 'saga.compensated', 'saga.failed', 'saga.cancelled', 'saga.rejected']);

function events(id, onevent) {
  for (const [k, s] of streams) if (k !== id) { if (s.es) s.es.close(); streams.delete(k); }
  let s = streams.get(id);
  if (!s) {
    s = { list: [], seen: new Set(), es: null, listeners: new Set() };
    streams.set(id, s);
  }
  if (!s.es && !s.list.some((e) => TERMINAL.has(e.type))) {
    const last = s.list.length ? s.list[s.list.length - 1].seq : null;
    s.es = new EventSource('/v1/sagas/' + enc(id) + '/events' + (last === null ? '' : '?after_seq=' + last));
    const onmsg = (ev) => {
      let e;
      try { e = JSON.parse(ev.data); } catch (err) { return; }
      if (s.seen.has(e.seq)) return;
      s.seen.add(e.seq);
      s.list.push(e);
      s.list.sort((a, b) => a.seq - b.seq);
      for (const l of s.listeners) l();
    };
    for (const t of ['saga.accepted', 'saga.rejected', 'step.succeeded', 'step.failed', 'step.retry_scheduled', 'saga.compensating', 'step.compensated', 'step.compensation_failed', 'saga.completed', 'saga.compensated', 'saga.failed', 'saga.dead_lettered', 'saga.duplicate', 'saga.cancelling', 'saga.cancelled', 'saga.command_refused', 'step.approval_requested', 'step.approved', 'step.rejected', 'group.finished', 'message'])
      s.es.addEventListener(t, onmsg);
    const es = s.es;
    es.onerror = () => { es.close(); if (s.es === es) s.es = null; };
  }
  s.listeners.clear();
  s.listeners.add(onevent);
  return s.list;
}

function timelineItem(e) {
  const bits = [];
  if (e.step_name) bits.push('step ' + e.step_name);
  if (e.attempt) bits.push('attempt ' + e.attempt);
  if (e.error_code) bits.push(e.error_code);
  if (e.delay_ms) bits.push('retry in ' + ago(e.delay_ms / 1000));
  if (e.principal || e.by) bits.push('by ' + (e.principal || e.by) + (e.via ? ' via ' + e.via : ''));
  if (e.reason) bits.push('"' + e.reason + '"');
  if (e.agent_action) bits.push('agent_action: ' + e.agent_action);
  if (e.message) bits.push(e.message);
  return h('li', {}, h('span', { class: 't' }, time(e.time)), h('strong', {}, e.type), ' ', h('span', { class: 'wrap' }, bits.join(' · ')));
}

function diagram(steps) {
  const out = [];
  let group = null;
  for (const st of steps) {
    const b = h('span', { title: st.tool + ': ' + st.status }, badge(st.status), ' ', st.name);
    if (st.group) {
      if (!group || group.dataset.name !== st.group) {
        group = h('div', { class: 'group', 'aria-label': 'parallel group ' + st.group });
        group.dataset.name = st.group;
        out.push(group);
      }
      group.append(b);
    } else { group = null; out.push(b); }
  }
  return h('div', { class: 'diagram', 'aria-label': 'steps in order' }, out.flatMap((x, i) => i ? [h('span', { 'aria-hidden': 'true' }, '→'), x] : [x]));
}

// A duration in milliseconds as a person reads it; '-' when not known.
function ms(n) {
  if (n === null || n === undefined) return '-';
  return n < 1000 ? n + ' ms' : n < 90000 ? (n / 1000).toFixed(1) + ' s' : ago(n / 1000);
}

const ATTEMPTS_SHOWN = 200;

// Every call of the saga as the attempts table has it (GET
// /v1/sagas/{id}/attempts): its key, how it ended, how long it took, how
// long it waited after the attempt before it.  The scheduled retry delay is
// in the timeline (step.retry_scheduled).
function attemptsTable(at) {
  const rows = at.attempts.map((a) => [
    String(a.step) + ' ' + a.step_name, a.phase === 'compensate' ? badge('compensate') : 'forward',
    'g' + a.generation + ' #' + a.attempt, badge(a.status || 'running'),
    a.error_code ? h('span', {}, h('code', {}, a.error_code), a.error_class ? ' (' + a.error_class + ')' : null) : '-',
    h('td', { class: 'id mono' }, a.idempotency_key),
    ms(a.latency_ms), ms(a.waited_ms), time(a.started_at),
    h('td', { class: 'wrap' }, a.agent_action || '-')]);
  return [table(['Step', 'Phase', 'Generation / attempt', 'Status', 'Error code', 'Idempotency key', 'Duration', 'Waited', 'Started', 'agent_action'], rows, 'Attempts'),
    at.truncated ? h('p', { class: 'note' }, 'The first ' + at.attempts.length + ' attempts; the rest: GET /v1/sagas/' + at.saga_id + '/attempts?after=' + at.next_after + ' or sagactl timeline.') : null];
}

async function saga(ctx) {
  const id = ctx.id;
  const env = await api.get('/v1/sagas/' + enc(id));
  const attempts = await api.get('/v1/sagas/' + enc(id) + '/attempts?limit=' + ATTEMPTS_SHOWN);
  // Its dead letters and what became of them (replayed, discarded): the
  // lineage of a replayed saga.
  const dls = may(ctx, 'dead_letters_read')
    ? (await api.get('/v1/dead-letters?view=entries&limit=20&saga=' + enc(id))).items : null;
  const shown = mask(env);
  const list = events(id, () => {
    const ol = document.getElementById('timeline');
    if (ol) ol.replaceChildren(...timelineItems());
  });
  const timelineItems = () => list.length ? list.map(timelineItem) : [h('li', { class: 'muted' }, 'waiting for its events…')];
  const approveWhy = (st) => whyNot(ctx, 'approve', 'approving') || (ctx.session.user === env.submitted_by ? 'you submitted this saga: another person must decide (four eyes; the API refuses too)' : null);
  const stepRows = env.steps.map((st) => [
    String(st.step), st.name, h('code', {}, st.tool), badge(st.status), String(st.attempts),
    st.error_code ? h('a', { href: '#/dead-letters?saga=' + enc(env.saga_id) }, st.error_code) : '-',
    st.agent_action || '-',
    st.status === 'awaiting_approval' ? approvalControls(ctx, env, st, approveWhy(st)) : (st.result === null ? '-' : json(mask(st.result), 400))]);
  const envText = JSON.stringify(shown, null, 2);
  const cancelWhy = !['running', 'held'].includes(env.saga_status) ? 'the saga is ' + env.saga_status
    : may(ctx, 'cancel_all') || (may(ctx, 'cancel_own') && env.submitted_by === ctx.session.user) ? null
      : 'your roles do not allow cancelling this saga';
  return page('Saga ' + env.name,
    h('dl', { class: 'kv' },
      h('dt', {}, 'Saga id'), h('dd', { class: 'mono' }, env.saga_id),
      h('dt', {}, 'Status'), h('dd', {}, badge(env.status), ' (row: ', env.saga_status, ')'),
      h('dt', {}, 'Submitted by'), h('dd', {}, env.submitted_by || 'unsigned'),
      h('dt', {}, 'Created'), h('dd', {}, time(env.created_at)),
      h('dt', {}, 'Updated'), h('dd', {}, time(env.updated_at)),
      h('dt', {}, 'Generation, seq'), h('dd', {}, env.generation + ', ' + env.seq),
      h('dt', {}, 'Error code'), h('dd', {}, env.error_code || '-'),
      h('dt', {}, 'Next (agent_action)'), h('dd', {}, env.agent_action || '-')),
    h('h2', {}, 'Steps'), diagram(env.steps),
    table(['#', 'Step', 'Tool', 'Status', 'Attempts', 'Error', 'agent_action', 'Result / decision'], stepRows, 'Steps'),
    h('h2', {}, 'Attempts'), attemptsTable(attempts),
    h('h2', {}, 'Timeline'), h('ol', { class: 'timeline', id: 'timeline' }, timelineItems()),
    dls && dls.length ? [h('h2', {}, 'Dead letters of this saga'),
      table(['Id', 'Status', 'Step', 'Error code', 'Replays', 'Created', 'Resolved'], dls.map((d) => [
        h('a', { href: '#/dead-letters/' + d.id }, '#' + d.id), badge(d.status), d.step_name || '-', d.error_code,
        String(d.replays ?? 0), time(d.created_at), d.resolved_at ? time(d.resolved_at) : '-']), 'Dead letters of this saga')] : null,
    h('h2', {}, 'Cancel'), actForm(ctx, { label: 'Cancel saga', what: 'cancelling', danger: true, why: cancelWhy,
      onact: (reason) => api.post('/v1/sagas/' + enc(env.saga_id) + '/cancel', { reason }) }),
    h('h2', {}, 'Envelope'),
    h('div', { class: 'row' },
      h('button', { type: 'button', class: 'quiet', onclick: (ev) => navigator.clipboard.writeText(envText).then(() => { ev.target.textContent = 'Copied'; }, () => { ev.target.textContent = 'Copy refused by the browser'; }) }, 'Copy JSON'),
      h('button', { type: 'button', class: 'quiet', onclick: () => download(env.saga_id + '.json', envText) }, 'Download JSON'),
      h('span', { class: 'muted' }, 'members named like secrets are masked')),
    json(shown));
}

function approvalControls(ctx, env, st, why) {
  const base = '/v1/sagas/' + enc(env.saga_id) + '/steps/' + enc(st.name);
  const out = h('div', { 'aria-live': 'polite' });
  const reason = h('textarea', { rows: 2, 'aria-label': 'Reason for the decision on ' + st.name, disabled: ctx.session.read_only || !may(ctx, 'approve') });
  const decide = (verb) => async () => {
    out.replaceChildren();
    if (!reason.value.trim()) return out.replaceChildren(message('error', 'A reason is required.'));
    try {
      const r = await api.post(base + '/' + verb, { reason: reason.value.trim() });
      reason.value = '';
      out.replaceChildren(message('ok', verb + ': ' + (r.body.outcome || r.body.status || 'sent')));
    } catch (e) {
      out.replaceChildren(message('error', verb + ' refused (' + e.status + '): ' + e.message));
    }
  };
  // Four eyes is the API's rule: a submitter's own approval is sent and
  // its refusal shown, the button only warns.
  const hard = ctx.session.read_only ? 'read-only console (console.read_only)' : !may(ctx, 'approve') ? 'your roles do not allow approving' : null;
  return h('div', {}, h('label', {}, 'Reason (required)', reason),
    h('div', { class: 'row' }, actionButton('Approve', hard, decide('approve')), actionButton('Reject', hard, decide('reject'), 'danger')),
    why && !hard ? h('p', { class: 'muted' }, why) : null, out);
}

// ---- Approvals ------------------------------------------------------------------

async function approvals(ctx) {
  if (!may(ctx, 'approve')) return page('Approvals', message('info', 'The approval inbox is an approver\'s: your roles do not include approver.'));
  const list = await api.get('/v1/approvals');
  const cards = list.items.map((a) => {
    const env = { saga_id: a.saga_id, submitted_by: a.submitted_by };
    const st = { name: a.step_name };
    return h('article', { class: 'card', 'aria-label': 'approval of ' + a.step_name + ' in ' + a.saga_name },
      h('h2', {}, a.saga_name + ' · ' + a.step_name),
      h('dl', { class: 'kv' },
        h('dt', {}, 'Saga'), h('dd', {}, h('a', { href: '#/sagas/' + enc(a.saga_id), class: 'id' }, a.saga_id)),
        h('dt', {}, 'Tool'), h('dd', {}, h('code', {}, a.tool)),
        h('dt', {}, 'Why a person'), h('dd', {}, a.reason || '-'),
        h('dt', {}, 'Submitted by'), h('dd', {}, a.submitted_by || 'unsigned'),
        h('dt', {}, 'Waiting since'), h('dd', {}, time(a.waiting_since)),
        h('dt', {}, 'Expires'), h('dd', {}, a.expires_at ? time(a.expires_at) : 'no timeout of its own'),
        h('dt', {}, 'Args'), h('dd', {}, json(mask(a.args), 2000))),
      approvalControls(ctx, env, st, null));
  });
  return page('Approvals', h('p', { class: 'note' }, 'Steps waiting for you: tools you may approve, in sagas you did not submit (four eyes).'),
    cards.length ? cards : message('info', 'Nothing waits for you.'));
}

// ---- Dead letters ---------------------------------------------------------------

async function deadLetters(ctx) {
  if (!may(ctx, 'dead_letters_read')) return page('Dead letters', message('info', 'Dead letters are a reader\'s and an operator\'s.'));
  const p = ctx.params;
  if (!p.code && !p.tool && !p.saga) {
    const q = new URLSearchParams({ view: 'groups' });
    if (p.since) q.set('since', p.since);
    const g = await api.get('/v1/dead-letters?' + q);
    return page('Dead letters',
      h('p', { class: 'note' }, 'Grouped by error code and tool. A group lists its entries.'),
      table(['Error code', 'Tool', 'Pending', 'Total', 'Sagas', 'First seen', 'Last seen'], g.groups.map((x) => [
        h('a', { href: '#/dead-letters?code=' + enc(x.error_code) + (x.tool ? '&tool=' + enc(x.tool) : '') }, x.error_code),
        x.tool || '-', String(x.pending), String(x.count), String(x.sagas ?? '-'), time(x.first_seen), time(x.last_seen)]), 'Dead-letter groups'));
  }
  const q = new URLSearchParams({ view: 'entries', limit: '50' });
  for (const k of ['code', 'tool', 'saga', 'status', 'before']) if (p[k]) q.set(k, p[k]);
  const l = await api.get('/v1/dead-letters?' + q);
  const next = l.next_before ? (() => { const n = new URLSearchParams(p); n.set('before', l.next_before); return h('a', { href: '#/dead-letters?' + n }, 'Older entries →'); })() : null;
  return page('Dead letters: ' + [p.code, p.tool, p.saga].filter(Boolean).join(' · '),
    h('p', {}, h('a', { href: '#/dead-letters' }, '← All groups')),
    p.code ? bulkReplay(ctx, p) : null,
    table(['Id', 'Status', 'Error code', 'Saga', 'Step', 'Attempts', 'Created'], l.items.map((d) => [
      h('a', { href: '#/dead-letters/' + d.id }, '#' + d.id), badge(d.status), d.error_code,
      d.saga_id ? h('a', { href: '#/sagas/' + enc(d.saga_id), class: 'id' }, d.saga_id) : '-',
      d.step_name || '-', String(d.attempts ?? '-'), time(d.created_at)]), 'Dead letters'), next);
}

// A group's pending entries replayed one at a time, at most cap of them,
// rate a second, each by the API (which may refuse one: it is counted and
// named, and the rest go on), with the progress shown as it goes.
function bulkReplay(ctx, p) {
  const why = whyNot(ctx, 'dead_letters_write', 'replaying');
  const out = h('div', { 'aria-live': 'polite' });
  const reason = h('textarea', { name: 'reason', rows: 2, disabled: !!why, 'aria-label': 'Reason for the bulk replay' });
  const cap = h('input', { type: 'number', name: 'cap', min: 1, max: 100, value: 10, disabled: !!why });
  const rate = h('input', { type: 'number', name: 'rate', min: 1, max: 10, value: 2, disabled: !!why });
  const dry = h('input', { type: 'checkbox', name: 'dry', checked: true, disabled: !!why });
  let stop = false;
  const stopBtn = h('button', { type: 'button', class: 'quiet', hidden: true, onclick: () => { stop = true; } }, 'Stop');
  const form = h('form', { class: 'act', onsubmit: async (ev) => {
    ev.preventDefault();
    if (!reason.value.trim()) return out.replaceChildren(message('error', 'A reason is required.'));
    const n = Math.max(1, Math.min(100, Number(cap.value) || 1));
    const gap = 1000 / Math.max(1, Math.min(10, Number(rate.value) || 1));
    const q = new URLSearchParams({ view: 'entries', status: 'pending', limit: String(n) });
    for (const k of ['code', 'tool']) if (p[k]) q.set(k, p[k]);
    stop = false;
    stopBtn.hidden = false;
    const done = { ok: 0, refused: [] };
    try {
      const list = (await api.get('/v1/dead-letters?' + q)).items;
      for (let i = 0; i < list.length && !stop; i++) {
        try {
          await api.post('/v1/dead-letters/' + list[i].id + '/replay?dry_run=' + dry.checked, { reason: reason.value.trim() });
          done.ok++;
        } catch (e) {
          done.refused.push('#' + list[i].id + ': ' + e.message);
        }
        out.replaceChildren(message('info', (dry.checked ? 'Dry run: ' : '') + (i + 1) + ' of ' + list.length + ': ' + done.ok +
          (dry.checked ? ' would be replayed' : ' replayed') + ', ' + done.refused.length + ' refused'),
        h('ul', {}, done.refused.map((r) => h('li', {}, r))));
        if (i + 1 < list.length) await new Promise((r) => setTimeout(r, gap));
      }
      if (!list.length) out.replaceChildren(message('info', 'No pending entry in this group.'));
    } catch (e) {
      out.replaceChildren(message('error', 'Bulk replay stopped (' + e.status + '): ' + e.message));
    }
    stopBtn.hidden = true;
  } },
  h('label', {}, 'Reason (required)', reason), h('label', {}, 'At most', cap), h('label', {}, 'Per second', rate),
  h('label', { class: 'row' }, h('span', {}, 'Dry run'), dry), actionButton('Replay the group\'s pending entries', why), stopBtn);
  return h('div', { class: 'card' }, h('h2', {}, 'Replay this group'), form, out);
}

async function deadLetter(ctx) {
  const id = ctx.id;
  const full = ctx.params.full === 'true';
  const d = await api.get('/v1/dead-letters/' + enc(id) + (full ? '?full=true' : ''));
  const r = d.record || {};
  const scalars = Object.entries(r).filter(([k, v]) => k !== 'payload' && (v === null || typeof v !== 'object'));
  const objects = Object.entries(d).filter(([k]) => k !== 'record' && k !== 'payload_untrusted');
  const dry = h('div', { 'aria-live': 'polite' });
  const dryWhy = whyNot(ctx, null) || (may(ctx, 'dead_letters_read') ? null : 'your roles do not allow it');
  return page('Dead letter #' + id,
    h('dl', { class: 'kv' }, scalars.flatMap(([k, v]) => [h('dt', {}, k), h('dd', { class: 'wrap' }, /_at$/.test(k) ? time(v) : String(v))])),
    h('h2', {}, 'Payload'),
    h('p', { class: 'note' }, 'Untrusted data from a producer or a downstream, shown as text; members named like secrets masked. ',
      full ? h('a', { href: '#/dead-letters/' + enc(id) }, 'Cut it again') : h('a', { href: '#/dead-letters/' + enc(id) + '?full=true' }, 'Show it whole')),
    payloadView(r.payload, full),
    r.headers || r.attempts_trail ? json(mask({ headers: r.headers, attempts_trail: r.attempts_trail }), 4000) : null,
    objects.length ? [h('h2', {}, 'Trail, replays, saga'), json(mask(Object.fromEntries(objects)), 8000)] : null,
    h('h2', {}, 'Replay'),
    h('div', { class: 'row' }, actionButton('Dry-run replay', dryWhy, async () => {
      dry.replaceChildren();
      try {
        const res = await api.post('/v1/dead-letters/' + enc(id) + '/replay?dry_run=true', { reason: 'console dry run' });
        dry.replaceChildren(message('info', 'Dry run: ' + res.body.outcome + (res.body.detail ? ' - ' + res.body.detail : '')), json(mask(res.body)));
      } catch (e) {
        dry.replaceChildren(message('error', 'Dry run refused (' + e.status + '): ' + e.message));
      }
    }, 'quiet')), dry,
    actForm(ctx, { label: 'Replay', perm: 'dead_letters_write', what: 'replaying',
      onact: (reason) => api.post('/v1/dead-letters/' + enc(id) + '/replay?dry_run=false', { reason }) }),
    h('h2', {}, 'Discard'),
    actForm(ctx, { label: 'Discard', perm: 'dead_letters_write', what: 'discarding', danger: true,
      onact: (reason) => api.post('/v1/dead-letters/' + enc(id) + '/discard', { reason }) }));
}

function payloadView(p, full) {
  if (p === undefined || p === null) return h('p', { class: 'muted' }, 'no payload');
  let v = p;
  try { v = mask(JSON.parse(p)); } catch (e) { return json(p, full ? 0 : 2000); }
  return json(v, full ? 0 : 2000);
}

// ---- Tools ----------------------------------------------------------------------

// A tool's circuit as the workers alive hold it: the worst state, since
// when, and on how many of them.
function breakerCell(b) {
  if (!b) return h('span', { class: 'muted', title: 'no breaker (builtin), or no worker reported it in the last 30 s' }, '-');
  const worst = b.workers.filter((w) => w.state === b.state);
  const first = worst[0];
  return h('span', { class: 'breaker', 'data-state': b.state }, badge(b.state),
    ' since ', time(first.since),
    b.state !== 'closed' ? ', ' + first.failures + ' failures' : '',
    b.workers.length > 1 ? ' (' + worst.length + ' of ' + b.workers.length + ' workers)' : '');
}

function errorCell(r) {
  if (!r) return '-';
  if (!r.calls) return h('span', { class: 'muted' }, 'no calls');
  const pct = Math.round(r.error_rate * 1000) / 10;
  return h('span', { class: r.error_rate >= 0.1 ? 'badge bad' : '', title: r.errors + ' of ' + r.calls + ' calls in ' + ago(r.window_s) + ' failed' },
    pct + '% (' + r.errors + '/' + r.calls + ')');
}

async function tools() {
  const t = await api.get('/v1/tools');
  return page('Tools', h('p', { class: 'note' }, 'The registry as the gateway loaded it (worker.registry): never a tool\'s target or headers. Circuit: the worst state of the tool\'s breaker on the workers that reported in the last 30 s. Errors: the tool\'s failed calls among those started in the last 5 minutes.'),
    t.health_error ? message('error', 'Circuits and error rates are not shown: ' + t.health_error) : null,
    table(['Tool', 'Adapter', 'Circuit', 'Errors, 5 min', 'Side effect', 'Timeout', 'Retry', 'Approval', 'Compensation', 'Description'], t.items.map((x) => [
      h('code', {}, x.name), x.adapter, breakerCell(x.breaker), errorCell(x.recent), x.side_effect, ago(x.timeout_ms / 1000),
      x.retry ? JSON.stringify(x.retry) : 'default', x.approval_required ? badge('required') : 'no',
      x.compensation || '-', x.description || '']), 'Tools'));
}

export const pages = { now, sagas, saga, approvals, deadLetters, deadLetter, tools };
