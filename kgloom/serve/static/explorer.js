// kgloom explorer: opens on an overview of the graph (the largest communities' central
// entities), finds entities by name and draws their neighbourhood, filters by entity type,
// community level and community; asks the index, shows the sources and the retrieved
// subgraph (Cytoscape.js, its built-in force-directed "cose" layout, labels kept apart);
// lists the documents and browses the community hierarchy. Talks only to this server's
// /api (docs/serve.md). No build step, no framework.
"use strict";

const $ = (id) => document.getElementById(id);
const state = { cy: null, build: null, hiddenTypes: new Set(), maxBody: 65536 };

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
function showDetail(...children) {
  $("detail").className = ""; // the greyed hint is gone
  $("detail").replaceChildren(...children);
}

// ``heading``: a line above the unit (none when omitted)
async function showTextUnit(id, heading) {
  try {
    const u = await api(`api/text_units/${encodeURIComponent(id)}`);
    showDetail(...(heading ? [el("h3", {}, heading)] : []),
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
    showDetail(
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
    showDetail(
      el("h3", {}, `C${d.community} (level ${d.level}): ${d.title || ""}`),
      el("div", { class: "muted" }, `${d.members_total} members, ${d.children.length} children`),
      el("div", { class: "text", "data-testid": "report" },
        r.full_content || r.summary || "(no report)"),
      findings,
      el("button", { onclick: () => drawEntities(d.members.map((m) => m.id), 0,
        `Members of C${d.community} (level ${d.level}): ${d.members.length} entities`) },
      "draw members"));
  } catch (e) { showError($("detail"), e); }
}

// --- graph -----------------------------------------------------------------------
// GraphRAG's usual entity types get colours of their own; any other type one by its hash
const KNOWN_TYPE_COLOURS = { PERSON: "#7b61c4", ORGANIZATION: "#2f6fdf", LOCATION: "#3d9a50",
  GEO: "#3d9a50", EVENT: "#d9822b" };
const TYPE_COLOURS = ["#b5478c", "#c2a024", "#2aa0a4", "#8c6d3f", "#5f6b7a"];
function colour(type) {
  const known = KNOWN_TYPE_COLOURS[String(type).toUpperCase()];
  if (known) return known;
  let h = 0;
  for (const ch of String(type)) h = (h * 31 + ch.charCodeAt(0)) >>> 0;
  return TYPE_COLOURS[h % TYPE_COLOURS.length];
}

// Labels sit by their node (placeLabel), cut with an ellipsis past 160 px, vanish when zoomed
// out below 7 px (the small nodes' labels first: their font is smaller). "quiet" nodes
// keep their label hidden (declutterLabels); a selected node always shows its own.
const GRAPH_STYLE = [
  { selector: "node", style: { "background-color": "data(colour)", label: "data(label)",
    width: "data(size)", height: "data(size)", "font-size": "data(font)",
    "min-zoomed-font-size": 7,
    "text-wrap": "ellipsis", "text-max-width": 160, "z-index": "data(z)",
    "text-background-color": "#fff",
    "text-background-opacity": 0.8, "text-background-padding": 1 } },
  { selector: "node.quiet", style: { "text-opacity": 0, "text-background-opacity": 0 } },
  { selector: "node.centre", style: { "border-width": 3, "border-color": "#d33" } },
  { selector: "node:selected", style: { "border-width": 3, "border-color": "#111",
    "text-opacity": 1, "text-background-opacity": 0.8, "z-index": 300 } },
  { selector: "edge", style: { width: 1.5, "line-color": "#aab2bd", "curve-style": "bezier",
    "target-arrow-shape": "triangle", "target-arrow-color": "#aab2bd" } },
];

// Force-directed cose, spacing nodes by their label boxes too (nodeDimensionsIncludeLabels)
// so that few labels need hiding, spread over the canvas's own shape (boundingBox: else a
// long thin graph is fitted small); one node or none: a grid.
function layoutOptions(cy) {
  if (cy.nodes().length < 2) return { name: "grid", animate: false };
  return { name: "cose", animate: false, randomize: true, nodeDimensionsIncludeLabels: true,
    boundingBox: { x1: 0, y1: 0, w: cy.width(), h: cy.height() },
    idealEdgeLength: () => 40, nodeRepulsion: () => 4500, gravity: 4, nodeOverlap: 20,
    componentSpacing: 30, padding: 24, numIter: 1500 };
}

// Cytoscape's data of node ``n``: size and font grow with PageRank (``maxPr``: the largest
// drawn); ``rank`` orders the labels (declutterLabels), the centre first.
function nodeData(n, maxPr, centre) {
  const weight = Math.sqrt((n.pagerank || 0) / maxPr);
  return { id: n.id, label: n.title, type: n.type || "", colour: colour(n.type),
    size: 14 + 30 * weight, font: 11 + 6 * weight, rank: n.id === centre ? 2 : weight,
    z: n.id === centre ? 200 : Math.round(100 * weight) }; // the central drawn on top
}

const labelBox = (n) => n.boundingBox({ includeNodes: false, includeEdges: false,
  includeLabels: true });
const intersect = (a, b) => a.x1 < b.x2 && b.x1 < a.x2 && a.y1 < b.y2 && b.y1 < a.y2;

// Where a label may sit, tried in this order: under its node, above, right, left.
const LABEL_PLACES = [
  { "text-valign": "bottom", "text-halign": "center", "text-margin-x": 0, "text-margin-y": 2 },
  { "text-valign": "top", "text-halign": "center", "text-margin-x": 0, "text-margin-y": -2 },
  { "text-valign": "center", "text-halign": "right", "text-margin-x": 3, "text-margin-y": 0 },
  { "text-valign": "center", "text-halign": "left", "text-margin-x": -3, "text-margin-y": 0 },
];

// Puts ``n``'s label in the first of LABEL_PLACES where it meets none of the ``taken``
// boxes, preferring a place that covers none of the ``bodies`` either (other nodes'), and
// returns its box; null (the label back under its node) when there is no place.
function placeLabel(n, taken, bodies) {
  for (const avoid of [[...taken, ...bodies], taken]) {
    for (const place of LABEL_PLACES) {
      n.style(place);
      const box = labelBox(n);
      if (!avoid.some((b) => intersect(b, box))) return box;
    }
  }
  n.style(LABEL_PLACES[0]);
  return null;
}

const bodyBox = (n) => n.boundingBox({ includeLabels: false, includeEdges: false });

// Shows the labels of the visible nodes, highest rank first, each where it meets no
// label already shown and no higher-ranked node's body (drawn above it), and where it can,
// no node at all; else hides it ("quiet"): no two shown labels ever intersect. The layout
// keeps most apart; this settles the rest.
function declutterLabels(cy) {
  cy.nodes().removeClass("quiet");
  const nodes = cy.nodes().filter((n) => n.visible());
  const bodies = new Map(nodes.map((n) => [n.id(), bodyBox(n)]));
  const taken = []; // shown labels' boxes and higher-ranked nodes' bodies
  for (const n of nodes.sort((a, b) => b.data("rank") - a.data("rank"))) {
    const others = [...bodies].filter(([id]) => id !== n.id()).map(([, b]) => b);
    const box = placeLabel(n, taken, others);
    if (box) taken.push(box);
    else n.addClass("quiet");
    taken.push(bodies.get(n.id()));
  }
}

// Replaces the drawn graph with the subgraph ``sub`` ({nodes, edges} as the /api/graph
// endpoints answer, plus ``caption``, and ``centre``: an entity id to mark); the
// placeholder shows while no node is drawn. Cytoscape owns #graph (destroy() empties it),
// so the placeholder is its sibling, never its child.
function drawGraph(sub) {
  if (state.cy) state.cy.destroy();
  state.cy = window.kgloomGraph = null;
  $("graph-empty").hidden = false; // until a graph with nodes stands in the old one's place
  $("graph-caption").textContent = sub.caption || "";
  const maxPr = Math.max(1e-9, ...sub.nodes.map((n) => n.pagerank || 0));
  const elements = sub.nodes.map((n) => ({ data: nodeData(n, maxPr, sub.centre) }));
  for (const e of sub.edges) {
    elements.push({ data: { id: `e:${e.id}`, source: e.source, target: e.target,
                            label: e.description || "" } });
  }
  showTypes(sub.nodes); // first: the row's height settles the canvas's
  const cy = cytoscape({ container: $("graph"), elements, wheelSensitivity: 0.3,
                         style: GRAPH_STYLE, maxZoom: 4 });
  if (sub.centre) cy.getElementById(sub.centre).addClass("centre");
  applyTypeFilter(cy);
  cy.layout(layoutOptions(cy)).run(); // synchronous: animate is off
  declutterLabels(cy);
  cy.fit(undefined, 24); // again: labels moved to a node's side may reach past the edge
  if (cy.zoom() > 1.5) cy.zoom(1.5).center(); // a few nodes: not blown up
  cy.on("tap", "node", (ev) => showEntity(ev.target.id()));
  state.cy = window.kgloomGraph = cy; // for the browser test and the console
  $("graph-empty").hidden = cy.nodes().length > 0;
}

// --- type filter: one checkbox per entity type drawn, with its colour --------------
// a style bypass, not a class: Cytoscape 3.35 can bring back a class's old "display: none"
// when other classes change next (declutterLabels), which left re-shown labels overlapping
function applyTypeFilter(cy) {
  cy.nodes().forEach((n) => {
    n.style("display", state.hiddenTypes.has(n.data("type")) ? "none" : "element");
  });
}

// ``nodes``: the drawn nodes as the API gives them
function showTypes(nodes) {
  const counts = new Map();
  for (const n of nodes) counts.set(n.type || "", (counts.get(n.type || "") || 0) + 1);
  const boxes = [...counts].sort((a, b) => b[1] - a[1]).map(([type, count]) => {
    const box = el("input", { type: "checkbox", "data-type": type });
    box.checked = !state.hiddenTypes.has(type);
    box.onchange = () => toggleType(type, box.checked);
    return el("label", {}, box, el("span", { class: "swatch", style: `background:${colour(type)}` }),
      `${type || "(no type)"} (${count})`);
  });
  $("types").replaceChildren(...boxes);
}

function toggleType(type, shown) {
  if (shown) state.hiddenTypes.delete(type);
  else state.hiddenTypes.add(type);
  if (!state.cy) return;
  applyTypeFilter(state.cy);
  declutterLabels(state.cy);
}

// Answers can come back out of order (a slow question overtaken by "draw members"): each
// request takes a turn of its kind ("ask", "draw", "search") when it is made; takeTurn
// returns a function telling whether that turn is still the latest, and only the latest
// may show.
const turns = {};
function takeTurn(kind) {
  const mine = (turns[kind] = (turns[kind] || 0) + 1);
  return () => turns[kind] === mine;
}

// Draws the subgraph that fetchSub() resolves to, or shows its error in the details
// panel, unless a later draw was asked for meanwhile; then calls onDrawn(sub).
async function drawLatest(isLatest, fetchSub, onDrawn) {
  try {
    const sub = await fetchSub();
    if (!isLatest()) return;
    drawGraph(sub);
    if (onDrawn) onDrawn(sub);
  } catch (e) { if (isLatest()) showError($("detail"), e); }
}

// A subgraph request whose id lists (most relevant first) are cut, the longer list first,
// until its JSON fits the server's body limit (/api/modes: limits.max_body_bytes); a
// fused or two-step answer can name more entities than a small limit holds.
function fitBody(body) {
  const out = { ...body };
  const size = () => new Blob([JSON.stringify(out)]).size;
  while (size() > state.maxBody) {
    const lists = ["entity_ids", "text_unit_ids"].filter((k) => (out[k] || []).length);
    if (!lists.length) break;
    const k = lists.reduce((a, b) => (out[a].length >= out[b].length ? a : b));
    out[k] = out[k].slice(0, Math.floor(out[k].length * 0.8));
  }
  return out;
}

async function drawEntities(ids, depth, caption) {
  await drawLatest(takeTurn("draw"), async () => ({ caption, ...(ids.length ?
    await api("api/graph/subgraph", fitBody({ entity_ids: ids.slice(0, 500), depth })) :
    { nodes: [], edges: [] }) }));
}

async function drawNeighbourhood(id) {
  await drawLatest(takeTurn("draw"), async () => {
    const sub = await api(`api/graph/entities/${encodeURIComponent(id)}/neighbourhood?depth=1`);
    const centre = sub.nodes.find((n) => n.id === id);
    const more = sub.truncated ? " (the most central)" : "";
    return { ...sub, centre: id, caption: `Neighbourhood of ${centre ? centre.title : id}: ` +
      `${sub.nodes.length} entities${more} within one hop` };
  });
}

// --- overview: the largest communities of a level and their central entities --------
const OVERVIEW_NODES = 60;

// ``params``: {level, community} (either may be absent: the server picks the first level).
async function drawOverview(params = {}) {
  const query = new URLSearchParams({ max_nodes: OVERVIEW_NODES });
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== "") query.set(k, v);
  await drawLatest(takeTurn("draw"), async () => {
    const ov = await api(`api/graph/overview?${query}`);
    return { ...ov, caption: overviewCaption(ov, params.community) };
  }, (ov) => showOverviewFilters(ov, params.community));
}

function overviewCaption(ov, community) {
  if (!ov.nodes.length) return "";
  if (community !== undefined && community !== "") {
    return `Community C${community} (level ${ov.level}): its ${ov.nodes.length} most central entities`;
  }
  if (!ov.communities.length) return `The ${ov.nodes.length} most central entities`;
  return `Overview, level ${ov.level}: the ${ov.nodes.length} most central entities of the ` +
    `${ov.communities.length} largest communities`;
}

// The level and community selects, after the overview ``ov`` is drawn: the levels the
// index has, and (unless one community is drawn) the communities the overview shows.
function showOverviewFilters(ov, community) {
  const levels = $("level-filter");
  if (levels.options.length !== ov.levels.length) {
    levels.replaceChildren(...ov.levels.map((l) => el("option", { value: l }, l)));
  }
  levels.value = ov.level ?? "";
  levels.disabled = !ov.levels.length;
  const select = $("community-filter");
  if (community === undefined || community === "") {
    select.replaceChildren(el("option", { value: "" }, "largest communities"),
      ...ov.communities.map((c) => el("option", { value: c.community },
        `C${c.community} ${(c.title || "").slice(0, 40)} (${c.size})`)));
  }
  select.value = community ?? "";
  select.disabled = !ov.communities.length;
}

// --- entity search: matches as you type; choosing one draws its neighbourhood ---------
let searchTimer = null;
function onSearchInput() {
  clearTimeout(searchTimer);
  searchTimer = setTimeout(findEntities, 200);
}

async function findEntities() {
  const q = $("entity-search").value.trim();
  const isLatest = takeTurn("search");
  if (!q) { $("entity-matches").hidden = true; return; }
  try {
    const d = await api(`api/graph/entities?q=${encodeURIComponent(q)}&limit=12`);
    if (isLatest()) showMatches(d.entities);
  } catch (e) { if (isLatest()) showError($("entity-matches"), e); }
}

function showMatches(entities) {
  const items = entities.map((e) => el("li", {}, el("button", { class: "match",
    "data-id": e.id, onclick: () => chooseEntity(e) },
    e.title, " ", el("span", { class: "muted" }, e.type || ""))));
  $("entity-matches").replaceChildren(...items);
  if (!items.length) $("entity-matches").append(el("li", { class: "muted" }, "no entity matches"));
  $("entity-matches").hidden = false;
}

function chooseEntity(e) {
  takeTurn("search"); // a search still under way no longer shows its matches
  $("entity-matches").hidden = true;
  $("entity-search").value = e.title;
  showEntity(e.id);
  drawNeighbourhood(e.id);
}

function onSearchKey(ev) {
  const first = $("entity-matches").querySelector("button.match");
  if (ev.key === "Enter" && first && !$("entity-matches").hidden) first.click();
  if (ev.key === "Escape") $("entity-matches").hidden = true;
}

// --- asking ----------------------------------------------------------------------
function sourceItem(ref, kind, id, text) {
  const open = () => {
    if (kind === "text_units") showTextUnit(id);
    else if (kind === "entities") showEntity(id);
    else if (kind === "reports") showCommunity(Number(id));
    else showDetail(el("div", { class: "text" }, text));
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
  await drawLatest(isLatestDraw, async () => {
    const sub = await api("api/graph/subgraph",
      fitBody({ ...retrievedItems(res), depth: 0, max_nodes: 150 }));
    return { ...sub, caption: `The entities of the answer: ${sub.nodes.length}` };
  });
}

// --- documents -------------------------------------------------------------------
// ISO time as "YYYY-MM-DD HH:MM" (UTC when the text says so); other text as it is
function shortTime(iso) {
  if (!iso) return "unknown";
  const utc = /(Z|\+00:00)$/.test(iso) ? " UTC" : "";
  return String(iso).replace("T", " ").slice(0, 16) + utc;
}

function documentItem(doc) {
  const open = (ev) => {
    for (const item of $("documents").children) item.classList.toggle("open", item === ev.currentTarget);
    if (doc.first_text_unit_id) {
      showTextUnit(doc.first_text_unit_id, `The first text unit of ${doc.title}`);
    } else showDetail(el("div", { class: "muted" }, `${doc.title} has no text unit.`));
  };
  return el("li", { class: "document", "data-id": doc.id, onclick: open },
    el("strong", {}, doc.title),
    el("div", { class: "muted" }, `${doc.text_units} text units · ${doc.source || "?"}`),
    el("div", { class: "muted" }, `created ${shortTime(doc.creation_date)}`));
}

async function loadDocuments() {
  try {
    const d = await api("api/documents");
    $("build-info").textContent = `build ${state.build}, published ${shortTime(d.published_at)}`;
    $("documents").replaceChildren(...d.documents.map(documentItem));
    if (!d.documents.length) $("documents").append(el("li", { class: "muted" }, "No document."));
  } catch (e) { showError($("documents"), e); }
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
  initGraphTools();
  $("question").onkeydown = (ev) => { if (ev.key === "Enter") ask(); };
  try {
    const modes = await api("api/modes");
    state.maxBody = modes.limits.max_body_bytes;
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
  loadDocuments();
  drawOverview();
}

function initGraphTools() {
  $("entity-search").oninput = onSearchInput;
  $("entity-search").onkeydown = onSearchKey;
  $("level-filter").onchange = () => drawOverview({ level: $("level-filter").value });
  $("community-filter").onchange = () => drawOverview({ level: $("level-filter").value,
    community: $("community-filter").value });
  $("overview").onclick = () => drawOverview({ level: $("level-filter").value });
}

init();
