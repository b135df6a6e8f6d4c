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
