// The SLA Orchestrator dashboard: plain JavaScript over the /v1 API, no build step, nothing
// fetched from elsewhere. The API token lives in this tab's sessionStorage and is sent as a
// bearer header; the page shows and does exactly what the token's principal may.
"use strict";

const TOKEN_KEY = "orch-token";
const PAGE_SIZE = 100;
// the overview reads every job (10,000: a few MB, about a second of the server's time), so it
// is refreshed less often than a job's page; neither is refreshed while the tab is hidden
const REFRESH_MS = { overview: 15000, job: 2000 };
// the job states and the ended ones, read from the API once signed in (/v1/dashboard/states):
// the page spells none of them
let ENDED = new Set();
const SVG_NS = "http://www.w3.org/2000/svg";

const ui = { me: null, rows: [], page: 0, timer: null, view: "", stale: false };

// ---- small helpers ------------------------------------------------------------------------

function $(id) { return document.getElementById(id); }

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") el.className = v;
    else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v);
  }
  for (const c of children) el.append(c instanceof Node ? c : String(c ?? ""));
  return el;
}

function svg(tag, attrs, text) {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
  if (text !== undefined) el.textContent = text;
  return el;
}

function fmt(x, digits = 1) {
  return typeof x === "number" ? x.toLocaleString(undefined, { maximumFractionDigits: digits }) : "-";
}

function when(ts) { return ts ? new Date(ts * 1000).toLocaleString() : "-"; }

function showError(message) {
  const el = $("error");
  el.textContent = message || "";
  el.hidden = !message;
}

// ---- the API ------------------------------------------------------------------------------

class Unauthorized extends Error {}

async function api(path, options = {}) {
  const token = sessionStorage.getItem(TOKEN_KEY);
  const headers = { Accept: "application/json", Authorization: `Bearer ${token}` };
  const res = await fetch(path, { ...options, headers });
  if (res.status === 401) throw new Unauthorized("the token is unknown, malformed or revoked");
  const body = res.headers.get("content-type")?.includes("json") ? await res.json() : null;
  if (!res.ok) {
    const detail = body && body.detail;
    throw new Error(typeof detail === "string" ? detail : `${res.status} ${res.statusText}`);
  }
  return body;
}

async function optional(path) {
  try { return await api(path); } catch (err) {
    if (err instanceof Unauthorized) throw err;
    return null;  // e.g. no scheduler publishes a pool view (404)
  }
}

function mayCancel(job) {
  if (!ui.me || ENDED.has(job.state) || job.state === "cancelling") return false;
  return ui.me.role === "admin" || (ui.me.role === "member" && ui.me.team === job.team);
}

async function cancel(job) {
  if (!window.confirm(`Cancel ${job.id}?`)) return;
  try {
    await api(`/v1/jobs/${encodeURIComponent(job.id)}/cancel`, { method: "POST" });
    showError("");
  } catch (err) { fail(err); }
  route();
}

// ---- sign-in and routing ------------------------------------------------------------------

function fail(err) {
  if (err instanceof Unauthorized) {
    sessionStorage.removeItem(TOKEN_KEY);
    ui.me = null;
    showOnly("login-view");
  }
  showError(err.message);
}

function showOnly(id) {
  for (const v of ["login-view", "overview-view", "job-view"]) $(v).hidden = v !== id;
  $("logout").hidden = id === "login-view";
  if (id === "login-view") $("whoami").textContent = "";
}

async function signIn(event) {
  event.preventDefault();
  sessionStorage.setItem(TOKEN_KEY, $("token").value.trim());
  $("token").value = "";
  await route();
}

async function route() {
  clearTimeout(ui.timer);
  if (!sessionStorage.getItem(TOKEN_KEY)) { showOnly("login-view"); return; }
  try {
    if (!ui.me) {
      ui.me = await api("/v1/whoami");
      const team = ui.me.team ? ` of ${ui.me.team}` : "";
      $("whoami").textContent = `${ui.me.name} (${ui.me.role}${team})`;
    }
    await loadStates();
    const match = location.hash.match(/^#\/job\/(.+)$/);
    if (match) await jobPage(decodeURIComponent(match[1]));
    else await overview();
    showError("");
  } catch (err) { fail(err); }
}

function refresh(kind) {
  clearTimeout(ui.timer);
  ui.timer = setTimeout(() => {
    if (document.hidden) ui.stale = true;
    else route();
  }, REFRESH_MS[kind]);
}

// ---- the overview: pool, teams, queues, jobs ---------------------------------------------

async function overview() {
  const [pool, rows, history] = await Promise.all([optional("/v1/pool"),
    api("/v1/dashboard/jobs"), api("/v1/dashboard/pool-history?count=360")]);
  if (ui.view !== "overview") { ui.page = 0; ui.view = "overview"; }
  showOnly("overview-view");
  ui.rows = rows;
  renderPool(pool);
  renderTeams(pool);
  renderQueues(rows);
  renderHistory(history);
  renderAttainment(rows);
  renderJobs();
  if (!document.body.dataset.jobsRendered) {
    document.body.dataset.jobsRendered = String(performance.now());
  }
  refresh("overview");
}

function nodeKind(node) {
  // the pool's GPU kind (orchestrator/kinds.py); a view published before kinds: the models
  if (node.kind) return node.kind;
  const models = [...new Set((node.models || []).map((g) => g.model))].sort();
  return node.virtual || !models.length ? "virtual" : models.join(" + ");
}

function renderPool(pool) {
  const el = $("pool");
  if (!pool) { el.replaceChildren(h("p", { class: "muted" }, "No scheduler is running.")); return; }
  const kinds = new Map();
  for (const n of pool.nodes) {
    const k = kinds.get(nodeKind(n)) || { used: 0, total: 0 };
    k.used += n.used_gpus; k.total += n.gpus;
    kinds.set(nodeKind(n), k);
  }
  const bars = [...kinds].map(([kind, k]) => ({ label: kind, value: k.used, max: k.total }));
  const virtual = kinds.has("virtual") ? "; virtual: GPU slots backed by the CPU" : "";
  el.replaceChildren(barChart(bars, "GPUs"), h("p", { class: "muted" },
    `${pool.nodes.length} node(s), policy ${pool.policy}${virtual}`));
}

function renderTeams(pool) {
  const el = $("teams");
  const teams = pool ? pool.teams : [];
  if (!teams.length) { el.replaceChildren(h("p", { class: "muted" }, "No team holds GPUs.")); return; }
  const total = pool.nodes.reduce((s, n) => s + n.gpus, 0);
  const bars = teams.map((t) => ({
    label: t.team, value: t.used_gpus, max: t.max_gpus || total, mark: t.guaranteed_gpus,
    note: `${t.used_gpus} used / ${t.guaranteed_gpus} guaranteed` +
      (t.borrowed_gpus ? `, ${t.borrowed_gpus} borrowed` : "") +
      (t.queued_gpus ? `, ${t.queued_gpus} queued` : ""),
  }));
  el.replaceChildren(barChart(bars, "GPUs"), h("p", { class: "muted" },
    "GPUs used against the team's cap (or the pool); the tick is its guarantee, orange is " +
    "borrowed beyond it."));
}

function renderQueues(rows) {
  const counts = new Map();
  for (const r of rows) {
    if (r.state !== "queued") continue;
    const key = `${r.class}\u0000${r.team}`;
    counts.set(key, (counts.get(key) || 0) + 1);
  }
  const body = [...counts].sort().map(([key, n]) => {
    const [cls, team] = key.split("\u0000");
    return h("tr", {}, h("td", {}, cls), h("td", {}, team), h("td", {}, n));
  });
  $("queues").replaceChildren(body.length
    ? h("table", {}, h("thead", {}, h("tr", {}, h("th", {}, "class"), h("th", {}, "team"),
      h("th", {}, "queued"))), h("tbody", {}, ...body))
    : h("p", { class: "muted" }, "No job waits."));
}

// The pool's use over the last hour (a sample per 10 s): all GPUs held, and each team's.
function renderHistory(history) {
  const el = $("history");
  if (!history.length) {
    el.replaceChildren(h("p", { class: "muted" }, "No use recorded yet (a scheduler samples " +
      "the pool every 10 s)."));
    return;
  }
  const teams = [...new Set(history.flatMap((s) => Object.keys(s.teams)))].sort();
  const series = [{ name: "all teams", pts: history.map((s) => [s.at, s.used]) }].concat(
    teams.map((t) => ({ name: t || "(none)", pts: history.map((s) => [s.at, s.teams[t] || 0]) })));
  drawLines(el, series, "GPUs", history[history.length - 1].gpus, "pool");
}

// SLA attainment per team: the share of ended jobs whose SLA was judged that met it, over the
// last hour, the last day and every job the namespace remembers.
function renderAttainment(rows) {
  const now = Date.now() / 1000, windows = [["last hour", 3600], ["last 24 h", 86400],
    ["all", Infinity]];
  const judged = rows.filter((r) => ENDED.has(r.state) && r.verdict.met !== null);
  const teams = [...new Set(judged.map((r) => r.team))].sort();
  if (!teams.length) {
    $("attainment").replaceChildren(h("p", { class: "muted" }, "No ended job judged yet."));
    return;
  }
  const cell = (team, age) => {
    const inWindow = judged.filter((r) => r.team === team && now - r.updated_at <= age);
    if (!inWindow.length) return h("td", { class: "muted" }, "-");
    const met = inWindow.filter((r) => r.verdict.met).length;
    return h("td", { title: `${met} of ${inWindow.length} met` },
      `${Math.round((100 * met) / inWindow.length)}% (${met}/${inWindow.length})`);
  };
  $("attainment").replaceChildren(h("table", {},
    h("thead", {}, h("tr", {}, h("th", {}, "team"), ...windows.map(([w]) => h("th", {}, w)))),
    h("tbody", {}, ...teams.map((t) => h("tr", { "data-team": t }, h("td", {}, t),
      ...windows.map(([, age]) => cell(t, age)))))));
}

function visibleRows() {
  const text = $("filter").value.trim().toLowerCase();
  const state = $("state-filter").value;
  return ui.rows.filter((r) => (!state || r.state === state) &&
    (!text || `${r.id} ${r.team} ${r.state} ${r.class}`.toLowerCase().includes(text)));
}

function verdictBadge(v) {
  const kind = v.met === true ? "met" : v.met === false ? "violated" : "pending";
  const label = v.met === true ? "met" : v.met === false ? "missed" : "not measured";
  return h("span", { class: `badge ${kind}` }, label);
}

function renderJobs() {
  const rows = visibleRows();
  const pages = Math.max(1, Math.ceil(rows.length / PAGE_SIZE));
  ui.page = Math.min(ui.page, pages - 1);
  const shown = rows.slice(ui.page * PAGE_SIZE, (ui.page + 1) * PAGE_SIZE);
  const body = shown.map((r) => h("tr", { "data-id": r.id },
    h("td", {}, h("a", { href: `#/job/${encodeURIComponent(r.id)}` }, r.id)),
    h("td", {}, r.team), h("td", {}, r.class),
    h("td", { class: `state-${r.state}` }, r.state), h("td", {}, r.gpus),
    h("td", {}, r.verdict.target), h("td", {}, r.verdict.measured),
    h("td", {}, verdictBadge(r.verdict)),
    h("td", {}, mayCancel(r)
      ? h("button", { class: "danger cancel", type: "button", onclick: () => cancel(r) }, "cancel")
      : "")));
  $("jobs-table").tBodies[0].replaceChildren(...body);
  $("jobs-count").textContent = `${rows.length} of ${ui.rows.length}`;
  $("page").textContent = `page ${ui.page + 1} of ${pages}`;
  $("prev").disabled = ui.page === 0;
  $("next").disabled = ui.page >= pages - 1;
}

// ---- a job's page -------------------------------------------------------------------------

async function jobPage(ref) {
  const path = `/v1/jobs/${encodeURIComponent(ref)}`;
  const [detail, history] = await Promise.all([api(path), api(`${path}/metrics?count=300`)]);
  ui.view = "job";
  showOnly("job-view");
  const job = detail.job;
  $("job-title").textContent = `${job.name} (${job.id})`;
  const facts = [["state", job.state], ["team", job.team], ["class", job.class],
    ["GPUs", job.gpus], ["submitted", when(job.submitted_at)], ["by", job.by || "-"],
    ["SLA", job.verdict.target], ["measured", job.verdict.measured]];
  $("job-summary").replaceChildren(
    ...facts.map(([k, v]) => h("span", { id: `job-${k.toLowerCase()}` }, h("b", {}, k), v)),
    verdictBadge(job.verdict), h("span", { class: "muted" }, job.message));
  const button = $("cancel");
  button.hidden = !mayCancel(job);
  button.className = "danger";
  button.onclick = () => cancel(job);
  const sla = job.spec.sla || {};
  const latency = sla.latency || {};
  const pct = latency.percentile || 95;  // the percentile the SLA names, against its ceiling
  $("latency-title").textContent = `p${pct} latency (ms)`;
  drawSeries($("chart-latency"), history, `p${pct}_ms`, "ms", latency.max_ms);
  drawSeries($("chart-tput"), history, "samples_per_s", "samples/s",
    (sla.throughput || {}).min_samples_per_s);
  const busy = history.filter((r) => typeof r.gpu_busy_share === "number")
    .map((r) => ({ ts: r.ts, busy_pct: 100 * r.gpu_busy_share }));
  drawSeries($("chart-busy"), busy, "busy_pct", "% busy");
  renderEvents(detail.events);
  renderTrials(detail.tuning);
  renderLogs(await api(`${path}/logs?tail=200`));
  if (!ENDED.has(job.state)) refresh("job");
}

function renderEvents(events) {
  $("events").tBodies[0].replaceChildren(...events.slice().reverse().map((e) => h("tr", {},
    h("td", {}, when(e.ts)), h("td", { class: `state-${e.event}` }, e.event),
    h("td", {}, e.from || ""), h("td", { class: "msg" }, e.message || ""))));
}

function renderLogs(entries) {
  $("logs").textContent = entries.length
    ? entries.map((e) => `[rank ${e.rank}${e.stream === "err" ? " err" : ""}] ${e.line}`)
      .join("\n")
    : "No output captured yet.";
}

function describeConfig(c) {
  return Object.entries(c || {}).map(([k, v]) => `${k}=${v}`).join(" ");
}

function renderTrials(tuning) {
  $("tuning").replaceChildren(tuning
    ? h("p", {}, `${tuning.status}: ${tuning.trials} trial(s), cache ${tuning.cache}`)
    : h("p", { class: "muted" }, "Not tuned."));
  const rows = (tuning && tuning.trials_table) || [];
  $("trials").hidden = !rows.length;
  $("trials").tBodies[0].replaceChildren(...rows.map((t) => h("tr", {},
    h("td", {}, t.number), h("td", {}, describeConfig(t.config)), h("td", {}, t.source),
    h("td", {}, fmt(t.measurement.samples_per_s)), h("td", {}, fmt(t.measurement.p95_ms)),
    h("td", {}, t.feasible ? "meets SLA" : t.reason || "misses"))));
}

// ---- charts (inline SVG) ------------------------------------------------------------------

function barChart(bars, unit) {
  const rowH = 26, width = 420, labelW = 100, barW = width - labelW - 70;
  const root = svg("svg", { viewBox: `0 0 ${width} ${bars.length * rowH + 4}`, role: "img" });
  bars.forEach((b, i) => {
    const y = i * rowH + 4, scale = b.max > 0 ? barW / b.max : 0;
    root.append(svg("text", { x: 0, y: y + 13 }, b.label.slice(0, 16)));
    root.append(svg("rect", { x: labelW, y, width: barW, height: 16, fill: "#eef1f6" }));
    const used = svg("rect", { x: labelW, y, width: Math.min(barW, b.value * scale), height: 16,
      fill: b.mark !== undefined && b.value > b.mark ? "#b54708" : "#3456c8" });
    used.append(svg("title", {}, b.note || `${b.value} of ${b.max} ${unit}`));
    root.append(used);
    if (b.mark) {
      const x = labelW + Math.min(barW, b.mark * scale);
      root.append(svg("line", { x1: x, x2: x, y1: y - 2, y2: y + 18, stroke: "#1d2330",
        "stroke-width": 2 }));
    }
    root.append(svg("text", { x: labelW + barW + 8, y: y + 13 }, `${b.value} / ${b.max}`));
  });
  return root;
}

const COLOURS = ["#3456c8", "#c4320a", "#12805c", "#8e44ad", "#b7791f", "#2c7a7b"];

function drawSeries(el, history, key, unit, threshold) {
  const pts = history.filter((r) => typeof r[key] === "number").map((r) => [r.ts, r[key]]);
  if (!pts.length) {
    el.replaceChildren(h("p", { class: "muted" }, `No ${unit} reported yet.`));
    return;
  }
  drawLines(el, [{ name: key, pts }], unit, threshold, "SLA");
}

// Lines of [time, value] points on one time axis; `mark` is a dashed level (an SLA, the
// pool's size) named `markName`; with more than one line, a legend under the chart names each
// line's colour (in HTML: it wraps, and a long team name overlaps nothing).
function drawLines(el, series, unit, mark, markName) {
  const all = series.flatMap((s) => s.pts);
  const W = 480, H = 180, L = 48, B = 20, T = 8;
  const t0 = Math.min(...all.map((p) => p[0]));
  const t1 = Math.max(Math.max(...all.map((p) => p[0])), t0 + 1);
  const values = all.map((p) => p[1]).concat(mark ? [mark] : []);
  const vmax = Math.max(...values) * 1.1 || 1;
  const x = (t) => L + ((t - t0) / (t1 - t0)) * (W - L - 4);
  const y = (v) => T + (1 - v / vmax) * (H - T - B);
  const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, role: "img",
    "data-points": series[0].pts.length, "data-series": series.length });
  for (const v of [0, vmax / 2, vmax]) {
    root.append(svg("line", { x1: L, x2: W, y1: y(v), y2: y(v), stroke: "#e4e7ec" }));
    root.append(svg("text", { x: 2, y: y(v) + 4 }, fmt(v, v < 10 ? 2 : 0)));
  }
  if (mark) {
    root.append(svg("line", { x1: L, x2: W, y1: y(mark), y2: y(mark),
      stroke: "#c4320a", "stroke-dasharray": "5 4" }));
    root.append(svg("text", { x: W - 100, y: y(mark) - 4 }, `${markName} ${fmt(mark)} ${unit}`));
  }
  const legend = h("ul", { class: "legend" });
  series.forEach((s, i) => {
    const line = s.pts.map((p) => `${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`).join(" ");
    const colour = COLOURS[i % COLOURS.length];
    const poly = svg("polyline", { points: line, fill: "none", stroke: colour,
      "stroke-width": 2, "data-name": s.name });
    poly.append(svg("title", {}, s.name));
    root.append(poly);
    const swatch = h("span", { class: "swatch" });
    swatch.style.backgroundColor = colour;
    legend.append(h("li", { "data-name": s.name }, swatch, s.name));
  });
  root.append(svg("text", { x: L, y: H - 4 }, new Date(t0 * 1000).toLocaleTimeString()));
  root.append(svg("text", { x: W - 60, y: H - 4 }, new Date(t1 * 1000).toLocaleTimeString()));
  el.replaceChildren(...(series.length > 1 ? [root, legend] : [root]));
}

// ---- start --------------------------------------------------------------------------------

async function loadStates() {
  if (ENDED.size) return;
  const known = await api("/v1/dashboard/states");
  ENDED = new Set(known.ended);
  for (const s of known.states) $("state-filter").append(h("option", { value: s }, s));
}

function start() {
  $("login-form").addEventListener("submit", signIn);
  $("logout").addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN_KEY);
    ui.me = null;
    clearTimeout(ui.timer);
    showOnly("login-view");
  });
  $("filter").addEventListener("input", () => { ui.page = 0; renderJobs(); });
  $("state-filter").addEventListener("change", () => { ui.page = 0; renderJobs(); });
  $("prev").addEventListener("click", () => { ui.page -= 1; renderJobs(); });
  $("next").addEventListener("click", () => { ui.page += 1; renderJobs(); });
  window.addEventListener("hashchange", () => { ui.view = ""; route(); });
  document.addEventListener("visibilitychange", () => {
    if (!document.hidden && ui.stale) { ui.stale = false; route(); }
  });
  route();
}

start();
