// The status page: polls /ui/state once a second while the page is visible
// (nothing while it is hidden, so an idle tab costs the hub nothing) and keeps
// the last five minutes of refusal counters to show refusals by reason.
"use strict";
const $ = (id) => document.getElementById(id);
const history = []; // [time ms, {reason: count}]
const WINDOW = 5 * 60 * 1000;

function dur(s) {
  if (s === null || s === undefined) return "—";
  if (s < 1) return Math.round(s * 1000) + " ms";
  if (s < 90) return s.toFixed(s < 10 ? 1 : 0) + " s";
  if (s < 5400) return Math.round(s / 60) + " min";
  return (s / 3600).toFixed(1) + " h";
}

function text(el, v) { if (el.textContent !== String(v)) el.textContent = v; }

function esc(s) {
  return String(s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
}

function render(st) {
  text($("version"), st.version);
  const eng = $("engine");
  text(eng, st.engine.ready ? "engine up" : "engine down");
  eng.title = st.engine.message;
  eng.className = "badge" + (st.engine.ready ? "" : " bad");
  $("congested").hidden = !st.queue.congested;
  $("congested").className = "badge bad";
  $("draining").hidden = !st.draining;
  text($("used"), st.slots.used);
  text($("limit"), st.slots.limit);
  text($("pending"), st.slots.pending);
  $("usedbar").style.width = Math.min(100, (100 * st.slots.used) / Math.max(1, st.slots.limit)) + "%";
  const q = st.queue;
  text($("waiting"), q.waiting);
  text($("oldest"), q.waiting ? dur(q.oldestWaitSeconds) : "—");
  text($("idle"), dur(q.idleSeconds));
  text($("budgets"), q.disabled ? "queue disabled" : q.timeoutSeconds
    ? dur(q.keepingUpBudgetSeconds) + ", " + dur(q.saturatedBudgetSeconds)
    : "unbounded");
  const g = st.gate;
  text($("inflight"), g ? g.inFlight : 0);
  text($("gatelimit"), g ? g.limit : "–");
  text($("gatemode"), g ? g.mode + (g.healthy ? "" : " (engine down)") : "off");
  text($("baseline"), g && g.baselineSeconds ? dur(g.baselineSeconds) : "—");

  const pool = st.pool;
  text($("poolready"), pool ? pool.reduce((n, p) => n + p.ready, 0) : 0);
  $("pool").tBodies[0].innerHTML = !pool ? '<tr><td class="muted">off</td></tr>'
    : pool.length ? pool.map((p) => "<tr><td>" + esc(p.browser + " " + p.version) + "</td><td>" + p.ready + " of " + p.target +
      (p.filling ? ", " + p.filling + " starting" : "") + "</td></tr>").join("")
    : '<tr><td class="muted">empty</td></tr>';

  const ts = st.tenants || [];
  $("tenants").tBodies[0].innerHTML = ts.length ? ts.map((t) => "<tr><td>" + esc(t.tenant || "everyone") + "</td><td>" +
    t.sessions + (t.maxSessions ? " of " + t.maxSessions : "") + " running, " + t.waiting + " waiting" +
    (t.weight !== 1 ? ", weight " + t.weight : "") + "</td></tr>").join("")
    : '<tr><td class="muted">none</td></tr>';

  const now = Date.now();
  history.push([now, st.rejected || {}]);
  while (history.length > 1 && history[0][0] < now - WINDOW) history.shift();
  const first = history[0][1], rows = [];
  for (const [reason, n] of Object.entries(st.rejected || {})) {
    const d = n - (first[reason] || 0);
    if (d > 0) rows.push("<tr><td>" + esc(reason) + "</td><td>" + d + "</td></tr>");
  }
  $("rejected").tBodies[0].innerHTML = rows.length ? rows.join("") : '<tr><td class="muted">none</td></tr>';

  const more = st.otherSessions ? " (+" + st.otherSessions + " of other users)" : "";
  const cut = st.listed > st.sessions.length ? ", oldest " + st.sessions.length + " shown" : "";
  text($("count"), st.listed + " live" + cut + more);
  const body = st.sessions.map((s) => "<tr><td class=\"id\" title=\"" + esc(s.id) + "\">" + esc(s.id.slice(0, 12)) +
    "</td><td>" + esc(s.browser + " " + s.version) + "</td><td>" + esc(s.name || "") +
    "</td><td>" + dur(s.ageSeconds) + "</td><td>" + dur(s.idleSeconds) + "</td><td>" +
    (s.vnc ? "<a href=\"" + esc(s.vnc) + "\">VNC</a>" : "") + (s.video ? " <span class=\"muted\">rec</span>" : "") +
    "</td></tr>").join("");
  $("sessions").tBodies[0].innerHTML = body || '<tr><td colspan="6" class="muted">no session</td></tr>';
  text($("updated"), "updated " + new Date(now).toLocaleTimeString());
}

let timer = null, busy = false;
async function poll() {
  timer = null;
  if (busy) return;
  busy = true;
  try {
    const r = await fetch("state", { cache: "no-store" });
    if (r.ok) render(await r.json());
    else text($("updated"), "hub answered " + r.status);
  } catch (e) {
    text($("updated"), "hub unreachable");
    $("engine").className = "badge bad";
  } finally {
    busy = false;
  }
  if (document.visibilityState === "visible" && timer === null) timer = setTimeout(poll, 1000);
}
document.addEventListener("visibilitychange", () => {
  if (document.visibilityState === "visible" && timer === null && !busy) poll();
});
poll();
