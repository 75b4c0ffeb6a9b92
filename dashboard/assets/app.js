// Polls /api/state and /api/history and renders them; the charts are uPlot's
// (vendor/uPlot.iife.min.js, embedded). Uses common.js.
"use strict";

// rows fills a table body; with errLast the last cell is an error message;
// cls names a class for a row. A cell given as {html} is markup (built
// with esc), any other is text.
function rows(id, items, cells, errLast = false, cls = () => "") {
  $(id).querySelector("tbody").innerHTML = (items || []).map((it) => {
    const cs = cells(it), c = cls(it);
    return `<tr${c ? ` class="${esc(c)}"` : ""}>` + cs.map((c, i) => {
      const html = c !== null && typeof c === "object" ? c.html : esc(c);
      return `<td${errLast && i === cs.length - 1 ? ` class="err" title="${esc(c)}"` : ""}>${html}</td>`;
    }).join("") + "</tr>";
  }).join("");
}

// tile colours a tile by its state: ok, warn or bad.
function tile(id, state) { $(id).dataset.state = state; }

// held lists, per consumer, what it cannot deliver now and why.
function held(consumers) {
  const out = [];
  for (const c of consumers || []) {
    const b = c.blocked || {};
    for (const cause of ["failed", "backing_off", "paused"]) {
      const f = b[cause] || {};
      const failed = cause === "failed" ? c.failed : 0;
      if (!f.aggregates && !f.events && !failed && !(cause === "paused" && c.paused)) continue;
      let why = f.why || "";
      if (cause === "paused" && c.paused) why += ` (${c.paused.probes} failed probes)`;
      out.push({consumer: c.name, cause, aggregates: f.aggregates || 0, events: f.events || 0, failed, since: f.age_seconds, head: f.head_id || "–", why});
    }
  }
  return out;
}

async function refresh() {
  let st;
  try {
    const r = await fetch("api/state", {cache: "no-store"});
    st = await r.json();
  } catch (e) {
    $("updated").textContent = "relay unreachable: " + e;
    showHealth({state: "down", reasons: ["this page cannot reach the relay: " + e]});
    return;
  }
  $("instance").textContent = st.instance ? "instance " + st.instance : "";
  const eng = st.engine;
  $("engine").textContent = eng ? "engine " + eng.kind + " " + (eng.addresses || []).join(", ") + " · auth " + eng.auth + " · TLS " + eng.tls : "";
  $("engine-warning").hidden = !(eng && eng.warning);
  $("engine-warning").textContent = eng && eng.warning ? eng.warning : "";
  showHealth(st.health);
  indexRows(st.indexes || []);
  const s = st.snapshot;
  if (!s) { $("updated").textContent = "waiting for the first sample…"; return; }
  $("updated").textContent = "updated " + new Date(s.at).toLocaleTimeString() +
    (st.unreachable ? " · the outbox cannot be read since " + new Date(st.unreachable.since).toLocaleTimeString() : "");
  $("lag").textContent = fmt(s.deliverable_lag_seconds) + " s";
  $("oldest").textContent = "oldest pending " + age(s.oldest_pending_age_seconds);
  $("throughput").textContent = fmt(s.delivered_per_second) + " /s";
  $("throughputper").textContent = (s.consumers || []).map((c) => c.name + " " + fmt(c.delivered_per_second) + "/s" + (c.paused ? " (paused)" : "")).join(" · ");
  $("backlog").textContent = s.pending;
  $("failed").textContent = s.failed;
  $("blocked").textContent = s.blocked_count;
  const paused = (s.consumers || []).filter((c) => c.paused).length;
  $("paused").textContent = paused;
  tile("t-failed", s.failed > 0 ? "bad" : "ok");
  tile("t-blocked", s.blocked_count > 0 ? "warn" : "ok");
  tile("t-paused", paused > 0 ? "warn" : "ok");
  tile("t-throughput", (s.consumers || []).some((c) => c.health === "down") ? "bad" : "ok");
  tile("t-backlog", "ok");
  const ooo = s.out_of_order || {};
  $("outoforder").hidden = !ooo.last_24h;
  if (ooo.last_24h && ooo.latest) {
    const l = ooo.latest;
    $("outoforder").textContent = ooo.last_24h + " events delivered out of id order in the last 24 h (latest: event " + l.event_id +
      " of " + l.aggregate_type + "/" + l.aggregate_id + " after event " + l.after_event_id + ", " + new Date(l.detected_at).toLocaleString() +
      "). A producer inserts without taking the aggregate's advisory lock: see docs/ordering.md.";
  }
  const drift = st.drift || [];
  $("drift").hidden = drift.length === 0;
  $("drift").innerHTML = drift.map(esc).join("<br>");
  rows("consumers", s.consumers, (c) => [c.name, c.type, (c.indexes || []).join(", "), {html: pill(c.health, c.health_reason) + (c.health_reason ? ` <span class="reason">${esc(c.health_reason)}</span>` : "")},
    c.paused ? "paused " + age(c.paused.age_seconds) : c.state, fmt(c.delivered_per_second), c.paused ? "– (paused)" : fmt(c.deliverable_lag_seconds),
    c.deliverable, c.pending, c.failed, fmt(c.oldest_pending_age_seconds)], false, (c) => "h-row-" + (c.health || "unknown"));
  const h = held(s.consumers);
  $("heldnone").hidden = h.length > 0;
  $("held").hidden = h.length === 0;
  rows("held", h, (r) => [r.consumer, r.cause, r.aggregates, r.events, r.failed, age(r.since), r.head === "–" ? "–" : {html: eventLink(r.head)}, r.why], true, (r) => r.cause);
  enableActions(st.actions);
  bulkButtons();
  consumerOptions(s.consumers);
  indexOptions(s.consumers);
  rows("partitions", st.partitions, (p) => [p.owner, (p.partitions || []).length + " (" + (p.partitions || []).join(",") + ")", new Date(p.heartbeat).toLocaleTimeString()]);
}

// showHealth is the health line: the verdict in colour, its reasons.
function showHealth(h) {
  h = h || {state: "unknown"};
  $("health").dataset.health = h.state;
  $("healthstate").className = "pill h-" + h.state;
  $("healthstate").dataset.health = h.state;
  $("healthstate").textContent = h.state;
  $("healthreasons").innerHTML = (h.reasons || []).map((r) => `<li>${esc(r)}</li>`).join("");
}

// indexRows is the Indexes table: per alias its live index, documents,
// the engine's health and the verdict.
function indexRows(ix) {
  $("indexesnone").hidden = ix.length > 0;
  $("indexes").hidden = ix.length === 0;
  rows("indexes", ix, (a) => [a.alias, a.index || "–", a.docs === undefined ? "–" : a.docs, a.engine_health || "–",
    {html: pill(a.health, a.health_reason) + (a.health_reason ? ` <span class="reason">${esc(a.health_reason)}</span>` : "") +
      (a.searchable_off ? `<div class="reason" data-testid="searchable-off">${esc(a.searchable_off)}</div>` : "")},
    a.checked_at && !a.checked_at.startsWith("0001") ? new Date(a.checked_at).toLocaleTimeString() : "–"]);
}

// The history: samples of /api/history for the selected range, extended with
// the newer ones at every refresh (?since=).
const hist = {range: "1h", samples: [], gen: 0};
// Series colours: distinct, and none red (red is for failures).
const palette = ["#2563eb", "#059669", "#7c3aed", "#d97706", "#0891b2", "#be185d", "#4d7c0f", "#475569"];
// The uPlot instances by chart id; tests inspect them.
window.consoleCharts = {};

// loadHistory runs one load at a time, each after the previous one, so that
// none reads the samples another is about to append.
let historyChain = Promise.resolve();
function loadHistory() {
  const p = historyChain.then(loadHistoryOnce);
  historyChain = p.catch(() => {});
  return p;
}

async function loadHistoryOnce() {
  const last = hist.samples[hist.samples.length - 1], gen = hist.gen;
  const q = last ? "&since=" + encodeURIComponent(last.at) : "";
  const r = await fetch("api/history?range=" + hist.range + q, {cache: "no-store"});
  if (!r.ok) throw new Error("history: HTTP " + r.status);
  const h = await r.json();
  if (gen !== hist.gen) return; // the range changed meanwhile
  hist.samples = hist.samples.concat(h.samples || []);
  const from = Date.now() / 1000 - {"1h": 3600, "6h": 21600, "24h": 86400}[hist.range];
  while (hist.samples.length && new Date(hist.samples[0].at).getTime() / 1000 < from) hist.samples.shift();
  $("histinfo").textContent = hist.samples.length + " samples · one every " + h.interval_seconds + " s" +
    (h.step_seconds > h.interval_seconds ? " (shown every " + h.step_seconds + " s)" : "") + " · kept in PostgreSQL";
}

// consumers names the consumers of the samples, sorted, with the indexes
// the newest sample gives each (one line per consumer: a search consumer
// writes its indexes in one bulk, so they share its lag).
function consumers(samples) {
  const newest = {};
  for (const s of samples) for (const [n, c] of Object.entries(s.consumers || {})) newest[n] = c;
  return Object.keys(newest).sort().map((n) => {
    const idx = newest[n].indexes || [];
    return {name: n, indexes: idx, label: idx.length ? n + " → " + idx.join(", ") : n};
  });
}

// lastValue is the newest value of series si, the legend's value when the
// cursor is not on the chart.
function lastValue(u, si) {
  const d = u.data[si] || [];
  for (let i = d.length - 1; i >= 0; i--) if (d[i] !== null && d[i] !== undefined) return d[i];
  return null;
}

// draw creates or updates the uPlot chart in the element id with one line per
// entry of defs (label, value(sample) → number or null, color, dash, width).
function draw(id, defs, unit) {
  const el = $(id), xs = hist.samples.map((s) => new Date(s.at).getTime() / 1000);
  const data = [xs].concat(defs.map((d) => hist.samples.map((s) => { const v = d.value(s); return v === undefined ? null : v; })));
  const key = defs.map((d) => d.label).join("|");
  let u = window.consoleCharts[id];
  if (u && u.key === key) { u.setData(data); if (u.cursor.idx === null || u.cursor.idx === undefined) u.setLegend({idx: null}); return; }
  if (u) u.destroy();
  el.innerHTML = "";
  u = new uPlot({
    width: Math.max(300, el.clientWidth || 800), height: 200,
    scales: {x: {time: true}, y: {range: (u, min, max) => [0, Math.max(1, max * 1.1)]}},
    axes: [{}, {label: unit, size: 60}],
    legend: {live: true},
    series: [{label: "time", value: (u, v, si, idx) => {
      if (idx === null || idx === undefined) v = lastValue(u, 0);
      return v === null || v === undefined ? "–" : new Date(v * 1000).toLocaleTimeString();
    }}].concat(defs.map((d, i) => ({label: d.label, stroke: d.color || palette[i % palette.length], width: d.width || 2, spanGaps: false, dash: d.dash || undefined,
      // Without the cursor on the chart, the newest value.
      value: (u, v, si, idx) => { if (idx === null || idx === undefined) v = lastValue(u, si); return v === null || v === undefined ? "–" : fmt(v, 2); }}))),
  }, data, el);
  u.key = key;
  u.setLegend({idx: null});
  window.consoleCharts[id] = u;
}

// layered gives the lines of a chart widths from wide (the first) to thin
// (the last), so that lines with the same values stay visible one on the
// other (two consumers delivering every event alike).
function layered(defs) {
  return defs.map((d, i) => Object.assign({width: 2 + 2.5 * (defs.length - 1 - i)}, d));
}

function drawCharts() {
  const cs = consumers(hist.samples);
  const of = (s, n) => (s.consumers || {})[n];
  draw("lagchart", layered(cs.map((c, i) => ({label: c.label, color: palette[i % palette.length], value: (s) => { const x = of(s, c.name); return x ? x.lag : null; }}))), "seconds");
  draw("blockedchart", layered(cs.map((c, i) => ({label: c.label, color: palette[i % palette.length], value: (s) => { const x = of(s, c.name); return x ? x.blocked : null; }}))), "aggregates");
  draw("ratechart", layered(cs.map((c, i) => ({label: c.name, color: palette[i % palette.length], value: (s) => { const x = of(s, c.name); return x && x.rate !== undefined ? x.rate : null; }}))).concat(
    [{label: "handled (outbox)", color: "#1d2430", dash: [4, 3], width: 1.5, value: (s) => s.rate}]), "events/s");
  // The backlog of each consumer, and the same again, thick, while it is
  // paused: a paused consumer's growing backlog stands out.
  const bl = [];
  cs.forEach((c, i) => {
    bl.push({label: c.name, color: palette[i % palette.length], width: 2 + 2.5 * (cs.length - 1 - i), value: (s) => { const x = of(s, c.name); return x && x.pending !== undefined ? x.pending : null; }});
    bl.push({label: c.name + " paused", color: "#c2410c", width: 8, dash: [2, 2],
      value: (s) => { const x = of(s, c.name); return x && x.paused && x.pending !== undefined ? x.pending : null; }});
  });
  draw("backlogchart", bl, "events");
  const lat = [];
  cs.forEach((c, i) => {
    for (const [p, dash] of [["p50", null], ["p99", [6, 4]]]) {
      lat.push({label: c.name + " " + p, color: palette[i % palette.length], value: (s) => { const x = of(s, c.name); return x && x.latency ? x.latency[p] : null; }, dash});
    }
  });
  draw("latencychart", lat, "seconds");
  const srch = [];
  let k = 0;
  for (const c of cs) {
    for (const ix of c.indexes) {
      const color = palette[k++ % palette.length];
      for (const [p, dash] of [["p50", null], ["p99", [6, 4]]]) {
        srch.push({label: ix + " " + p, color, dash, value: (s) => { const x = of(s, c.name), q = x && x.searchable && x.searchable[ix]; return q ? q[p] : null; }});
      }
    }
  }
  draw("searchablechart", srch, "seconds");
}

// The events: /api/events (filters, paging by after_id) and /api/blocked,
// loaded on demand, not at every refresh; each event links to its own page
// (/events/{id}). Actions on the current filter go through actMany
// (common.js).
const ev = {after: 0, next: 0, blockedOffset: 0};

function consumerOptions(consumers) {
  const sel = $("f-consumer"), names = (consumers || []).map((c) => c.name);
  const have = [...sel.options].map((o) => o.value).slice(1);
  if (have.join() === names.join()) return;
  const cur = sel.value;
  sel.innerHTML = '<option value="">any</option>' + names.map((n) => `<option>${esc(n)}</option>`).join("");
  sel.value = cur;
}

// indexOptions lists the search consumers' indexes in the index filter.
function indexOptions(consumers) {
  const sel = $("f-index"), names = [...new Set((consumers || []).flatMap((c) => c.indexes || []))];
  const have = [...sel.options].map((o) => o.value).slice(1);
  if (have.join() === names.join()) return;
  const cur = sel.value;
  sel.innerHTML = '<option value="">any</option>' + names.map((n) => `<option>${esc(n)}</option>`).join("");
  sel.value = cur;
}

// errorClasses fills the error dropdown from /api/error-classes: picking a
// class puts its pattern into the free-text error filter.
async function errorClasses() {
  let cls;
  try { cls = await getJSON("api/error-classes"); } catch (e) { return; }
  $("f-errclass").innerHTML = '<option value="">any</option>' +
    cls.map((c) => `<option value="${esc(c.pattern)}" title="${esc(c.label)}">${esc(c.name)}</option>`).join("");
}

// filterQuery is the filter as /api/events and /api/blocked take it.
function filterQuery() {
  const q = new URLSearchParams();
  if ($("f-consumer").value) q.set("consumer", $("f-consumer").value);
  if ($("f-type").value.trim()) q.set("event_type", $("f-type").value.trim());
  if ($("f-aggid").value.trim()) q.set("aggregate_id", $("f-aggid").value.trim());
  if ($("f-index").value) q.set("index", $("f-index").value);
  if ($("f-error").value.trim()) q.set("error", $("f-error").value.trim());
  return q;
}

async function loadEvents() {
  const q = filterQuery();
  q.set("status", $("f-status").value);
  if (ev.after) q.set("after_id", ev.after);
  let page;
  try { page = await getJSON("api/events?" + q); } catch (e) { msg("events: " + e.message, false); return; }
  ev.next = page.next_after_id;
  $("f-next").hidden = !ev.next;
  $("f-first").hidden = !ev.after;
  $("eventsnone").hidden = page.events.length > 0;
  $("events").querySelector("tbody").innerHTML = page.events.map((e) => {
    const err = e.last_error || (e.deliveries || []).map((d) => d.last_error && d.consumer + ": " + d.last_error).filter(Boolean).join("; ");
    return `<tr><td>${eventLink(e.id)}</td><td>${esc(e.event_type)}</td><td>${esc(e.aggregate_type + "/" + (e.aggregate_id || "–"))}</td>` +
      `<td>${esc(e.status)}</td><td>${e.attempts}</td><td class="err" title="${esc(err)}">${esc(err)}</td><td>${actButtons(e)}</td></tr>`;
  }).join("");
  loadBlocked();
}

async function loadBlocked() {
  const q = filterQuery();
  q.delete("aggregate_id");
  q.set("offset", ev.blockedOffset);
  let page;
  try { page = await getJSON("api/blocked?" + q); } catch (e) { return; }
  $("blockedinfo").textContent = page.total + " blocked" + (page.total > page.listed ? ", the oldest " + page.listed + " listed" : "");
  $("b-more").hidden = !page.next_offset;
  ev.blockedNext = page.next_offset;
  rows("blockedtbl", page.blocked, (b) => [b.aggregate_type + "/" + b.aggregate_id, {html: eventLink(b.head_id)}, b.event_type, b.status, b.waiting, (b.consumers || []).join(", ") || "–", b.last_error], true);
}

// bulkButtons: the actions on every event matching the current filter, on
// the failed listing only; skip takes no consumer (ack for a consumer marks
// its delivery done).
function bulkButtons() {
  const failed = $("f-status").value === "failed", consumer = $("f-consumer").value;
  $("bulkacts").hidden = !acts.enabled || !failed;
  for (const b of document.querySelectorAll("#bulkacts button[data-bulk]")) {
    const skipOne = b.dataset.bulk === "skip" && consumer;
    b.disabled = !!skipOne;
    b.title = skipOne ? "skip takes no consumer: Ack all for " + consumer + " marks its failed deliveries done" : "";
  }
}

// bulkSelection is the current filter as /api/actions takes it; a filter
// without an event type is every failed event (of the consumer), said
// explicitly ("all") after the confirmation showed the count.
function bulkSelection() {
  const type = $("f-type").value.trim(), consumer = $("f-consumer").value;
  const index = $("f-index").value, error = $("f-error").value.trim();
  const what = "failed" + (consumer ? " for " + consumer : "") + (type ? " of type " + type : "") +
    (index ? " written to index " + index : "") + (error ? " with an error like " + JSON.stringify(error) : "") +
    (type || index || error ? "" : " (every event type)");
  return {sel: {filter: {status: "failed", consumer, event_type: type, index, error}, all: !(type || index || error)}, what: "the filter: " + what};
}

acts.after = loadEvents;
document.addEventListener("click", (e) => {
  const t = e.target;
  if (t.dataset.bulk) { const b = bulkSelection(); actMany(t.dataset.bulk, b.sel, b.what); }
});
$("f-status").addEventListener("change", bulkButtons);
$("f-consumer").addEventListener("change", bulkButtons);
$("f-errclass").addEventListener("change", () => { $("f-error").value = $("f-errclass").value; });
$("f-apply").addEventListener("click", () => { ev.after = 0; ev.blockedOffset = 0; loadEvents(); });
$("f-next").addEventListener("click", () => { ev.after = ev.next; loadEvents(); });
$("f-first").addEventListener("click", () => { ev.after = 0; loadEvents(); });
$("b-more").addEventListener("click", () => { ev.blockedOffset = ev.blockedNext; loadBlocked(); });

let busy = false;
async function tick() {
  if (busy) return;
  busy = true;
  try { await tickOnce(); } finally { busy = false; }
}

async function tickOnce() {
  await refresh();
  try {
    await loadHistory();
    drawCharts();
  } catch (e) {
    $("histinfo").textContent = "history unavailable: " + e.message;
  }
}

for (const b of document.querySelectorAll("#ranges button")) {
  b.addEventListener("click", () => {
    hist.range = b.dataset.range;
    hist.samples = [];
    hist.gen++;
    for (const o of document.querySelectorAll("#ranges button")) o.classList.toggle("on", o === b);
    loadHistory().then(drawCharts, () => {});
  });
}

errorClasses();
tick().then(loadEvents);
setInterval(tick, 2000);
