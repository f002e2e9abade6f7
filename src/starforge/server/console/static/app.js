// StarForge console: projects -> runs -> a run (spec, parameters, provenance, lineage, status and
// why, attempts, live log, live curves, artifacts, the actions the caller may take) and a sweep
// (variants ranked, curves overlaid, stop); runs of a project compared (curves overlaid, the diff).
// Plain JavaScript over the /api/v1 JSON API; charts are drawn by plotly.js (served from the
// plotly package installed on the server). Actions send the token in the Authorization header,
// as every call does: no cookie exists that another site's page could make the browser send.
"use strict";

const API = "/api/v1";
const TOKEN_KEY = "starforge.token";
const ACTIVE = new Set(["queued", "starting", "running", "stopping", "pausing"]);
const STATUSES = ["running", "queued", "succeeded", "failed", "stopped", "paused"];
const FIRST_KEYS = ["loss", "reward", "eval_loss", "eval_reward"];
const main = document.getElementById("main");

let teardown = []; // what the current page must stop when the route changes

// ---- small helpers ---------------------------------------------------------------------------

function esc(value) {
  return String(value ?? "").replace(/[&<>"']/g, (c) => ({
    "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;",
  })[c]);
}

function ago(iso) {
  if (!iso) return "-";
  const s = Math.max(0, Math.round((Date.now() - Date.parse(iso)) / 1000));
  if (s < 60) return `${s}s ago`;
  if (s < 3600) return `${Math.floor(s / 60)}m ago`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ago`;
  return `${Math.floor(s / 86400)}d ago`;
}

function when(iso) {
  return iso ? `<span title="${esc(new Date(iso).toLocaleString())}">${ago(iso)}</span>` : "-";
}

function duration(run) {
  if (!run.started_at) return "-";
  const end = run.ended_at ? Date.parse(run.ended_at) : Date.now();
  let s = Math.max(0, Math.round((end - Date.parse(run.started_at)) / 1000));
  const h = Math.floor(s / 3600); s -= h * 3600;
  const m = Math.floor(s / 60); s -= m * 60;
  return h ? `${h}h ${m}m` : m ? `${m}m ${s}s` : `${s}s`;
}

function bytes(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return i ? `${n.toFixed(1)} ${units[i]}` : `${n} B`;
}

function fmt(v) {
  if (typeof v === "string") return esc(v);
  if (typeof v !== "number") return esc(JSON.stringify(v));
  return Math.abs(v) >= 1e5 || (Math.abs(v) < 1e-3 && v !== 0) ? v.toExponential(3) : `${+v.toPrecision(6)}`;
}

const badge = (status) => `<span class="status ${esc(status)}">${esc(status)}</span>`;

function crumbs(parts) {
  const html = parts.map(([label, href]) => href ? `<a href="${href}">${esc(label)}</a>` : esc(label));
  document.getElementById("crumbs").innerHTML = html.join('<span class="sep">/</span>');
}

function every(ms, fn) {
  const id = setInterval(fn, ms);
  teardown.push(() => clearInterval(id));
}

// ---- the API, with the token ------------------------------------------------------------------

// sessionStorage: the token lives as long as this tab, never on the disk of a shared machine.
function token() { return sessionStorage.getItem(TOKEN_KEY) || ""; }
function signOut() { sessionStorage.removeItem(TOKEN_KEY); showWho(null); route(); }

class AuthError extends Error {}

async function api(path, options = {}) {
  const headers = { Authorization: `Bearer ${token()}`, ...(options.headers || {}) };
  const resp = await fetch(API + path, { ...options, headers });
  if (resp.status === 401) throw new AuthError("sign in");
  if (!resp.ok) {
    let message = `HTTP ${resp.status}`;
    try { message = (await resp.json()).message || message; } catch (_) { /* not JSON */ }
    throw new Error(message);
  }
  return resp.json();
}

// Reads the log's Server-Sent Events through fetch (EventSource cannot send the token header),
// reconnecting with Last-Event-ID after a drop so no line is shown twice or lost.
async function followLog(runId, onEvent, signal) {
  let lastId = null;
  while (!signal.aborted) {
    try {
      const headers = { Authorization: `Bearer ${token()}`, Accept: "text/event-stream" };
      if (lastId) headers["Last-Event-ID"] = lastId;
      const resp = await fetch(`${API}/runs/${encodeURIComponent(runId)}/logs/stream?tail=400`,
        { headers, signal });
      if (!resp.ok) throw new Error(`HTTP ${resp.status}`);
      const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = "", event = "message", data = [];
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += value;
        const keep = buffer.endsWith("\r") ? 1 : 0; // "\r\n" may be split across reads
        const lines = buffer.slice(0, buffer.length - keep).split(/\r\n|\r|\n/);
        buffer = lines.pop() + buffer.slice(buffer.length - keep);
        for (const line of lines) {
          if (line === "") {
            if (data.length && onEvent(event, JSON.parse(data.join("\n"))) === "end") return;
            event = "message"; data = [];
          } else if (line.startsWith(":")) {
            continue;
          } else {
            const i = line.indexOf(":");
            const field = i < 0 ? line : line.slice(0, i);
            const val = i < 0 ? "" : line.slice(i + 1).replace(/^ /, "");
            if (field === "data") data.push(val);
            else if (field === "event") event = val;
            else if (field === "id") lastId = val;
          }
        }
      }
    } catch (err) {
      if (signal.aborted) return;
    }
    await new Promise((r) => setTimeout(r, 1000));
  }
}

// ---- pages ------------------------------------------------------------------------------------

// Who is signed in, and what their role lets them see (operators and admins: every user's runs).
function showWho(me) {
  const who = document.getElementById("who");
  if (!me) { who.textContent = ""; return; }
  const scope = me.role === "operator" || me.role === "admin" ? "every user's runs" : "your runs";
  who.innerHTML = `<span class="user">${esc(me.user)}</span> <span class="role">${esc(me.role)}</span>
    <span class="muted">· ${scope} ·</span> <a href="#/" id="signout">sign out</a>`;
  document.getElementById("signout").addEventListener("click", (e) => { e.preventDefault(); signOut(); });
}

function signIn(message) {
  crumbs([["sign in"]]);
  main.innerHTML = `
    <div class="panel signin">
      <h1>Sign in</h1>
      <p class="muted">Paste your StarForge token, or run <code>sf job console</code>: it opens
      this console signed in.</p>
      ${message ? `<p class="error">${esc(message)}</p>` : ""}
      <form id="signin"><input id="tok" type="password" placeholder="token" autocomplete="off">
      <button type="submit">Sign in</button></form>
    </div>`;
  document.getElementById("signin").addEventListener("submit", (e) => {
    e.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, document.getElementById("tok").value.trim());
    route();
  });
}

async function projectsPage() {
  crumbs([["projects"]]);
  const { runs } = await api("/runs?limit=1000");
  const groups = new Map();
  for (const run of runs) {
    if (!groups.has(run.project)) groups.set(run.project, []);
    groups.get(run.project).push(run);
  }
  if (!groups.size) {
    main.innerHTML = `<div class="panel empty">No runs yet. Submit one with
      <code>sf submit EXPERIMENT --profile h200:1 ...</code></div>`;
    return;
  }
  const cards = [...groups.entries()].map(([name, list]) => {
    const counts = {};
    for (const r of list) counts[r.status] = (counts[r.status] || 0) + 1;
    const experiments = new Set(list.map((r) => r.experiment));
    return `
      <a class="card" href="#/projects/${encodeURIComponent(name)}" data-project="${esc(name)}">
        <div class="name">${esc(name)}</div>
        <div class="muted">${list.length} run${list.length > 1 ? "s" : ""} ·
          ${experiments.size} experiment${experiments.size > 1 ? "s" : ""} ·
          last ${ago(list[0].created_at)}</div>
        <div class="counts">${Object.entries(counts).map(([s, n]) =>
          `${badge(s)}<span class="pill">${n}</span>`).join(" ")}</div>
      </a>`;
  });
  main.innerHTML = `
    <div class="page-head"><h1>Projects</h1>
      <span class="sub">grouped by the name in each lab's starforge.yaml, from the latest
      ${runs.length} runs</span></div>
    <div class="cards">${cards.join("")}</div>`;
}

const PAGE = 50; // runs per page of a project's list

async function projectPage(project, query) {
  const filter = query.get("status") || "all";
  crumbs([["projects", "#/"], [project]]);
  let pages = 1;
  const picked = new Set(); // runs ticked for comparison, kept across the page's refreshes
  const render = async () => {
    // The pages asked for so far, each a keyset page of this project's runs (newest first), so
    // the page reads what it shows and never the project's whole history.
    const mine = [];
    let before = null;
    for (let i = 0; i < pages; i++) {
      const page = await api(`/runs?limit=${PAGE}&project=${encodeURIComponent(project)}` +
        (before ? `&before=${encodeURIComponent(before)}` : ""));
      mine.push(...page.runs);
      before = page.next_before;
      if (!before) break;
    }
    const shown = mine.filter((r) => filter === "all" || (filter === "active"
      ? ACTIVE.has(r.status) : r.status === filter));
    const progress = shown.length
      ? (await api(`/progress?runs=${shown.map((r) => r.run_id).join(",")}`)).runs : [];
    const steps = new Map(progress.map((p) => [p.run_id, p.last_step]));
    const count = (s) => mine.filter((r) => s === "all" || (s === "active"
      ? ACTIVE.has(r.status) : r.status === s)).length;
    const chips = ["all", "active", ...STATUSES].map((s) =>
      `<a class="${s === filter ? "on" : ""}" href="#/projects/${encodeURIComponent(project)}` +
      `${s === "all" ? "" : `?status=${s}`}">${s}<span class="n">${count(s)}</span></a>`).join("");
    const rows = shown.map((r) => `
      <tr class="link" data-run-id="${esc(r.run_id)}" onclick="location.hash='#/runs/${esc(r.run_id)}'">
        <td class="pick"><input type="checkbox" class="pick" data-run-id="${esc(r.run_id)}"
          aria-label="compare ${esc(r.run_id)}" ${picked.has(r.run_id) ? "checked" : ""}></td>
        <td><a class="mono" href="#/runs/${esc(r.run_id)}">${esc(r.run_id)}</a></td>
        <td>${esc(r.experiment)}</td><td>${esc(r.method)}</td><td>${badge(r.status)}</td>
        <td class="mono">${esc(r.profiles.join(" "))}</td><td class="num">${r.gpus}</td>
        <td class="num">${steps.has(r.run_id) && steps.get(r.run_id) !== null ? steps.get(r.run_id) : "-"}</td>
        <td>${when(r.created_at)}</td><td class="num">${duration(r)}</td>
        <td class="muted">${esc(ACTIVE.has(r.status) ? r.reason : "")}</td>
      </tr>`).join("");
    main.innerHTML = `
      <div class="page-head"><h1>${esc(project)}</h1>
        <span class="sub">${before ? "the latest " : ""}${mine.length} run${mine.length === 1 ? "" : "s"}</span></div>
      <div class="filters">${chips}</div>
      <div class="panel">
        ${shown.length ? `<div class="compare-bar"><button id="compare" disabled>Compare</button>
          <span class="muted" id="picked"></span></div>
          <table id="runs"><thead><tr><th></th><th>Run</th><th>Experiment</th>
          <th>Method</th><th>Status</th><th>Profile</th><th class="num">GPUs</th>
          <th class="num">Steps</th><th>Submitted</th><th class="num">Duration</th><th>Why</th>
          </tr></thead><tbody>${rows}</tbody></table>`
          : `<div class="empty">No ${filter === "all" ? "" : filter + " "}runs.</div>`}
        ${before ? `<button id="older">Older runs</button>` : ""}
      </div>${await sweepsPanel(project).catch(() => "")}`;
    const older = document.getElementById("older");
    if (older) older.addEventListener("click", () => { pages += 1; render().catch(() => {}); });
    pickForCompare(picked);
  };
  await render();
  every(5000, () => render().catch(() => {}));
}

// Ticking 2 to 8 runs (of any experiments of the project) enables "Compare": #/compare?runs=A,B.
const MAX_COMPARED = 8;

function pickForCompare(picked) {
  const button = document.getElementById("compare");
  if (!button) return;
  const show = () => {
    const n = picked.size;
    button.disabled = n < 2 || n > MAX_COMPARED;
    button.textContent = n ? `Compare ${n} runs` : "Compare";
    document.getElementById("picked").textContent = n > MAX_COMPARED
      ? `at most ${MAX_COMPARED} runs at a time` : n < 2 ? "tick 2 to 8 runs to compare them" : "";
  };
  for (const box of main.querySelectorAll("input.pick")) {
    box.addEventListener("click", (e) => e.stopPropagation()); // not the row's link
    box.addEventListener("change", () => {
      if (box.checked) picked.add(box.dataset.runId); else picked.delete(box.dataset.runId);
      show();
    });
  }
  button.addEventListener("click", () => {
    location.hash = `#/compare?runs=${[...picked].map(encodeURIComponent).join(",")}`;
  });
  show();
}

// ---- actions: what the caller may do to a run or a sweep ---------------------------------------

// The server says which actions the caller may take now (GET .../actions: the authorization
// table and the run's status decide), so the page keeps no copy of either rule. Each asks first.
const VERBS = { stop: "Stop", pause: "Pause", resume: "Resume", retry: "Retry" };
const QUESTIONS = {
  stop: "Stop run {id}? Its processes get SIGTERM, then SIGKILL after the grace period.",
  pause: "Pause run {id}? It saves a checkpoint and releases its GPUs; Resume continues it.",
  resume: "Resume run {id}? It is queued again and continues from its latest checkpoint.",
  retry: "Retry run {id}? It is queued again as a new attempt, from its latest checkpoint.",
};

function actionButtons(box, allowed, onAct) {
  const key = JSON.stringify(allowed);
  if (box.dataset.shown === key) return; // unchanged: keep the buttons (and a click under way)
  box.dataset.shown = key;
  box.innerHTML = allowed.actions.map((a) =>
    `<button class="act ${esc(a)}" data-action="${esc(a)}">${esc(VERBS[a] || a)}</button>`).join("") +
    (allowed.refused ? `<span class="readonly" id="read-only" title="${esc(allowed.refused)}">read only</span>` : "");
  for (const button of box.querySelectorAll("button[data-action]")) {
    button.addEventListener("click", () => onAct(button.dataset.action));
  }
}

// Confirm, call the same endpoint as the CLI, and say what came of it in `out`.
async function act(question, path, out, describe) {
  if (!window.confirm(question)) return false;
  for (const b of document.querySelectorAll("button.act")) b.disabled = true;
  try {
    const answer = await api(path, { method: "POST" });
    const [ok, html] = describe(answer);
    out.innerHTML = `<div class="result ${ok ? "ok" : "rejected"}">${html}</div>`;
  } catch (err) {
    out.innerHTML = `<div class="result rejected">${esc(err instanceof AuthError
      ? "your token was not accepted: sign in again" : err.message)}</div>`;
  } finally {
    for (const b of document.querySelectorAll("button.act")) b.disabled = false;
  }
  return true;
}

const describeAction = (r) => [r.accepted,
  `${r.accepted ? "" : "<b>Refused:</b> "}${esc(r.message)} ${badge(r.status)}`];

// ---- the run page -----------------------------------------------------------------------------

function kv(pairs) {
  return `<dl class="kv">${pairs.map(([k, v]) => `<dt>${esc(k)}</dt><dd>${v}</dd>`).join("")}</dl>`;
}

function table(head, rows, id = "") {
  if (!rows.length) return `<div class="empty">none</div>`;
  return `<table ${id ? `id="${id}"` : ""}><thead><tr>${head.map((h) => `<th>${esc(h)}</th>`).join("")}
    </tr></thead><tbody>${rows.map((r) => `<tr>${r.map((c) => `<td>${c}</td>`).join("")}</tr>`).join("")}
    </tbody></table>`;
}

function runSkeleton(runId) {
  main.innerHTML = `
    <div class="page-head"><h1 class="mono" id="run-title">${esc(runId)}</h1>
      <span id="run-status"></span><span class="sub" id="run-sub"></span>
      <span class="actions" id="actions"></span></div>
    <div id="action-result"></div>
    <div id="run-reason"></div>
    <div class="grid two">
      <section class="panel"><h2>Run</h2><div id="overview"></div></section>
      <section class="panel"><h2>Provenance</h2><div id="provenance"></div></section>
    </div>
    <section class="panel"><h2>Lineage</h2><div id="lineage"></div></section>
    <section class="panel"><h2>Curves <span class="aside" id="curves-note"></span></h2>
      <div class="charts" id="curves"></div></section>
    <section class="panel"><h2>Log <span class="live off" id="live">idle</span>
      <span class="aside">last lines, live</span></h2><pre class="log" id="log"></pre></section>
    <div class="grid two">
      <section class="panel"><h2>Attempts</h2><div id="attempts"></div></section>
      <section class="panel"><h2>Artifacts <span class="aside" id="artifacts-root"></span></h2>
        <div id="artifacts"></div></section>
    </div>
    <section class="panel"><h2>Hyperparameters <input class="search" id="hp-filter"
      placeholder="filter"></h2><div id="hparams"></div></section>
    <div class="grid two">
      <section class="panel"><h2>Events</h2><div id="events"></div></section>
      <section class="panel"><h2>Spec</h2><details><summary>the submitted JobSpec</summary>
        <pre class="json" id="spec"></pre></details></section>
    </div>`;
}

function renderRun(run) {
  const spec = run.spec || {};
  document.getElementById("run-status").innerHTML = badge(run.status) +
    (run.end_reason ? ` <span class="pill">${esc(run.end_reason)}</span>` : "");
  document.getElementById("run-sub").textContent = `${run.project} / ${run.experiment} · ${run.method}`;
  const p = run.pending;
  const pending = p ? `<div class="muted">#${esc(p.position)} of ${esc(p.queued)} in the queue` +
    `${p.detail ? ` · ${esc(p.detail)}` : ""}${p.next_event ? ` · next: ${esc(p.next_event)}` : ""}</div>` : "";
  const reason = run.reason && run.status !== "succeeded"
    ? `<div class="reason ${run.status === "queued" ? "" : "done"}" id="why"><b>${
      run.status === "queued" ? "Why pending" : "Status"}:</b> ${esc(run.reason)}${pending}</div>` : "";
  document.getElementById("run-reason").innerHTML = reason;
  const external = spec.observability_url;
  document.getElementById("overview").innerHTML = kv([
    ["project", `<a href="#/projects/${encodeURIComponent(run.project)}">${esc(run.project)}</a>`],
    ["experiment", esc(run.experiment)],
    ["method", esc(run.method)],
    ["profile", `<span class="mono">${esc(run.profiles.join(" "))}</span>`],
    ["pools", esc(run.pools.map((p) => `${p.name}: ${p.nodes} × ${p.gpus_per_node} ${p.series}`).join(", ") || "-")],
    ["GPUs", esc(run.gpus)],
    ["submitted", when(run.created_at)],
    ["started", when(run.started_at)],
    ["ended", when(run.ended_at)],
    ["duration", esc(duration(run))],
    ["exit code", esc(run.exit_code ?? "-")],
    ["curves", external ? `external: <a href="${esc(external)}" target="_blank" rel="noopener">${esc(external)}</a>`
      : "on the platform (below)"],
    ["run dir", `<span class="mono">${esc(run.run_dir)}</span>`],
  ]);
  const prov = spec.provenance || {};
  document.getElementById("provenance").innerHTML = kv([
    ["commit", `<span class="mono">${esc(run.git_commit || "-")}</span>${run.git_dirty ? ' <span class="pill">dirty</span>' : ""}`],
    ["untracked", esc((prov.untracked || []).join(", ") || "none")],
    ["client", esc(prov.client_version || "-")],
    ["method version", esc(spec.method ? `${spec.method.version} (${spec.method.framework_version || "-"})` : "-")],
    ["image", `<span class="mono">${esc(run.image || spec.image || "the method's default")}</span>`],
    ["inputs", Object.entries(spec.inputs || {}).filter(([, v]) => v)
      .map(([k, v]) => `${esc(k)}: <span class="mono">${esc(v.value)}</span> (${esc(v.kind)})`).join("<br>") || "-"],
    ["user", esc(run.user)],
  ]);
  const costed = run.attempts.some((a) => typeof a.gpu_hours === "number");
  document.getElementById("attempts").innerHTML = table(
    ["#", "started", "ended", "exit", "end reason", "resumed from", ...(costed ? ["GPU-hours"] : [])],
    run.attempts.map((a) => [esc(a.number), when(a.started_at), when(a.ended_at),
      esc(a.exit_code ?? "-"), esc(a.end_reason || "-"),
      `<span class="mono">${esc(a.resumed_from || "-")}</span>`,
      ...(costed ? [costOf(a)] : [])]), "attempts-table");
  document.getElementById("events").innerHTML = table(
    ["when", "status", "why", "by"],
    run.events.slice().reverse().map((e) => [when(e.at),
      `${e.src ? esc(e.src) + " → " : ""}${badge(e.dst)}`, esc(e.reason), esc(e.actor)]));
  document.getElementById("spec").textContent = JSON.stringify(spec, null, 2);
}

const runLink = (id) => `<a class="mono" href="#/runs/${esc(id)}">${esc(id)}</a>`;

function costOf(x) {
  if (typeof x.gpu_hours !== "number") return "-";
  const hours = `${+x.gpu_hours.toFixed(3)} GPU-hours`;
  return typeof x.cost === "number" ? `${hours} · ${x.cost.toFixed(2)} ${esc(x.currency || "")}` : hours;
}

// Where the run comes from and what it led to: pipeline steps, --init-from, reruns, the dataset
// versions and image it ran with, its eval gate's verdict, and what it cost (where the server
// counts it). `reruns`: the runs of the project that rerun this one.
function renderLineage(run, reruns) {
  const spec = run.spec || {};
  const rows = stepRows(run);
  const from = spec.init_from;
  if (from) {
    const step = from.resolved_step ?? from.step;
    rows.push(["init from", `${runLink(from.run_id)} · ${esc(from.kind)}` +
      `${step !== null && step !== undefined ? ` at step ${esc(step)}` : ""}` +
      `${from.parent_method ? ` <span class="muted">(${esc(from.parent_method)})</span>` : ""}`]);
  }
  if (run.rerun_of) rows.push(["rerun of", runLink(run.rerun_of)]);
  if (reruns.length) {
    rows.push(["reruns", reruns.map((r) => `${runLink(r.run_id)} ${badge(r.status)}`).join("<br>")]);
  }
  const data = Object.entries(run.datasets || {});
  rows.push(["datasets", data.length ? data.map(([input, version]) =>
    `${esc(input)}: <span class="mono">${esc(version)}</span>`).join("<br>") : "none"]);
  rows.push(["image", `<span class="mono">${esc(run.image || spec.image || "-")}</span>` +
    `${run.image_source ? ` <span class="muted">(${esc(run.image_source)})</span>` : ""}`]);
  const gate = run.gate;
  if (gate) {
    const verdict = gate.passed === null || gate.passed === undefined ? "pending"
      : gate.passed ? "passed" : "failed";
    rows.push(["eval gate", `<span class="verdict ${verdict}" id="gate-verdict">${verdict}</span> ` +
      `<span class="mono">${esc(gate.metric)} ${gate.bound === "min" ? "≥" : "≤"} ${fmt(gate.threshold)}</span>` +
      `${gate.value !== null && gate.value !== undefined ? ` · got ${fmt(gate.value)}` : ""}` +
      ` · judged by ${runLink(gate.run_id)}${gate.reason ? `<br><span class="muted">${esc(gate.reason)}</span>` : ""}`]);
  }
  if (typeof run.gpu_hours === "number") rows.push(["cost", costOf(run)]);
  document.getElementById("lineage").innerHTML = kv(rows);
}

// A pipeline's steps (--then export, eval), each a run of its own with its own page and log.
function stepRows(run) {
  const link = runLink;
  const rows = [];
  if (run.step) rows.push(["step", `${esc(run.step.action)} of ${link(run.step.root_run_id)}`]);
  if ((run.steps || []).length) {
    rows.push(["steps", run.steps.map((s) => `${s.position + 1}. ${esc(s.action)}: ` +
      (s.run_id ? `${badge(s.status)} ${link(s.run_id)}` : "not started")).join("<br>")]);
  }
  return rows;
}

function renderHparams(run, meta, filter) {
  const set = Object.entries((run.spec || {}).hyperparams || {});
  const reported = Object.entries(meta.hparams || {});
  const match = ([k]) => !filter || k.toLowerCase().includes(filter.toLowerCase());
  const section = (title, rows) => `<h2 class="muted" style="font-size:13px;margin-top:6px">${title}</h2>` +
    table(["name", "value"], rows.filter(match).map(([k, v]) => [`<span class="mono">${esc(k)}</span>`,
      `<span class="mono">${fmt(v)}</span>`]));
  document.getElementById("hparams").innerHTML =
    section(`Set at submit (${set.length})`, set) +
    section(`Resolved, as the job reported them (${reported.length})`, reported);
}

function orderKeys(keys) {
  const first = FIRST_KEYS.filter((k) => keys.includes(k));
  return [...first, ...keys.filter((k) => !first.includes(k)).sort()];
}

// One chart per metric key in `box`, made on first sight and kept in `charts` (a refresh redraws
// it in place rather than rebuilding the page's charts).
function chartFor(box, charts, key) {
  let chart = charts.get(key);
  if (!chart) {
    chart = document.createElement("div");
    chart.className = "chart";
    chart.dataset.key = key;
    chart.innerHTML = `<div class="title"><span class="mono">${esc(key)}</span>
      <span class="meta"></span></div><div class="plot"></div>`;
    box.appendChild(chart);
    charts.set(key, chart);
  }
  return chart;
}

// Draws `traces` in a chart of chartFor: every curve chart has the same axes and look.
function plotChart(chart, traces) {
  Plotly.react(chart.querySelector(".plot"), traces, {
    margin: { l: 48, r: 10, t: 6, b: 30 }, height: 210, showlegend: false,
    xaxis: { title: { text: "step", standoff: 4 }, gridcolor: "#eef0f4", zeroline: false },
    yaxis: { gridcolor: "#eef0f4", zeroline: false }, font: { size: 11 },
    paper_bgcolor: "#fff", plot_bgcolor: "#fff",
  }, { displayModeBar: false, responsive: true });
}

function renderCurves(data, charts) {
  const box = document.getElementById("curves");
  const note = document.getElementById("curves-note");
  if (!window.Plotly) {
    note.textContent = window.STARFORGE_NO_PLOTLY || "the chart library did not load";
    return;
  }
  if (!data.series.length) {
    box.innerHTML = `<div class="empty">No curves yet: they come from starforge.report in the
      training code (the trl/* methods send theirs already).</div>`;
    return;
  }
  note.textContent = `${data.series.length} metric${data.series.length > 1 ? "s" : ""}`;
  if (box.querySelector(".empty")) box.innerHTML = "";
  const byKey = new Map(data.series.map((s) => [s.key, s]));
  for (const key of orderKeys([...byKey.keys()])) {
    const s = byKey.get(key);
    const chart = chartFor(box, charts, key);
    chart.dataset.points = String(s.count);
    chart.querySelector(".meta").textContent =
      `${s.count} point${s.count > 1 ? "s" : ""} · step ${s.last_step} · ${fmt(s.last_value)}` +
      (s.downsampled ? " · downsampled" : "");
    plotChart(chart, [{
      x: s.steps, y: s.values, type: "scatter", mode: s.steps.length <= 60 ? "lines+markers" : "lines",
      line: { width: 2, color: "#3656d6" }, marker: { size: 5 }, name: key,
      hovertemplate: "step %{x}<br>%{y}<extra></extra>",
    }]);
  }
}

function renderArtifacts(list) {
  document.getElementById("artifacts-root").textContent = list.root;
  document.getElementById("artifacts").innerHTML = table(
    ["file", "size", "modified"],
    list.files.map((f) => [`<span class="mono">${esc(f.path)}</span>`, bytes(f.size), when(f.modified)]),
  ) + (list.truncated ? `<p class="muted">(first ${list.files.length} files)</p>` : "");
}

// The live log of every node: the stream labels node r > 0's lines "[node r] " itself.
function startLog(runId) {
  const pre = document.getElementById("log");
  const live = document.getElementById("live");
  const controller = new AbortController();
  teardown.push(() => controller.abort());
  live.className = "live";
  live.textContent = "live";
  followLog(runId, (event, data) => {
    const stick = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 24;
    if (event === "log") pre.append(document.createTextNode(data.text));
    else if (event === "attempt") pre.append(document.createTextNode(`──── attempt ${data.attempt} ────\n`));
    else if (event === "end") {
      live.className = "live off";
      live.textContent = `ended: ${data.status}`;
      return "end";
    }
    if (stick) pre.scrollTop = pre.scrollHeight;
    return null;
  }, controller.signal);
}

// The runs of the project that rerun this one (a run records what it reruns, not its reruns).
async function rerunsOf(run) {
  const { runs } = await api(`/runs?limit=1000&project=${encodeURIComponent(run.project)}`);
  return runs.filter((r) => r.rerun_of === run.run_id);
}

async function runPage(runId) {
  runSkeleton(runId);
  let run = await api(`/runs/${encodeURIComponent(runId)}`);
  crumbs([["projects", "#/"], [run.project, `#/projects/${encodeURIComponent(run.project)}`], [run.run_id]]);
  const reruns = await rerunsOf(run).catch(() => []);
  const path = `/runs/${encodeURIComponent(run.run_id)}`;
  const showActions = async () => actionButtons(document.getElementById("actions"),
    await api(`${path}/actions`), onAct);
  const onAct = async (action) => {
    const question = QUESTIONS[action].replace("{id}", run.run_id);
    const out = document.getElementById("action-result");
    if (await act(question, `${path}/${action}`, out, describeAction)) {
      await refresh().catch(() => {});
    }
  };
  const charts = new Map();
  let meta = { hparams: {} };
  const filter = document.getElementById("hp-filter");
  filter.addEventListener("input", () => renderHparams(run, meta, filter.value));
  const refresh = async () => {
    const was = run.status;
    run = await api(`/runs/${encodeURIComponent(runId)}`);
    renderRun(run);
    renderLineage(run, reruns);
    const [metrics, reported, artifacts] = await Promise.all([
      api(`/runs/${encodeURIComponent(runId)}/metrics?max_points=1000`),
      api(`/runs/${encodeURIComponent(runId)}/meta`),
      api(`/runs/${encodeURIComponent(runId)}/artifacts`),
    ]);
    meta = reported;
    renderCurves(metrics, charts);
    renderHparams(run, meta, filter.value);
    renderArtifacts(artifacts);
    await showActions();
    return ACTIVE.has(was) || ACTIVE.has(run.status);
  };
  renderRun(run);
  renderLineage(run, reruns);
  startLog(runId);
  await refresh();
  let busy = false;
  every(2000, async () => {
    if (busy || !ACTIVE.has(run.status)) return;
    busy = true;
    try { await refresh(); } catch (_) { /* next tick */ } finally { busy = false; }
  });
}

// ---- sweeps: the variants ranked, and their curves of the sweep's metric overlaid -------------

async function sweepsPanel(project) {
  const { sweeps } = await api("/sweeps?limit=50");
  const mine = sweeps.filter((w) => w.project === project);
  if (!mine.length) return "";
  const rows = mine.map((w) => [
    `<a class="mono" href="#/sweeps/${esc(w.sweep_id)}">${esc(w.sweep_id)}</a>`,
    esc(w.experiment), String(w.variants.length),
    String(w.variants.filter((v) => ACTIVE.has(v.status)).length),
    esc(w.metric || "-"), when(w.created_at),
  ]);
  return `<section class="panel" id="sweeps"><h2>Sweeps</h2>${table(
    ["sweep", "experiment", "variants", "active", "metric", "submitted"], rows, "sweep-list")}</section>`;
}

async function sweepPage(sweepId) {
  let outcome = ""; // what the last "stop sweep" came to, kept across the page's refreshes
  const stopSweep = async (sweep) => {
    const question = `Stop sweep ${sweep.sweep_id}? Every variant that has not ended is stopped.`;
    const out = document.getElementById("action-result");
    const done = await act(question, `/sweeps/${encodeURIComponent(sweep.sweep_id)}/stop`, out,
      ({ results }) => [true, results.length
        ? `${results.filter((r) => r.accepted).length} of ${results.length} variants stopped:<br>` +
          results.map((r) => `${esc(r.message)} ${badge(r.status)}`).join("<br>")
        : "no variant was left to stop"]);
    if (done) { outcome = out.innerHTML; await render().catch(() => {}); }
  };
  const render = async () => {
    const sweep = await api(`/sweeps/${encodeURIComponent(sweepId)}`);
    const allowed = await api(`/sweeps/${encodeURIComponent(sweep.sweep_id)}/actions`);
    crumbs([["projects", "#/"], [sweep.project, `#/projects/${encodeURIComponent(sweep.project)}`],
      [sweep.sweep_id]]);
    const keys = Object.keys(sweep.grid);
    const rule = sweep.early_stop;
    const rows = sweep.variants.map((v) => [
      v.rank ? String(v.rank) : "-",
      `<a class="mono" href="#/runs/${esc(v.run_id)}">${esc(v.run_id)}</a>`, badge(v.status),
      ...keys.map((k) => esc(String(v.params[k]))),
      v.metric === null ? "-" : fmt(v.metric), v.step === null ? "-" : String(v.step),
      `<span class="muted">${esc(v.status === "stopped" ? v.reason : "")}</span>`,
    ]);
    main.innerHTML = `
      <div class="page-head"><h1 class="mono">${esc(sweep.sweep_id)}</h1>
        <span class="sub">${esc(sweep.experiment)} · ${sweep.variants.length} variants${rule
          ? ` · early stopping on ${esc(rule.metric)} (${rule.mode}) at steps ${rule.rungs.join(", ")},
            keeping 1/${rule.keep}` : ""}</span><span class="actions" id="actions"></span></div>
      <div id="action-result">${outcome}</div>
      <section class="panel"><h2>Variants, best first</h2>${table(
        ["rank", "run", "status", ...keys, sweep.metric || "metric", "step", "why it stopped"],
        rows, "variants")}</section>
      <section class="panel"><h2>Curves <span class="aside">${esc(sweep.metric)}</span></h2>
        <div class="plot" id="sweep-curves"></div></section>`;
    actionButtons(document.getElementById("actions"), allowed, () => stopSweep(sweep));
    const stop = document.querySelector('#actions button[data-action="stop"]');
    if (stop) { stop.textContent = "Stop sweep"; stop.id = "stop-sweep"; }
    if (!sweep.metric || !window.Plotly) return;
    const traces = await Promise.all(sweep.variants.map(async (v) => {
      const data = await api(`/runs/${encodeURIComponent(v.run_id)}/metrics?key=` +
        `${encodeURIComponent(sweep.metric)}&max_points=500`);
      const s = data.series[0] || { steps: [], values: [] };
      const name = keys.map((k) => `${k}=${v.params[k]}`).join(" ");
      return { x: s.steps, y: s.values, type: "scatter", mode: "lines", name };
    }));
    Plotly.react(document.getElementById("sweep-curves"), traces, {
      margin: { l: 48, r: 10, t: 6, b: 30 }, height: 320, font: { size: 11 },
      xaxis: { title: { text: "step", standoff: 4 } }, paper_bgcolor: "#fff", plot_bgcolor: "#fff",
    }, { displayModeBar: false, responsive: true });
  };
  await render();
  every(5000, () => render().catch(() => {}));
}

// ---- compare: 2 to 8 runs, their curves overlaid per metric and what differs between them -----

const PALETTE = ["#3656d6", "#d9480f", "#2f8a3e", "#9b4dca", "#c2255c", "#0f7ea8", "#b7791f", "#495057"];

// Exponential moving average, debiased at the start (the first points are not pulled to 0).
function smooth(values, weight) {
  if (!weight) return values;
  let last = 0, n = 0;
  return values.map((v) => {
    if (typeof v !== "number" || !Number.isFinite(v)) return v;
    last = last * weight + (1 - weight) * v;
    n += 1;
    return last / (1 - weight ** n);
  });
}

function drawCompared(runs, metrics, weight, charts) {
  const box = document.getElementById("compare-curves");
  if (!window.Plotly) {
    box.innerHTML = `<div class="empty">${esc(window.STARFORGE_NO_PLOTLY || "the chart library did not load")}</div>`;
    return;
  }
  const keys = orderKeys([...new Set(metrics.flatMap((m) => m.series.map((s) => s.key)))]);
  if (!keys.length) { box.innerHTML = `<div class="empty">None of these runs has reported curves yet.</div>`; return; }
  if (box.querySelector(".empty")) box.innerHTML = "";
  for (const key of keys) {
    const chart = chartFor(box, charts, key);
    const traces = [];
    runs.forEach((run, i) => {
      const s = metrics[i].series.find((x) => x.key === key);
      if (!s) return;
      traces.push({ x: s.steps, y: smooth(s.values, weight), type: "scatter", mode: "lines",
        name: run.run_id, line: { width: 2, color: PALETTE[i % PALETTE.length] },
        hovertemplate: `${run.run_id}<br>step %{x}<br>%{y}<extra></extra>` });
    });
    chart.querySelector(".meta").textContent = `${traces.length} of ${runs.length} runs`;
    plotChart(chart, traces);
  }
}

// The diff of GET /runs-diff: one row per key that differs, one column per run (in the asked
// order); null is a key the run does not have.
function renderDiff(runs, diff) {
  const head = runs.map((r, i) => `<th><span class="swatch" style="background:${PALETTE[i % PALETTE.length]}"></span>` +
    `<span class="mono">${esc(r.run_id)}</span></th>`).join("");
  const rows = diff.rows.map((row) => `<tr data-section="${esc(row.section)}" data-key="${esc(row.key)}">
    <td class="muted">${esc(row.section)}</td><td class="mono">${esc(row.key)}</td>
    ${row.values.map((v) => v === null ? `<td class="muted">absent</td>`
      : `<td class="mono">${esc(v)}</td>`).join("")}</tr>`).join("");
  document.getElementById("diff").innerHTML = (diff.rows.length
    ? `<table id="diff-table"><thead><tr><th>section</th><th>key</th>${head}</tr></thead>
      <tbody>${rows}</tbody></table>` : `<div class="empty">Nothing differs.</div>`) +
    `<p class="muted" id="diff-same">${diff.same} compared key${diff.same === 1 ? " is" : "s are"} the same in all runs</p>`;
}

async function comparePage(query) {
  const asked = [...new Set((query.get("runs") || "").split(",").map((s) => s.trim()).filter(Boolean))];
  crumbs([["projects", "#/"], ["compare"]]);
  if (asked.length < 2 || asked.length > MAX_COMPARED) {
    main.innerHTML = `<div class="panel error">Compare takes 2 to ${MAX_COMPARED} runs
      (#/compare?runs=A,B); this link names ${asked.length}.</div>`;
    return;
  }
  let runs = await Promise.all(asked.map((id) => api(`/runs/${encodeURIComponent(id)}`)));
  const projects = [...new Set(runs.map((r) => r.project))];
  crumbs([["projects", "#/"], ...projects.map((p) => [p, `#/projects/${encodeURIComponent(p)}`]),
    [`compare ${runs.length} runs`]]);
  main.innerHTML = `
    <div class="page-head"><h1>Compare ${runs.length} runs</h1>
      <span class="sub">curves on the same step axis; the table lists what differs</span></div>
    <section class="panel"><div id="compared"></div></section>
    <section class="panel"><h2>Curves <span class="aside"><label for="smoothing">smoothing</label>
      <input type="range" id="smoothing" min="0" max="0.99" step="0.01" value="0">
      <span class="mono" id="smoothing-value">0</span></span></h2>
      <div class="charts" id="compare-curves"></div></section>
    <section class="panel"><h2>Differences</h2><div id="diff"><p class="muted">loading…</p></div></section>`;
  const legend = () => {
    document.getElementById("compared").innerHTML = table(["", "run", "experiment", "method", "status", "submitted"],
      runs.map((r, i) => [`<span class="swatch" style="background:${PALETTE[i % PALETTE.length]}"></span>`,
        runLink(r.run_id), esc(r.experiment), esc(r.method), badge(r.status), when(r.created_at)]),
      "compared-runs");
  };
  const charts = new Map();
  const slider = document.getElementById("smoothing");
  let metrics = [];
  const draw = () => drawCompared(runs, metrics, Number(slider.value), charts);
  slider.addEventListener("input", () => {
    document.getElementById("smoothing-value").textContent = slider.value;
    draw();
  });
  const load = async () => {
    metrics = await Promise.all(runs.map((r) =>
      api(`/runs/${encodeURIComponent(r.run_id)}/metrics?max_points=1000`)));
    legend();
    draw();
  };
  await load();
  const ids = runs.map((r) => `run=${encodeURIComponent(r.run_id)}`).join("&");
  api(`/runs-diff?${ids}`).then((diff) => renderDiff(runs, diff)).catch((err) => {
    document.getElementById("diff").innerHTML = `<div class="error">${esc(err.message)}</div>`;
  });
  let busy = false;
  every(5000, async () => { // curves of runs still going grow; ended ones are read once
    if (busy || !runs.some((r) => ACTIVE.has(r.status))) return;
    busy = true;
    try {
      runs = await Promise.all(runs.map((r) => api(`/runs/${encodeURIComponent(r.run_id)}`)));
      await load();
    } catch (_) { /* next tick */ } finally { busy = false; }
  });
}

// ---- routing ----------------------------------------------------------------------------------

async function route() {
  for (const stop of teardown) stop();
  teardown = [];
  const [path, queryText] = location.hash.replace(/^#/, "").split("?");
  const query = new URLSearchParams(queryText || "");
  if (query.has("token")) { // a signed-in link: keep the token, drop it from the address bar
    sessionStorage.setItem(TOKEN_KEY, query.get("token"));
    query.delete("token");
    const rest = query.toString();
    history.replaceState(null, "", `#${path || "/"}${rest ? `?${rest}` : ""}`);
  }
  if (!token()) return signIn("");
  const parts = (path || "/").split("/").filter(Boolean).map(decodeURIComponent);
  try {
    api("/whoami").then(showWho).catch(() => {});
    if (parts[0] === "runs" && parts[1]) await runPage(parts[1]);
    else if (parts[0] === "sweeps" && parts[1]) await sweepPage(parts[1]);
    else if (parts[0] === "compare") await comparePage(query);
    else if (parts[0] === "projects" && parts[1]) await projectPage(parts[1], query);
    else await projectsPage();
  } catch (err) {
    if (err instanceof AuthError) return signIn("That token was not accepted.");
    main.innerHTML = `<div class="panel error">${esc(err.message)}</div>`;
  }
}

window.addEventListener("hashchange", route);
route();
