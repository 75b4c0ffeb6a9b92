// Polls /api/state and renders it; no dependencies.
"use strict";
const $ = (id) => document.getElementById(id);
const fmt = (n, d = 1) => (n === undefined || n === null) ? "–" : Number(n).toFixed(d);
const esc = (s) => String(s ?? "").replace(/[&<>"]/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}[c]));

// rows fills a table body; with errLast the last cell is an error message;
// cls names a class for a row.
function rows(id, items, cells, errLast = false, cls = () => "") {
  $(id).querySelector("tbody").innerHTML = (items || []).map((it) => {
    const cs = cells(it), c = cls(it);
    return `<tr${c ? ` class="${esc(c)}"` : ""}>` + cs.map((c, i) => `<td${errLast && i === cs.length - 1 ? ' class="err"' : ""}>${esc(c)}</td>`).join("") + "</tr>";
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

function chart(svg, points, series) {
  const w = 800, h = svg.viewBox.baseVal.height, pad = 4;
  if (!points.length) { svg.innerHTML = ""; return; }
  const t0 = new Date(points[0].at).getTime(), t1 = new Date(points[points.length - 1].at).getTime();
  let ymax = 1;
  for (const s of series) for (const p of points) ymax = Math.max(ymax, s.value(p));
  const x = (p) => pad + (w - 2 * pad) * ((new Date(p.at).getTime() - t0) / Math.max(1, t1 - t0));
  const y = (v) => h - pad - (h - 2 * pad) * (v / ymax);
  svg.innerHTML = series.map((s) =>
    `<polyline fill="none" stroke="${s.color}" stroke-width="2" points="${points.map((p) => `${x(p).toFixed(1)},${y(s.value(p)).toFixed(1)}`).join(" ")}"/>`).join("") +
    `<text x="6" y="14" font-size="12" fill="#6b7280">max ${fmt(ymax)}</text>`;
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
  rows("failures", s.failures, (f) => [f.id, f.event_type, f.aggregate_type + "/" + (f.aggregate_id || "–"), f.attempts, f.last_error], true);
  rows("blockedtbl", s.blocked, (b) => [b.aggregate_type + "/" + b.aggregate_id, b.head_id, b.status, b.waiting, (b.consumers || []).join(", ") || "–", b.last_error], true);
  rows("partitions", st.partitions, (p) => [p.owner, (p.partitions || []).length + " (" + (p.partitions || []).join(",") + ")", new Date(p.heartbeat).toLocaleTimeString()]);
  const colors = ["#2563eb", "#dc2626", "#059669", "#d97706", "#7c3aed"];
  const names = Object.keys((st.history[st.history.length - 1] || {}).consumer_lag_seconds || {});
  chart($("lagchart"), st.history, [{color: "#111827", value: (p) => p.deliverable_lag_seconds || 0}]
    .concat(names.map((n, i) => ({color: colors[i % colors.length], value: (p) => (p.consumer_lag_seconds || {})[n] || 0}))));
  chart($("ratechart"), st.history, [{color: "#059669", value: (p) => p.delivered_per_second}]);
}

refresh();
setInterval(refresh, 2000);
