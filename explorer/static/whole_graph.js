/* A graph over the node limit drawn whole where there is no graph viewer (viewer.js): an export's graphs, drawn when the file opens,
   and the diff's. The box holds its view as JSON (script[data-whole-view]: nodes, edges, groups and marks, as a page's ?whole=1 view),
   a slot for the canvas ([data-whole-canvas]) and may hold a search field ([data-act=search]), a hit count ([data-hits]), zoom buttons
   ([data-act=zoom-in|zoom-out|fit]) and a line that names the node picked ([data-picked]). Drawn, the box says data-drawn="canvas" and
   holds its BigGraph as box.wholeGraph. */
import { BigGraph } from "./big_graph.js";

const READABLE_PX = 11, MIN_FIT_PX = 2.5;  // as viewer.js opens a graph: fitted while its boxes show, else readable over its first mark

export async function drawWhole(box) {
  const view = JSON.parse(box.querySelector("script[data-whole-view]").textContent);
  const slot = box.querySelector("[data-whole-canvas]"), info = box.querySelector("[data-picked]");
  const search = box.querySelector("[data-act=search]"), count = box.querySelector("[data-hits]");
  let hits = [], hit = -1, picked = null, big = null;
  const pick = (id) => {
    picked = id;
    big.select(hits, id);
    const n = id != null ? big.byId.get(id) : null;
    if (info) info.textContent = n ? n.label.replaceAll("\n", " · ") : "";
  };
  big = await BigGraph.create(slot, view, pick);
  if (big.labelPx() < MIN_FIT_PX) {
    const consumed = new Set(view.edges.map((e) => e.src)), out = view.nodes.filter((n) => !consumed.has(n.id)).pop();
    const at = (view.highlight || [])[0] || (out && out.id);
    if (at) { await big.reveal(at); big.zoomAt(READABLE_PX / big.labelPx()); }
  }
  const next = async (dir) => {
    if (!hits.length) return;
    hit = (hit + dir + hits.length) % hits.length;
    if (count) count.textContent = `${hit + 1} / ${hits.length}`;
    await big.reveal(hits[hit]);
    pick(hits[hit]);
  };
  if (search) {
    search.addEventListener("input", () => {
      const q = search.value.trim().toLowerCase();
      hits = q ? view.nodes.filter((n) => n.id === q || String(n.num) === q || n.label.toLowerCase().includes(q)).map((n) => n.id) : [];
      hit = -1;
      if (count) count.textContent = q ? (hits.length ? `${hits.length} hit${hits.length === 1 ? "" : "s"}` : "no hit") : "";
      if (hits.length) next(1); else pick(picked);
    });
    search.addEventListener("keydown", (e) => { if (e.key === "Enter") { e.preventDefault(); next(e.shiftKey ? -1 : 1); } });
  }
  const acts = { "zoom-in": () => big.zoomAt(1.25), "zoom-out": () => big.zoomAt(0.8), fit: () => big.fit() };
  box.querySelectorAll("[data-act]").forEach((b) => { if (acts[b.dataset.act]) b.addEventListener("click", acts[b.dataset.act]); });
  box.wholeGraph = big;
  box.dataset.drawn = "canvas";
  return big;
}
