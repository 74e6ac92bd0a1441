"use strict";
const TOKEN = "__TOKEN__";
const q = (path) => path + (path.includes("?") ? "&" : "?") + "token=" + encodeURIComponent(TOKEN);
const $ = (id) => document.getElementById(id);
let chartsVersion = null, mode = null, source = null, replay = null;

function setText(id, value) {
  const el = $(id);
  if (el.textContent !== String(value)) el.textContent = value;
}

function seconds(value) {
  if (value >= 1) return value.toPrecision(3) + " s";
  if (value >= 1e-3) return (value * 1e3).toPrecision(3) + " ms";
  return (value * 1e6).toPrecision(3) + " \u00b5s";
}

function money(value) {
  if (!value) return "0";
  if (value >= 100) return value.toFixed(2);
  return value.toPrecision(4).replace(/(\.\d*?)0+$/, "$1").replace(/\.$/, "");
}

// Drawing charts costs the browser CPU that a run on a small machine needs too. While the
// run plays, they are redrawn at most every 2 s and at most 5% of the time, and a chart
// scrolled out of sight waits until it is seen again; when the run waits (paused, ended,
// a replay), every chart is drawn at once.
const visible = new Set();
const observer = new IntersectionObserver((entries) => {
  for (const entry of entries) {
    const div = entry.target;
    if (entry.isIntersecting) {
      visible.add(div);
      if (div.pendingSpec) drawChart(div, div.pendingSpec);
    } else {
      visible.delete(div);
    }
  }
});
let chartsDue = 0, chartsPending = null, chartsTimer = null, chartsSettled = true;

function drawChart(div, spec) {
  div.pendingSpec = null;
  Plotly.react(div, spec.data, spec.layout, {displaylogo: false, responsive: true});
}

function drawCharts(charts, settled) {
  const main = $("charts");
  // A chart the state has not (a replay before the first model call) goes, as in a report.
  for (const div of main.querySelectorAll(".chart")) {
    if (div.dataset.chart in charts) continue;
    observer.unobserve(div);
    visible.delete(div);
    div.remove();
  }
  let previous = null;  // the charts in the report's order, a new one after the one before it
  for (const [name, spec] of Object.entries(charts)) {
    let div = $("chart-" + name);
    if (!div) {
      div = document.createElement("section");
      div.className = "card chart";
      div.id = "chart-" + name;
      div.dataset.chart = name;
      main.insertBefore(div, previous ? previous.nextSibling : main.firstChild);
      observer.observe(div);
      drawChart(div, spec);
    } else if (settled || visible.has(div)) {
      drawChart(div, spec);
    } else {
      div.pendingSpec = spec;
    }
    previous = div;
  }
}

function offerCharts(charts, settled) {
  chartsPending = charts;
  chartsSettled = settled;
  const wait = settled ? 0 : chartsDue - performance.now();
  if (wait <= 0) flushCharts();
  else if (chartsTimer === null) chartsTimer = setTimeout(flushCharts, wait);
}

function flushCharts() {
  clearTimeout(chartsTimer);
  chartsTimer = null;
  if (chartsPending === null) return;
  const start = performance.now();
  drawCharts(chartsPending, chartsSettled);
  chartsPending = null;
  const cost = performance.now() - start;
  chartsDue = performance.now() + Math.max(2000, 20 * cost);
}

function drawEvents(rows) {
  const body = $("events");
  const out = document.createDocumentFragment();
  for (const [i, step, time, agent, kind, text] of rows) {
    const tr = document.createElement("tr");
    const cells = [[i, "num"], [step, "num"],
                   [typeof time === "number" ? time.toFixed(3) : time, "num"],
                   ["@" + agent, ""], [kind, ""], [text, "text"]];
    for (const [value, cls] of cells) {
      const td = document.createElement("td");
      td.textContent = value;
      if (cls) td.className = cls;
      tr.appendChild(td);
    }
    out.appendChild(tr);
  }
  body.replaceChildren(out);
}

// The model calls by endpoint (a run with sim.llm.endpoints): a card above the events,
// made when a snapshot first has them and gone when one has none (a replay's slider at 0).
function drawEndpoints(table) {
  let card = $("endpoints-card");
  if (!table) {
    if (card) card.remove();
    return;
  }
  if (!card) {
    card = document.createElement("section");
    card.className = "card";
    card.id = "endpoints-card";
    card.innerHTML = "<h2>By endpoint</h2><table class='endpoints'><thead></thead>" +
      "<tbody></tbody></table><p class='note'>fallback in: calls moved here because the " +
      "endpoint they were routed to was down; fallback out: calls routed here and moved to " +
      "its fallback. Latency of the calls that returned.</p>";
    $("charts").insertBefore(card, $("events-card"));
  }
  const head = document.createElement("tr");
  table.cols.forEach((c, i) => {
    const th = document.createElement("th");
    th.textContent = c;
    if (table.numeric[i]) th.className = "num";
    head.appendChild(th);
  });
  card.querySelector("thead").replaceChildren(head);
  const latency = table.cols.indexOf("latency mean");  // it and the percentiles after it
  const body = document.createDocumentFragment();
  for (const row of table.rows) {
    const tr = document.createElement("tr");
    tr.dataset.endpoint = row[0];
    row.forEach((value, i) => {
      const td = document.createElement("td");
      td.textContent = value === null ? "" : i >= latency ? seconds(value) :
        table.cols[i] === "cost" ? money(value) :
        typeof value === "number" ? value.toLocaleString("en-US") : String(value);
      if (table.numeric[i]) td.className = "num";
      tr.appendChild(td);
    });
    body.appendChild(tr);
  }
  card.querySelector("tbody").replaceChildren(body);
}

function render(s) {
  mode = s.mode;
  const state = s.state || "starting";
  const badge = $("state");
  let label = state;
  if (state === "paused" && s.paused_at !== null && s.paused_at !== undefined)
    label = "paused at step " + s.paused_at;
  setText("state", label);
  badge.className = "badge " + state;
  badge.dataset.state = state;
  const t = s.totals;
  setText("step", t.steps);
  setText("steps-total", s.steps_total ? " / " + s.steps_total : "");
  setText("events-count", t.events);
  setText("calls", t.calls);
  setText("tokens", t.tokens);
  setText("cost", money(Number(t.cost)));
  setText("failed", t.failed);
  setText("message", s.message || "");
  setText("scenario", s.scenario ? "scenario " + s.scenario : "");
  const live = s.mode === "live";
  const over = ["ended", "stopping"].includes(state);
  $("stop").style.display = live ? "" : "none";
  $("play").disabled = live && (over || state === "playing");
  $("pause").disabled = live && (over || state === "paused");
  $("step-once").disabled = live && over;
  $("stop").disabled = over;
  if (s.charts && s.charts_version !== chartsVersion) {
    chartsVersion = s.charts_version;
    offerCharts(s.charts, !(live && state === "playing"));
  }
  drawEvents(s.events);
  drawEndpoints(s.endpoints);
  document.body.dataset.ready = "1";
}

async function control(action) {
  if (mode === "replay") { replayControl(action); return; }
  const response = await fetch(q("api/control/" + action), {method: "POST"});
  if (!response.ok) setText("message", await response.text());
}

// -- replay: the slider moves through the events of a run directory --------------
let timer = null, pending = null, fetching = false, boundaries = [];
async function showAt(position) {
  if (fetching) { pending = position; return; }
  fetching = true;
  try {
    const response = await fetch(q("api/snapshot?pos=" + position));
    const s = await response.json();
    boundaries = s.boundaries;
    const slider = $("slider");
    slider.max = s.events_total;
    slider.value = s.position;
    setText("position", s.position + " / " + s.events_total);
    render(s);
  } finally {
    fetching = false;
    if (pending !== null) { const next = pending; pending = null; showAt(next); }
  }
}
function nextBoundary() {
  const at = Number($("slider").value);
  for (const end of boundaries) if (end > at) return end;
  return Number($("slider").max);
}
function replayControl(action) {
  if (action === "pause") { clearInterval(timer); timer = null; }
  if (action === "step") { clearInterval(timer); timer = null; showAt(nextBoundary()); }
  if (action === "play" && timer === null) {
    if (Number($("slider").value) >= Number($("slider").max)) showAt(0);
    timer = setInterval(() => {
      const slider = $("slider");
      if (Number(slider.value) >= Number(slider.max)) {
        clearInterval(timer); timer = null; return;
      }
      showAt(nextBoundary());
    }, 700);
  }
}

async function start() {
  $("play").onclick = () => control("play");
  $("pause").onclick = () => control("pause");
  $("step-once").onclick = () => control("step");
  $("stop").onclick = () => control("stop");
  const first = await (await fetch(q("api/snapshot"))).json();
  if (first.mode === "replay") {
    mode = "replay";
    $("slider-box").style.display = "flex";
    $("slider").addEventListener("input", (e) => showAt(Number(e.target.value)));
    await showAt(first.position);  // the whole run, at its end
    if (first.state === "unfinished") follow();
    return;
  }
  render(first);
  follow();
}

function follow() {
  source = new EventSource(q("stream"));
  source.addEventListener("snapshot", (e) => {
    const s = JSON.parse(e.data);
    if (s.mode === "replay") {
      const slider = $("slider");
      const atEnd = Number(slider.value) >= Number(slider.max);
      slider.max = s.position;
      if (atEnd) showAt(s.position);
      return;
    }
    render(s);
  });
  source.addEventListener("end", () => { source.close(); source = null; });
}

start();
