// The elmokit explorer page: plain DOM and SVG, no libraries. Every number it shows comes from the
// server's /v1/explorer routes (docs/serve.md); this file only draws them. Each view's <section> carries
// data-state="idle|loading|ready|unavailable|error" so that tests and users can tell where it stands.
"use strict";

const SVG = "http://www.w3.org/2000/svg";
// Okabe & Ito's colour-blind-safe palette, for clusters.
const CLUSTER_COLOURS = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000"];

const state = {
  info: null,
  layer: null,          // the layer shown by the neighbour, heatmap and projection views
  view: "neighbors",
  tokens: null,         // the sentence's tokens, as the server cut them
  neighbors: null,      // the last /neighbors answer (all layers)
  similarity: null,     // the last /similarity answer (all layers)
  word: null,           // {position, word} picked for the projection view
  fresh: {},            // view -> true when it shows the current sentence
  tickets: {},          // view -> number of its latest request: an older answer arriving late is dropped
};

function ticket(view) { state.tickets[view] = (state.tickets[view] || 0) + 1; return state.tickets[view]; }
function stale(view, number) { return state.tickets[view] !== number; }

const $ = (selector) => document.querySelector(selector);

function el(tag, attributes = {}, ...children) {
  const node = tag.startsWith("svg:") ? document.createElementNS(SVG, tag.slice(4)) : document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value === undefined || value === null || value === false) continue;
    if (name === "class") node.setAttribute("class", value);
    else if (name === "text") node.textContent = value;
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children) node.append(child);
  return node;
}

async function api(path, body) {
  const headers = {"Accept": "application/json"};
  const key = sessionStorage.getItem("elmokit-api-key");
  if (key) headers["Authorization"] = "Bearer " + key;
  const options = {headers};
  if (body !== undefined) {
    options.method = "POST";
    headers["Content-Type"] = "application/json";
    options.body = JSON.stringify(body);
  }
  const response = await fetch(path, options);
  let data = null;
  try { data = await response.json(); } catch (_) { data = null; }
  if (!response.ok) {
    const error = new Error((data && (data.error && (data.error.message || data.error))) || response.statusText);
    error.status = response.status;
    error.type = data && data.error_type;
    if (response.status === 401) $("#key-row").hidden = false;
    throw error;
  }
  return data;
}

function section(view) { return $("#view-" + view); }

function setState(view, value, message) {
  const node = section(view);
  node.dataset.state = value;
  const notice = node.querySelector(".notice");
  notice.hidden = !message;
  notice.textContent = message || "";
  notice.classList.toggle("error", value === "error");
}

// ---- start-up -------------------------------------------------------------------------------------

async function start() {
  $("#api-key").addEventListener("change", (event) => {
    sessionStorage.setItem("elmokit-api-key", event.target.value.trim());
    loadInfo();
  });
  for (const tab of document.querySelectorAll("#tabs button")) {
    tab.addEventListener("click", () => show(tab.dataset.view));
  }
  $("#sentence-form").addEventListener("submit", (event) => { event.preventDefault(); explore(); });
  $("#similarity-form").addEventListener("submit", (event) => { event.preventDefault(); loadSimilarity(); });
  $("#neighbors-top").addEventListener("change", loadNeighbors);
  $("#neighbors-same-form").addEventListener("change", loadNeighbors);
  $("#projection-k").addEventListener("change", loadProjection);
  await loadInfo();
}

async function loadInfo() {
  try {
    state.info = await api("v1/explorer");
  } catch (error) {
    $("#model-info").textContent = "cannot reach the server: " + error.message;
    return;
  }
  const info = state.info;
  $("#key-row").hidden = !info.api_key_required;
  const index = info.index
    ? `index: ${info.index.n_tokens.toLocaleString()} occurrences in ${info.index.n_sentences.toLocaleString()} sentences`
    : "no neighbour index (--index)";
  const tasks = info.task_models.length ? `task models: ${info.task_models.join(", ")}` : "no task model (--task-model)";
  $("#model-info").textContent = `${info.model} · ${info.num_layers} layers of ${info.dim} · ${index} · ${tasks}`;
  const buttons = $("#layer-buttons");
  buttons.replaceChildren();
  if (state.layer === null || state.layer >= info.num_layers) state.layer = info.num_layers - 1;
  for (let layer = 0; layer < info.num_layers; layer++) {
    const button = el("button", {type: "button", role: "radio", "data-layer": layer, text: String(layer),
                                 "aria-checked": String(layer === state.layer)});
    button.addEventListener("click", () => setLayer(layer));
    buttons.append(button);
  }
  explore();
}

function setLayer(layer) {
  state.layer = layer;
  for (const button of document.querySelectorAll("#layer-buttons button")) {
    button.setAttribute("aria-checked", String(Number(button.dataset.layer) === layer));
  }
  drawNeighbors();
  drawSimilarity();
  state.fresh.projection = false;
  if (state.view === "projection") loadProjection();
}

function show(view) {
  state.view = view;
  for (const tab of document.querySelectorAll("#tabs button")) {
    tab.setAttribute("aria-selected", String(tab.dataset.view === view));
  }
  for (const node of document.querySelectorAll(".view")) node.hidden = node.id !== "view-" + view;
  if (!state.fresh[view]) refresh(view);
}

function refresh(view) {
  if (view === "neighbors") return loadNeighbors();
  if (view === "similarity") return loadSimilarity();
  if (view === "projection") return loadProjection();
  if (view === "weights") return loadWeights();
}

function sentence() { return $("#sentence").value; }

async function explore() {
  if (!state.info) return;
  state.fresh = {};
  state.word = null;
  state.tokens = null;
  section(state.view).dataset.state = "loading";  // at once: the last sentence's views are out of date
  const number = ticket("explore");
  let tokens = null;
  try {
    tokens = (await api("tokenize", {inputs: sentence()}))[0].map((t) => t.text);
  } catch (error) {
    tokens = null;
  }
  if (stale("explore", number)) return;
  state.tokens = tokens;
  drawChips();
  refresh(state.view);
}

// ---- 1. nearest occurrences ---------------------------------------------------------------------------

async function loadNeighbors() {
  state.fresh.neighbors = true;
  if (!state.info.index) {
    $("#neighbors-list").replaceChildren();
    return setState("neighbors", "unavailable", "No neighbour index is loaded: start the server with " +
                    "--index DIR (built with `elmokit neighbors index --model M --corpus FILE --out DIR`).");
  }
  setState("neighbors", "loading");
  const number = ticket("neighbors");
  let data;
  try {
    data = await api("v1/explorer/neighbors", {
      inputs: sentence(), top: Number($("#neighbors-top").value), same_form: $("#neighbors-same-form").checked});
  } catch (error) {
    if (stale("neighbors", number)) return;
    state.neighbors = null;
    $("#neighbors-list").replaceChildren();
    return setState("neighbors", "error", error.message);
  }
  if (stale("neighbors", number)) return;
  state.neighbors = data;
  drawNeighbors();
  setState("neighbors", "ready");
}

function drawNeighbors() {
  const data = state.neighbors;
  if (!data) return;
  const layer = data.layers.find((l) => l.layer === state.layer) || data.layers[data.layers.length - 1];
  const list = $("#neighbors-list");
  list.replaceChildren();
  list.dataset.layer = layer.layer;
  for (const word of layer.words) {
    const rows = word.neighbors.map((hit) => el("tr", {class: "neighbor-row"},
      el("td", {class: "score", text: hit.score.toFixed(3)}),
      el("td", {class: "context"},
        el("span", {class: "left", text: (hit.cut_left ? "… " : "") + hit.left + " "}),
        el("mark", {text: hit.word}),
        el("span", {class: "right", text: " " + hit.right + (hit.cut_right ? " …" : "")}))));
    const table = el("table", {class: "hits"}, el("tbody", {}, ...rows));
    if (!rows.length) table.append(el("caption", {text: "no occurrences"}));
    list.append(el("div", {class: "word-block", "data-position": word.position},
      el("h3", {}, el("span", {class: "position", text: String(word.position)}), el("span", {text: " " + word.word})),
      table));
  }
}

// ---- 2. similarity heatmap ------------------------------------------------------------------------------

async function loadSimilarity() {
  state.fresh.similarity = true;
  setState("similarity", "loading");
  const number = ticket("similarity");
  let data;
  try {
    data = await api("v1/explorer/similarity", {a: sentence(), b: $("#sentence-b").value});
  } catch (error) {
    if (stale("similarity", number)) return;
    state.similarity = null;
    $("#heatmap").replaceChildren();
    return setState("similarity", "error", error.message);
  }
  if (stale("similarity", number)) return;
  state.similarity = data;
  drawSimilarity();
  setState("similarity", "ready");
}

// Cosine -1..1 to a diverging colour: blue (-1), white (0), red (+1).
function divergingColour(value) {
  const v = Math.max(-1, Math.min(1, value));
  const [r0, g0, b0] = v >= 0 ? [178, 24, 43] : [33, 102, 172];
  const t = Math.abs(v);
  const mix = (c) => Math.round(255 + (c - 255) * t);
  return `rgb(${mix(r0)},${mix(g0)},${mix(b0)})`;
}

function textWidth(tokens) { return Math.max(30, ...tokens.map((t) => t.length * 7.2)) + 10; }

function drawSimilarity() {
  const data = state.similarity;
  if (!data) return;
  const j = data.layers.indexOf(state.layer) >= 0 ? data.layers.indexOf(state.layer) : data.layers.length - 1;
  const matrix = data.cosine[j];
  const a = data.tokens_a, b = data.tokens_b;
  const cell = Math.max(26, Math.min(46, Math.floor(640 / Math.max(a.length, b.length))));
  const left = textWidth(a), top = textWidth(b);
  const width = left + cell * b.length + 90, height = top + cell * a.length + 10;
  const svg = el("svg:svg", {width, height, viewBox: `0 0 ${width} ${height}`, role: "img",
                             "aria-label": `cosine similarity, layer ${data.layers[j]}`, "data-layer": data.layers[j]});
  b.forEach((token, col) => {
    const x = left + col * cell + cell / 2 + 4, y = top - 6;
    svg.append(el("svg:text", {class: "col-label", x, y, transform: `rotate(-55 ${x} ${y})`, text: token}));
  });
  a.forEach((token, row) => {
    svg.append(el("svg:text", {class: "row-label", x: left - 6, y: top + row * cell + cell / 2 + 4,
                               "text-anchor": "end", text: token}));
    matrix[row].forEach((value, col) => {
      const x = left + col * cell, y = top + row * cell;
      const rect = el("svg:rect", {class: "cell", x, y, width: cell - 1, height: cell - 1, fill: divergingColour(value),
                                   "data-row": row, "data-col": col, "data-value": value.toFixed(6)});
      rect.append(el("svg:title", {text: `${token} · ${b[col]}: ${value.toFixed(3)}`}));
      svg.append(rect);
      if (cell >= 30) {
        svg.append(el("svg:text", {class: "cell-value", x: x + cell / 2 - 0.5, y: y + cell / 2 + 4, "text-anchor": "middle",
                                   fill: Math.abs(value) > 0.6 ? "#fff" : "#222", text: value.toFixed(2).replace(/^(-?)0\./, "$1.")}));
      }
    });
  });
  // the colour key
  const keyX = left + cell * b.length + 30;
  for (let i = 0; i <= 20; i++) {
    const v = 1 - i / 10;
    svg.append(el("svg:rect", {class: "key", x: keyX, y: top + i * 8, width: 14, height: 8, fill: divergingColour(v)}));
  }
  for (const [v, label] of [[1, "+1"], [0, "0"], [-1, "−1"]]) {
    svg.append(el("svg:text", {class: "key-label", x: keyX + 18, y: top + (1 - v) * 80 + 5, text: label}));
  }
  $("#heatmap").replaceChildren(svg);
}

// ---- 3. projection ---------------------------------------------------------------------------------------

function drawChips() {
  const chips = $("#word-chips");
  chips.replaceChildren();
  if (!state.tokens || !state.tokens.length) return;
  if (!state.word) {  // start with the middle word (the user picks another by clicking)
    const position = Math.floor(state.tokens.length / 2);
    state.word = {position, word: state.tokens[position]};
  }
  state.tokens.forEach((token, position) => {
    const chip = el("button", {type: "button", class: "word-chip", "data-position": position, text: token,
                               "aria-pressed": String(position === state.word.position)});
    chip.addEventListener("click", () => {
      state.word = {position, word: token};
      for (const other of chips.children) other.setAttribute("aria-pressed", String(other === chip));
      loadProjection();
    });
    chips.append(chip);
  });
}

async function loadProjection() {
  state.fresh.projection = true;
  if (!state.info.index) {
    $("#projection").replaceChildren();
    $("#projection-legend").replaceChildren();
    return setState("projection", "unavailable", "No neighbour index is loaded: start the server with --index DIR " +
                    "to see the occurrences of a word.");
  }
  if (!state.word) return setState("projection", "error", "the sentence has no words");
  setState("projection", "loading");
  const number = ticket("projection");
  let data;
  try {
    data = await api("v1/explorer/projection", {inputs: sentence(), position: state.word.position, layer: state.layer,
                                                clusters: Number($("#projection-k").value)});
  } catch (error) {
    if (stale("projection", number)) return;
    $("#projection").replaceChildren();
    $("#projection-legend").replaceChildren();
    return setState("projection", "error", error.message);
  }
  if (stale("projection", number)) return;
  drawProjection(data);
  setState("projection", "ready", data.n_occurrences ? null
           : `“${data.word}” does not occur in the index: pick another word.`);
}

function drawProjection(data) {
  const width = 720, height = 440, pad = 28;
  const xs = data.points.map((p) => p.x), ys = data.points.map((p) => p.y);
  if (data.query) { xs.push(data.query.x); ys.push(data.query.y); }
  const span = (values) => {
    const lo = Math.min(...values), hi = Math.max(...values);
    return hi - lo > 1e-9 ? [lo, hi] : [lo - 1, hi + 1];
  };
  const [x0, x1] = xs.length ? span(xs) : [-1, 1], [y0, y1] = ys.length ? span(ys) : [-1, 1];
  const sx = (x) => pad + (x - x0) / (x1 - x0) * (width - 2 * pad);
  const sy = (y) => height - pad - (y - y0) / (y1 - y0) * (height - 2 * pad);
  const svg = el("svg:svg", {width, height, viewBox: `0 0 ${width} ${height}`, role: "img", "data-layer": data.layer,
                             "aria-label": `occurrences of ${data.word}, layer ${data.layer}`});
  svg.append(el("svg:rect", {x: 0.5, y: 0.5, width: width - 1, height: height - 1, class: "frame"}));
  const [ev1, ev2] = data.explained_variance.map((v) => (100 * v).toFixed(0) + "%");
  svg.append(el("svg:text", {class: "axis-label", x: width - pad, y: height - 8, "text-anchor": "end", text: `PC1 (${ev1})`}));
  svg.append(el("svg:text", {class: "axis-label", x: 8, y: 18, text: `PC2 (${ev2})`}));
  for (const point of data.points) {
    const circle = el("svg:circle", {class: "point", cx: sx(point.x).toFixed(2), cy: sy(point.y).toFixed(2), r: 5,
                                     fill: CLUSTER_COLOURS[point.cluster % CLUSTER_COLOURS.length],
                                     "data-cluster": point.cluster, "data-sentence": point.sentence});
    circle.append(el("svg:title", {text: `${point.left} [${point.word}] ${point.right}`}));
    svg.append(circle);
  }
  if (data.query) {
    const cx = sx(data.query.x), cy = sy(data.query.y), r = 11;
    const star = [];
    for (let i = 0; i < 10; i++) {
      const angle = -Math.PI / 2 + i * Math.PI / 5, radius = i % 2 ? r * 0.45 : r;
      star.push(`${(cx + radius * Math.cos(angle)).toFixed(2)},${(cy + radius * Math.sin(angle)).toFixed(2)}`);
    }
    const marker = el("svg:polygon", {class: "query-point", points: star.join(" "),
                                      fill: CLUSTER_COLOURS[data.query.cluster % CLUSTER_COLOURS.length]});
    marker.append(el("svg:title", {text: "your sentence: " + data.query.tokens.map(
      (t, i) => (i === data.query.position ? `[${t}]` : t)).join(" ")}));
    svg.append(marker);
  }
  $("#projection").replaceChildren(svg);
  // legend: each cluster with its size and a few of its occurrences
  const legend = $("#projection-legend");
  legend.replaceChildren(el("p", {class: "muted", text: `“${data.word}”: ${data.n_occurrences} occurrences` +
    (data.truncated ? ` (the first ${data.points.length} shown)` : "") + ` · layer ${data.layer} · k = ${data.clusters}`}));
  for (let c = 0; c < data.clusters; c++) {
    const members = data.points.filter((p) => p.cluster === c);
    const examples = members.slice(0, 3).map((p) => el("li", {},
      el("span", {text: p.left + " "}), el("mark", {text: p.word}), el("span", {text: " " + p.right})));
    legend.append(el("div", {class: "cluster", "data-cluster": c},
      el("h3", {}, el("span", {class: "swatch", style: `background:${CLUSTER_COLOURS[c % CLUSTER_COLOURS.length]}`}),
         el("span", {text: ` cluster ${c + 1}: ${members.length} occurrence${members.length === 1 ? "" : "s"}`})),
      el("ul", {}, ...examples)));
  }
}

// ---- 4. layer weights -------------------------------------------------------------------------------------

async function loadWeights() {
  state.fresh.weights = true;
  setState("weights", "loading");
  const number = ticket("weights");
  let data;
  try {
    data = await api("v1/explorer/layer-weights");
  } catch (error) {
    return stale("weights", number) ? undefined : setState("weights", "error", error.message);
  }
  if (stale("weights", number)) return;
  const box = $("#weights");
  box.replaceChildren();
  if (!data.task_models.length) {
    return setState("weights", "unavailable", "No task model is loaded: start the server with --task-model DIR " +
                    "(a folder from `elmokit tag train` or `elmokit classify train`; repeatable).");
  }
  for (const model of data.task_models) {
    const block = el("div", {class: "task-model", "data-name": model.name},
      el("h3", {text: `${model.name} (${model.kind}, ${model.elmo_mode}` +
                      (model.representation ? `, trained on ${model.representation}` : "") + ")"}));
    if (!model.mixes.length) block.append(el("p", {class: "muted", text: "no learned mix (this model uses " +
                                                   (model.elmo_mode === "none" ? "no ELMo" : "a fixed layer") + ")"}));
    for (const mix of model.mixes) block.append(weightChart(mix));
    box.append(block);
  }
  setState("weights", "ready");
}

function weightChart(mix) {
  const bar = 54, gap = 18, chartHeight = 170, top = 24, left = 44;
  const width = left + mix.layers.length * (bar + gap) + 10, height = top + chartHeight + 44;
  const max = Math.max(...mix.softmax_w, 1e-9);
  const ceiling = Math.min(1, Math.ceil(max * 10 + 1e-9) / 10);
  const svg = el("svg:svg", {class: "weights-chart", width, height, viewBox: `0 0 ${width} ${height}`, role: "img",
                             "aria-label": `softmax(w) of the ${mix.name} mix`, "data-mix": mix.name});
  for (const tick of [0, ceiling / 2, ceiling]) {
    const y = top + chartHeight - tick / ceiling * chartHeight;
    svg.append(el("svg:line", {class: "grid", x1: left - 4, x2: width - 6, y1: y, y2: y}));
    svg.append(el("svg:text", {class: "tick", x: left - 8, y: y + 4, "text-anchor": "end", text: tick.toFixed(2)}));
  }
  mix.layers.forEach((layer, i) => {
    const value = mix.softmax_w[i], h = value / ceiling * chartHeight;
    const x = left + i * (bar + gap) + gap / 2, y = top + chartHeight - h;
    const rect = el("svg:rect", {class: "weight-bar", x, y, width: bar, height: Math.max(h, 0.5),
                                 "data-layer": layer, "data-value": value.toFixed(6)});
    rect.append(el("svg:title", {text: `layer ${layer}: softmax(w) = ${value.toFixed(4)} (w = ${mix.w[i].toFixed(4)})`}));
    svg.append(rect);
    svg.append(el("svg:text", {class: "bar-value", x: x + bar / 2, y: y - 5, "text-anchor": "middle", text: value.toFixed(3)}));
    svg.append(el("svg:text", {class: "bar-label", x: x + bar / 2, y: top + chartHeight + 16, "text-anchor": "middle",
                               text: `layer ${layer}`}));
  });
  svg.append(el("svg:text", {class: "gamma", x: left, y: height - 6, text: `${mix.name} mix · γ = ${mix.gamma.toFixed(4)}`}));
  return svg;
}

start();
