// The operator page of `lease serve`. Everything it shows comes from the public API, with the
// session cookie; every string from the store is set as text (textContent), never as markup.
'use strict';

const STATUSES = ['waiting', 'pending', 'running', 'done', 'dead', 'cancelled'];
const PAGE = 50;

const state = {
  session: null,
  events: null,
  stats: null,
  activity: null,
  refusals: null,
  queues: [],
  schedules: [],
  pageAfter: [],
  next: null,
  job: null,
};

const $ = (id) => document.getElementById(id);
const numbers = new Intl.NumberFormat();

class ApiError extends Error {
  constructor(status, body) {
    super((body && (body.detail || body.title)) || `HTTP ${status}`);
    this.status = status;
    this.body = body;
  }
}

async function api(method, path, body) {
  const headers = { Accept: 'application/json' };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  if (method !== 'GET' && state.session && state.session.csrf) {
    headers['X-Lease-CSRF'] = state.session.csrf;
  }
  const response = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    credentials: 'same-origin',
    cache: 'no-store',
  });
  const text = await response.text();
  let data = null;
  if (text) {
    try { data = JSON.parse(text); } catch (_) { data = null; }
  }
  if (!response.ok) {
    if (response.status === 401) showSignIn('Your session ended; sign in again.');
    throw new ApiError(response.status, data);
  }
  return data;
}

// ---- formatting -------------------------------------------------------------------------

function el(tag, text, className) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (className) node.className = className;
  return node;
}

function num(n) {
  return n === null || n === undefined ? '—' : numbers.format(n);
}

// A fence carries its store's epoch in its high 32 bits (raised by a failover or a restore:
// docs/GUARANTEES.md, "Failover and restore"); one above epoch 0 is shown with both parts.
const EPOCH = 2 ** 32;

function fenceText(n) {
  if (n === null || n === undefined || n < EPOCH) return num(n);
  return `${num(n)} (epoch ${num(Math.floor(n / EPOCH))}, #${num(n % EPOCH)})`;
}

// A time as RFC 3339 in UTC to the second (2026-12-05T02:40:27Z), the same for every viewer
// and sortable as text.
function rfc3339(seconds) {
  return new Date(Math.floor(seconds) * 1000).toISOString().replace('.000Z', 'Z');
}

// How long ago (or how far ahead) a time is from now, in the page's units: "3 min ago", "in 2 h".
function age(seconds) {
  const from = Date.now() / 1000 - seconds;
  if (Math.abs(from) < 1) return 'now';
  return from > 0 ? `${duration(from)} ago` : `in ${duration(-from)}`;
}

// A time as text: RFC 3339 with its age beside it.
function when(seconds) {
  return `${rfc3339(seconds)} (${age(seconds)})`;
}

function time(seconds) {
  const node = el('time');
  if (seconds === null || seconds === undefined) {
    node.textContent = '—';
    return node;
  }
  const date = new Date(seconds * 1000);
  node.textContent = when(seconds);
  node.dateTime = date.toISOString();
  node.title = `${date.toLocaleString()} here; Unix ${seconds}`;
  return node;
}

function duration(seconds) {
  if (seconds === null || seconds === undefined) return '—';
  const s = Math.max(0, seconds);
  if (s < 1) return `${Math.round(s * 1000)} ms`;
  if (s < 120) return `${numbers.format(Math.round(s * 10) / 10)} s`;
  if (s < 7200) return `${numbers.format(Math.round(s / 60))} min`;
  if (s < 172800) return `${numbers.format(Math.round(s / 3600))} h`;
  return `${numbers.format(Math.round(s / 86400))} d`;
}

function jobLink(id) {
  const a = el('a', id);
  a.href = `#/job/${encodeURIComponent(id)}`;
  return a;
}

// A cell. Ids, owners and queue names ('id' cells) stay on one line, shortened with an
// ellipsis past a width; the whole value is the cell's title, a tap on it shows it in full
// (a job's link opens its page, which shows it too), and a table wider than the screen
// scrolls in its own box.
function cell(row, content, className) {
  const td = el('td', undefined, className);
  const inner = className === 'id' ? el('span', undefined, 'clip') : td;
  if (content instanceof Node) inner.append(content);
  else inner.textContent = content === null || content === undefined ? '—' : String(content);
  if (inner !== td) {
    td.title = inner.textContent;
    inner.addEventListener('click', () => inner.classList.toggle('whole'));
    td.append(inner);
  }
  row.append(td);
  return td;
}

function say(text) {
  $('status-line').textContent = text || '';
}

// ---- sections ---------------------------------------------------------------------------

const SECTIONS = ['sign-in', 'overview', 'jobs', 'job'];

function show(section) {
  for (const id of SECTIONS) $(id).hidden = id !== section;
  $('nav').hidden = section === 'sign-in';
}

function isAdmin() {
  return state.session && state.session.scope === 'admin';
}

function applyScope() {
  for (const node of document.querySelectorAll('.admin-only')) node.hidden = !isAdmin();
}

function showSignIn(message) {
  state.session = null;
  stopEvents();
  show('sign-in');
  $('sign-in-error').textContent = message || '';
  $('key').focus();
}

// ---- overview ---------------------------------------------------------------------------

// The last hour of a queue, a stacked bar per minute (jobs done, attempts failed, jobs dead
// and cancelled, refused writes, in the legend's colours), with its axes: the busiest
// minute's count at the top, the hour's two ends below. A quiet hour says so.
const SERIES = ['completed', 'failed', 'dead', 'cancelled', 'refused'];
const SERIES_CLASS = { completed: 'done', failed: 'failed', dead: 'dead', cancelled: 'cancelled', refused: 'refused' };

function chart(series) {
  const ns = 'http://www.w3.org/2000/svg';
  const sum = (a) => a.reduce((x, y) => x + y, 0);
  const of = (name) => (series && series[name]) || [];
  const totals = SERIES.map((name) => sum(of(name)));
  if (sum(totals) === 0) {
    return el('span', 'none in the last hour', 'quiet');
  }
  const width = 120;
  const height = 24;
  const axis = 11;
  const pad = 9;
  const svg = document.createElementNS(ns, 'svg');
  svg.setAttribute('class', 'chart');
  svg.setAttribute('width', String(width));
  svg.setAttribute('height', String(pad + height + axis));
  svg.setAttribute('viewBox', `0 0 ${width} ${pad + height + axis}`);
  const minutes = Math.max(1, ...SERIES.map((name) => of(name).length));
  const stacked = Array.from({ length: minutes }, (_, i) => sum(SERIES.map((name) => of(name)[i] || 0)));
  const top = Math.max(1, ...stacked);
  const step = width / minutes;
  for (let i = 0; i < minutes; i += 1) {
    let base = pad + height - 1;
    for (const name of SERIES) {
      const value = of(name)[i] || 0;
      if (!value) continue;
      const h = Math.max(1, (value / top) * (height - 2));
      const rect = document.createElementNS(ns, 'rect');
      rect.setAttribute('class', SERIES_CLASS[name]);
      rect.setAttribute('x', String(i * step));
      rect.setAttribute('y', String(base - h));
      rect.setAttribute('width', String(Math.max(0.5, step - 0.3)));
      rect.setAttribute('height', String(h));
      svg.append(rect);
      base -= h;
    }
  }
  const line = document.createElementNS(ns, 'line');
  line.setAttribute('class', 'base');
  line.setAttribute('x1', '0');
  line.setAttribute('x2', String(width));
  line.setAttribute('y1', String(pad + height - 0.5));
  line.setAttribute('y2', String(pad + height - 0.5));
  svg.append(line);
  const label = (text, x, y, anchor) => {
    const node = document.createElementNS(ns, 'text');
    node.setAttribute('class', 'axis');
    node.setAttribute('x', String(x));
    node.setAttribute('y', String(y));
    node.setAttribute('text-anchor', anchor);
    node.textContent = text;
    svg.append(node);
  };
  label(`${num(top)}/min`, width, 7, 'end');
  label('−60 min', 0, pad + height + axis - 1, 'start');
  label('now', width, pad + height + axis - 1, 'end');
  const title = document.createElementNS(ns, 'title');
  const [done, failed, dead, cancelled, refused] = totals;
  title.textContent = `last hour: ${num(done)} completed, ${num(failed)} failed, ${num(dead)} dead, ${num(cancelled)} cancelled, ${num(refused)} refused`;
  svg.append(title);
  return svg;
}

// A queue's flow control in words: paused (until when), its limit, its timeout and its group
// rules.
function flow(settings) {
  if (!settings) return '—';
  const words = [];
  if (settings.paused) {
    words.push(settings.paused_until ? `paused until ${when(settings.paused_until)}` : 'paused');
  }
  if (settings.concurrency !== null && settings.concurrency !== undefined) words.push(`≤ ${num(settings.concurrency)} at once`);
  if (settings.timeout !== null && settings.timeout !== undefined) words.push(`timeout ${duration(settings.timeout)}`);
  if (settings.per_group !== null && settings.per_group !== undefined) words.push(`≤ ${num(settings.per_group)} a group`);
  if (settings.ordered) words.push('groups in order');
  if (settings.fair) words.push('groups served in turn');
  if (settings.rate) words.push(`≤ ${settings.rate}`);
  if (settings.rate_per_group) words.push(`≤ ${settings.rate_per_group} a group`);
  const pausedGroups = settings.paused_groups || [];
  if (pausedGroups.length === 1) words.push(`group ${pausedGroups[0].group} paused`);
  else if (pausedGroups.length > 1) words.push(`${num(pausedGroups.length)} groups paused`);
  return words.length ? words.join(', ') : '—';
}

function renderQueues() {
  const body = $('queues').tBodies[0];
  const queues = (state.stats && state.stats.queues) || {};
  const activity = (state.activity && state.activity.queues) || {};
  const settings = Object.fromEntries(state.queues.map((q) => [q.queue, q]));
  const names = [...new Set([...Object.keys(queues), ...Object.keys(settings)])].sort();
  const now = Date.now() / 1000;
  const rows = names.map((name) => {
    const q = queues[name] || {};
    const row = el('tr');
    const link = el('a', name);
    link.href = `#/jobs?queue=${encodeURIComponent(name)}`;
    cell(row, link, 'id');
    const pending = cell(row, num(q.pending), 'num');
    // Jobs waiting for their parents are shown with the pending ones, only when there are any.
    if (q.waiting) pending.append(el('span', ` + ${num(q.waiting)} waiting`, 'waiting'));
    cell(row, num(q.due), 'num');
    const oldest = q.oldest_due_since;
    const wait = cell(row, oldest === null || oldest === undefined ? '—' : duration(now - oldest), 'num');
    if (oldest !== null && oldest !== undefined) wait.title = `due since Unix ${oldest}`;
    for (const status of ['running', 'done', 'dead', 'cancelled']) cell(row, num(q[status]), 'num');
    cell(row, chart(activity[name]));
    cell(row, flow(settings[name]), settings[name] && settings[name].paused ? 'flow paused' : 'flow');
    if (isAdmin()) {
      const paused = !!(settings[name] && settings[name].paused);
      const button = el('button', paused ? 'Resume…' : 'Pause…', paused ? undefined : 'danger');
      button.type = 'button';
      button.dataset.queue = name;
      button.addEventListener('click', () => pauseOrResume(name, paused));
      cell(row, button);
    }
    return row;
  });
  body.replaceChildren(...rows);
  $('no-queues').hidden = names.length > 0;
  const list = $('queue-names');
  list.replaceChildren(...names.map((name) => {
    const option = el('option');
    option.value = name;
    return option;
  }));
}

function refusalRow(r, withJob) {
  const row = el('tr');
  cell(row, time(r.time));
  if (withJob) cell(row, jobLink(r.job), 'id');
  cell(row, r.owner, 'id');
  cell(row, r.operation);
  cell(row, num(r.presented_fence), 'num');
  cell(row, num(r.current_fence), 'num');
  cell(row, r.reason);
  cell(row, r.late_by === null || r.late_by === undefined ? '—' : duration(r.late_by), 'num');
  return row;
}

function renderRefusals() {
  const audit = state.session && state.session.audit;
  $('audit-off').hidden = !!audit;
  $('refusals').hidden = !audit;
  const list = ((state.refusals && state.refusals.refusals) || []).slice().reverse();
  $('refusals').tBodies[0].replaceChildren(...list.map((r) => refusalRow(r, true)));
  $('no-refusals').hidden = !audit || list.length > 0;
}

function renderSchedules() {
  const rows = state.schedules.map((s) => {
    const row = el('tr');
    cell(row, s.name, 'id');
    cell(row, `${s.cron} (${s.zone})`);
    cell(row, s.queue, 'id');
    cell(row, s.catch_up);
    cell(row, time(s.last_tick));
    cell(row, time(s.next_tick));
    if (isAdmin()) {
      const run = el('button', 'Run now…');
      run.type = 'button';
      run.dataset.run = s.name;
      run.addEventListener('click', () => runSchedule(s.name));
      const remove = el('button', 'Remove…', 'danger');
      remove.type = 'button';
      remove.dataset.remove = s.name;
      remove.addEventListener('click', () => removeSchedule(s.name));
      const both = el('span', undefined, 'actions');
      both.append(run, ' ', remove);
      cell(row, both);
    }
    return row;
  });
  $('schedules').tBodies[0].replaceChildren(...rows);
  $('no-schedules').hidden = rows.length > 0;
}

// The five busiest groups of each queue: waiting and running jobs, paused or throttled.
function renderGroups() {
  const rows = [];
  for (const answer of state.groups || []) {
    for (const g of answer.groups) {
      const row = el('tr');
      cell(row, answer.queue, 'id');
      cell(row, g.group, 'id');
      cell(row, num(g.backlog), 'num');
      cell(row, num(g.running), 'num');
      const words = [];
      if (g.paused) words.push(g.paused_until ? `paused until ${when(g.paused_until)}` : 'paused');
      if (g.throttled_until) words.push(`throttled until ${when(g.throttled_until)}`);
      cell(row, words.length ? words.join(', ') : '—', g.paused ? 'flow paused' : 'flow');
      if (isAdmin()) {
        const button = el('button', g.paused ? 'Resume…' : 'Pause…', g.paused ? undefined : 'danger');
        button.type = 'button';
        button.dataset.group = g.group;
        button.addEventListener('click', () => groupAct(answer.queue, g.group, g.paused ? 'resume' : 'pause'));
        cell(row, button);
      }
      rows.push(row);
    }
  }
  $('groups').tBodies[0].replaceChildren(...rows);
  $('no-groups').hidden = rows.length > 0;
}

async function loadGroups() {
  const names = Object.keys((state.stats && state.stats.queues) || {});
  state.groups = await Promise.all(
    names.map((name) => api('GET', `/v1/queues/${encodeURIComponent(name)}/groups?limit=5`)),
  );
  renderGroups();
}

async function loadControl() {
  const [queues, schedules] = await Promise.all([
    api('GET', '/v1/queues'),
    api('GET', '/v1/schedules'),
  ]);
  state.queues = queues.queues;
  state.schedules = schedules.schedules;
  renderQueues();
  renderSchedules();
  await loadGroups();
}

async function loadOverview() {
  const [stats, refusals, activity] = await Promise.all([
    api('GET', '/v1/stats'),
    api('GET', '/v1/refusals?limit=50'),
    api('GET', '/v1/activity?minutes=60'),
  ]);
  state.stats = stats;
  state.refusals = refusals;
  state.activity = activity;
  renderQueues();
  renderRefusals();
  await loadControl();
}

// ---- live updates -----------------------------------------------------------------------

function stopEvents() {
  if (state.events) state.events.close();
  state.events = null;
  $('live').classList.remove('on');
}

function startEvents() {
  if (state.events || typeof EventSource === 'undefined') return;
  const source = new EventSource('/v1/events');
  state.events = source;
  source.addEventListener('open', () => $('live').classList.add('on'));
  source.addEventListener('error', () => $('live').classList.remove('on'));
  source.addEventListener('stats', (e) => {
    state.stats = JSON.parse(e.data);
    renderQueues();
    if (!state.loadingGroups) {
      state.loadingGroups = true;
      loadGroups().catch(() => {}).finally(() => { state.loadingGroups = false; });
    }
  });
  source.addEventListener('activity', (e) => {
    state.activity = JSON.parse(e.data);
    renderQueues();
  });
  source.addEventListener('queues', (e) => {
    state.queues = JSON.parse(e.data).queues;
    renderQueues();
  });
  source.addEventListener('refusals', (e) => {
    state.refusals = JSON.parse(e.data);
    renderRefusals();
    if (state.job) renderJobRefusals();
  });
}

// ---- jobs -------------------------------------------------------------------------------

// The job list's filters, as the page's address holds them.
const JOB_FILTERS = ['queue', 'status', 'group', 'prefix'];

function jobsQuery() {
  const params = new URLSearchParams(location.hash.split('?')[1] || '');
  return Object.fromEntries(JOB_FILTERS.map((name) => [name, params.get(name) || '']));
}

async function loadJobs() {
  const filters = jobsQuery();
  const params = new URLSearchParams({ limit: String(PAGE) });
  for (const name of JOB_FILTERS) {
    $(`filter-${name}`).value = filters[name];
    if (filters[name]) params.set(name, filters[name]);
  }
  const after = state.pageAfter[state.pageAfter.length - 1];
  if (after !== undefined) params.set('after', after);
  const page = await api('GET', `/v1/jobs?${params}`);
  const rows = page.jobs.map((job) => {
    const row = el('tr');
    cell(row, jobLink(job.id), 'id');
    cell(row, job.queue, 'id');
    cell(row, job.group, 'id');
    cell(row, job.status);
    cell(row, num(job.fence), 'num');
    cell(row, job.owner, 'id');
    cell(row, num(job.attempts), 'num');
    cell(row, time(job.updated));
    return row;
  });
  $('job-table').tBodies[0].replaceChildren(...rows);
  $('no-jobs').hidden = rows.length > 0;
  state.next = page.next;
  $('next-page').disabled = page.next === null || page.next === undefined;
  $('first-page').disabled = state.pageAfter.length === 0;
}

// ---- one job ----------------------------------------------------------------------------

function base64Size(text) {
  const padding = text.endsWith('==') ? 2 : text.endsWith('=') ? 1 : 0;
  return Math.floor((text.length * 3) / 4) - padding;
}

function field(list, name, value) {
  list.append(el('dt', name));
  const dd = el('dd');
  if (value instanceof Node) dd.append(value);
  else dd.textContent = value === null || value === undefined ? '—' : String(value);
  list.append(dd);
}

function text(value) {
  return value === null || value === undefined ? '—' : el('pre', value, 'value-text');
}

function renderJob(job) {
  $('job-id').textContent = job.id;
  const list = $('job-fields');
  list.replaceChildren();
  field(list, 'Queue', job.queue);
  field(list, 'Group', job.group === null || job.group === undefined ? null : text(job.group));
  field(list, 'Status', job.status);
  field(list, 'Fence', fenceText(job.fence));
  field(list, 'Owner', job.owner);
  field(list, 'Lease until', time(job.until || null));
  field(list, 'Attempts', `${num(job.attempts)} of ${job.max_attempts ? num(job.max_attempts) : '1'}`);
  field(list, 'Priority', num(job.priority));
  field(list, 'Run at', time(job.run_at));
  if (job.result_encrypted) field(list, 'Result', `encrypted (key ${job.result_encrypted.key})`);
  else field(list, 'Result', text(job.result));
  field(list, 'Result fence', fenceText(job.result_fence));
  field(list, 'Last error', text(job.error));
  field(list, 'Progress', sealedLabel(job.progress) ?? text(job.progress));
  field(list, 'Timeout', job.timeout === null || job.timeout === undefined ? null : duration(job.timeout));
  field(list, 'Ended', job.ended);
  if (job.after && job.after.length > 0) {
    field(list, 'Runs after', parentList(job.after, state.parents || {}));
    field(list, 'If a parent fails', job.on_parent_failure === 'run' ? 'runs anyway' : 'cancelled');
  }
  // A child cancelled by a parent's end names that parent (the error the domain writes).
  const cancelledBy = (job.after || []).find((p) =>
    ['dead', 'cancelled'].some((end) => job.error === `cancelled: its parent ${p} ended ${end}`));
  if (cancelledBy !== undefined) {
    const link = el('a', cancelledBy);
    link.href = `#/job/${encodeURIComponent(cancelledBy)}`;
    field(list, 'Cancelled by', link);
  }
  const children = state.children || { children: [], more: false };
  if (children.children.length > 0) {
    const statuses = Object.fromEntries(children.children.map((id) => [id, state.childJobs[id]]));
    const runsBefore = parentList(children.children, statuses);
    if (children.more) runsBefore.append(el('li', 'and more'));
    field(list, 'Runs before', runsBefore);
  }
  const kept = state.checkpoints || [];
  if (kept.length > 0) field(list, 'Checkpoints', checkpointList(kept));
  field(list, 'Updated', time(job.updated));
  // The trace it was enqueued in: the trace id, and the enqueuing span (W3C traceparent).
  if (typeof job.traceparent === 'string') {
    const [, traceId, spanId] = job.traceparent.split('-');
    field(list, 'Trace', `${traceId} (enqueued by span ${spanId})`);
  }
  if (job.payload_encrypted) field(list, 'Payload', `encrypted (key ${job.payload_encrypted.key})`);
  else if (typeof job.payload === 'string') field(list, 'Payload', text(job.payload));
  else if (typeof job.payload_base64 === 'string') {
    field(list, 'Payload', `${num(base64Size(job.payload_base64))} bytes (not UTF-8 text)`);
  } else field(list, 'Payload', null);
  // A dead job can be cancelled too: it keeps its record and error, and frees its ordered group.
  const cancellable = ['waiting', 'pending', 'running', 'dead'].includes(job.status);
  $('cancel-job').disabled = !cancellable;
  $('retry-job').disabled = !(job.status === 'dead' || job.status === 'cancelled');
}

// A job's attempts along time: one bar per attempt from its claim to its end (the one under
// way to its lease's end), its fence, owner and outcome on it, and the writes refused with
// its fence as marks where they came; the same in words below, one item per attempt.
const OUTCOME_WORDS = {
  done: 'done', failed: 'failed', timed_out: 'timed out', lease_lost: 'lease lost',
  released: 'released', cancelled: 'cancelled', running: 'running', expired: 'lease expired',
};

function timeline(shown) {
  const box = el('div');
  const attempts = (shown && shown.attempts) || [];
  if (attempts.length === 0) {
    box.append(el('p', 'Never leased.', 'hint'));
    return box;
  }
  const ns = 'http://www.w3.org/2000/svg';
  const times = [];
  for (const a of attempts) {
    for (const t of [a.started, a.ended, a.until]) if (typeof t === 'number') times.push(t);
    for (const r of a.refused || []) times.push(r.time);
  }
  const from = Math.min(...times);
  const to = Math.max(from + 1, ...times);
  const width = 600;
  const left = 4;
  const right = 60;
  const row = 22;
  const height = attempts.length * row + 16;
  const x = (t) => left + ((t - from) / (to - from)) * (width - left - right);
  const svg = document.createElementNS(ns, 'svg');
  svg.setAttribute('class', 'timeline');
  svg.setAttribute('viewBox', `0 0 ${width} ${height}`);
  svg.setAttribute('role', 'img');
  const add = (tag, attrs, textContent) => {
    const node = document.createElementNS(ns, tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
    if (textContent !== undefined) node.textContent = textContent;
    svg.append(node);
    return node;
  };
  attempts.forEach((a, i) => {
    const start = typeof a.started === 'number' ? a.started : from;
    const end = typeof a.ended === 'number' ? a.ended : (typeof a.until === 'number' ? a.until : to);
    const y = i * row + 2;
    const bar = add('rect', {
      class: `bar ${a.outcome}`, 'data-fence': a.fence, x: x(start), y,
      width: Math.max(2, x(end) - x(start)), height: row - 6,
    });
    const title = document.createElementNS(ns, 'title');
    title.textContent = `fence ${a.fence}, ${a.owner}: ${OUTCOME_WORDS[a.outcome] || a.outcome}`;
    bar.append(title);
    add('text', { class: 'label', x: x(start) + 3, y: y + row - 10 },
      `fence ${a.fence} · ${a.owner} · ${OUTCOME_WORDS[a.outcome] || a.outcome}`);
    for (const r of a.refused || []) {
      const mx = x(r.time);
      const mark = add('path', {
        class: 'mark', 'data-fence': a.fence,
        d: `M ${mx} ${y} l 5 ${(row - 6) / 2} l -5 ${(row - 6) / 2} l -5 ${-(row - 6) / 2} z`,
      });
      const why = document.createElementNS(ns, 'title');
      why.textContent = `${r.operation} refused (${r.reason}) at ${rfc3339(r.time)}`;
      mark.append(why);
    }
  });
  add('text', { class: 'axis', x: left, y: height - 3 }, rfc3339(from));
  add('text', { class: 'axis', x: width - 2, y: height - 3, 'text-anchor': 'end' }, rfc3339(to));
  box.append(svg);
  const list = el('ol', null, 'attempts');
  for (const a of attempts) {
    const item = el('li');
    item.dataset.fence = String(a.fence);
    const span = typeof a.started === 'number' && typeof a.ended === 'number'
      ? ` (${duration(Math.max(0, a.ended - a.started))})` : '';
    const ends = typeof a.ended === 'number' ? rfc3339(a.ended)
      : typeof a.until === 'number' ? `lease until ${rfc3339(a.until)}` : '…';
    const start = typeof a.started === 'number' ? rfc3339(a.started) : 'unknown';
    item.append(el('strong', `Fence ${num(a.fence)}`),
      ` · ${a.owner} · ${OUTCOME_WORDS[a.outcome] || a.outcome} · ${start} → ${ends}${span}`);
    if (a.error) item.append(el('pre', a.error, 'value-text'));
    for (const r of a.refused || []) {
      item.append(el('div', `${r.operation} by ${r.owner} refused (${r.reason}) at ${rfc3339(r.time)}`, 'refused'));
    }
    list.append(item);
  }
  box.append(list);
  if (shown.older > 0) box.append(el('p', `and ${num(shown.older)} earlier attempts not kept`, 'hint'));
  return box;
}

// A workflow around a job: parents above their children, one row per depth (the longest path
// from a job with no parent drawn), each job a box linking to its page with its status, each
// dependency a line with an arrow to the child. Jobs left out beyond the bound are counted.
const GRAPH_SHOWN = 50;

function graphLayers(nodes, edges) {
  const ids = nodes.map((n) => n.id);
  const parents = new Map(ids.map((id) => [id, []]));
  const children = new Map(ids.map((id) => [id, []]));
  for (const e of edges) {
    parents.get(e.child).push(e.parent);
    children.get(e.parent).push(e.child);
  }
  const depth = new Map();
  const pending = new Map(ids.map((id) => [id, parents.get(id).length]));
  const ready = ids.filter((id) => pending.get(id) === 0);
  for (const id of ready) depth.set(id, 0);
  while (ready.length > 0) {
    const id = ready.shift();
    for (const child of children.get(id)) {
      depth.set(child, Math.max(depth.get(child) || 0, depth.get(id) + 1));
      pending.set(child, pending.get(child) - 1);
      if (pending.get(child) === 0) ready.push(child);
    }
  }
  const layers = [];
  for (const id of ids) {
    const d = depth.has(id) ? depth.get(id) : 0;
    (layers[d] = layers[d] || []).push(id);
  }
  // Each row ordered by where its parents stand in the row above (fewer crossings).
  for (let d = 1; d < layers.length; d += 1) {
    const above = new Map((layers[d - 1] || []).map((id, i) => [id, i]));
    const place = (id) => {
      const at = parents.get(id).filter((p) => above.has(p)).map((p) => above.get(p));
      return at.length ? at.reduce((a, b) => a + b, 0) / at.length : Infinity;
    };
    layers[d] = (layers[d] || []).map((id, i) => [place(id), i, id])
      .sort((a, b) => a[0] - b[0] || a[1] - b[1]).map((x) => x[2]);
  }
  return layers.filter((layer) => layer && layer.length > 0);
}

function workflowGraph(graph, current) {
  const ns = 'http://www.w3.org/2000/svg';
  const box = el('div');
  const layers = graphLayers(graph.nodes, graph.edges);
  const byId = new Map(graph.nodes.map((n) => [n.id, n]));
  const w = 112;
  const h = 30;
  const gapX = 12;
  const gapY = 34;
  const widest = Math.max(...layers.map((l) => l.length));
  const width = widest * (w + gapX) + gapX;
  const height = layers.length * (h + gapY) - gapY + 16;
  const at = new Map();
  layers.forEach((layer, row) => {
    const offset = (width - layer.length * (w + gapX) + gapX) / 2;
    layer.forEach((id, i) => at.set(id, { x: offset + i * (w + gapX), y: 8 + row * (h + gapY) }));
  });
  const svg = document.createElementNS(ns, 'svg');
  svg.setAttribute('class', 'graph');
  svg.setAttribute('viewBox', `0 0 ${width} ${height}`);
  svg.style.maxWidth = `${width}px`;
  const make = (tag, attrs, parent, text) => {
    const node = document.createElementNS(ns, tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
    if (text !== undefined) node.textContent = text;
    (parent || svg).append(node);
    return node;
  };
  const defs = make('defs', {});
  const marker = make('marker', { id: 'arrow', viewBox: '0 0 8 8', refX: 8, refY: 4, markerWidth: 7, markerHeight: 7, orient: 'auto' }, defs);
  make('path', { class: 'arrow', d: 'M0,0 L8,4 L0,8 z' }, marker);
  for (const e of graph.edges) {
    const from = at.get(e.parent);
    const to = at.get(e.child);
    if (!from || !to) continue;
    const x1 = from.x + w / 2;
    const y1 = from.y + h;
    const x2 = to.x + w / 2;
    const y2 = to.y;
    const mid = (y1 + y2) / 2;
    make('path', {
      class: 'edge', 'data-parent': e.parent, 'data-child': e.child, 'marker-end': 'url(#arrow)',
      d: `M ${x1} ${y1} C ${x1} ${mid}, ${x2} ${mid}, ${x2} ${y2}`,
    });
  }
  for (const [id, p] of at) {
    const n = byId.get(id);
    const link = make('a', { class: `node ${n.status}${id === current ? ' current' : ''}`, href: `#/job/${encodeURIComponent(id)}` });
    make('title', {}, link, `${id}: ${n.status}${n.queue ? ` in ${n.queue}` : ''}`);
    make('rect', { x: p.x, y: p.y, width: w, height: h }, link);
    const shown = id.length > 16 ? `${id.slice(0, 15)}…` : id;
    make('text', { x: p.x + 6, y: p.y + 13 }, link, shown);
    make('text', { class: 'state', x: p.x + 6, y: p.y + 25 }, link, n.status);
  }
  box.append(svg);
  if (graph.more > 0) box.append(el('p', `and ${num(graph.more)} more jobs not drawn`, 'hint'));
  return box;
}

function renderJobRefusals() {
  const list = (state.jobRefusals || []).slice().reverse();
  $('job-refusals').tBodies[0].replaceChildren(...list.map((r) => refusalRow(r, false)));
  $('no-job-refusals').hidden = list.length > 0;
}

// The parents shown on a job's page, each a link with its status (at most this many are read).
const PARENTS_SHOWN = 20;

function parentList(after, parents) {
  const list = el('ul', null, 'parents');
  for (const id of after.slice(0, PARENTS_SHOWN)) {
    const item = el('li');
    const link = el('a', id);
    link.href = `#/job/${encodeURIComponent(id)}`;
    const parent = parents[id];
    // A parent gone was purged after it finished: it counts as done.
    const status = parent === undefined ? '…' : parent === null ? 'done (purged)' : parent.status;
    item.append(link, el('span', ` ${status}`, `status ${status}`));
    list.append(item);
  }
  if (after.length > PARENTS_SHOWN) list.append(el('li', `and ${num(after.length - PARENTS_SHOWN)} more`));
  return list;
}

// A text a worker sealed (its progress, a checkpoint: docs/ENCRYPTION.md) is shown by its key,
// never as its sealed text; null for any other text.
function sealedLabel(value) {
  const sealed = /^lease-sealed:v1:([A-Za-z0-9._-]{1,64}):/.exec(typeof value === 'string' ? value : '');
  return sealed ? `encrypted (key ${sealed[1]})` : null;
}

// A job's checkpoints: each step's name, what it kept (its start, for a long value) and the
// fence of the attempt that wrote it.
const CHECKPOINT_CHARS = 200;

function checkpointList(kept) {
  const list = el('ul', null, 'checkpoints');
  for (const c of kept) {
    const item = el('li');
    const sealed = sealedLabel(c.value);
    const value = sealed ?? (c.value.length > CHECKPOINT_CHARS ? `${c.value.slice(0, CHECKPOINT_CHARS)}…` : c.value);
    item.append(el('strong', c.name), el('span', ` fence ${num(c.fence)} `, 'muted'), el('pre', value, 'value-text'));
    list.append(item);
  }
  return list;
}

async function loadParents(after) {
  const shown = (after || []).slice(0, PARENTS_SHOWN);
  const read = await Promise.all(shown.map((id) =>
    api('GET', `/v1/jobs/${encodeURIComponent(id)}`).catch((e) => {
      if (e instanceof ApiError && e.status === 404) return null;
      throw e;
    })));
  return Object.fromEntries(shown.map((id, n) => [id, read[n]]));
}

async function loadJob(id) {
  state.job = id;
  const path = `/v1/jobs/${encodeURIComponent(id)}`;
  const [job, refusals, kept, children, attempts, graph] = await Promise.all([
    api('GET', path),
    api('GET', `/v1/refusals?limit=100&job=${encodeURIComponent(id)}`),
    api('GET', `${path}/checkpoints`),
    api('GET', `${path}/children?limit=${PARENTS_SHOWN}`),
    api('GET', `${path}/attempts`),
    api('GET', `${path}/graph?limit=${GRAPH_SHOWN}`),
  ]);
  $('job-timeline').replaceChildren(timeline(attempts));
  $('job-workflow').hidden = graph.nodes.length < 2;
  $('job-graph').replaceChildren(graph.nodes.length < 2 ? '' : workflowGraph(graph, id));
  [state.parents, state.childJobs] = await Promise.all([
    loadParents(job.after),
    loadParents(children.children),
  ]);
  state.checkpoints = kept.checkpoints;
  state.children = children;
  renderJob(job);
  state.jobRefusals = refusals.refusals;
  renderJobRefusals();
}

// ---- actions ----------------------------------------------------------------------------

function confirmed(message) {
  const dialog = $('confirm');
  $('confirm-text').textContent = message;
  return new Promise((resolve) => {
    dialog.addEventListener('close', () => resolve(dialog.returnValue === 'yes'), { once: true });
    dialog.showModal();
  });
}

// The words of a bulk action's filter, as its confirmation says them.
function filterWords(filter) {
  const words = [];
  if (filter.queue) words.push(`of queue “${filter.queue}”`);
  if (filter.group) words.push(`of group “${filter.group}”`);
  if (filter.prefix) words.push(`whose id starts with “${filter.prefix}”`);
  return words.join(', ');
}

// Retries or cancels every job the list's filters match (a status by default: dead for a
// retry, pending for a cancel), after a confirmation that says how many.
async function bulk(action) {
  const shown = jobsQuery();
  const filter = { action };
  for (const name of ['queue', 'group', 'prefix', 'status']) if (shown[name]) filter[name] = shown[name];
  const status = shown.status || (action === 'retry' ? 'dead' : 'pending');
  try {
    const counted = await api('POST', '/v1/bulk', { ...filter, dry_run: true });
    if (counted.matched === 0) {
      say(`No ${status} jobs ${filterWords(filter)} to ${action}.`);
      return;
    }
    const verb = action === 'retry' ? 'Retry' : 'Cancel';
    if (!(await confirmed(`${verb} ${num(counted.matched)} ${status} jobs ${filterWords(filter)}?`))) return;
    const done = await api('POST', '/v1/bulk', filter);
    say(`${action === 'retry' ? 'Retried' : 'Cancelled'} ${num(done.changed)} of ${num(done.matched)} ${status} jobs.`);
  } catch (e) {
    say(`${action}: ${e.message}`);
  }
  state.pageAfter = [];
  await loadJobs();
}

async function act(verb, id) {
  if (!(await confirmed(`${verb === 'cancel' ? 'Cancel' : 'Retry'} job “${id}”?`))) return;
  try {
    await api('POST', `/v1/jobs/${encodeURIComponent(id)}/${verb}`, {});
    say(`Job ${id}: ${verb === 'cancel' ? 'cancelled' : 'queued again'}.`);
  } catch (e) {
    say(`Job ${id}: ${e.message}`);
  }
  await loadJob(id);
}

async function pauseOrResume(queue, paused) {
  const verb = paused ? 'resume' : 'pause';
  const question = paused
    ? `Resume queue “${queue}”? Claims take its jobs again.`
    : `Pause queue “${queue}”? No new lease is handed out until it is resumed; running jobs go on.`;
  if (!(await confirmed(question))) return;
  try {
    await api('POST', `/v1/queues/${encodeURIComponent(queue)}/${verb}`, {});
    say(`Queue ${queue}: ${paused ? 'resumed' : 'paused'}.`);
  } catch (e) {
    say(`Queue ${queue}: ${e.message}`);
  }
  await loadControl();
}

// Pause or resume one group of a queue, from the group form.
async function pauseGroup(event) {
  event.preventDefault();
  const queue = $('group-queue').value;
  const group = $('group-name').value;
  const action = $('group-action').value;
  if (!queue || !group) {
    say('Name a queue and one of its groups.');
    return;
  }
  await groupAct(queue, group, action);
}

// Pauses or resumes one group of a queue, once confirmed.
async function groupAct(queue, group, action) {
  const verb = action === 'resume' ? 'Resume' : 'Pause';
  if (!(await confirmed(`${verb} group “${group}” of queue “${queue}”? Its running leases are not touched.`))) return;
  try {
    const path = `/v1/queues/${encodeURIComponent(queue)}/groups/${encodeURIComponent(group)}/${action}`;
    const answer = await api('POST', path, {});
    say(`Queue ${queue}: ${flow(answer)}.`);
  } catch (e) {
    say(`Queue ${queue}, group ${group}: ${e.message}`);
  }
  await loadControl();
}

async function limit(event) {
  event.preventDefault();
  const queue = $('limit-queue').value;
  const body = {};
  const concurrency = $('limit-concurrency').value;
  const timeout = $('limit-timeout').value;
  const perGroup = $('limit-per-group').value;
  const ordered = $('limit-ordered').value;
  const fair = $('limit-fair').value;
  const rate = $('limit-rate').value.trim();
  const ratePerGroup = $('limit-rate-per-group').value.trim();
  if (rate !== '') body.rate = rate;
  if (ratePerGroup !== '') body.rate_per_group = ratePerGroup;
  if (concurrency !== '') body.concurrency = Number(concurrency);
  if (perGroup !== '') body.per_group = Number(perGroup);
  if (ordered !== '') body.ordered = ordered === 'yes';
  if (fair !== '') body.fair = fair === 'yes';
  if (timeout !== '') {
    if (Number(timeout) === 0) body.no_timeout = true; else body.timeout = Number(timeout);
  }
  if (!queue || Object.keys(body).length === 0) {
    say('Name a queue, and a limit or a timeout to set.');
    return;
  }
  if (!(await confirmed(`Set the limits of queue “${queue}”? Running leases are not touched.`))) return;
  try {
    const answer = await api('PUT', `/v1/queues/${encodeURIComponent(queue)}/limits`, body);
    say(`Queue ${queue}: ${flow(answer)}.`);
  } catch (e) {
    say(`Queue ${queue}: ${e.message}`);
  }
  await loadControl();
}

async function saveSchedule(event) {
  event.preventDefault();
  const name = $('schedule-name').value;
  const body = {
    cron: $('schedule-cron').value,
    zone: $('schedule-zone').value || 'UTC',
    queue: $('schedule-queue').value,
    catch_up: $('schedule-catch-up').value,
  };
  if ($('schedule-payload').value !== '') body.payload = $('schedule-payload').value;
  if (!(await confirmed(`Save schedule “${name}”: ${body.cron} in ${body.zone}, into queue “${body.queue}”?`))) return;
  try {
    const answer = await api('PUT', `/v1/schedules/${encodeURIComponent(name)}`, body);
    say(`Schedule ${name} saved; next tick ${answer.next_tick ? when(answer.next_tick) : 'none'}.`);
  } catch (e) {
    say(`Schedule ${name}: ${e.message}`);
  }
  await loadControl();
}

async function runSchedule(name) {
  if (!(await confirmed(`Run schedule “${name}” now? Its job is enqueued once, outside its ticks, which stay as they are.`))) return;
  try {
    const ran = await api('POST', `/v1/schedules/${encodeURIComponent(name)}/run`, {});
    say(ran.inserted
      ? `Schedule ${name}: job ${ran.id} enqueued in queue ${ran.queue}.`
      : `Schedule ${name}: job ${ran.id} was already enqueued this second.`);
  } catch (e) {
    say(`Schedule ${name}: ${e.message}`);
  }
}

async function removeSchedule(name) {
  if (!(await confirmed(`Remove schedule “${name}”? The jobs its ticks made stay.`))) return;
  try {
    await api('DELETE', `/v1/schedules/${encodeURIComponent(name)}`);
    say(`Schedule ${name} removed.`);
  } catch (e) {
    say(`Schedule ${name}: ${e.message}`);
  }
  await loadControl();
}

async function purge(event) {
  event.preventDefault();
  const age = Number($('purge-age').value) * Number($('purge-unit').value);
  const statuses = [...document.querySelectorAll('input[name="purge-status"]:checked')].map((c) => c.value);
  if (!(age >= 0) || statuses.length === 0) {
    say('Choose an age and at least one status to purge.');
    return;
  }
  const before = Date.now() / 1000 - age;
  const text = `Purge every ${statuses.join(', ')} job last changed before ${when(before)}?`;
  if (!(await confirmed(text))) return;
  try {
    const answer = await api('POST', '/v1/purge', { before, statuses });
    say(`Purged ${num(answer.purged)} ${answer.purged === 1 ? 'job' : 'jobs'}.`);
  } catch (e) {
    say(`Purge: ${e.message}`);
  }
}

// ---- routing ----------------------------------------------------------------------------

async function route() {
  if (!state.session) return;
  say('');
  const hash = location.hash || '#/';
  try {
    if (hash.startsWith('#/job/')) {
      show('job');
      await loadJob(decodeURIComponent(hash.slice('#/job/'.length)));
    } else if (hash.startsWith('#/jobs')) {
      state.job = null;
      show('jobs');
      await loadJobs();
    } else {
      state.job = null;
      show('overview');
      await loadOverview();
    }
  } catch (e) {
    if (!(e instanceof ApiError && e.status === 401)) say(e.message);
  }
}

function signedIn(session) {
  state.session = session;
  $('who').textContent = `${session.principal} (${session.scope})`;
  applyScope();
  startEvents();
  route();
}

async function start() {
  $('sign-in-form').addEventListener('submit', async (event) => {
    event.preventDefault();
    const key = $('key').value.trim();
    $('key').value = '';
    try {
      signedIn(await api('POST', '/v1/sessions', { key }));
    } catch (e) {
      $('sign-in-error').textContent = e.status === 401 ? 'That key is not known, or was revoked.' : e.message;
    }
  });
  $('sign-out').addEventListener('click', async () => {
    try { await api('DELETE', '/v1/session'); } catch (_) { /* signed out either way */ }
    showSignIn('Signed out.');
  });
  $('job-filter').addEventListener('submit', (event) => {
    event.preventDefault();
    const params = new URLSearchParams();
    for (const name of JOB_FILTERS) {
      const value = $(`filter-${name}`).value.trim();
      if (value) params.set(name, value);
    }
    state.pageAfter = [];
    const target = `#/jobs${params.toString() ? `?${params}` : ''}`;
    if (location.hash === target) route(); else location.hash = target;
  });
  $('bulk-retry').addEventListener('click', () => bulk('retry'));
  $('bulk-cancel').addEventListener('click', () => bulk('cancel'));
  $('next-page').addEventListener('click', () => {
    if (state.next === null || state.next === undefined) return;
    state.pageAfter.push(state.next);
    route();
  });
  $('first-page').addEventListener('click', () => {
    state.pageAfter = [];
    route();
  });
  $('cancel-job').addEventListener('click', () => act('cancel', state.job));
  $('retry-job').addEventListener('click', () => act('retry', state.job));
  $('purge-form').addEventListener('submit', purge);
  $('limit-form').addEventListener('submit', limit);
  $('group-form').addEventListener('submit', pauseGroup);
  $('schedule-form').addEventListener('submit', saveSchedule);
  window.addEventListener('hashchange', () => {
    if (!location.hash.startsWith('#/jobs')) state.pageAfter = [];
    route();
  });
  const session = await api('GET', '/v1/session');
  if (session.signed_in) signedIn(session);
  else showSignIn('');
}

start().catch((e) => say(e.message));
