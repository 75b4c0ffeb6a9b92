// The Reindex panel: /api/reindex, one row per alias (its live index, the
// definition's drift, and its running or latest recent reindex). It polls
// every 5 s, and at the page's pace (2 s) while a job runs and the panel is
// in view; not at all while the tab is hidden. Uses $, esc, fmt and age of
// app.js.
"use strict";
const reindexPanel = {running: false, visible: true, timer: 0};

// shortHash prints the first 12 characters of a definition hash.
const shortHash = (h) => h ? h.slice(0, 12) : "–";

// reindexDrift is the definition column: none, differs (with the reason) or
// unknown (why), and the hashes.
function reindexDrift(a) {
  const hashes = a.hash || a.live_hash ? ` (${shortHash(a.hash)} · live ${shortHash(a.live_hash)})` : "";
  if (a.drift === "differs" && a.projection_changes && a.projection_changes.length) {
    return "differs: " + a.projection_changes.join("; ") + hashes;
  }
  if (a.drift === "differs") return "differs" + hashes;
  if (a.drift === "none") return "matches" + hashes;
  return a.message || "unknown";
}

// reindexProgress is the progress cell of a job: a bar with the phase and
// its figures while it runs, the result once it ended.
function reindexProgress(j) {
  if (!j) return "";
  const docs = `docs ${j.docs_seeded}${j.docs_total ? "/" + j.docs_total : ""}`;
  const pct = j.percent === undefined || j.percent === null ? "" : ` (${fmt(j.percent, 0)}%)`;
  if (j.state === "running") {
    let what = "phase " + j.phase;
    if (j.phase === "seed") what += " · " + docs + pct;
    else if (j.phase === "replay") what += ` · id ${j.last_id} of ${j.watermark || j.outbox_head} (head ${j.outbox_head})${pct} · ${j.events_replayed} events`;
    else what += " · " + docs;
    if (j.waiting) what += " · waiting: " + j.waiting;
    if (j.owed) what += ` · waiting for the live consumers: ${j.owed} events`;
    const bar = j.percent === undefined || j.percent === null ? "" :
      `<span class="bar" data-percent="${esc(fmt(j.percent, 1))}"><span style="width:${esc(fmt(j.percent, 1))}%"></span></span>`;
    return bar + esc(what);
  }
  const ended = j.finished_at ? " " + age((Date.now() - new Date(j.finished_at).getTime()) / 1000) + " ago" : "";
  if (j.state === "succeeded") {
    return esc(`succeeded${ended} in ${fmt(j.seconds)} s → ${j.new_index || j.target} · ${docs} seeded · ${j.events_replayed} events replayed`);
  }
  return esc(`${j.state}${ended} in phase ${j.phase}` + (j.error ? ": " + j.error : ""));
}

function renderReindex(r) {
  const list = r.aliases || [];
  $("reindexnone").hidden = list.length > 0;
  $("reindex").hidden = list.length === 0;
  reindexPanel.running = list.some((a) => a.job && a.job.state === "running");
  $("reindexinfo").textContent = reindexPanel.running ? "a reindex is running" : "jobs of the last 24 h";
  $("reindex").querySelector("tbody").innerHTML = list.map((a) => {
    const j = a.job;
    const jobCell = j ? `job ${j.id} · ${j.state}` + (j.owner ? ` · ${j.owner}` : "") : "–";
    const cells = [
      `<td>${esc(a.alias)}</td>`,
      `<td>${esc(a.index || "–")}</td>`,
      `<td class="drift drift-${esc(a.drift)}" title="${esc(a.message || "")}">${esc(reindexDrift(a))}</td>`,
      `<td class="job${j ? " state-" + esc(j.state) : ""}" title="${esc(j && j.error || "")}">${esc(jobCell)}</td>`,
      `<td class="progress">${reindexProgress(j)}</td>`,
      `<td>${j && j.state === "running" ? esc(fmt(j.rate_per_s, 0) + " docs/s") : ""}</td>`,
      `<td>${j && j.state === "running" ? esc(j.eta || "–") : ""}</td>`,
      `<td>${j ? esc(new Date(j.finished_at || j.updated_at || j.started_at).toLocaleTimeString()) : ""}</td>`,
    ];
    return `<tr data-alias="${esc(a.alias)}" data-drift="${esc(a.drift)}"${j ? ` data-state="${esc(j.state)}" data-phase="${esc(j.phase)}"` : ""}>${cells.join("")}</tr>`;
  }).join("");
}

async function loadReindex() {
  try {
    const r = await fetch("api/reindex", {cache: "no-store"});
    if (!r.ok) throw new Error("HTTP " + r.status);
    renderReindex(await r.json());
  } catch (e) {
    $("reindexinfo").textContent = "reindex jobs unavailable: " + e.message;
  }
}

function scheduleReindex() {
  const fast = reindexPanel.running && reindexPanel.visible;
  reindexPanel.timer = setTimeout(async () => {
    if (!document.hidden) await loadReindex();
    scheduleReindex();
  }, fast ? 2000 : 5000);
}

if ("IntersectionObserver" in window) {
  new IntersectionObserver((es) => { for (const e of es) reindexPanel.visible = e.isIntersecting; }).observe($("reindexsec"));
}
loadReindex().then(scheduleReindex);
