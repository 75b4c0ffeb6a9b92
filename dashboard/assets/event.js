// An event's own page (/events/{id}): its row with the payload formatted,
// the whole last error, every routed consumer's delivery, the events
// waiting behind it, and the actions. Uses common.js.
"use strict";
const eventID = decodeURIComponent(location.pathname.replace(/\/+$/, "").split("/").pop());

// deliveryState maps a consumer's state of the event to a health colour.
const deliveryColour = {done: "healthy", pending: "degraded", failed: "failing", skipped: "paused"};

async function loadEvent() {
  let d;
  try {
    const st = await getJSON(base + "api/state");
    enableActions(st.actions);
  } catch (e) { /* the page works read-only without the state */ }
  try { d = await getJSON(base + "api/events/" + encodeURIComponent(eventID)); } catch (e) {
    $("notfound").hidden = false;
    $("notfound").textContent = "Event " + eventID + ": " + e.message;
    $("event").hidden = true;
    return;
  }
  const e = d.event;
  document.title = "event " + e.id + " · searchsync";
  $("event").hidden = false;
  $("detailtitle").textContent = "Event " + e.id + " · " + e.event_type + " · " + e.status;
  $("eventstatus").innerHTML = pill(deliveryColour[e.status === "dispatched" ? "done" : e.status] || "unknown", e.status);
  const when = (t) => t ? new Date(t).toLocaleString() : "–";
  const fields = [
    ["aggregate", e.aggregate_type + "/" + (e.aggregate_id || "–")], ["tenant", e.tenant_id || "–"],
    ["schema version", e.schema_version], ["status", e.status], ["attempts", e.attempts],
    ["created", when(e.created_at) + (e.created_by ? " by " + e.created_by : "")], ["available at", when(e.available_at)],
    ["dispatched at", when(e.dispatched_at)], ["correlation id", e.correlation_id || "–"], ["audit log id", e.audit_log_id || "–"],
  ];
  $("fields").querySelector("tbody").innerHTML = fields.map(([k, v]) => `<tr><th>${esc(k)}</th><td>${esc(v)}</td></tr>`).join("");
  $("lasterror").textContent = e.last_error || "none";
  $("deliveries").querySelector("tbody").innerHTML = (d.consumers || []).map((c) =>
    `<tr><td>${esc(c.consumer)}</td><td>${pill(deliveryColour[c.state] || "unknown", c.shared ? "the outbox row's state, shared" : "its own delivery row")} ${esc(c.state)}${c.shared ? " <span class=\"muted\">(shared)</span>" : ""}</td>` +
    `<td>${esc(c.attempts)}</td><td>${esc(when(c.available_at))}</td><td>${esc(when(c.delivered_at))}</td><td><pre class="wrap">${esc(c.last_error || "")}</pre></td></tr>`).join("");
  $("detailacts").innerHTML = actButtons(e) + aggButtons(e);
  $("waiting").querySelector("tbody").innerHTML = (d.waiting || []).map((w) =>
    `<tr><td>${eventLink(w.id)}</td><td>${esc(w.event_type)}</td><td>${esc(w.status)}</td><td>${esc(when(w.created_at))}</td></tr>`).join("");
  $("detailjson").textContent = JSON.stringify(e, null, 2);
}

acts.after = loadEvent;
loadEvent();
