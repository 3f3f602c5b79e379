// kgloom explorer: ask the index, read the sources, see the retrieved subgraph (Cytoscape.js,
// its built-in force-directed "cose" layout), browse the community hierarchy. Talks only to
// this server's /api (docs/serve.md). No build step, no framework.
"use strict";

const $ = (id) => document.getElementById(id);
const state = { cy: null, build: null };

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "onclick") node.addEventListener("click", v);
    else if (k === "class") node.className = v;
    else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return node;
}

async function api(path, body) {
  const headers = { "Content-Type": "application/json" };
  const key = localStorage.getItem("kgloom-api-key");
  if (key) headers["X-API-Key"] = key;
  const res = await fetch(path, body === undefined ? { headers } :
    { method: "POST", headers, body: JSON.stringify(body) });
  const data = await res.json().catch(() => ({ error: { message: res.statusText } }));
  if (res.status === 401) {
    $("apikey").hidden = false;
    $("apikey").focus();
  }
  if (!res.ok) throw new Error((data.error && data.error.message) || res.statusText);
  const build = res.headers.get("X-Kgloom-Build") || data.build_id;
  if (build) { state.build = build; $("status").textContent = `build ${build}`; }
  return data;
}

function showError(where, err) {
  where.replaceChildren(el("div", { class: "error" }, err.message));
}

// --- details panel ---------------------------------------------------------------
async function showTextUnit(id) {
  try {
    const u = await api(`api/text_units/${encodeURIComponent(id)}`);
    $("detail").replaceChildren(
      el("div", {}, el("span", { class: "ref" }, u.ref), u.document_title || ""),
      el("div", { class: "text", "data-testid": "unit-text" }, u.text));
  } catch (e) { showError($("detail"), e); }
}

async function showEntity(id) {
  try {
    const n = await api(`api/graph/entities/${encodeURIComponent(id)}`);
    const comms = el("span", {});
    for (const [level, c] of Object.entries(n.communities)) {
      comms.append(el("a", { href: "#", onclick: (ev) => { ev.preventDefault(); showCommunity(c); } },
        `L${level}: C${c}`), " ");
    }
    $("detail").replaceChildren(
      el("h3", { "data-testid": "node-title" }, n.title),
      el("dl", {},
        el("dt", {}, "type"), el("dd", {}, n.type || ""),
        el("dt", {}, "degree"), el("dd", { "data-testid": "node-degree" }, n.degree),
        el("dt", {}, "PageRank"), el("dd", {}, Number(n.pagerank).toFixed(5)),
        el("dt", {}, "communities"), el("dd", {}, comms)),
      el("div", { class: "text" }, n.description || "(no description)"),
      el("button", { onclick: () => drawNeighbourhood(id) }, "expand neighbourhood"));
  } catch (e) { showError($("detail"), e); }
}

async function showCommunity(c) {
  try {
    const d = await api(`api/graph/communities/${c}`);
    const r = d.report || {};
    const findings = el("ul", {});
    for (const f of r.findings || []) findings.append(el("li", {}, `${f.summary}: ${f.explanation}`));
    $("detail").replaceChildren(
      el("h3", {}, `C${d.community} (level ${d.level}): ${d.title || ""}`),
      el("div", { class: "muted" }, `${d.members_total} members, ${d.children.length} children`),
      el("div", { class: "text", "data-testid": "report" },
        r.full_content || r.summary || "(no report)"),
      findings,
      el("button", { onclick: () => drawEntities(d.members.map((m) => m.id), 0) }, "draw members"));
  } catch (e) { showError($("detail"), e); }
}

// --- graph -----------------------------------------------------------------------
const TYPE_COLOURS = ["#2f6fdf", "#d9822b", "#3d9a50", "#b5478c", "#7b61c4", "#c2a024", "#2aa0a4"];
function colour(type) {
  let h = 0;
  for (const ch of String(type)) h = (h * 31 + ch.charCodeAt(0)) >>> 0;
  return TYPE_COLOURS[h % TYPE_COLOURS.length];
}

// Replaces the drawn graph with the subgraph ``sub`` ({nodes, edges} as the /api/graph
// endpoints answer); the placeholder shows while no node is drawn. Cytoscape owns #graph
// (destroy() empties it), so the placeholder is its sibling, never its child.
function drawGraph(sub) {
  if (state.cy) state.cy.destroy();
  state.cy = window.kgloomGraph = null;
  $("graph-empty").hidden = false; // until a graph with nodes stands in the old one's place
  const maxPr = Math.max(1e-9, ...sub.nodes.map((n) => n.pagerank || 0));
  const elements = sub.nodes.map((n) => ({ data: {
    id: n.id, label: n.title, colour: colour(n.type),
    size: 14 + 30 * Math.sqrt((n.pagerank || 0) / maxPr) } }));
  for (const e of sub.edges) {
    elements.push({ data: { id: `e:${e.id}`, source: e.source, target: e.target,
                            label: e.description || "" } });
  }
  state.cy = cytoscape({
    container: $("graph"), elements, wheelSensitivity: 0.3,
    style: [
      { selector: "node", style: { "background-color": "data(colour)", label: "data(label)",
        width: "data(size)", height: "data(size)", "font-size": 10 } },
      { selector: "node:selected", style: { "border-width": 3, "border-color": "#111" } },
      { selector: "edge", style: { width: 1.5, "line-color": "#aab2bd", "curve-style": "bezier",
        "target-arrow-shape": "triangle", "target-arrow-color": "#aab2bd" } },
    ],
    layout: { name: sub.nodes.length > 1 ? "cose" : "grid", animate: false },
  });
  state.cy.on("tap", "node", (ev) => showEntity(ev.target.id()));
  window.kgloomGraph = state.cy; // for the browser test and the console
  $("graph-empty").hidden = state.cy.nodes().length > 0;
}

// Answers can come back out of order (a slow question overtaken by "draw members"): each
// request takes a turn of its kind ("ask", "draw") when it is made; takeTurn returns a
// function telling whether that turn is still the latest, and only the latest may show.
const turns = {};
function takeTurn(kind) {
  const mine = (turns[kind] = (turns[kind] || 0) + 1);
  return () => turns[kind] === mine;
}

// Draws the subgraph that fetchSub() resolves to, or shows its error in the details
// panel, unless a later draw was asked for meanwhile.
async function drawLatest(isLatest, fetchSub) {
  try {
    const sub = await fetchSub();
    if (isLatest()) drawGraph(sub);
  } catch (e) { if (isLatest()) showError($("detail"), e); }
}

async function drawEntities(ids, depth) {
  await drawLatest(takeTurn("draw"), async () => (ids.length ?
    api("api/graph/subgraph", { entity_ids: ids.slice(0, 500), depth }) : { nodes: [], edges: [] }));
}

async function drawNeighbourhood(id) {
  await drawLatest(takeTurn("draw"),
    () => api(`api/graph/entities/${encodeURIComponent(id)}/neighbourhood?depth=1`));
}

// --- asking ----------------------------------------------------------------------
function sourceItem(ref, kind, id, text) {
  const open = () => {
    if (kind === "text_units") showTextUnit(id);
    else if (kind === "entities") showEntity(id);
    else if (kind === "reports") showCommunity(Number(id));
    else $("detail").replaceChildren(el("div", { class: "text" }, text));
  };
  const shown = text.startsWith(`[${ref}]`) ? text.slice(ref.length + 2).trim() : text;
  return el("div", { class: "source", "data-kind": kind, onclick: open },
    el("span", { class: "ref" }, ref), shown.length > 220 ? shown.slice(0, 220) + " ..." : shown);
}

// the entities and text units a result was built from: the graph draws the entities and
// those the units mention
function retrievedItems(res) {
  const entities = new Set(), units = new Set();
  if (res.text_units) { // a retrieval result
    for (const e of res.entities || []) entities.add(e.entity_id);
    for (const u of res.text_units) units.add(u.id);
  } else { // a search result: its context's entities and text units, else its seeds and units
    for (const item of (res.context && res.context.items) || []) {
      if (item.kind === "entities") entities.add(item.source_id);
      if (item.kind === "text_units") units.add(item.source_id);
    }
    for (const s of ((res.info || {}).local || {}).seeds || []) entities.add(s);
    if (!entities.size && !units.size) {
      for (const u of ((res.info || {}).retrieval || {}).units || []) units.add(u);
    }
  }
  return { entity_ids: [...entities].slice(0, 500), text_unit_ids: [...units].slice(0, 500) };
}

// Shows the server's notice above the sources when it flags the answer as of low relevance
// (info.low_relevance: its best retrieval score is under the threshold, so no unit is
// relevant; info.notice: a sentence saying so); otherwise, and for servers older than
// those fields, nothing shows.
function showNotice(info) {
  const low = Boolean(info && info.low_relevance);
  $("notice").textContent = low ?
    (info.notice || "Nothing in the index looks relevant to this question.") : "";
}

async function ask() {
  const question = $("question").value.trim();
  if (!question) return;
  const mode = $("mode").value;
  const isLatestAsk = takeTurn("ask"), isLatestDraw = takeTurn("draw");
  $("answer").textContent = "asking ...";
  $("answer").className = "muted";
  $("sources").replaceChildren();
  showNotice(null);
  let res;
  try {
    res = await api("api/query", { question, mode });
  } catch (e) { if (isLatestAsk()) showError($("answer"), e); return; }
  if (!isLatestAsk()) return; // a later question owns the answer panel now
  $("answer").className = "";
  showNotice(res.info);
  const sources = $("sources");
  if (res.text_units) {
    $("answer").textContent = `${res.text_units.length} text units (${res.info.used_mode})`;
    for (const u of res.text_units) {
      sources.append(sourceItem(`#${u.rank}`, "text_units", u.id,
        `${u.document_title || ""}: ${u.text}`));
    }
  } else {
    $("answer").textContent = (res.answer || "(no answer)") + (res.notice ? `\n\n${res.notice}` : "");
    const cited = res.cited.length ? res.cited : res.context.items.map(
      (i) => ({ ref: i.ref, kind: i.kind, id: i.source_id, text: i.text }));
    for (const c of cited) sources.append(sourceItem(c.ref, c.kind, c.id, c.text));
  }
  await drawLatest(isLatestDraw,
    () => api("api/graph/subgraph", { ...retrievedItems(res), depth: 0, max_nodes: 150 }));
}

// --- communities -----------------------------------------------------------------
async function loadCommunities() {
  try {
    const d = await api("api/graph/communities");
    const rows = new Map(d.communities.map((c) => [c.community, c]));
    const item = (c) => {
      const row = rows.get(c);
      const label = el("summary", { "data-community": c },
        `C${c} ${row.title || ""} (${row.size})`);
      label.addEventListener("click", () => showCommunity(c));
      const node = el("details", {}, label);
      for (const k of row.children) if (rows.has(k)) node.append(item(k));
      return node;
    };
    const roots = d.communities.filter((c) => c.level === (d.levels[0] ?? 0));
    $("communities").replaceChildren(...roots.map((c) => item(c.community)));
    if (!roots.length) $("communities").textContent = "This index has no communities.";
  } catch (e) { showError($("communities"), e); }
}

async function init() {
  $("apikey").value = localStorage.getItem("kgloom-api-key") || "";
  $("apikey").addEventListener("change", () => {
    localStorage.setItem("kgloom-api-key", $("apikey").value);
    init();
  });
  $("ask").onclick = ask;
  $("question").onkeydown = (ev) => { if (ev.key === "Enter") ask(); };
  try {
    const modes = await api("api/modes");
    const select = $("mode");
    select.replaceChildren();
    for (const group of ["search", "retrieval"]) {
      const og = el("optgroup", { label: group });
      for (const m of modes[group]) og.append(el("option", { value: m }, m));
      select.append(og);
    }
    select.value = "local";
    await api("api/health");
  } catch (e) { $("status").textContent = e.message; return; }
  loadCommunities();
}

init();
