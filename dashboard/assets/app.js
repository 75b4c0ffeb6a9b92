// Polls /api/state and /api/history and renders them; the charts are uPlot's
// (vendor/uPlot.iife.min.js, embedded).
"use strict";
const $ = (id) => document.getElementById(id);
const fmt = (n, d = 1) => (n === undefined || n === null) ? "–" : Number(n).toFixed(d);
const esc = (s) => String(s ?? "").replace(/[&<>"]/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}[c]));

// rows fills a table body; with errLast the last cell is an error message;
// cls names a class for a row.
function rows(id, items, cells, errLast = false, cls = () => "") {
  $(id).querySelector("tbody").innerHTML = (items || []).map((it) => {
    const cs = cells(it), c = cls(it);
    return `<tr${c ? ` class="${esc(c)}"` : ""}>` + cs.map((c, i) => `<td${errLast && i === cs.length - 1 ? ` class="err" title="${esc(c)}"` : ""}>${esc(c)}</td>`).join("") + "</tr>";
  }).join("");
}

// age prints seconds as 12s, 3m4s, 2h5m.
function age(sec) {
  if (!sec) return "–";
  sec = Math.round(sec);
  if (sec < 60) return sec + "s";
  if (sec < 3600) return Math.floor(sec / 60) + "m" + (sec % 60) + "s";
  return Math.floor(sec / 3600) + "h" + Math.floor((sec % 3600) / 60) + "m";
}

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
    return;
  }
  $("instance").textContent = st.instance ? "instance " + st.instance : "";
  const eng = st.engine;
  $("engine").textContent = eng ? "engine " + eng.kind + " " + (eng.addresses || []).join(", ") + " · auth " + eng.auth + " · TLS " + eng.tls : "";
  $("engine-warning").hidden = !(eng && eng.warning);
  $("engine-warning").textContent = eng && eng.warning ? eng.warning : "";
  const s = st.snapshot;
  if (!s) { $("updated").textContent = "waiting for the first sample…"; return; }
  $("updated").textContent = "updated " + new Date(s.at).toLocaleTimeString();
  $("lag").textContent = fmt(s.deliverable_lag_seconds) + " s";
  $("oldest").textContent = "oldest pending " + age(s.oldest_pending_age_seconds);
  $("throughput").textContent = fmt(s.delivered_per_second) + " /s";
  $("backlog").textContent = s.pending;
  $("failed").textContent = s.failed;
  $("blocked").textContent = s.blocked_count;
  $("paused").textContent = (s.consumers || []).filter((c) => c.paused).length;
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
  rows("consumers", s.consumers, (c) => [c.name, c.type, (c.indexes || []).join(", "),
    c.paused ? "paused " + age(c.paused.age_seconds) : c.state, c.paused ? "– (paused)" : fmt(c.deliverable_lag_seconds),
    c.deliverable, c.pending, c.failed, fmt(c.oldest_pending_age_seconds)], false, (c) => c.paused ? "paused-consumer" : "");
  const h = held(s.consumers);
  $("heldnone").hidden = h.length > 0;
  $("held").hidden = h.length === 0;
  rows("held", h, (r) => [r.consumer, r.cause, r.aggregates, r.events, r.failed, age(r.since), r.head, r.why], true, (r) => r.cause);
  actionsEnabled(st.actions);
  consumerOptions(s.consumers);
  indexOptions(s.consumers);
  rows("partitions", st.partitions, (p) => [p.owner, (p.partitions || []).length + " (" + (p.partitions || []).join(",") + ")", new Date(p.heartbeat).toLocaleTimeString()]);
}

// The history: samples of /api/history for the selected range, extended with
// the newer ones at every refresh (?since=).
const hist = {range: "1h", samples: [], gen: 0};
const palette = ["#2563eb", "#dc2626", "#059669", "#d97706", "#7c3aed", "#0891b2", "#be185d", "#4d7c0f"];
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

// lines names the lines of a per-consumer chart from the newest sample: one
// per index of a search consumer, one per other consumer.
function lines(samples) {
  const out = [];
  const names = new Set();
  for (const s of samples) for (const n of Object.keys(s.consumers || {})) names.add(n);
  const newest = {};
  for (const s of samples) for (const [n, c] of Object.entries(s.consumers || {})) newest[n] = c;
  for (const n of [...names].sort()) {
    const idx = (newest[n] && newest[n].indexes) || [];
    if (idx.length) for (const i of idx) out.push({label: "index " + i + " (" + n + ")", consumer: n, index: i});
    else out.push({label: "consumer " + n, consumer: n});
  }
  return out;
}

// draw creates or updates the uPlot chart in the element id with one line per
// entry of defs (label, value(sample) → number or null).
function draw(id, defs, unit) {
  const el = $(id), xs = hist.samples.map((s) => new Date(s.at).getTime() / 1000);
  const data = [xs].concat(defs.map((d) => hist.samples.map((s) => { const v = d.value(s); return v === undefined ? null : v; })));
  const key = defs.map((d) => d.label).join("|");
  let u = window.consoleCharts[id];
  if (u && u.key === key) { u.setData(data); return; }
  if (u) u.destroy();
  el.innerHTML = "";
  u = new uPlot({
    width: Math.max(300, el.clientWidth || 800), height: 200,
    scales: {x: {time: true}, y: {range: (u, min, max) => [0, Math.max(1, max * 1.1)]}},
    axes: [{}, {label: unit, size: 60}],
    legend: {live: true},
    series: [{label: "time"}].concat(defs.map((d, i) => ({label: d.label, stroke: d.color || palette[i % palette.length], width: 2, spanGaps: false, dash: d.dash || undefined,
      value: (u, v) => v === null || v === undefined ? "–" : fmt(v, 2)}))),
  }, data, el);
  u.key = key;
  window.consoleCharts[id] = u;
}

function drawCharts() {
  const ls = lines(hist.samples);
  const cons = (s, l) => (s.consumers || {})[l.consumer];
  draw("lagchart", ls.map((l) => ({label: l.label, value: (s) => { const c = cons(s, l); return c ? c.lag : null; }})), "seconds");
  draw("blockedchart", ls.map((l) => ({label: l.label, value: (s) => { const c = cons(s, l); return c ? c.blocked : null; }})), "aggregates");
  draw("ratechart", [{label: "delivered (all relays)", color: "#059669", value: (s) => s.rate}], "events/s");
  const names = [...new Set(ls.map((l) => l.consumer))];
  const lat = [];
  names.forEach((n, i) => {
    for (const [p, dash] of [["p50", null], ["p99", [6, 4]]]) {
      lat.push({label: n + " " + p, color: palette[i % palette.length], value: (s) => { const c = (s.consumers || {})[n]; return c && c.latency ? c.latency[p] : null; }, dash});
    }
  });
  draw("latencychart", lat, "seconds");
  const srch = [];
  ls.filter((l) => l.index).forEach((l, i) => {
    for (const [p, dash] of [["p50", null], ["p99", [6, 4]]]) {
      srch.push({label: l.index + " " + p, color: palette[i % palette.length], dash,
        value: (s) => { const c = cons(s, l), q = c && c.searchable && c.searchable[l.index]; return q ? q[p] : null; }});
    }
  });
  draw("searchablechart", srch, "seconds");
}

// Event pages: /api/events (filters, paging by after_id), /api/events/{id},
// /api/blocked; actions POST /api/events/{id}/retry|ack|skip and, for an
// aggregate or the current filter, POST /api/actions (a dry run first, whose
// count the confirmation shows) with the token in a header (never in a URL),
// loaded on demand, not at every refresh.
const ev = {after: 0, next: 0, actions: false, blockedOffset: 0};

function actionsEnabled(on) {
  ev.actions = !!on;
  $("actionsbar").hidden = !ev.actions;
  $("readonly").hidden = ev.actions;
  bulkButtons();
  $("token").value = $("token").value || sessionStorage.getItem("searchsync-token") || "";
  $("operator").value = $("operator").value || sessionStorage.getItem("searchsync-operator") || "";
}

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
  if ($("f-index").value) q.set("index", $("f-index").value);
  if ($("f-error").value.trim()) q.set("error", $("f-error").value.trim());
  return q;
}

async function getJSON(url) {
  const r = await fetch(url, {cache: "no-store"});
  const body = await r.json().catch(() => ({}));
  if (!r.ok) throw new Error(body.error || "HTTP " + r.status);
  return body;
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
    return `<tr><td><a data-open="${e.id}">${e.id}</a></td><td>${esc(e.event_type)}</td><td>${esc(e.aggregate_type + "/" + (e.aggregate_id || "–"))}</td>` +
      `<td>${esc(e.status)}</td><td>${e.attempts}</td><td class="err" title="${esc(err)}">${esc(err)}</td><td>${actButtons(e)}</td></tr>`;
  }).join("");
  loadBlocked();
}

async function loadBlocked() {
  const q = filterQuery();
  q.set("offset", ev.blockedOffset);
  let page;
  try { page = await getJSON("api/blocked?" + q); } catch (e) { return; }
  $("blockedinfo").textContent = page.total + " blocked" + (page.total > page.listed ? ", the oldest " + page.listed + " listed" : "");
  $("b-more").hidden = !page.next_offset;
  ev.blockedNext = page.next_offset;
  rows("blockedtbl", page.blocked, (b) => [b.aggregate_type + "/" + b.aggregate_id, b.head_id, b.event_type, b.status, b.waiting, (b.consumers || []).join(", ") || "–", b.last_error], true);
}

const actionNames = {retry: "Retry", ack: "Ack", skip: "Skip"};

function actButtons(e) {
  if (!ev.actions || e.status !== "failed") return "";
  return Object.entries(actionNames).map(([a, label]) => `<button class="act" data-act="${a}" data-id="${e.id}">${label}</button>`).join("");
}

// aggButtons: the actions on every event of the event's aggregate.
function aggButtons(e) {
  if (!ev.actions || !e.aggregate_id) return "";
  return Object.entries(actionNames).map(([a, label]) =>
    `<button class="act" data-agg-act="${a}" data-type="${esc(e.aggregate_type)}" data-aid="${esc(e.aggregate_id)}">${label} this aggregate</button>`).join("");
}

// bulkButtons: the actions on every event matching the current filter, on
// the failed listing only; skip takes no consumer (ack for a consumer marks
// its delivery done).
function bulkButtons() {
  const failed = $("f-status").value === "failed", consumer = $("f-consumer").value;
  $("bulkacts").hidden = !ev.actions || !failed;
  for (const b of document.querySelectorAll("#bulkacts button[data-bulk]")) {
    const skipOne = b.dataset.bulk === "skip" && consumer;
    b.disabled = !!skipOne;
    b.title = skipOne ? "skip takes no consumer: Ack all for " + consumer + " marks its failed deliveries done" : "";
  }
}

function msg(text, ok) {
  $("actionmsg").textContent = text;
  $("actionmsg").className = ok ? "okmsg" : "errmsg";
}

async function openEvent(id) {
  ev.detailID = id;
  let d;
  try { d = await getJSON("api/events/" + id); } catch (e) { msg("event " + id + ": " + e.message, false); return; }
  $("detail").hidden = false;
  $("detailtitle").textContent = "Event " + id + " · " + d.event.event_type + " · " + d.event.status;
  $("detailacts").innerHTML = actButtons(d.event) + aggButtons(d.event);
  $("detailjson").textContent = JSON.stringify(d.event, null, 2);
  rows("waiting", d.waiting, (w) => [w.id, w.event_type, w.status, new Date(w.created_at).toLocaleString()]);
}

// post sends an action with the token; null when there is no token (the
// page says so) or the answer to the caller.
async function post(url, req) {
  const token = $("token").value;
  if (!token) { msg("enter the operator token first", false); return null; }
  sessionStorage.setItem("searchsync-token", token);
  sessionStorage.setItem("searchsync-operator", $("operator").value);
  const r = await fetch(url, {method: "POST", cache: "no-store",
    headers: {"Content-Type": "application/json", "X-Searchsync-Token": token, "X-Searchsync-Operator": $("operator").value || "console"},
    body: JSON.stringify(req)});
  return {r, body: await r.json().catch(() => ({}))};
}

async function act(action, id) {
  const a = await post("api/events/" + id + "/" + action, {});
  if (!a) return;
  const {r, body} = a;
  if (!r.ok) { msg(action + " of event " + id + " refused: " + (body.error || "HTTP " + r.status), false); return; }
  msg(action + " of event " + id + ": " + body.count + " event(s) changed" + (body.job_id ? ", recorded as job " + body.job_id : "") +
    ((body.events || [])[0] ? " (" + body.events[0].outcome + ")" : ""), true);
  loadEvents();
  if (!$("detail").hidden) openEvent(id);
}

// actMany runs an action on an aggregate or a filter (sel: the part of
// the /api/actions request that selects): a dry run first, then the
// confirmation with its count; confirmed, the action itself.
async function actMany(action, sel, what) {
  const dry = await post("api/actions", Object.assign({action, dry_run: true}, sel));
  if (!dry) return;
  if (!dry.r.ok) { msg(action + " of " + what + " refused: " + (dry.body.error || "HTTP " + dry.r.status), false); return; }
  const n = dry.body.count;
  if (!n) { msg("nothing to " + action + ": no event of " + what + " qualifies", false); return; }
  const ids = dry.body.ids || [];
  $("confirmtext").textContent = actionNames[action] + " " + n + " event" + (n === 1 ? "" : "s") + " of " + what + "? (" +
    ids.slice(0, 10).join(", ") + (n > 10 ? ", …" : "") + ")";
  $("confirm-yes").textContent = actionNames[action] + " " + n;
  $("confirmbox").hidden = false;
  ev.confirm = async () => {
    const a = await post("api/actions", Object.assign({action}, sel));
    if (!a) return;
    if (!a.r.ok) { msg(action + " of " + what + " refused: " + (a.body.error || "HTTP " + a.r.status), false); return; }
    msg(action + " of " + what + ": " + a.body.count + " event(s) changed" + (a.body.job_id ? ", recorded as job " + a.body.job_id : ""), true);
    loadEvents();
    if (!$("detail").hidden && ev.detailID) openEvent(ev.detailID);
  };
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

document.addEventListener("click", (e) => {
  const t = e.target;
  if (t.dataset.open) openEvent(t.dataset.open);
  if (t.dataset.act) act(t.dataset.act, t.dataset.id);
  if (t.dataset.aggAct) actMany(t.dataset.aggAct, {aggregate: {type: t.dataset.type, id: t.dataset.aid}}, "aggregate " + t.dataset.type + "/" + t.dataset.aid);
  if (t.dataset.bulk) { const b = bulkSelection(); actMany(t.dataset.bulk, b.sel, b.what); }
});
$("confirm-yes").addEventListener("click", () => { $("confirmbox").hidden = true; const f = ev.confirm; ev.confirm = null; if (f) f(); });
$("confirm-no").addEventListener("click", () => { $("confirmbox").hidden = true; ev.confirm = null; msg("cancelled; nothing changed", true); });
$("f-status").addEventListener("change", bulkButtons);
$("f-consumer").addEventListener("change", bulkButtons);
$("f-errclass").addEventListener("change", () => { $("f-error").value = $("f-errclass").value; });
$("f-apply").addEventListener("click", () => { ev.after = 0; ev.blockedOffset = 0; loadEvents(); });
$("f-next").addEventListener("click", () => { ev.after = ev.next; loadEvents(); });
$("f-first").addEventListener("click", () => { ev.after = 0; loadEvents(); });
$("b-more").addEventListener("click", () => { ev.blockedOffset = ev.blockedNext; loadBlocked(); });
$("detailclose").addEventListener("click", () => { $("detail").hidden = true; });

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
