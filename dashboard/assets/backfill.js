// The Backfills panel: /api/backfill, one row per declared backfill source
// with its newest job (state, rows of total, rate, ETA, why it waits or was
// interrupted), and, with the operator token, Start (or Resume), Abort and
// Dry run. A backfill started here runs in the relay's process. It polls
// every 5 s, every 2 s while a job runs and the panel is in view; not at all
// while the tab is hidden. Uses $, esc, fmt, age and post of common.js.
"use strict";
const backfillPanel = {running: false, visible: true, actions: false};

function bfMsg(text, ok) {
  $("backfillmsg").textContent = text;
  $("backfillmsg").className = ok ? "okmsg" : "errmsg";
}

// backfillProgress is the progress cell: a bar with rows of total while the
// job runs or is interrupted, the result once it ended.
function backfillProgress(j) {
  if (!j) return "never run";
  const pct = j.percent === undefined || j.percent === null ? "" : ` (${fmt(j.percent, 0)}%)`;
  const rows = `${j.rows}/${j.total} rows${pct}`;
  const ended = j.finished_at ? " " + age((Date.now() - new Date(j.finished_at).getTime()) / 1000) + " ago" : "";
  if (j.state === "succeeded") return esc(`succeeded${ended}: ${j.rows} rows in ${j.chunks} chunks, ${fmt(j.seconds)} s` + (j.resumed ? " (resumed)" : ""));
  if (j.state === "aborted") return esc(`aborted${ended} after ${rows}` + (j.error ? ": " + j.error : ""));
  const bar = j.percent === undefined || j.percent === null ? "" :
    `<span class="bar" data-percent="${esc(fmt(j.percent, 1))}"><span style="width:${esc(fmt(j.percent, 1))}%"></span></span>`;
  return bar + esc(`phase ${j.phase} · ${rows}`);
}

// backfillWhy is what holds a job: its waiting reason while it runs, what
// interrupted it.
function backfillWhy(j) {
  if (!j) return "";
  if (j.state === "running" && j.waiting) return "waiting: " + j.waiting;
  if (j.state === "interrupted") return "interrupted" + (j.interrupted_by ? " by: " + j.interrupted_by : " (stopped or killed): Start resumes it");
  return "";
}

function backfillButtons(row) {
  if (!backfillPanel.actions || !row.declared) return "";
  const j = row.job, name = esc(row.source.name);
  const live = j && (j.state === "running" || j.state === "interrupted");
  const start = j && j.state === "interrupted" ? "Resume" : "Start";
  let b = `<button class="act" data-bf="dry-run" data-source="${name}">Dry run</button>`;
  if (!j || j.state !== "running") b += `<button class="act" data-bf="start" data-source="${name}">${start}…</button>`;
  if (live) b += `<button class="act" data-bf="abort" data-source="${name}">Abort…</button>`;
  return b;
}

function renderBackfill(r) {
  const list = r.sources || [];
  backfillPanel.actions = !!r.actions;
  $("backfillnone").hidden = list.length > 0;
  $("backfill").hidden = list.length === 0;
  backfillPanel.running = list.some((s) => s.job && s.job.state === "running");
  $("backfillinfo").textContent = backfillPanel.running ? "a backfill is running" : "newest job per source";
  $("backfill").querySelector("tbody").innerHTML = list.map((s) => {
    const j = s.job;
    const jobCell = j ? `job ${j.id} · ${j.state}` + (j.here ? " · here" : j.owner ? " · " + j.owner : "") : "–";
    const cells = [
      `<td title="${esc(s.source.query)}">${esc(s.source.name)}${s.declared ? "" : " (not declared)"}</td>`,
      `<td class="job${j ? " state-" + esc(j.state) : ""}">${esc(jobCell)}</td>`,
      `<td class="progress">${backfillProgress(j)}</td>`,
      `<td>${j && j.state === "running" ? esc(fmt(j.rate_per_s, 0) + " rows/s") : ""}</td>`,
      `<td>${j && j.state === "running" ? esc(j.eta || "–") : ""}</td>`,
      `<td class="why">${esc(backfillWhy(j))}</td>`,
      `<td>${j ? esc(new Date(j.finished_at || j.updated_at || j.started_at).toLocaleTimeString()) : ""}</td>`,
      `<td>${backfillButtons(s)}</td>`,
    ];
    return `<tr data-source="${esc(s.source.name)}"${j ? ` data-state="${esc(j.state)}" data-phase="${esc(j.phase)}"` : ""}>${cells.join("")}</tr>`;
  }).join("");
}

async function loadBackfill() {
  try {
    renderBackfill(await getJSON("api/backfill"));
  } catch (e) {
    $("backfillinfo").textContent = "backfill jobs unavailable: " + e.message;
  }
}

// bfPost sends a backfill action with the token; null when it failed (the
// panel says why).
async function bfPost(source, action, req) {
  if (!$("token").value) { bfMsg("enter the operator token (above the events list) first", false); return null; }
  const a = await post("api/backfill/" + encodeURIComponent(source) + "/" + action, req || {});
  if (!a) return null;
  if (!a.r.ok) { bfMsg(action + " of " + source + " refused: " + (a.body.error || "HTTP " + a.r.status), false); return null; }
  return a.body;
}

function showPlan(p) {
  const lines = [`dry run of ${p.source.name}: ${p.rows} rows now, one snapshot event each (nothing written)`];
  if (p.resume) lines.push(`a start resumes job ${p.resume.id} after ${p.resume.rows} rows`);
  for (const s of p.sample || []) {
    lines.push(`key ${s.key}  ${s.event_type}  ${s.aggregate_type}/${s.aggregate_id}  → ${s.consumers.length ? s.consumers.join(", ") : "no consumer (skipped)"}`);
    lines.push("  " + JSON.stringify(s.payload));
  }
  $("backfillplan").textContent = lines.join("\n");
  $("backfillplan").hidden = false;
}

// confirmThen shows the page's confirmation with text; confirmed, it runs f.
function confirmThen(text, yes, f) {
  $("confirmtext").textContent = text;
  $("confirm-yes").textContent = yes;
  $("confirmbox").hidden = false;
  acts.confirm = f;
}

async function backfillAct(action, source) {
  if (action === "dry-run") {
    const p = await bfPost(source, "dry-run", {sample: 3});
    if (p) { showPlan(p); bfMsg("dry run of " + source + ": " + p.rows + " rows", true); }
    return;
  }
  if (action === "abort") {
    confirmThen(`Abort the backfill of ${source}? The events it wrote stay; the next start begins anew.`, "Abort", async () => {
      const a = await bfPost(source, "abort", {});
      if (a) { bfMsg(a.message, true); loadBackfill(); }
    });
    return;
  }
  const p = await bfPost(source, "dry-run", {sample: 1});
  if (!p) return;
  const what = p.resume ? `Resume the backfill of ${source} after ${p.resume.rows} of ${p.resume.total} rows?` :
    `Backfill ${source}: ${p.rows} rows as snapshot events into the outbox?`;
  confirmThen(what, p.resume ? "Resume" : "Start", async () => {
    const a = await bfPost(source, "start", {});
    if (a) { bfMsg(a.message, true); loadBackfill(); }
  });
}

document.addEventListener("click", (e) => {
  const t = e.target;
  if (t.dataset && t.dataset.bf) backfillAct(t.dataset.bf, t.dataset.source);
});

function scheduleBackfill() {
  const fast = backfillPanel.running && backfillPanel.visible;
  setTimeout(async () => {
    if (!document.hidden) await loadBackfill();
    scheduleBackfill();
  }, fast ? 2000 : 5000);
}

if ("IntersectionObserver" in window) {
  new IntersectionObserver((es) => { for (const e of es) backfillPanel.visible = e.isIntersecting; }).observe($("backfillsec"));
}
loadBackfill().then(scheduleBackfill);
