// An event's own page (/events/{id}): its row with the payload formatted,
// the whole last error, every routed consumer's delivery, what the search
// consumers would write for it (the dry run), the events waiting behind it,
// and the actions. Uses common.js.
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
  $("projection").innerHTML = projectionHTML(d.projection);
}

// projectionHTML renders the dry run (GET /api/events/{id}'s projection,
// projections/dryrun.Report): per routed search consumer the upcast payload,
// the result, the current document, the write or the poison error.
function projectionHTML(p) {
  if (!p) return `<p class="muted">This process does not run the dry run.</p>`;
  if (!p.consumers.length) {
    return `<p class="muted">${p.routed.length ? "No search consumer among the consumers it is routed to (" + esc(p.routed.join(", ")) + ")." : "No route takes this event."}</p>`;
  }
  const json = (v) => `<pre class="wrap">${esc(JSON.stringify(v, null, 2))}</pre>`;
  return p.consumers.map((c) => {
    let h = `<h4>${esc(c.consumer)} <span class="muted">(search consumer of ${esc(c.indexes.join(", "))})</span></h4>`;
    if (c.skipped) return h + `<p class="muted" data-testid="projection-skipped">${esc(c.skipped)}</p>`;
    if (c.upcast) {
      h += `<p>Payload ${c.upcast.from === c.upcast.to ? "at schema_version " + esc(c.upcast.to) + " (no upcaster runs)" : "upcast from schema_version " + esc(c.upcast.from) + " to " + esc(c.upcast.to)}</p>` + json(c.upcast.payload);
    }
    if (c.result) {
      const r = c.result;
      h += `<p>Projection <b>${esc(r.projection)}</b> → ${esc(r.index)}/${esc(r.id)}, version ${esc(r.version)}, op <b>${esc(r.op)}</b>` +
        (r.op === "index" ? (r.partial ? ", partial (merged onto the current document)" : ", full state") : "") + `</p>`;
    }
    if (c.error) {
      if (!c.result && c.projection) h += `<p>Projection <b>${esc(c.projection)}</b></p>`;
      return h + `<p class="warn" data-testid="projection-error">Poison${c.error.path ? " at <code>" + esc(c.error.path) + "</code>" : ""} (${esc(c.error.stage)}): the consumer marks the event failed with</p><pre class="wrap">${esc(c.error.message)}</pre>`;
    }
    if (c.current) {
      h += c.current.error ? `<p class="warn">Current document unreadable (${esc(c.current.error)}): folded onto no document.</p>` :
        c.current.found ? `<p>Current document (${esc(c.current.from)}), version ${esc(c.current.version)}</p>` + json(c.current.doc) :
          `<p class="muted">${esc(c.current.from)} has no document ${esc(c.result.id)}.</p>`;
    }
    const w = c.write;
    if (w) {
      h += w.op === "none" ? `<p data-testid="projection-write">Writes nothing (${esc(w.step)}).</p>` :
        `<p data-testid="projection-write">Writes: <b>${esc(w.op)}</b> ${esc(w.alias)}/${esc(w.id)} version ${esc(w.version)}${w.same_version ? " (external_gte)" : ""}</p>` + (w.doc ? json(w.doc) : "");
      if (w.note) h += `<p class="muted">${esc(w.note)}</p>`;
    }
    return h;
  }).join("");
}

acts.after = loadEvent;
loadEvent();
