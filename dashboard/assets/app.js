// Polls /api/state and renders it; no dependencies.
"use strict";
const $ = (id) => document.getElementById(id);
const fmt = (n, d = 1) => (n === undefined || n === null) ? "–" : Number(n).toFixed(d);
const esc = (s) => String(s ?? "").replace(/[&<>"]/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}[c]));

// rows fills a table body; with errLast the last cell is an error message.
function rows(id, items, cells, errLast = false) {
  $(id).querySelector("tbody").innerHTML = (items || []).map((it) => {
    const cs = cells(it);
    return "<tr>" + cs.map((c, i) => `<td${errLast && i === cs.length - 1 ? ' class="err"' : ""}>${esc(c)}</td>`).join("") + "</tr>";
  }).join("");
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
  const s = st.snapshot;
  if (!s) { $("updated").textContent = "waiting for the first sample…"; return; }
  $("updated").textContent = "updated " + new Date(s.at).toLocaleTimeString();
  $("lag").textContent = fmt(s.oldest_pending_age_seconds) + " s";
  $("throughput").textContent = fmt(s.delivered_per_second) + " /s";
  $("backlog").textContent = s.pending;
  $("failed").textContent = s.failed;
  $("blocked").textContent = s.blocked_count;
  const drift = st.drift || [];
  $("drift").hidden = drift.length === 0;
  $("drift").innerHTML = drift.map(esc).join("<br>");
  rows("consumers", s.consumers, (c) => [c.name, c.type, (c.indexes || []).join(", "), fmt(c.oldest_pending_age_seconds), c.pending, c.failed]);
  rows("failures", s.failures, (f) => [f.id, f.event_type, f.aggregate_type + "/" + (f.aggregate_id || "–"), f.attempts, f.last_error], true);
  rows("blockedtbl", s.blocked, (b) => [b.aggregate_type + "/" + b.aggregate_id, b.head_id, b.status, b.waiting, b.last_error], true);
  rows("partitions", st.partitions, (p) => [p.owner, (p.partitions || []).length + " (" + (p.partitions || []).join(",") + ")", new Date(p.heartbeat).toLocaleTimeString()]);
  const colors = ["#2563eb", "#dc2626", "#059669", "#d97706", "#7c3aed"];
  const names = Object.keys((st.history[st.history.length - 1] || {}).consumer_lag_seconds || {});
  chart($("lagchart"), st.history, [{color: "#111827", value: (p) => p.oldest_pending_age_seconds}]
    .concat(names.map((n, i) => ({color: colors[i % colors.length], value: (p) => (p.consumer_lag_seconds || {})[n] || 0}))));
  chart($("ratechart"), st.history, [{color: "#059669", value: (p) => p.delivered_per_second}]);
}

refresh();
setInterval(refresh, 2000);
