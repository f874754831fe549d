/* The diff page: folded source runs, the UOp graph diff (an HTML fragment computed in a worker) and pan/zoom on its drawings (a graph
   over the node limit drawn whole on a canvas: whole_graph.js); its two measurements (interleaved re-timing, outputs compared) are
   measure.js's. */
import { $, $$, esc } from "./dom.js";
import { drawWhole } from "./whole_graph.js";

function panZoom(root) {
  $$(".diff-graph[data-whole]", root).forEach((box) => {  // a kernel's graph over the node limit, whole on a canvas
    if (box.dataset.pz) return;
    box.dataset.pz = "1";
    drawWhole(box).catch((err) => { $("[data-whole-canvas]", box).innerHTML = `<div class="viewer-status err">Not drawn: ${esc(err.message)}</div>`; });
  });
  $$(".diff-graph:not([data-whole])", root).forEach((box) => {
    const svg = $("svg", box);
    if (!svg || !window.svgPanZoom || box.dataset.pz) return;
    box.dataset.pz = "1";
    const pz = window.svgPanZoom(svg, { zoomScaleSensitivity: 0.3, minZoom: 0.02, maxZoom: 40, fit: true, center: true });
    const fit = () => { pz.resize(); pz.fit(); pz.center(); if (pz.getZoom() > 1.6) pz.zoom(1.6); };
    fit();
    if (pz.getSizes().realZoom < 0.35) {  // too small to read when fitted: zoom in around the first outlined node (or the sink)
      const target = $("g.node.changed", svg) || $("g.node.op-SINK", svg);
      pz.zoom(pz.getZoom() * 0.7 / pz.getSizes().realZoom);
      if (target) requestAnimationFrame(() => requestAnimationFrame(() => {
        const c = box.querySelector(".viewer-canvas").getBoundingClientRect(), t = target.getBoundingClientRect();
        pz.panBy({ x: c.left + c.width / 2 - (t.left + t.width / 2), y: c.top + c.height / 2 - (t.top + t.height / 2) });
      }));
    }
    $$("[data-act]", box).forEach((b) => b.addEventListener("click", () => {
      if (b.dataset.act === "zoom-in") pz.zoomIn(); else if (b.dataset.act === "zoom-out") pz.zoomOut(); else fit();
    }));
  });
}

async function loadGraphs(root) {
  if (root.dataset.graphsCached === "yes") { panZoom(document); return; }
  let html;
  try {
    const r = await fetch(root.dataset.graphsUrl, { headers: { Accept: "text/html" } });
    if (!r.ok) { let d = `${r.status}`; try { d = (await r.json()).detail; } catch (e) { /* keep status */ } throw new Error(d); }
    html = await r.text();
  } catch (err) {
    $$(".graph-pending").forEach((p) => { p.className = "alert err"; p.textContent = `The graph diff failed: ${err.message}`; });
    return;
  }
  const box = document.createElement("div");
  box.innerHTML = html;
  const error = $("[data-graph-error]", box);
  $$(".graph-diff").forEach((slot) => {
    const g = $(`[data-graph-group="${slot.dataset.group}"]`, box);
    slot.innerHTML = "";
    if (g) slot.appendChild(g); else if (error) slot.appendChild(error.cloneNode(true));
    const cell = $(`[data-graph-count="${slot.dataset.group}"]`);
    if (cell) cell.textContent = g ? `${g.dataset.onlyA} / ${g.dataset.onlyB}` : "–";
  });
  document.body.dataset.graphs = "loaded";
  panZoom(document);
}

// a module runs once the page is parsed
$$("[data-unfold]").forEach((b) => b.addEventListener("click", () => {
  const toggle = b.closest("tbody");
  toggle.nextElementSibling.hidden = false; toggle.remove();
}));
const root = $("#diff-root");
if (root) loadGraphs(root);
