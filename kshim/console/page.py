"""The console's page: one self-contained HTML document (no external scripts or fonts; the
console works offline). It opens /events (server-sent events) and redraws from each state; the
buttons POST /action. Elements carry data-* attributes with the numbers they draw, which
compat_tests/test_console.py reads in a real browser."""
from __future__ import annotations

PAGE = r"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>kshim console</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
  :root { --committed: #2e7d32; --pending: #81c784; --uncommitted: #f57c00; --deleted: #cfd8dc;
          --bg: #fafafa; --line: #e0e0e0; --muted: #607d8b; }
  body { font: 14px/1.4 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0; background: var(--bg); color: #263238; }
  header { background: #263238; color: #eceff1; padding: 10px 20px; display: flex; gap: 24px; align-items: baseline; }
  header h1 { font-size: 18px; margin: 0; }
  header .meta { color: #b0bec5; }
  #live { margin-left: auto; }
  #live.on::before { content: "\25CF "; color: #66bb6a; }
  #live.off::before { content: "\25CF "; color: #ef5350; }
  main { padding: 12px 20px; display: grid; gap: 16px; }
  section { background: #fff; border: 1px solid var(--line); border-radius: 6px; padding: 10px 14px; }
  h2 { font-size: 15px; margin: 0 0 8px; }
  table { border-collapse: collapse; width: 100%; }
  th, td { text-align: left; padding: 4px 8px; border-bottom: 1px solid var(--line); vertical-align: top; }
  th { color: var(--muted); font-weight: 600; font-size: 12px; text-transform: uppercase; }
  button { font: inherit; font-size: 12px; padding: 2px 8px; margin: 0 2px; border: 1px solid #90a4ae;
           border-radius: 4px; background: #eceff1; cursor: pointer; }
  button:disabled { opacity: .35; cursor: default; }
  .state-running { color: var(--committed); } .state-paused { color: var(--uncommitted); }
  .state-dead { color: #c62828; }
  .state-isolated { color: var(--uncommitted); }
  #fault-form input.wide { width: 30em; }  /* the longest error name, whole */
  .partition { margin: 8px 0 14px; }
  .partition .title { font-weight: 600; }
  .partition .title span { font-weight: normal; color: var(--muted); margin-left: 10px; }
  .replica { display: grid; grid-template-columns: 170px 1fr 330px; gap: 10px; align-items: center; margin: 3px 0; }
  .replica .who { font-family: ui-monospace, monospace; font-size: 12px; }
  .bar { position: relative; height: 18px; background: #f5f5f5; border: 1px solid var(--line); border-radius: 3px; overflow: hidden; }
  .bar div { position: absolute; top: 0; bottom: 0; }
  .seg-deleted { background: var(--deleted); }
  .seg-committed { background: var(--committed); }
  .seg-pending { background: var(--pending); }
  .seg-uncommitted { background: repeating-linear-gradient(45deg, var(--uncommitted), var(--uncommitted) 4px, #ffb74d 4px, #ffb74d 8px); }
  .mark-hw { border-left: 2px solid #1b5e20; }
  .replica.out .bar { opacity: .45; }
  .replica.stale .bar { filter: grayscale(1); opacity: .5; }
  .nums { font-family: ui-monospace, monospace; font-size: 12px; color: #37474f; }
  .tag { display: inline-block; font-size: 11px; padding: 0 5px; border-radius: 3px; margin-left: 4px; }
  .tag.leader { background: #1565c0; color: #fff; } .tag.isr { background: #c8e6c9; }
  .tag.out { background: #ffe0b2; } .tag.stale { background: #eceff1; color: var(--muted); }
  .legend span { margin-right: 14px; font-size: 12px; }
  .legend i { display: inline-block; width: 14px; height: 10px; margin-right: 4px; vertical-align: middle; }
  .muted { color: var(--muted); }
  #message { font-size: 12px; }
  #message.err { color: #c62828; }
</style>
</head>
<body>
<header>
  <h1>kshim console</h1>
  <span class="meta" id="cluster"></span>
  <span class="meta" id="controller"></span>
  <span id="message"></span>
  <span id="live" class="off">connecting</span>
</header>
<main>
<section id="brokers-section"><h2>Brokers</h2><table id="brokers"></table></section>
<section id="partitions-section">
  <h2>Partitions <label class="muted" style="font-weight:normal;font-size:12px;margin-left:12px">
    <input type="checkbox" id="internal"> show internal topics</label></h2>
  <div class="legend">
    <span><i class="seg-committed"></i>COMMITTED and stable (below the last stable offset)</span>
    <span><i class="seg-pending"></i>COMMITTED, in an open transaction (last stable offset to high watermark)</span>
    <span><i class="seg-uncommitted"></i>UNCOMMITTED (high watermark to log end)</span>
    <span><i class="seg-deleted"></i>deleted on this replica (below its log start)</span>
  </div>
  <div id="partitions"></div>
</section>
<section id="groups-section"><h2>Consumer groups</h2><div id="groups"></div></section>
<section id="transactions-section"><h2>Open transactions</h2><div id="transactions"></div></section>
<section id="schemas-section" hidden><h2>Schema registry</h2><div id="schemas"></div></section>
<section id="faults-section"><h2>Fault rules</h2>
  <form id="fault-form" class="muted">
    <select id="f-action"><option>error</option><option>delay</option><option>drop</option><option>timeout</option></select>
    api <input id="f-api" size="10" placeholder="Produce">
    topic <input id="f-topic" size="10">
    partition <input id="f-partition" size="3">
    client id <input id="f-client" size="8">
    error <input id="f-error" class="wide" value="NOT_LEADER_OR_FOLLOWER">
    delay ms <input id="f-delay" size="6" value="200">
    count <input id="f-count" size="3">
    duration ms <input id="f-duration" size="7">
    broker <input id="f-node" size="3" placeholder="all">
    <button type="submit" id="f-add">add rule</button>
    <button type="button" data-fault-clear="all">clear all</button>
  </form>
  <div id="faults"></div></section>
</main>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
const esc = (v) => String(v ?? "-").replace(/[&<>"']/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]));
let state = null;

function processClass(p) {
  if (p === "running" || p === "external") return "state-running";
  if (p === "paused") return "state-paused";
  return "state-dead";
}

function canDo(action, b) {
  const up = b.process === "running" || b.process === "paused";
  switch (action) {
    case "kill": return up;
    case "start": return !up && b.process !== "external";
    case "pause": return b.process === "running";
    case "resume": return b.process === "paused";
    case "isolate": return !b.isolated;
    case "heal": return b.isolated;
  }
  return false;
}

function renderBrokers(s) {
  const acts = s.actions || [];
  let h = "<tr><th>broker</th><th>address</th><th>pid</th><th>process</th><th>registered</th><th>isolated</th><th>epoch</th><th></th></tr>";
  for (const b of s.brokers) {
    const buttons = acts.map((a) => `<button data-action="${a}" data-node="${b.id}" ${canDo(a, b) ? "" : "disabled"}>${a}</button>`).join("");
    h += `<tr data-broker="${b.id}" data-process="${esc(b.process)}" data-alive="${b.alive}" data-isolated="${b.isolated}">` +
         `<td>${b.id}</td><td>${esc(b.host)}:${b.port}</td><td>${b.pid || "-"}</td>` +
         `<td class="${processClass(b.process)}">${esc(b.process)}</td>` +
         `<td class="${b.alive ? "" : "state-dead"}">${b.alive ? "alive" : "fenced"}</td>` +
         `<td class="${b.isolated ? "state-isolated" : ""}">${b.isolated ? "yes" : "no"}</td><td>${b.epoch}</td><td>${buttons}</td></tr>`;
  }
  if (s.mode === "cluster" && acts.includes("kill")) {
    const c = s.controller || {};
    h += `<tr data-broker="controller"><td>controller</td><td></td><td>${c.pid || "-"}</td>` +
         `<td class="${processClass(c.state)}">${esc(c.state)}</td><td colspan="3">restarts ${c.restarts ?? 0}</td>` +
         `<td><button data-action="kill" data-node="controller" ${c.state === "running" ? "" : "disabled"}>kill</button></td></tr>`;
  }
  $("brokers").innerHTML = h;
}

// a partition's bars share one scale, from the lowest log start of its replicas to the highest log end
function bar(r, from, to) {
  if (r.log_end_offset == null) return '<div class="bar"></div>';
  const pct = (v) => to > from ? 100 * (v - from) / (to - from) : 0;
  const leo = r.log_end_offset, hw = Math.min(r.high_watermark ?? from, leo);
  const start = Math.max(from, Math.min(r.log_start_offset ?? from, hw)), lso = Math.min(r.last_stable_offset ?? hw, hw);
  const seg = (cls, a, b) => b > a ? `<div class="${cls}" style="left:${pct(a)}%;width:${pct(b) - pct(a)}%"></div>` : "";
  return '<div class="bar">' + seg("seg-deleted", from, start) + seg("seg-committed", start, lso) +
         seg("seg-pending", lso, hw) + seg("seg-uncommitted", hw, leo) +
         `<div class="mark-hw" style="left:${pct(hw)}%"></div></div>`;
}

function renderPartitions(s) {
  const internal = $("internal").checked;
  const shown = s.partitions.filter((p) => internal || !p.topic.startsWith("__"));
  const hidden = s.partitions.length - shown.length;
  let h = hidden ? `<p class="muted">${hidden} partitions of internal topics hidden</p>` : "";
  if (!shown.length) { $("partitions").innerHTML = h || '<p class="muted">no topics yet</p>'; return; }
  for (const p of shown) {
    const known = p.replica_states.filter((r) => r.log_end_offset != null);
    const starts = known.filter((r) => r.log_start_offset != null).map((r) => r.log_start_offset);
    const from = starts.length ? Math.min(...starts) : 0;
    const to = Math.max(from + 1, ...known.map((r) => r.log_end_offset));
    h += `<div class="partition" data-topic="${esc(p.topic)}" data-partition="${p.partition}" data-leader="${p.leader}" data-isr="${p.isr.join(",")}">` +
         `<div class="title">${esc(p.topic)}-${p.partition}<span>leader ${p.leader >= 0 ? p.leader : "none"} ` +
         `(epoch ${p.leader_epoch}) &middot; replicas [${p.replicas.join(", ")}] &middot; ISR [${p.isr.join(", ")}]</span></div>`;
    for (const r of p.replica_states) {
      const cls = ["replica", r.in_isr ? "in" : "out", r.stale ? "stale" : ""].join(" ");
      const tags = (r.is_leader ? '<span class="tag leader">leader</span>' : "") +
                   (r.in_isr ? '<span class="tag isr">in ISR</span>' : '<span class="tag out">out of ISR</span>') +
                   (r.stale ? '<span class="tag stale">not answering</span>' : "");
      h += `<div class="${cls}" data-node="${r.node}" data-in-isr="${r.in_isr}" data-stale="${r.stale}" ` +
           `data-log-start="${r.log_start_offset ?? ""}" data-lso="${r.last_stable_offset ?? ""}" ` +
           `data-hw="${r.high_watermark ?? ""}" data-leo="${r.log_end_offset ?? ""}">` +
           `<div class="who">broker ${r.node}${tags}</div>${bar(r, from, to)}` +
           `<div class="nums">start ${esc(r.log_start_offset)} &middot; LSO ${esc(r.last_stable_offset)} &middot; ` +
           `HW ${esc(r.high_watermark)} &middot; LEO ${esc(r.log_end_offset)}</div></div>`;
    }
    h += "</div>";
  }
  $("partitions").innerHTML = h;
}

function renderGroups(s) {
  let h = "";
  for (const g of s.groups) {
    const members = g.members.map((m) => {
      const a = m.assignment ? Object.entries(m.assignment).map(([t, ps]) => `${esc(t)} [${ps.join(", ")}]`).join("; ") : "-";
      return `${esc(m.client_id)} <span class="muted">${esc(m.host)}</span>: ${a || "nothing assigned"}`;
    }).join("<br>") || '<span class="muted">no members</span>';
    const offsets = g.offsets.map((o) => `<span data-group-offset="${esc(o.topic)}-${o.partition}" data-lag="${o.lag ?? ""}">` +
      `${esc(o.topic)}-${o.partition}: committed ${esc(o.committed)}, end ${esc(o.log_end_offset)}, <b>lag ${esc(o.lag)}</b></span>`).join("<br>");
    h += `<tr data-group="${esc(g.group_id)}"><td>${esc(g.group_id)}</td><td>${esc(g.state)}</td><td>${esc(g.group_type || g.protocol_type)}</td>` +
         `<td>${g.coordinator ? g.coordinator.node_id : "-"}</td><td>${members}</td><td>${offsets || "-"}</td>` +
         `<td>${esc(g.error || "")}</td></tr>`;
  }
  const errors = s.group_errors.length ? `<p class="muted">${s.group_errors.map(esc).join("<br>")}</p>` : "";
  $("groups").innerHTML = h ? "<table><tr><th>group</th><th>state</th><th>type</th><th>coordinator</th><th>members and assignments</th>" +
    "<th>offsets and lag</th><th></th></tr>" + h + "</table>" + errors : '<p class="muted">no consumer groups</p>' + errors;
}

function renderTransactions(s) {
  let h = "";
  for (const t of s.transactions) {
    const parts = Object.entries(t.partitions || {}).map(([topic, ps]) => `${esc(topic)} [${ps.join(", ")}]`).join("; ");
    h += `<tr data-txn="${esc(t.transactional_id)}"><td>${esc(t.transactional_id)}</td><td>${esc(t.state)}</td>` +
         `<td>${esc(t.producer_id)}/${esc(t.producer_epoch)}</td><td>${t.coordinator ? t.coordinator.node_id : "-"}</td>` +
         `<td>${t.running_ms != null ? (t.running_ms / 1000).toFixed(1) + " s" : "-"}</td><td>${parts || "-"}</td><td>${esc(t.error || "")}</td></tr>`;
  }
  const summary = `<p class="muted">${s.transaction_count} transactional ids known</p>`;
  $("transactions").innerHTML = (h ? "<table><tr><th>transactional id</th><th>state</th><th>producer id/epoch</th>" +
    "<th>coordinator</th><th>running</th><th>partitions</th><th></th></tr>" + h + "</table>" : '<p class="muted">no open transactions</p>') + summary;
}

// the schema registry's subjects and versions (kshim serve --schema-registry); null without one
function renderSchemas(s) {
  $("schemas-section").hidden = s.schemas == null;
  if (s.schemas == null) return;
  const rows = s.schemas.map((x) => `<tr data-subject="${esc(x.subject)}"><td>${esc(x.subject)}</td><td>` +
    x.versions.map((v) => `<span data-version="${v.version}"${v.deleted ? ' class="muted" title="soft-deleted"' : ""}>` +
      `v${v.version} (id ${v.id}, ${esc(v.type)})</span>`).join(" ") + "</td></tr>").join("");
  $("schemas").innerHTML = rows ? "<table><tr><th>subject</th><th>versions</th></tr>" + rows + "</table>"
                                : '<p class="muted">no subjects</p>';
}

// the brokers' request fault rules (kshim ctl fault); null when they could not be read
function renderFaults(s) {
  if (s.faults == null) {
    $("faults").innerHTML = '<p class="muted">the fault rules could not be read</p>';
    return;
  }
  const cols = ["node", "id", "action", "api", "topic", "partition", "client_id", "error", "delay_ms", "after",
                "count", "remaining_ms", "matched", "applied"];
  $("faults").innerHTML = s.faults.length
    ? "<table><tr>" + cols.map((c) => `<th>${c}</th>`).join("") + "<th></th></tr>" + s.faults.map((f) =>
        "<tr>" + cols.map((c) => `<td>${esc(f[c])}</td>`).join("") +
        `<td><button data-fault-clear="${esc(f.id)}" data-fault-node="${esc(f.node)}">clear</button></td></tr>`).join("") + "</table>"
    : '<p class="muted">no fault rules</p>';
}

async function post(body, label) {
  const msg = $("message");
  msg.textContent = `${label}...`; msg.className = "";
  try {
    const r = await fetch("/action", {method: "POST", headers: {"Content-Type": "application/json"},
                                      body: JSON.stringify(body)});
    const answer = await r.json();
    msg.textContent = answer.message; msg.className = answer.ok ? "" : "err";
  } catch (e) { msg.textContent = String(e); msg.className = "err"; }
}

$("fault-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const v = (id) => $(id).value.trim();
  const action = v("f-action");
  const rule = {action};
  if (v("f-api")) rule.api = v("f-api");
  if (v("f-topic")) rule.topic = v("f-topic");
  if (v("f-partition")) rule.partition = Number(v("f-partition"));
  if (v("f-client")) rule.client_id = v("f-client");
  if (action === "error" && v("f-error")) rule.error = v("f-error");
  if ((action === "delay" || action === "timeout") && v("f-delay")) rule.delay_ms = Number(v("f-delay"));
  if (v("f-count")) rule.count = Number(v("f-count"));
  if (v("f-duration")) rule.duration_ms = Number(v("f-duration"));
  post({action: "fault-add", rule, node: v("f-node") ? Number(v("f-node")) : null}, "adding a fault rule");
});

document.addEventListener("click", (ev) => {
  const b = ev.target.closest("button[data-fault-clear]");
  if (!b) return;
  const all = b.dataset.faultClear === "all";
  post({action: "fault-clear", id: all ? null : Number(b.dataset.faultClear),
        node: all ? null : Number(b.dataset.faultNode)}, "clearing fault rules");
});

function render(s) {
  state = s;
  $("cluster").textContent = `${s.mode === "cluster" ? "cluster" : "single broker"} ${s.cluster_id || ""}`;
  const c = s.controller || {};
  $("controller").textContent = `controller ${c.state || "?"}, metadata version ${c.image_version ?? "?"}` + (s.error ? ` (${s.error})` : "");
  document.body.dataset.version = s.version;
  renderBrokers(s); renderPartitions(s); renderGroups(s); renderTransactions(s); renderSchemas(s); renderFaults(s);
}

$("internal").addEventListener("change", () => state && renderPartitions(state));

document.addEventListener("click", async (ev) => {
  const b = ev.target.closest("button[data-action]");
  if (!b) return;
  b.disabled = true;
  const node = b.dataset.node === "controller" ? "controller" : Number(b.dataset.node);
  const msg = $("message");
  msg.textContent = `${b.dataset.action} ${b.dataset.node}...`; msg.className = "";
  try {
    const r = await fetch("/action", {method: "POST", headers: {"Content-Type": "application/json"},
                                      body: JSON.stringify({action: b.dataset.action, node})});
    const answer = await r.json();
    msg.textContent = answer.message; msg.className = answer.ok ? "" : "err";
  } catch (e) { msg.textContent = String(e); msg.className = "err"; }
});

function connect() {
  const source = new EventSource("/events");
  source.onopen = () => { $("live").className = "on"; $("live").textContent = "live"; };
  source.onmessage = (ev) => render(JSON.parse(ev.data));
  source.onerror = () => { $("live").className = "off"; $("live").textContent = "reconnecting"; };
}
connect();
</script>
</body>
</html>
"""
