/* simulacra report: the views of one self-contained page.
 *
 * The data is the JSON of the script element "report-data" (the log, threads,
 * agents and model calls: "report-log", parsed when first needed); the charts are plotly
 * specs drawn with Plotly.newPlot when their view is first shown. Views are
 * hash routes: #/overview, #/log?agent=..&kind=..&q=.., #/threads, #/agents,
 * #/agent/NAME (society runs); #/overview, #/summary, #/replications
 * (studies); #/overview (monitors). Nothing here fetches anything.
 */
(function () {
  "use strict";
  var D = JSON.parse(document.getElementById("report-data").textContent);
  // Work still to come (a timer set, a chunk decoding): the page is settled when none is
  // left and the route shown is the one in the address (tests wait on window.__reportSettled).
  var BUSY = 0;
  function later(fn, ms) { BUSY++; return setTimeout(function () { BUSY--; fn(); }, ms); }
  function cancel(timer) { if (timer !== null) { clearTimeout(timer); BUSY--; } }
  function replaceRoute(hash) {
    history.replaceState(null, "", hash);
    document.body.setAttribute("data-route", location.hash);
  }
  window.__reportSettled = function () {
    return BUSY === 0 && document.body.getAttribute("data-route") === location.hash;
  };
  var PLOT_CONFIG = {displaylogo: false, responsive: true,
                     modeBarButtonsToRemove: ["sendDataToCloud", "lasso2d", "select2d"]};
  var PAGE = 100;

  // -- helpers -------------------------------------------------------------------------
  function esc(value) {
    return String(value).replace(/[&<>"']/g, function (c) {
      return {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c];
    });
  }
  function el(tag, cls, html) {
    var node = document.createElement(tag);
    if (cls) node.className = cls;
    if (html !== undefined) node.innerHTML = html;
    return node;
  }
  function fmt(value) {
    if (value === null || value === undefined) return "";
    if (typeof value === "number") {
      if (Number.isInteger(value)) return value.toLocaleString("en-US");
      return Math.abs(value) >= 1000 ? value.toFixed(1) : String(Number(value.toPrecision(4)));
    }
    if (typeof value === "boolean") return value ? "true" : "false";
    if (typeof value === "object") return JSON.stringify(value);
    return String(value);
  }
  function kvTable(pairs) {
    var rows = pairs.map(function (p) {
      var value = p[1];
      var cls = typeof value === "string" && value.length > 40 && value.indexOf(" ") >= 0 ? "wrap" : "";
      return "<tr><td>" + esc(p[0]) + "</td><td class='" + cls + "'>" + esc(fmt(value)) + "</td></tr>";
    });
    return "<table class='kv'>" + rows.join("") + "</table>";
  }
  function agentLink(name) {
    return "<a href='#/agent/" + encodeURIComponent(name) + "'>@" + esc(name) + "</a>";
  }
  function parseQuery(text) {
    var out = {};
    (text || "").split("&").forEach(function (part) {
      if (!part) return;
      var at = part.indexOf("=");
      var key = decodeURIComponent(at < 0 ? part : part.slice(0, at));
      out[key] = at < 0 ? "" : decodeURIComponent(part.slice(at + 1).replace(/\+/g, " "));
    });
    return out;
  }
  function toQuery(obj) {
    return Object.keys(obj).filter(function (k) {
      return obj[k] !== "" && obj[k] !== null && obj[k] !== undefined && obj[k] !== false;
    }).map(function (k) {
      return encodeURIComponent(k) + "=" + encodeURIComponent(obj[k] === true ? "1" : obj[k]);
    }).join("&");
  }

  // -- charts ----------------------------------------------------------------------------
  function drawChart(div, spec) {
    var layout = Object.assign({}, spec.layout);
    if (D.template) layout.template = D.template;
    Plotly.newPlot(div, spec.data, layout, PLOT_CONFIG);
    div.setAttribute("data-drawn", "1");
  }
  function chartGrid(container, charts) {
    var grid = el("div", "charts");
    container.appendChild(grid);
    // Every cell first, then the charts: plotly sizes a chart to its cell when drawn.
    var divs = charts.map(function (chart) {
      var div = el("div", "chart");
      div.id = "chart-" + chart.id.replace(/[^A-Za-z0-9_-]+/g, "-");
      div.setAttribute("data-chart", chart.id);
      grid.appendChild(div);
      return div;
    });
    charts.forEach(function (chart, i) { drawChart(divs[i], chart.spec); });
    return grid;
  }

  // -- paged tables ----------------------------------------------------------------------
  /* A table of `count` rows drawn a page at a time: rowHtml(k) gives row k's <tr>. */
  function pagedTable(container, headHtml, count, rowHtml, options) {
    options = options || {};
    var size = options.pageSize || PAGE;
    var page = Math.min(options.page || 0, Math.max(0, Math.ceil(count / size) - 1));
    var pager = el("div", "pager");
    var table = el("table", options.cls || "");
    table.innerHTML = "<thead>" + headHtml + "</thead><tbody></tbody>";
    container.appendChild(pager);
    container.appendChild(table);
    function render() {
      var first = page * size, last = Math.min(count, first + size);
      var html = [];
      for (var k = first; k < last; k++) html.push(rowHtml(k));
      table.tBodies[0].innerHTML = html.join("") ||
        "<tr><td colspan='20' class='empty'>" + esc(options.empty || "nothing to show") + "</td></tr>";
      var pages = Math.max(1, Math.ceil(count / size));
      pager.innerHTML = "";
      var prev = el("button", "prev", "&larr; previous");
      var next = el("button", "next", "next &rarr;");
      prev.disabled = page === 0;
      next.disabled = page >= pages - 1;
      prev.onclick = function () { page -= 1; render(); if (options.onPage) options.onPage(page); };
      next.onclick = function () { page += 1; render(); if (options.onPage) options.onPage(page); };
      var info = el("span", "info", count ? (fmt(first + 1) + "&ndash;" + fmt(last) + " of " +
                    fmt(count) + (options.what ? " " + esc(options.what) : "") +
                    " &middot; page " + fmt(page + 1) + " of " + fmt(pages)) : "0 " + esc(options.what || ""));
      pager.appendChild(prev);
      pager.appendChild(next);
      pager.appendChild(info);
    }
    render();
    return {table: table, pager: pager};
  }

  // ======================================================================================
  // Society runs
  // ======================================================================================
  var LOG = null, ROWS = null, AGENT_AT = null, KIND_AT = null;
  /* The action log, the threads, the agents and the model calls are a second JSON
     document, parsed when a view first needs them: the overview does not wait for them. */
  function needLog() {
    if (LOG !== null) return;
    var node = document.getElementById("report-log");
    if (node) Object.assign(D, JSON.parse(node.textContent));
    LOG = D.log || {agents: [], kinds: [], rows: []};
    ROWS = LOG.rows;
    AGENT_AT = new Map();
    LOG.agents.forEach(function (name, i) { AGENT_AT.set(name, i); });
    KIND_AT = new Map();
    LOG.kinds.forEach(function (name, i) { KIND_AT.set(name, i); });
  }
  var LOWER = null;  // lowercased "text agent kind" of every event, built on the first search

  function kindBadge(k) {
    var name = LOG.kinds[k];
    var color = (D.colors && D.colors[name]) || "#667085";
    return "<span class='kind' style='background:" + esc(color) + "'>" + esc(name) + "</span>";
  }
  function linkMentions(text) {
    return esc(text).replace(/@([A-Za-z0-9_.-]+)/g, function (m, name) {
      return AGENT_AT.has(name) ? agentLink(name) : m;
    });
  }
  function timeText(t) {
    return typeof t === "number" ? (Number.isInteger(t) ? String(t) : t.toFixed(3)) : esc(t);
  }
  var EVENT_HEAD = "<tr><th class='num'>#</th><th class='num'>step</th><th class='num'>time</th>" +
                   "<th>agent</th><th>kind</th><th>what</th></tr>";
  function eventRow(i) {
    var r = ROWS[i];
    return "<tr data-row='" + i + "'><td class='num'>" + r[0] + "</td><td class='num'>" + r[1] +
           "</td><td class='num'>" + timeText(r[2]) + "</td><td>" + agentLink(LOG.agents[r[3]]) +
           "</td><td>" + kindBadge(r[4]) + "</td><td class='text'>" + linkMentions(r[5]) + "</td></tr>";
  }
  function eventList(container, indices, options) {
    options = options || {};
    return pagedTable(container, EVENT_HEAD, indices.length, function (k) {
      return eventRow(indices[k]);
    }, {cls: "events", what: options.what || "events", empty: options.empty || "no events",
        page: options.page, onPage: options.onPage, pageSize: options.pageSize});
  }

  /* Indices of the events that pass filter f: {agent, inv, kind, s0, s1, t0, t1, q}. */
  function filterEvents(f) {
    var a = f.agent !== undefined && f.agent !== "" ? AGENT_AT.get(f.agent) : -1;
    if (a === undefined) return [];
    var k = f.kind ? KIND_AT.get(f.kind) : -1;
    if (k === undefined) return [];
    var s0 = f.s0 === "" || f.s0 === undefined ? null : Number(f.s0);
    var s1 = f.s1 === "" || f.s1 === undefined ? null : Number(f.s1);
    var t0 = f.t0 === "" || f.t0 === undefined ? null : Number(f.t0);
    var t1 = f.t1 === "" || f.t1 === undefined ? null : Number(f.t1);
    var q = (f.q || "").toLowerCase();
    var inv = !!f.inv;
    if (q && LOWER === null) {
      LOWER = new Array(ROWS.length);
      for (var j = 0; j < ROWS.length; j++) {
        var row = ROWS[j];
        LOWER[j] = (row[5] + "\n" + LOG.agents[row[3]] + "\n" + LOG.kinds[row[4]]).toLowerCase();
      }
    }
    var out = [];
    for (var i = 0; i < ROWS.length; i++) {
      var r = ROWS[i];
      if (a >= 0 && r[3] !== a && !(inv && r[6] && r[6].indexOf(a) >= 0)) continue;
      if (k >= 0 && r[4] !== k) continue;
      if (s0 !== null && r[1] < s0) continue;
      if (s1 !== null && r[1] > s1) continue;
      if (t0 !== null && r[2] < t0) continue;
      if (t1 !== null && r[2] > t1) continue;
      if (q && LOWER[i].indexOf(q) < 0) continue;
      out.push(i);
    }
    return out;
  }

  // -- overview ----------------------------------------------------------------------------
  // The model calls split by endpoint (a run with sim.llm.endpoints): one row per endpoint.
  function endpointCard(table) {
    var head = "<tr>" + table.cols.map(function (c, i) {
      return "<th" + (table.numeric[i] ? " class='num'" : "") + ">" + esc(c) + "</th>";
    }).join("") + "</tr>";
    var latency = table.cols.indexOf("latency mean");  // it and the percentiles after it
    var rows = table.rows.map(function (r) {
      return "<tr data-endpoint='" + esc(r[0]) + "'>" + r.map(function (v, i) {
        return "<td" + (table.numeric[i] ? " class='num'" : "") + ">" +
               esc(i >= latency ? seconds(v) : fmt(v)) + "</td>";
      }).join("") + "</tr>";
    });
    return el("div", "card wide endpoints", "<h3>By endpoint</h3><table class='endpoints'><thead>" +
      head + "</thead><tbody>" + rows.join("") + "</tbody></table><p class='note'>Calls: every " +
      "call the endpoint served or failed; fallback in: calls moved here because the endpoint " +
      "they were routed to was down; fallback out: calls routed here and moved to its fallback " +
      "(counted in the other row). Latency (" + (D.simulated ? "simulated" : "wall clock") +
      ") of the calls that returned.</p>");
  }
  function renderSocietyOverview(page) {
    var cards = el("div", "cards");
    cards.appendChild(el("div", "card", "<h3>Run</h3>" + kvTable(D.identity)));
    cards.appendChild(el("div", "card", "<h3>Summary</h3>" + kvTable(D.totals)));
    if (D.world && D.world.length) {
      cards.appendChild(el("div", "card", "<h3>World</h3>" + kvTable(D.world)));
    }
    if (D.failures && D.failures.length) {
      var rows = D.failures.map(function (f) {
        return "<tr><td>" + esc(f[0]) + "</td><td class='num'>" + fmt(f[1]) + "</td><td>" +
               (f[2] ? agentLink(f[2]) : "") + " step " + esc(fmt(f[3])) + ": " + esc(f[4]) + "</td></tr>";
      });
      cards.appendChild(el("div", "card", "<h3 class='bad'>Failed turns</h3><table><thead><tr><th>kind" +
        "</th><th class='num'>turns</th><th>first</th></tr></thead><tbody>" + rows.join("") +
        "</tbody></table>"));
    }
    if (D.call_failures && D.call_failures.length) {
      var crows = D.call_failures.map(function (f) {
        return "<tr><td>" + esc(f[0]) + "</td><td class='num'>" + fmt(f[1]) + "</td><td class='num'>" +
               fmt(f[2]) + "</td><td class='wrap'>" + (f[3] ? agentLink(f[3]) : "") + " step " + esc(fmt(f[4])) +
               ": " + esc(f[5]) + "</td></tr>";
      });
      cards.appendChild(el("div", "card", "<h3 class='bad'>Failed model calls</h3><table class='failed-calls'>" +
        "<thead><tr><th>error</th><th class='num'>calls</th><th class='num'>agents</th><th>first</th></tr></thead><tbody>" +
        crows.join("") + "</tbody></table><p class='note'><a href='#/agents?sort=failed'>agents by failed calls</a></p>"));
    }
    if (D.endpoints) cards.appendChild(endpointCard(D.endpoints));
    page.appendChild(cards);
    (D.notes || []).forEach(function (n) { page.appendChild(el("p", "note", esc(n))); });
    page.appendChild(el("h2", "", "Per " + (D.windowed ? "window of virtual time" : "step")));
    chartGrid(page, D.charts);
  }

  // -- the log browser ------------------------------------------------------------------------
  var logState = null;
  function renderLog(page, query) {
    needLog();
    if (logState === null) {
      page.innerHTML = "";
      var form = el("form", "controls");
      form.setAttribute("autocomplete", "off");
      var kindOptions = "<option value=''>every kind</option>" + LOG.kinds.map(function (k) {
        return "<option>" + esc(k) + "</option>";
      }).join("");
      form.innerHTML =
        "<label>agent<input name='agent' list='agent-names' placeholder='any agent'></label>" +
        "<label class='check'><input type='checkbox' name='inv'> and events that concern it</label>" +
        "<label>kind<select name='kind'>" + kindOptions + "</select></label>" +
        "<label>step from<input type='number' name='s0'></label>" +
        "<label>step to<input type='number' name='s1'></label>" +
        "<label>time from<input type='number' step='any' name='t0'></label>" +
        "<label>time to<input type='number' step='any' name='t1'></label>" +
        "<label>text<input type='search' class='search' name='q' placeholder='search the log'></label>" +
        "<button type='reset'>clear</button>";
      var list = el("datalist");
      list.id = "agent-names";
      var options = [];
      for (var i = 0; i < LOG.agents.length; i++) options.push("<option value='" + esc(LOG.agents[i]) + "'>");
      list.innerHTML = options.join("");
      var results = el("div", "results");
      page.appendChild(el("h2", "", "Action log"));
      page.appendChild(form);
      page.appendChild(list);
      page.appendChild(results);
      logState = {form: form, results: results, key: null};
      var timer = null;
      var changed = function (event) {
        cancel(timer);
        var delay = event && event.target && event.target.name === "q" ? 150 : 0;
        timer = later(function () {
          timer = null;
          var f = readForm(form);
          replaceRoute("#/log" + (toQuery(f) ? "?" + toQuery(f) : ""));
          showLog(f, 0);
        }, delay);
      };
      form.addEventListener("input", changed);
      form.addEventListener("change", changed);
      form.addEventListener("submit", function (e) { e.preventDefault(); });
      form.addEventListener("reset", function () { later(changed, 0); });
    }
    writeForm(logState.form, query);
    showLog(query, Number(query.p || 0));
  }
  function readForm(form) {
    return {agent: form.agent.value.trim().replace(/^@/, ""), inv: form.inv.checked,
            kind: form.kind.value, s0: form.s0.value, s1: form.s1.value, t0: form.t0.value,
            t1: form.t1.value, q: form.q.value};
  }
  function writeForm(form, q) {
    form.agent.value = q.agent || "";
    form.inv.checked = !!q.inv;
    form.kind.value = q.kind || "";
    ["s0", "s1", "t0", "t1", "q"].forEach(function (name) { form[name].value = q[name] || ""; });
  }
  function showLog(f, pageNumber) {
    var key = JSON.stringify([f.agent, !!f.inv, f.kind, f.s0, f.s1, f.t0, f.t1, f.q]);
    var results = logState.results;
    if (logState.key === key && pageNumber === logState.page) return;
    var indices = logState.key === key ? logState.indices : filterEvents(f);
    logState.key = key;
    logState.indices = indices;
    logState.page = pageNumber;
    results.innerHTML = "";
    var unknown = f.agent && !AGENT_AT.has(f.agent) ? "no agent @" + f.agent : null;
    results.appendChild(el("p", "note", esc(unknown || (fmt(indices.length) + " of " + fmt(ROWS.length) +
                                                        " events match"))));
    eventList(results, indices, {page: pageNumber, onPage: function (p) {
      logState.page = p;
      var q = toQuery(Object.assign({}, f, {p: p || ""}));
      replaceRoute("#/log" + (q ? "?" + q : ""));
    }});
  }

  // -- threads -----------------------------------------------------------------------------
  function renderThreads(page) {
    needLog();
    var T = D.threads || {items: [], total: 0};
    page.appendChild(el("h2", "", "Conversations"));
    page.appendChild(el("p", "note", esc(fmt(T.total) + " threads of replies and mentions, the longest chain first" +
      (T.items.length < T.total ? "; the " + fmt(T.items.length) + " longest are in this report" : ""))));
    var list = el("div", "threads");
    page.appendChild(list);
    var shown = 0;
    var more = el("button", "more", "show more threads");
    function add(count) {
      var end = Math.min(T.items.length, shown + count);
      var html = [];
      for (var t = shown; t < end; t++) {
        var item = T.items[t], rows = item[0], depth = item[1];
        var authors = {};
        rows.forEach(function (i) { authors[LOG.agents[ROWS[i][3]]] = 1; });
        var lines = rows.map(function (i, k) {
          var r = ROWS[i];
          return "<div class='msg' style='margin-left:" + (Math.min(depth[k], 14) * 18) + "px'>" +
                 "<span class='meta'>" + agentLink(LOG.agents[r[3]]) + " &middot; step " + r[1] +
                 " &middot; " + esc(LOG.kinds[r[4]]) + "</span>" + linkMentions(r[5]) + "</div>";
        });
        html.push("<div class='thread' data-thread='" + t + "'><div class='head'>thread " + (t + 1) +
                  ": " + rows.length + " messages, longest chain " + item[2] + ", " +
                  Object.keys(authors).length + " agents</div>" + lines.join("") + "</div>");
      }
      list.insertAdjacentHTML("beforeend", html.join(""));
      shown = end;
      more.style.display = shown < T.items.length ? "" : "none";
    }
    more.onclick = function () { add(25); };
    page.appendChild(more);
    add(25);
    if (!T.items.length) list.appendChild(el("p", "empty", "no replies or mentions in this run"));
  }

  // -- agents --------------------------------------------------------------------------------
  var AGENT_COLS = ["agent", "events", "concerning it", "model calls", "prompt tokens",
                    "completion tokens", "cost", "failed calls"];
  var AGENT_FIELD = [0, 1, 2, 3, 4, 5, 6, 8];  // the row's field of each column (7: kinds)
  function renderAgents(page, query) {
    needLog();
    var A = D.agents.rows;
    page.appendChild(el("h2", "", "Agents"));
    var form = el("form", "controls");
    form.innerHTML = "<label>agent<input type='search' class='search' name='q' placeholder='filter by name'></label>";
    form.addEventListener("submit", function (e) { e.preventDefault(); });
    page.appendChild(form);
    var holder = el("div");
    page.appendChild(holder);
    var sortBy = query && query.sort === "failed" ? 8 : 1, descending = true;
    function draw() {
      var q = form.q.value.trim().replace(/^@/, "").toLowerCase();
      var rows = A.filter(function (r) { return !q || LOG.agents[r[0]].toLowerCase().indexOf(q) >= 0; });
      rows.sort(function (x, y) {
        var a = sortBy === 0 ? LOG.agents[x[0]] : x[sortBy], b = sortBy === 0 ? LOG.agents[y[0]] : y[sortBy];
        var c = a < b ? -1 : a > b ? 1 : 0;
        if (c === 0) c = LOG.agents[x[0]] < LOG.agents[y[0]] ? -1 : 1;
        return descending ? -c : c;
      });
      holder.innerHTML = "";
      var head = "<tr>" + AGENT_COLS.map(function (c, i) {
        var col = AGENT_FIELD[i];
        var mark = col === sortBy ? (descending ? " &darr;" : " &uarr;") : "";
        return "<th class='sortable" + (i ? " num" : "") + "' data-col='" + col + "'>" + esc(c) + mark + "</th>";
      }).join("") + "</tr>";
      var made = pagedTable(holder, head, rows.length, function (k) {
        var r = rows[k];
        return "<tr><td>" + agentLink(LOG.agents[r[0]]) + pseudoTag(LOG.agents[r[0]]) + "</td>" + AGENT_FIELD.slice(1).map(function (f) {
          var v = r[f] || 0;
          return "<td class='num" + (f === 8 && v ? " bad" : "") + "'>" + fmt(v) + "</td>";
        }).join("") + "</tr>";
      }, {what: "agents"});
      made.table.querySelectorAll("th.sortable").forEach(function (th) {
        th.onclick = function () {
          var col = Number(th.getAttribute("data-col"));
          descending = col === sortBy ? !descending : col !== 0;
          sortBy = col;
          draw();
        };
      });
    }
    form.addEventListener("input", draw);
    draw();
  }

  /* A name in the log that is no agent of the run: a scenario's own events, an agent's interviews. */
  function pseudoOf(name) { return (D.pseudo || {})[name] || null; }
  function pseudoTag(name) {
    var p = pseudoOf(name);
    return p ? " <span class='chip muted pseudo' title='not an agent of the run'>" + esc(p[0]) + "</span>" : "";
  }
  function pseudoNote(name) {
    var p = pseudoOf(name);
    if (!p) return "";
    if (p[0] === "interview") {
      var agent = name.slice("interview:".length);
      return "<p class='note pseudo-note'>Not an agent: the interviews of " + agentLink(agent) + " by the scenario " +
             "<b>" + esc(p[1]) + "</b> (its model asked the scenario's questions, at call site " + esc(name) +
             "). The answers are <i>interview</i> records in " + agentLink(agent) + "'s events; they change nothing in the run.</p>";
    }
    return "<p class='note pseudo-note'>Not an agent: @" + esc(name) + " is the name the scenario <b>" + esc(p[1]) +
           "</b> makes its events in (its interventions, applied by the world). It takes no turns and calls no model.</p>";
  }

  function callsOf(name) {
    return (D.llm && D.llm.calls && D.llm.calls[name]) || null;
  }
  function str(i) { return D.llm.strings[i]; }

  function renderAgent(page, name) {
    needLog();
    page.innerHTML = "";
    var a = AGENT_AT.get(name);
    if (a === undefined) {
      page.appendChild(el("h2", "", "No agent @" + esc(name)));
      page.appendChild(el("p", "", "<a href='#/agents'>every agent</a>"));
      return;
    }
    var row = D.agents.rows.filter(function (r) { return r[0] === a; })[0] || [a, 0, 0, 0, 0, 0, 0, {}];
    var own = [], concerning = [];
    for (var i = 0; i < ROWS.length; i++) {
      var r = ROWS[i];
      if (r[3] === a) own.push(i);
      else if (r[6] && r[6].indexOf(a) >= 0) concerning.push(i);
    }
    page.appendChild(el("h2", "", "@" + esc(name) + pseudoTag(name)));
    var pseudo = pseudoOf(name);
    if (pseudo) page.appendChild(el("div", "", pseudoNote(name)));
    var chips = el("div", "chips");
    var kinds = row[7] || {};
    Object.keys(kinds).forEach(function (k) {
      chips.insertAdjacentHTML("beforeend", kindBadge(Number(k)).replace("</span>", " " + kinds[k] + "</span>"));
    });
    page.appendChild(chips);
    var scenarioMade = pseudo && pseudo[0] === "scenario";
    page.appendChild(el("div", "cards", "<div class='card'>" + kvTable([
      ["events it made", row[1]], ["events that concern it", row[2]]].concat(scenarioMade ? [] : [["model calls", row[3]],
      ["prompt tokens", row[4]], ["completion tokens", row[5]], ["cost", row[6]]])) +
      "<p class='note'><a href='#/log?" + toQuery({agent: name, inv: true}) +
      "'>open its events in the log browser</a></p></div>"));
    // Its actions per step, by kind: a plotly chart like the run's own.
    var steps = {}, concernSteps = {};
    own.forEach(function (i) { steps[ROWS[i][1]] = steps[ROWS[i][1]] || {}; steps[ROWS[i][1]][ROWS[i][4]] = (steps[ROWS[i][1]][ROWS[i][4]] || 0) + 1; });
    concerning.forEach(function (i) { concernSteps[ROWS[i][1]] = (concernSteps[ROWS[i][1]] || 0) + 1; });
    var xs = (D.steps || []).slice();
    var traces = LOG.kinds.map(function (kind, k) {
      return {type: "bar", name: kind, x: xs, marker: {color: (D.colors || {})[kind]},
              y: xs.map(function (s) { return (steps[s] && steps[s][k]) || 0; })};
    }).filter(function (t) { return t.y.some(function (v) { return v > 0; }); });
    traces.push({type: "scatter", mode: "lines+markers", name: "concerning it", x: xs,
                 y: xs.map(function (s) { return concernSteps[s] || 0; }), line: {color: "#111827"}});
    var top = 0;  // whole-number ticks on its count axis (never 0.5), as the run's charts have
    xs.forEach(function (x, j) {
      var sum = 0;
      traces.forEach(function (t) { if (t.type === "bar") sum += t.y[j]; });
      top = Math.max(top, sum, concernSteps[x] || 0);
    });
    var yaxis = {title: {text: "events"}, rangemode: "tozero"};
    if (top <= 10) { yaxis.tick0 = 0; yaxis.dtick = top <= 6 ? 1 : 2; }
    if (top === 0) yaxis.range = [0, 1];
    var chart = el("div", "chart");
    chart.id = "agent-chart";
    chart.setAttribute("data-chart", "agent");
    page.appendChild(chart);
    drawChart(chart, {data: traces, layout: {
      title: {text: "@" + name + ": what it did per " + (D.windowed ? "window" : "step"), x: 0.01, xanchor: "left"},
      barmode: "stack", height: 300, margin: {l: 60, r: 20, t: 48, b: 48},
      xaxis: {title: {text: D.windowed ? "window" : "step"}, tick0: 0,
              dtick: Math.max(1, Math.ceil(xs.length / 15))}, yaxis: yaxis,
      legend: {orientation: "h", y: -0.25, x: 0}}});

    page.appendChild(el("h3", "", "What it did"));
    eventList(page, own, {what: "of its events", empty: "it made no events"});

    if (scenarioMade) {  // no turns, no model calls: only what concerns it
      page.appendChild(el("h3", "", "Events that concern it"));
      eventList(page, concerning, {what: "events", empty: "no event concerns it"});
      return;
    }
    if (D.call_log) {
      renderAgentCalls(page, name, a, own, concerning);
      return;
    }
    var calls = callsOf(name);
    page.appendChild(el("h3", "", "What it saw"));
    if (calls && calls.length) {
      page.appendChild(el("p", "note", "The prompt of each of its model calls: the observation the world gave it."));
      var seen = el("div");
      calls.forEach(function (c, k) {
        var messages = c[4] || [];
        var last = messages.length ? messages[messages.length - 1] : null;
        var details = el("details", "saw");
        if (k === calls.length - 1) details.open = true;  // the newest: what it saw last
        details.innerHTML = "<summary>call " + c[0] + " &middot; " + fmt(c[1]) + " prompt tokens</summary>" +
          (last ? "<pre>" + esc(str(last[1])) + "</pre>" : "<p class='note'>its prompt was not recorded</p>");
        seen.appendChild(details);
      });
      page.appendChild(seen);
    } else {
      page.appendChild(el("p", "note", esc(D.llm && D.llm.note ? D.llm.note : "Its observations are not recorded.") +
                          " The events that concern it are below."));
    }
    page.appendChild(el("h3", "", "Events that concern it"));
    page.appendChild(el("p", "note", "Mentions of it, replies to it, likes of its posts, follows."));
    eventList(page, concerning, {what: "events", empty: "no event concerns it"});

    page.appendChild(el("h3", "", "Its model calls"));
    if (calls && calls.length) {
      var holder = el("div", "calls");
      page.appendChild(holder);
      pagedTable(holder, "<tr><th class='num'>call</th><th class='num'>prompt</th><th class='num'>completion</th>" +
                 "<th>finish</th><th>completion text, and the request</th></tr>", calls.length, function (k) {
        var c = calls[k];
        var messages = (c[4] || []).map(function (m) {
          return "<div class='muted'>" + esc(D.llm.roles[m[0]]) + "</div><pre>" + esc(str(m[1])) + "</pre>";
        }).join("");
        return "<tr><td class='num'>" + c[0] + "</td><td class='num'>" + fmt(c[1]) + "</td><td class='num'>" +
               fmt(c[2]) + "</td><td>" + esc(c[5]) + "</td><td class='text'><pre>" + esc(str(c[3])) +
               "</pre>" + (messages ? "<details><summary>request messages</summary>" + messages + "</details>" : "") +
               "</td></tr>";
      }, {what: "calls", pageSize: 20});
    } else {
      page.appendChild(el("p", "note", esc((D.llm && D.llm.note) || "No model calls are recorded for it.")));
    }
  }

  // -- an agent's turns and calls, from calls.jsonl ------------------------------------------
  /* Each agent's calls are in a chunk of agents: base64 of deflated JSON, inflated (by the
     browser's own DecompressionStream) when one of those agents' pages first opens. */
  var CHUNKS = {};
  function agentCalls(a) {
    var size = (D.agent_chunks && D.agent_chunks.chunk) || 64;
    var k = Math.floor(a / size);
    if (!CHUNKS[k]) {
      var node = document.getElementById("agents-" + k);
      if (!node) {
        CHUNKS[k] = Promise.resolve({m: [], a: {}});
      } else {
        var text = atob(node.textContent.trim());
        var bytes = new Uint8Array(text.length);
        for (var i = 0; i < text.length; i++) bytes[i] = text.charCodeAt(i);
        var stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("deflate-raw"));
        CHUNKS[k] = new Response(stream).text().then(JSON.parse);
      }
    }
    return CHUNKS[k].then(function (chunk) {
      return {messages: chunk.m, calls: chunk.a[String(a)] || []};
    });
  }
  function sawHtml(saw, messages) {
    if (!saw) return "<p class='note'>its prompt is not recorded (no llm_recordings.sqlite, or a replayed call)</p>";
    var last = saw.length - 1;
    return saw.map(function (id, i) {
      var m = messages[id];
      var text = esc(m.content);
      if (i === last) return "<div class='muted'>" + esc(m.role) + "</div><pre class='saw'>" + text + "</pre>";
      return "<details><summary>" + esc(m.role) + " message</summary><pre>" + text + "</pre></details>";
    }).join("");
  }
  function seconds(v) {
    if (v === null || v === undefined) return "";
    if (v >= 1) return v.toPrecision(3) + " s";
    if (v >= 1e-3) return (v * 1e3).toPrecision(3) + " ms";
    return (v * 1e6).toPrecision(3) + " \u00b5s";
  }
  function outcomeHtml(c) {
    return c[9] ? "<span class='ok'>ok</span>" :
      "<span class='bad'><b>" + esc(c[10]) + "</b></span> <span class='muted'>" + esc(c[11] || "") + "</span>";
  }
  function renderAgentCalls(page, name, a, own, concerning) {
    var holder = el("div", "agent-calls");
    holder.appendChild(el("p", "note", "reading its model calls&hellip;"));
    page.appendChild(holder);
    BUSY++;
    agentCalls(a).then(function (data) {
      BUSY--;
      holder.innerHTML = "";
      fillAgentCalls(holder, name, a, own, concerning, data);
    }, function (error) {
      BUSY--;
      holder.innerHTML = "";
      holder.appendChild(el("p", "bad", "cannot read its model calls: " + esc(error)));
    });
  }
  function fillAgentCalls(page, name, a, own, concerning, data) {
    var calls = data.calls || [];
    var messages = data.messages || [];
    var failed = (D.agents.failed || {})[name] || {};
    var kinds = Object.keys(failed);
    var box = el("div", "agent-failures");
    if (kinds.length) {
      box.innerHTML = "<h3 class='bad'>Failed model calls</h3><div class='chips'>" + kinds.map(function (k) {
        return "<span class='chip bad' data-error='" + esc(k) + "'>" + esc(k) + " &times; " + failed[k] + "</span>";
      }).join("") + "</div>";
    } else {
      box.innerHTML = "<p class='note'>None of its " + fmt(calls.length) + " model calls failed.</p>";
    }
    page.appendChild(box);

    // Its turns: what it saw (the prompt of the turn's model calls) and what it did (the turn's events).
    var turns = new Map();
    function turnOf(t) {
      var item = turns.get(t);
      if (!item) { item = {turn: t, calls: [], events: []}; turns.set(t, item); }
      return item;
    }
    calls.forEach(function (c) { turnOf(c[1]).calls.push(c); });
    // An event's turn: its own (the event-driven engine's, last in the row), or its step.
    own.forEach(function (i) { var r = ROWS[i]; turnOf(r.length > 7 ? r[7] : r[1]).events.push(i); });
    var order = Array.from(turns.keys()).sort(function (x, y) { return x - y; });
    var unit = D.windowed ? "turn" : "step";
    page.appendChild(el("h3", "", "Its turns: what it saw and what it did"));
    page.appendChild(el("p", "note", esc(fmt(order.length) + " turns. What it saw is the prompt of the turn's model call " +
      "(the observation the world gave it, as the agent put it to the model); what it did, the events its turn resolved to." +
      (D.windowed ? " On the event-driven engine a turn is the agent's n-th wake-up; t is the virtual time it woke." : ""))));
    var turnsHolder = el("div", "turns");
    page.appendChild(turnsHolder);
    pagedTable(turnsHolder, "<tr><th class='num'>" + unit + "</th><th>what it saw</th><th>what it did</th></tr>",
      order.length, function (k) {
        var item = turns.get(order[k]);
        var first = item.calls[0];
        var meta = "<b>" + esc(item.turn) + "</b>" + (first && D.windowed ? "<div class='muted'>t=" + timeText(first[3]) +
                   "</div>" : "");
        var saw = item.calls.length ? item.calls.map(function (c, j) {
          return (item.calls.length > 1 ? "<div class='muted'>call " + c[0] + "</div>" : "") + sawHtml(c[12], messages);
        }).join("") : "<p class='note'>no model call this turn</p>";
        var did = item.events.map(function (i) {
          var r = ROWS[i];
          return "<div class='did'>" + kindBadge(r[4]) + " " + linkMentions(r[5]) + "</div>";
        }).join("") || "<p class='note'>no event</p>";
        var how = item.calls.map(function (c) {
          return "<div class='muted call-outcome'>call " + c[0] + ": " + outcomeHtml(c) + (c[9] ? " &middot; " + seconds(c[4]) +
                 " &middot; " + fmt(c[6]) + "+" + fmt(c[7]) + " tokens" : "") + "</div>";
        }).join("");
        return "<tr class='turn" + (item.calls.some(function (c) { return !c[9]; }) ? " failed" : "") + "' data-turn='" +
               item.turn + "'><td class='num'>" + meta + "</td><td class='text saw-cell'>" + saw +
               "</td><td class='text did-cell'>" + did + how + "</td></tr>";
      }, {cls: "turns", what: "turns", pageSize: 10, empty: "it took no turn"});

    page.appendChild(el("h3", "", "Events that concern it"));
    page.appendChild(el("p", "note", "Mentions of it, replies to it, likes of its posts, follows."));
    eventList(page, concerning, {what: "events", empty: "no event concerns it"});

    // Every model call, failed ones included.
    page.appendChild(el("h3", "", "Its model calls"));
    var texts = {};
    ((D.llm && D.llm.calls && D.llm.calls[name]) || []).forEach(function (c) { texts[c[0]] = c; });
    var form = el("form", "controls");
    form.innerHTML = "<label class='check'><input type='checkbox' name='failed'> only failed calls</label>";
    form.addEventListener("submit", function (e) { e.preventDefault(); });
    page.appendChild(form);
    var holder = el("div", "calls");
    page.appendChild(holder);
    var what = D.simulated ? "latency (simulated)" : "latency";
    function draw() {
      var shown = form.failed.checked ? calls.filter(function (c) { return !c[9]; }) : calls;
      holder.innerHTML = "";
      pagedTable(holder, "<tr><th class='num'>call</th><th class='num'>" + unit + "</th><th class='num'>" + esc(what) +
                 "</th><th class='num'>wall</th><th class='num'>prompt</th><th class='num'>completion</th>" +
                 "<th class='num'>cost</th><th>outcome, and the reply</th></tr>", shown.length, function (k) {
        var c = shown[k];
        var text = texts[c[0]];
        return "<tr class='call" + (c[9] ? "" : " failed") + "' data-call='" + c[0] + "'><td class='num'>" + c[0] +
               "</td><td class='num'>" + esc(fmt(c[1])) + "</td><td class='num'>" + seconds(c[4]) + "</td><td class='num'>" +
               seconds(c[5]) + "</td><td class='num'>" + fmt(c[6]) + "</td><td class='num'>" + fmt(c[7]) +
               "</td><td class='num'>" + fmt(c[8]) + "</td><td class='text'>" + outcomeHtml(c) +
               (text ? "<pre>" + esc(str(text[3])) + "</pre>" : "") + "</td></tr>";
      }, {what: "calls", pageSize: 20, empty: form.failed.checked ? "no failed call" : "no model call"});
    }
    form.addEventListener("change", draw);
    draw();
    if (D.llm && D.llm.note && calls.length && !Object.keys(texts).length) {
      page.appendChild(el("p", "note", "The replies' texts: " + esc(D.llm.note)));
    }
  }

  // ======================================================================================
  // Studies and monitors
  // ======================================================================================
  function renderTablePage(page, title, table, note) {
    page.appendChild(el("h2", "", esc(title)));
    if (note) page.appendChild(el("p", "note", esc(note)));
    var form = el("form", "controls");
    form.innerHTML = "<label>filter<input type='search' class='search' name='q' placeholder='any column'></label>";
    form.addEventListener("submit", function (e) { e.preventDefault(); });
    page.appendChild(form);
    var holder = el("div");
    page.appendChild(holder);
    var head = "<tr>" + table.cols.map(function (c, i) {
      return "<th" + (table.numeric && table.numeric[i] ? " class='num'" : "") + ">" + esc(c) + "</th>";
    }).join("") + "</tr>";
    var text = table.rows.map(function (r) { return r.map(fmt).join("\n").toLowerCase(); });
    function draw() {
      var q = form.q.value.trim().toLowerCase();
      var rows = [];
      for (var i = 0; i < table.rows.length; i++) if (!q || text[i].indexOf(q) >= 0) rows.push(table.rows[i]);
      holder.innerHTML = "";
      pagedTable(holder, head, rows.length, function (k) {
        return "<tr>" + rows[k].map(function (v, i) {
          return "<td" + (table.numeric && table.numeric[i] ? " class='num'" : "") + ">" + esc(fmt(v)) + "</td>";
        }).join("") + "</tr>";
      }, {what: "rows"});
    }
    form.addEventListener("input", draw);
    draw();
  }
  function scenarioCards(container) {
    var S = D.scenarios;
    var rows = S.identity.map(function (s) {
      var cites = s.citations.length ? "<ul class='cites'>" + s.citations.map(function (c) {
        return "<li><span class='passage'>" + esc(c[0]) + "</span>" + (c[1] ? " &ldquo;" + esc(c[1]) + "&rdquo;" : "") + "</li>";
      }).join("") + "</ul>" : "<span class='muted'>cites no passage</span>";
      return "<tr data-scenario='" + esc(s.name) + "'><td><b>" + esc(s.name) + "</b><div class='muted hash'>" +
             esc(String(s.hash || "").slice(0, 12)) + "</div></td><td class='wrap'>" + esc(s.description) +
             "<div class='muted'>" + fmt(s.interventions) + (s.interventions === 1 ? " intervention" : " interventions") +
             " on " + esc(s.knobs.join(", ")) +
             "</div></td><td class='wrap'>" + cites + "</td></tr>";
    });
    container.appendChild(el("div", "card wide scenarios", "<h3>Scenarios</h3><table class='scenario-ids'><thead><tr>" +
      "<th>scenario (hash)</th><th>what it does</th><th>passages it cites</th></tr></thead><tbody>" +
      rows.join("") + "</tbody></table>"));
  }
  function renderStudyOverview(page) {
    var cards = el("div", "cards", "<div class='card'><h3>Study</h3>" + kvTable(D.identity) + "</div>");
    page.appendChild(cards);
    var S = D.scenarios;
    if (S && S.identity) scenarioCards(cards);
    (D.notes || []).forEach(function (n) { page.appendChild(el("p", "note", esc(n))); });
    if (S && S.charts && S.charts.length) {
      page.appendChild(el("h2", "", "Each scenario's effect on each KPI"));
      page.appendChild(el("p", "note", "The difference from the baseline (the same config without the scenario), " +
        "paired by replication (the same seeds), with its confidence interval; zero is the baseline. " +
        "<a href='#/scenarios'>The table</a>."));
      chartGrid(page, S.charts).classList.add("effects");
    }
    page.appendChild(el("h2", "", "Each KPI against each parameter"));
    chartGrid(page, D.charts);
  }
  function renderScenarios(page) {
    var S = D.scenarios;
    var cards = el("div", "cards");
    page.appendChild(cards);
    scenarioCards(cards);
    renderTablePage(page, "Each scenario's KPIs and their difference from the baseline", S.effects,
                    "Mean and interval of each KPI under each scenario; the difference from the baseline is " +
                    "paired by replication (as effects.csv of simulacra experiment).");
  }
  function renderMonitorsOverview(page) {
    var cards = el("div", "cards");
    cards.appendChild(el("div", "card", "<h3>Monitors</h3>" + kvTable(D.identity)));
    page.appendChild(cards);
    [["Time series", D.series_table], ["Samples", D.samples_table]].forEach(function (pair) {
      if (!pair[1] || !pair[1].rows.length) return;
      var head = "<tr>" + pair[1].cols.map(function (c) { return "<th>" + esc(c) + "</th>"; }).join("") + "</tr>";
      var body = pair[1].rows.map(function (r) {
        return "<tr>" + r.map(function (v) { return "<td>" + esc(fmt(v)) + "</td>"; }).join("") + "</tr>";
      }).join("");
      cards.appendChild(el("div", "card wide", "<h3>" + esc(pair[0]) + "</h3><table><thead>" + head +
                           "</thead><tbody>" + body + "</tbody></table>"));
    });
    page.appendChild(el("h2", "", "Over time, and histograms"));
    chartGrid(page, D.charts);
  }

  // ======================================================================================
  // Routing
  // ======================================================================================
  var VIEWS = {
    society: [["overview", "Overview", renderSocietyOverview], ["log", "Action log", renderLog],
              ["threads", "Conversations", renderThreads], ["agents", "Agents", renderAgents],
              ["agent", null, null]],
    study: [["overview", "Overview", renderStudyOverview],
            ["summary", "Intervals", function (p) { renderTablePage(p, "Mean and confidence interval per config", D.summary, D.summary_note); }],
            ["replications", "Replications", function (p) { renderTablePage(p, "Every replication", D.replications); }]]
           .concat(D.scenarios && D.scenarios.identity ? [["scenarios", "Scenarios", renderScenarios]] : []),
    monitors: [["overview", "Overview", renderMonitorsOverview]]
  }[D.kind];
  var pages = {}, rendered = {};
  var nav = document.querySelector("header nav");
  var main = document.querySelector("main");
  VIEWS.forEach(function (view) {
    var section = el("section", "page");
    section.id = "page-" + view[0];
    main.appendChild(section);
    pages[view[0]] = section;
    if (view[1]) {
      var link = el("a", "", esc(view[1]));
      link.href = "#/" + view[0];
      link.setAttribute("data-view", view[0]);
      nav.appendChild(link);
    }
  });
  function route() {
    var hash = location.hash.replace(/^#\/?/, "");
    var at = hash.indexOf("?");
    var path = at < 0 ? hash : hash.slice(0, at);
    var query = parseQuery(at < 0 ? "" : hash.slice(at + 1));
    var name = path.split("/")[0] || "overview";
    if (!pages[name]) name = "overview";
    Object.keys(pages).forEach(function (key) { pages[key].classList.toggle("shown", key === name); });
    nav.querySelectorAll("a").forEach(function (a) {
      var view = a.getAttribute("data-view");
      a.classList.toggle("active", view === name || (name === "agent" && view === "agents"));
    });
    var view = VIEWS.filter(function (v) { return v[0] === name; })[0];
    if (name === "agent") {
      var who = decodeURIComponent(path.slice("agent/".length));
      if (rendered.agent !== who) { renderAgent(pages.agent, who); rendered.agent = who; }
    } else if (name === "log") {
      renderLog(pages.log, query);
    } else if (!rendered[name]) {
      view[2](pages[name], query);
      rendered[name] = true;
    }
    if (name !== "overview" || !window.__reportReady) window.scrollTo(0, 0);
    document.body.setAttribute("data-route", location.hash);
    if (!window.__reportReady) {
      window.__reportReady = performance.now();
      document.body.setAttribute("data-ready", "1");
    }
  }
  window.addEventListener("hashchange", route);
  route();
})();
