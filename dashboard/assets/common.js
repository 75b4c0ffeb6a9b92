// What the console's pages share: formatting, the health pills, JSON
// requests, and the operator actions (retry, ack, skip of one event, an
// aggregate or a filter: a dry run first, whose count a confirmation shows,
// with the token in a header, never in a URL). Loaded before app.js (the
// console) and event.js (an event's page).
"use strict";
const $ = (id) => document.getElementById(id);
const fmt = (n, d = 1) => (n === undefined || n === null) ? "–" : Number(n).toFixed(d);
const esc = (s) => String(s ?? "").replace(/[&<>"]/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}[c]));

// base is the console's root, relative to this page: "" on the console,
// "../" on an event's page (/events/{id}), so that a console served under a
// proxy's path prefix keeps working.
const base = document.body.dataset.base || "";

// age prints seconds as 12s, 3m4s, 2h5m.
function age(sec) {
  if (!sec) return "–";
  sec = Math.round(sec);
  if (sec < 60) return sec + "s";
  if (sec < 3600) return Math.floor(sec / 60) + "m" + (sec % 60) + "s";
  return Math.floor(sec / 3600) + "h" + Math.floor((sec % 3600) / 60) + "m";
}

// pill is a coloured health word (healthy, degraded, failing, paused, down,
// unknown) with its reason as a tooltip.
function pill(state, reason) {
  const s = state || "unknown";
  return `<span class="pill h-${esc(s)}" data-health="${esc(s)}"${reason ? ` title="${esc(reason)}"` : ""}>${esc(s)}</span>`;
}

// eventLink is the link to an event's own page.
const eventLink = (id) => `<a class="evlink" href="${base}events/${encodeURIComponent(id)}" data-open="${esc(id)}">${esc(id)}</a>`;

async function getJSON(url) {
  const r = await fetch(url, {cache: "no-store"});
  const body = await r.json().catch(() => ({}));
  if (!r.ok) throw new Error(body.error || "HTTP " + r.status);
  return body;
}

function msg(text, ok) {
  $("actionmsg").textContent = text;
  $("actionmsg").className = ok ? "okmsg" : "errmsg";
}

// The actions. acts.enabled is set from /api/state; acts.after runs after a
// change (the page reloads what it shows).
const acts = {enabled: false, confirm: null, after: () => {}};
const actionNames = {retry: "Retry", ack: "Ack", skip: "Skip"};

// enableActions shows the token bar (or the read-only note) and fills in
// the token and name this tab used before.
function enableActions(on) {
  acts.enabled = !!on;
  $("actionsbar").hidden = !acts.enabled;
  $("readonly").hidden = acts.enabled;
  $("token").value = $("token").value || sessionStorage.getItem("searchsync-token") || "";
  $("operator").value = $("operator").value || sessionStorage.getItem("searchsync-operator") || "";
}

function actButtons(e) {
  if (!acts.enabled || e.status !== "failed") return "";
  return Object.entries(actionNames).map(([a, label]) => `<button class="act" data-act="${a}" data-id="${e.id}">${label}</button>`).join("");
}

// aggButtons: the actions on every event of the event's aggregate.
function aggButtons(e) {
  if (!acts.enabled || !e.aggregate_id) return "";
  return Object.entries(actionNames).map(([a, label]) =>
    `<button class="act" data-agg-act="${a}" data-type="${esc(e.aggregate_type)}" data-aid="${esc(e.aggregate_id)}">${label} this aggregate</button>`).join("");
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
  const a = await post(base + "api/events/" + id + "/" + action, {});
  if (!a) return;
  const {r, body} = a;
  if (!r.ok) { msg(action + " of event " + id + " refused: " + (body.error || "HTTP " + r.status), false); return; }
  msg(action + " of event " + id + ": " + body.count + " event(s) changed" + (body.job_id ? ", recorded as job " + body.job_id : "") +
    ((body.events || [])[0] ? " (" + body.events[0].outcome + ")" : ""), true);
  acts.after();
}

// actMany runs an action on an aggregate or a filter (sel: the part of
// the /api/actions request that selects): a dry run first, then the
// confirmation with its count and what would happen; confirmed, the action
// itself.
async function actMany(action, sel, what) {
  const dry = await post(base + "api/actions", Object.assign({action, dry_run: true}, sel));
  if (!dry) return;
  if (!dry.r.ok) { msg(action + " of " + what + " refused: " + (dry.body.error || "HTTP " + dry.r.status), false); return; }
  const n = dry.body.count;
  if (!n) { msg("nothing to " + action + ": no event of " + what + " qualifies", false); return; }
  const ids = dry.body.ids || [];
  $("confirmtext").textContent = actionNames[action] + " " + n + " event" + (n === 1 ? "" : "s") + " of " + what + "? (" +
    ids.slice(0, 10).join(", ") + (n > 10 ? ", …" : "") + ")";
  $("confirm-yes").textContent = actionNames[action] + " " + n;
  $("confirmbox").hidden = false;
  acts.confirm = async () => {
    const a = await post(base + "api/actions", Object.assign({action}, sel));
    if (!a) return;
    if (!a.r.ok) { msg(action + " of " + what + " refused: " + (a.body.error || "HTTP " + a.r.status), false); return; }
    msg(action + " of " + what + ": " + a.body.count + " event(s) changed" + (a.body.job_id ? ", recorded as job " + a.body.job_id : ""), true);
    acts.after();
  };
}

document.addEventListener("click", (e) => {
  const t = e.target;
  if (t.dataset.act) act(t.dataset.act, t.dataset.id);
  if (t.dataset.aggAct) actMany(t.dataset.aggAct, {aggregate: {type: t.dataset.type, id: t.dataset.aid}}, "aggregate " + t.dataset.type + "/" + t.dataset.aid);
});
$("confirm-yes").addEventListener("click", () => { $("confirmbox").hidden = true; const f = acts.confirm; acts.confirm = null; if (f) f(); });
$("confirm-no").addEventListener("click", () => { $("confirmbox").hidden = true; acts.confirm = null; msg("cancelled; nothing changed", true); });
