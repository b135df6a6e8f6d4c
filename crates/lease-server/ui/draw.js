// The operator page's drawings, by hand in SVG (the page's Content-Security-Policy allows no
// remote script): a queue's last hour as a stacked chart, a job's attempts along time, and a
// workflow around a job. Loaded before app.js, whose helpers (el, num, when, jobLink...) they
// call when they draw; every string from the store is set as text, never as markup.
'use strict';

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
