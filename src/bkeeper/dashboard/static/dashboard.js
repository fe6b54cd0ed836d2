// bkeeper dashboard: fetch the JSON API, fill the tables, draw the charts with plotly.js.
// Everything shown comes from /api/*; data is inserted as text (never as HTML).
"use strict";

const REFRESH_MS_DEFAULT = 2000;
const CHART_LAYOUT = {
  margin: { l: 50, r: 10, t: 30, b: 30 },
  legend: { orientation: "h", y: -0.2, font: { size: 10 } },
  font: { size: 11 },
};

function el(tag, text, cls) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (cls) node.className = cls;
  return node;
}

function bytes(n) {
  if (n === null || n === undefined) return "-";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i += 1; }
  return (i === 0 ? n : n.toFixed(1)) + " " + units[i];
}

function num(x, digits) {
  return x === null || x === undefined ? "-" : Number(x).toFixed(digits);
}

function when(ms) {
  return ms === null || ms === undefined ? "-" : new Date(ms).toISOString().replace("T", " ").slice(0, 19);
}

function fillRows(table, rows) {
  const body = document.querySelector(table + " tbody");
  body.replaceChildren(...rows);
}

function row(cells) {
  const tr = el("tr");
  for (const cell of cells) {
    if (cell instanceof Node) { const td = el("td"); td.appendChild(cell); tr.appendChild(td); }
    else if (typeof cell === "object" && cell !== null) tr.appendChild(el("td", cell.text, cell.cls));
    else tr.appendChild(el("td", cell));
  }
  return tr;
}

function diskCell(b) {
  if (!b.total_bytes) return el("span", "-");
  const used = b.total_bytes - b.free_bytes;
  const wrap = el("span");
  const bar = el("span", null, "bar");
  const fill = el("span");
  fill.style.width = Math.round((100 * used) / b.total_bytes) + "%";
  bar.appendChild(fill);
  wrap.appendChild(bar);
  wrap.appendChild(el("span", bytes(used) + " / " + bytes(b.total_bytes)));
  return wrap;
}

function renderOverview(o) {
  document.getElementById("cluster-uri").textContent = o.cluster.metadata_uri;
  document.getElementById("instance-id").textContent = "instance " + (o.cluster.instance_id || "-");
  document.getElementById("updated").textContent = "updated " + when(o.updated_ms.bookies);
  const counts = { writable: 0, "read-only": 0, down: 0 };
  fillRows("#bookies", o.bookies.map((b) => {
    counts[b.state] = (counts[b.state] || 0) + 1;
    const problems = [b.http_error, b.metrics_error].filter((p) => p).join("; ");
    return row([
      b.bookie_id,
      el("span", b.state, "state state-" + b.state),
      diskCell(b),
      { text: bytes(b.free_bytes), cls: "num" },
      { text: num(b.adds_per_s, 1), cls: "num" },
      { text: num(b.reads_per_s, 1), cls: "num" },
      { text: num(b.add_p99_ms, 2), cls: "num" },
      b.http_url || "-",
      { text: problems, cls: "problem" },
    ]);
  }));
  document.getElementById("bookie-counts").textContent =
    counts.writable + " writable, " + counts["read-only"] + " read-only, " + counts.down + " down" +
    (o.bookies_more ? " (" + o.bookies_more + " more not listed)" : "");
  const errors = Object.entries(o.errors).map(([what, e]) =>
    el("div", "refreshing " + what + " failed at " + when(e.time_ms) + ": " + e.error));
  document.getElementById("errors").replaceChildren(...errors);
  renderRecovery(o.recovery, o.bookies);
  drawDisk(o.bookies);
}

function renderRecovery(r, bookies) {
  if (r.pending) return;
  document.getElementById("auditor").textContent = r.auditor || "none elected";
  document.getElementById("recovery-enabled").textContent = r.enabled ? "enabled" : "disabled";
  document.getElementById("recovery-delay").textContent =
    r.lost_bookie_recovery_delay_s === null ? "not set" : r.lost_bookie_recovery_delay_s + " s";
  document.getElementById("under-replicated-count").textContent =
    (r.under_replicated_is_lower_bound ? "more than " : "") + r.under_replicated;
  document.getElementById("being-replicated").textContent = r.being_replicated.length
    ? r.being_replicated.map(([ledger, worker]) => ledger + " by " + worker).join(", ") : "none";
  let ledgers = 0, size = 0, seen = false;
  for (const b of bookies) {
    if (b.rereplicated_ledgers !== null) { seen = true; ledgers += b.rereplicated_ledgers; }
    if (b.rereplicated_bytes !== null) size += b.rereplicated_bytes;
  }
  document.getElementById("rereplicated").textContent =
    seen ? ledgers + " ledgers, " + bytes(size) + " (since the bookies started)" : "no metrics";
  fillRows("#under-replicated", r.rows.map((u) =>
    row([u.ledger_id, u.missing_replicas.join(", "), when(u.ctime_ms), u.worker || "-",
      u.reason === null ? (u.worker ? "-" : "no reason recorded")
        : u.reason + " (" + u.reason_kind + ", since " + when(u.reason_since_ms) + ")"])));
}

function renderLedgers(p) {
  if (p.pending) return;
  fillRows("#ledgers", p.ledgers.map((l) => row([
    { text: l.ledger_id, cls: "ledger-id" },
    l.state,
    l.ensemble.join(", ") + (l.ensembles > 1 ? " (" + l.ensembles + " ensembles)" : ""),
    l.quorum,
    l.lac === null ? { text: "? " + (l.lac_error || ""), cls: "problem" } : { text: l.lac, cls: "num" },
    { text: bytes(l.length_bytes), cls: "num" },
    when(l.ctime_ms),
  ])));
  document.getElementById("ledger-counts").textContent =
    (p.total_is_lower_bound ? "more than " : "") + p.total + " in all";
  document.getElementById("ledgers-more").textContent = p.more ? p.more + " more (older) not listed" : "";
}

function renderLogs(p) {
  if (p.pending) return;
  fillRows("#logs", p.logs.map((g) => row([
    g.name,
    { text: g.ledgers, cls: "num" },
    g.last_ledger_id === null ? "-" : g.last_ledger_id + " (" + g.last_ledger_state + ")",
    g.error ? { text: g.error, cls: "problem" }
      : { text: (g.size_is_lower_bound ? "≥ " : "") + bytes(g.size_bytes), cls: "num" },
  ])));
  document.getElementById("log-counts").textContent = p.total + " in all";
  document.getElementById("logs-more").textContent = p.more ? p.more + " more not listed" : "";
}

function noMetrics(id, why) {
  const node = document.getElementById(id);
  if (node.dataset.empty === why) return;
  Plotly.purge(node);
  node.replaceChildren(el("div", why, "no-metrics"));
  node.dataset.empty = why;
}

function plot(id, title, traces, yTitle) {
  const node = document.getElementById(id);
  if (node.dataset.empty) { node.replaceChildren(); delete node.dataset.empty; }
  const layout = Object.assign({}, CHART_LAYOUT, {
    title: { text: title, font: { size: 13 } },
    yaxis: { title: { text: yTitle }, rangemode: "tozero" },
    xaxis: { type: "date" },
  });
  Plotly.react(node, traces, layout, { displayModeBar: false, responsive: true });
}

function drawSeries(s) {
  const bookies = Object.entries(s.bookies);
  const charts = [
    ["chart-adds", "adds/s", "adds_per_s", "requests/s"],
    ["chart-reads", "read requests/s", "reads_per_s", "requests/s"],
    ["chart-p99", "add latency p99", "add_p99_ms", "ms"],
  ];
  for (const [id, title, key, unit] of charts) {
    if (!s.metrics_available || bookies.length === 0) {
      noMetrics(id, title + ": no metrics (no bookie serves /metrics)");
      continue;
    }
    plot(id, title, bookies.map(([bookie, points]) => ({
      x: points.time_ms.map((t) => new Date(t)), y: points[key],
      name: bookie, type: "scatter", mode: "lines",
    })), unit);
  }
  const ur = s.under_replicated;
  plot("chart-under-replicated", "under-replicated ledgers", [{
    x: ur.time_ms.map((t) => new Date(t)), y: ur.count, name: "queued",
    type: "scatter", mode: "lines", line: { shape: "hv" },
  }], "ledgers");
}

function drawDisk(bookies) {
  const known = bookies.filter((b) => b.total_bytes);
  const layout = Object.assign({}, CHART_LAYOUT, {
    title: { text: "disk per bookie", font: { size: 13 } }, barmode: "stack",
    yaxis: { title: { text: "GiB" } },
  });
  const gib = (n) => n / (1024 * 1024 * 1024);
  Plotly.react(document.getElementById("chart-disk"), [
    { x: known.map((b) => b.bookie_id), y: known.map((b) => gib(b.total_bytes - b.free_bytes)),
      name: "used", type: "bar" },
    { x: known.map((b) => b.bookie_id), y: known.map((b) => gib(b.free_bytes)),
      name: "free", type: "bar" },
  ], layout, { displayModeBar: false, responsive: true });
}

async function getJson(path) {
  const response = await fetch(path, { cache: "no-store" });
  if (response.status === 401) { window.location.reload(); throw new Error("logged out"); }
  if (!response.ok) throw new Error(path + ": HTTP " + response.status);
  return response.json();
}

let refreshMs = REFRESH_MS_DEFAULT;

async function refresh() {
  try {
    const [overview, series, ledgers, logs] = await Promise.all(
      ["/api/overview", "/api/series", "/api/ledgers", "/api/logs"].map(getJson));
    refreshMs = overview.refresh_ms || REFRESH_MS_DEFAULT;
    renderOverview(overview);
    drawSeries(series);
    renderLedgers(ledgers);
    renderLogs(logs);
    document.body.dataset.loaded = "true";
  } catch (error) {
    document.getElementById("errors").replaceChildren(el("div", "dashboard unreachable: " + error));
  }
  setTimeout(refresh, refreshMs);
}

refresh();
