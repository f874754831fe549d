/* A graph viewer (templates/_partials/viewer.html): fetch the graph's view JSON, then its SVG; pan/zoom, search, a node's pane. */
import { $, $$, esc, fetchJSON } from "./dom.js";
import { BigGraph } from "./big_graph.js";

const MIN_FIT_PX = 2.5;  // label size (px) down to which a fitted graph still shows its nodes' shapes and colours
const centre = (r) => ({ x: r.left + r.width / 2, y: r.top + r.height / 2 });

function densest(nodes, w, h) {  // the middle of the nodes in the w x h window (around one node) that holds the most of them
  const at = nodes.map((g) => centre(g.getBoundingClientRect()));
  let best = null, most = 0;
  for (const p of at) {
    const near = at.filter((q) => Math.abs(q.x - p.x) < w / 2 && Math.abs(q.y - p.y) < h / 2);
    if (near.length > most) { most = near.length; best = near; }
  }
  return best && { x: best.reduce((a, q) => a + q.x, 0) / best.length, y: best.reduce((a, q) => a + q.y, 0) / best.length };
}

export class Viewer {
  constructor(el) {
    this.el = el; this.trace = el.dataset.trace; this.canvas = $(".viewer-canvas", el); this.pz = null; this.seq = 0; this.full = false;
    $("[data-act=zoom-in]", el).addEventListener("click", () => (this.big ? this.big.zoomAt(1.5) : this.pz && this.pz.zoomIn()));
    $("[data-act=zoom-out]", el).addEventListener("click", () => (this.big ? this.big.zoomAt(1 / 1.5) : this.pz && this.pz.zoomOut()));
    $("[data-act=fit]", el).addEventListener("click", () => this.fit());
    $("[data-act=full]", el).addEventListener("click", () => { this.full = true; this.show(this.ref); });
    window.addEventListener("resize", () => {  // keep the user's zoom and pan
      if (!this.el.isConnected) return;
      if (this.big) this.big.resize(); else if (this.pz) this.pz.resize();
    });
    const index = $("[data-act=index]", el);
    if (index) index.addEventListener("change", () => this.show(this.ref, true));
    const groupBy = this.groupBy = $("[data-act=group-by]", el);  // a whole tensor graph's groups: by model line or by kernel (?by=kernel)
    if (groupBy) {
      if (new URL(window.location.href).searchParams.get("by") === "kernel") groupBy.value = "kernel";
      groupBy.addEventListener("change", () => {
        const url = new URL(window.location.href);
        if (groupBy.value === "line") url.searchParams.delete("by"); else url.searchParams.set("by", groupBy.value);
        window.history.replaceState(window.history.state, "", url);
        this.show(this.ref, true);
      });
    }
    const search = $("[data-act=search]", el);
    search.addEventListener("input", () => this.find(search.value));
    search.addEventListener("keydown", (e) => { if (e.key === "Enter") { e.preventDefault(); this.nextHit(e.shiftKey ? -1 : 1); } });
    this.canvas.addEventListener("click", (e) => {
      const g = e.target.closest("g.node");
      if (g && g.id.startsWith("n") && this.graph) this.select(g.id.slice(1));
    });
  }

  /* where a UOp first appeared, read from tinygrad's rewrite log by the server (the match that made it and its rule): the pane shows a
     placeholder, filled once the answer comes (GET /api/traces/{id}/rewrites/{group}/origin/{num}) */
  origin(n) {
    const bar = $(".stepper[data-prefix][data-trace]"), cur = $(".pass-list a[data-pass].active");
    if (n.num == null || !bar || !cur || cur.dataset.group === undefined) return "";
    const target = bar.dataset.target ? `?target=${encodeURIComponent(bar.dataset.target)}` : "";
    const url = `/api/traces/${bar.dataset.trace}/rewrites/${cur.dataset.group}/origin/${n.num}${target}`;
    fetch(url).then((r) => (r.ok ? r.json() : null)).then((o) => {
      const slot = $("[data-origin]", this.el);
      if (!slot || +slot.dataset.origin !== n.num) return;
      if (!o) { slot.textContent = ""; return; }
      const pass = (step, name) => `pass ${step + 1} <a href="?pass=${step}&amp;at=after">${esc(name)}</a>`;
      const says = {
        match: () => `${pass(o.step, o.name)}, match ${o.match}: rule <code title="${esc(o.rule_source || "")}">${esc(o.rule)}</code>`,
        start: () => `no rule: first seen in the graph ${pass(o.step, o.name)} started from (rebuilt between passes)`,
        input: () => "before codegen: in the kernel AST it was handed",
        unknown: () => "not recorded in the rewrite log",
      }[o.kind];
      slot.innerHTML = `<span class="muted">made by:</span> ${says ? says() : esc(o.kind)} · trace number ${n.num}`;
    }).catch(() => {});
    return `<div class="small" data-origin="${n.num}"><span class="muted">made by:</span> …</div>`;
  }

  /* the graph's nodes and edges (from the view JSON): search, selection, parents and children */
  index(view) {
    this.graph = null; this.hits = []; this.hit = -1;
    if (!view.nodes) return;
    const byId = new Map(view.nodes.map((n) => [n.id, n])), parents = new Map(), children = new Map();
    for (const e of view.edges || []) {
      if (!parents.has(e.dst)) parents.set(e.dst, []);
      if (!children.has(e.src)) children.set(e.src, []);
      parents.get(e.dst).push(e); children.get(e.src).push(e);
    }
    this.graph = { byId, parents, children };
    const q = $("[data-act=search]", this.el).value;
    if (q) this.find(q);
  }

  nodeEl(id) { return this.big ? null : this.canvas.querySelector(`g.node[id="n${CSS.escape(id)}"]`); }

  marked(select = null) {  // a canvas-drawn graph's marks: the search's hits, the selection with its parents and children
    if (this.big) this.big.select(this.hits, select !== null ? select : this.selected);
  }

  find(q) {
    $$("g.node.hit", this.canvas).forEach((g) => g.classList.remove("hit"));
    const out = $("[data-hits]", this.el);
    q = q.trim().toLowerCase();
    if (!q || !this.graph) { this.hits = []; out.textContent = ""; return; }
    this.hits = [...this.graph.byId.values()].filter((n) => n.id === q || String(n.num) === q || n.label.toLowerCase().includes(q)).map((n) => n.id);
    this.hits.forEach((id) => { const g = this.nodeEl(id); if (g) g.classList.add("hit"); });
    this.marked();
    this.hit = -1;
    out.textContent = this.hits.length ? `${this.hits.length} hit${this.hits.length === 1 ? "" : "s"}` : "no hit";
    if (this.hits.length) this.nextHit(1);
  }

  nextHit(dir) {
    if (!this.hits.length) return;
    this.hit = (this.hit + dir + this.hits.length) % this.hits.length;
    $("[data-hits]", this.el).textContent = `${this.hit + 1} / ${this.hits.length}`;
    this.select(this.hits[this.hit]);
  }

  panTo(g, id = null) {  // the node to the middle of the part of the graph the node pane leaves uncovered
    const c = this.canvas.getBoundingClientRect(), pane = $(".viewer-detail", this.el);
    const free = c.width - (pane && !pane.hidden ? pane.offsetWidth + 16 : 0);
    if (this.big) { this.big.reveal(id, free); return; }
    if (!this.pz || !g) return;
    const t = g.getBoundingClientRect();
    this.pz.panBy({ x: c.left + free / 2 - (t.left + t.width / 2), y: c.top + c.height / 2 - (t.top + t.height / 2) });
  }

  select(id, pan = true) {
    const n = this.graph && this.graph.byId.get(id);
    this.keepNum = n && n.num != null ? n.num : null;
    this.selected = n ? id : null;
    this.marked();
    this.el.dispatchEvent(new CustomEvent("node-selected", { detail: n || null }));
    $$(".selected, .parent, .child", this.canvas).forEach((x) => x.classList.remove("selected", "parent", "child"));
    const box = $(".viewer-detail", this.el);
    if (!n) { box.hidden = true; return; }
    const ins = this.graph.parents.get(id) || [], outs = this.graph.children.get(id) || [];
    const g = this.nodeEl(id);
    if (g) g.classList.add("selected");
    for (const e of ins) { const p = this.nodeEl(e.src), ed = this.canvas.querySelector(`g.edge[id="e${CSS.escape(e.src)}-${CSS.escape(id)}"]`); if (p) p.classList.add("parent"); if (ed) ed.classList.add("parent"); }
    for (const e of outs) { const c = this.nodeEl(e.dst), ed = this.canvas.querySelector(`g.edge[id="e${CSS.escape(id)}-${CSS.escape(e.dst)}"]`); if (c) c.classList.add("child"); if (ed) ed.classList.add("child"); }
    const link = (nid, extra) => { const m = this.graph.byId.get(nid); return `<a href="#" data-node="${esc(nid)}">${esc(m ? m.op : nid)}</a>${extra}`; };
    const [op, ...rest] = n.label.split("\n");
    box.hidden = false;
    box.innerHTML = `<div><b>${esc(op)}</b> <span class="muted mono">node ${esc(id)}</span> <button type="button" class="small" data-close>×</button></div>` +
      `<pre class="listing">${esc(rest.join("\n")) || "(no arg)"}</pre>` + this.origin(n) +
      `<div class="small"><span class="muted">sources:</span> ${ins.sort((a, b) => a.idx - b.idx).map((e) => link(e.src, `<sub>${e.idx}</sub>`)).join(", ") || "none"}</div>` +
      `<div class="small"><span class="muted">users:</span> ${outs.map((e) => link(e.dst, "")).join(", ") || "none (an output)"}</div>` +
      (n.truncated && n.num != null ? '<button type="button" class="small" data-open-inputs>show its inputs (cut off here)</button>' : "");
    const open = $("[data-open-inputs]", box);
    if (open) open.addEventListener("click", () => { (this.opened = this.opened || new Set()).add(n.num); this.show(this.ref, true); });
    $$("a[data-node]", box).forEach((a) => a.addEventListener("click", (e) => { e.preventDefault(); this.select(a.dataset.node); }));
    $("[data-close]", box).addEventListener("click", () => this.select(null));
    if (pan) this.panTo(g, id);
  }

  status(html, cls = "") {
    this.canvas.innerHTML = `<div class="viewer-status ${cls}">${html}</div>`;
  }

  /* where each recorded UOp is on screen now (by trace number), and the zoom: a stable step puts the survivors back there */
  screenState() {
    if (this.big) return this.big.screenState();
    if (!this.pz || !this.graph) return null;
    const at = new Map(), c = this.canvas.getBoundingClientRect();  // in the canvas: a note above it may push the whole canvas down
    for (const n of this.graph.byId.values()) {
      if (n.num == null) continue;
      const g = this.nodeEl(n.id);
      if (g) { const r = g.getBoundingClientRect(); at.set(n.num, { x: r.left + r.width / 2 - c.left, y: r.top + r.height / 2 - c.top }); }
    }
    return { realZoom: this.pz.getSizes().realZoom, at };
  }

  async show(ref, keepFull = false, stableFrom = null) {
    const seq = ++this.seq;
    if (ref !== this.ref && !keepFull) { this.full = false; this.opened = new Set(); }
    const before = stableFrom ? this.screenState() : null;
    if (ref !== this.ref && this.groupBy) this.groupBy.hidden = true;  // (shown for a view grouped two ways)
    this.ref = ref; this.el.dataset.ref = ref; delete this.el.dataset.loaded;
    if (this.pz) { this.pz.destroy(); this.pz = null; }
    this.big = null; this.selected = null;
    this.status('<span class="spinner"></span> Expanding and laying out the graph…');
    $(".viewer-notes", this.el).innerHTML = ""; $(".viewer-legend", this.el).innerHTML = ""; $(".viewer-rule", this.el).innerHTML = "";
    const idx = $("[data-act=index]", this.el), mode = idx ? idx.value : "auto";
    const opened = [...(this.opened || [])].sort((a, b) => a - b).join(",");
    const q = "?" + [this.full ? "full=1" : "", mode !== "auto" ? `index=${mode}` : "", opened ? `expand=${opened}` : ""].filter(Boolean).join("&");
    const base = `/api/traces/${this.trace}/graphs/${ref}`;
    try {
      const view = await fetchJSON(base + q);
      if (seq !== this.seq) return;
      if (view.partial && !this.full) { await this.showWhole(seq, base, mode, before); return; }
      this.describe(view);
      this.index(view);
      const svgUrl = stableFrom && before ? `${view.svg_url}${view.svg_url.includes("?") ? "&" : "?"}stable_from=${encodeURIComponent(stableFrom)}` : view.svg_url;
      const r = await fetch(svgUrl);
      if (!r.ok) { let d = `${r.status}`; try { d = (await r.json()).detail; } catch (e) { /* keep status */ } throw new Error(d); }
      const svg = await r.text();
      if (seq !== this.seq) return;
      this.canvas.innerHTML = svg;
      const el = $("svg", this.canvas);
      if ("compact" in this.el.dataset && el && el.viewBox.baseVal) {  // short, wide graphs: a canvas as tall as the graph needs
        const vb = el.viewBox.baseVal, w = this.canvas.clientWidth;
        this.canvas.style.height = `${Math.round(Math.min(Math.max(w * vb.height / vb.width + 24, 160), window.innerHeight * 0.7))}px`;
      }
      if (window.svgPanZoom && el) {
        this.pz = window.svgPanZoom(el, { zoomScaleSensitivity: 0.3, minZoom: 0.02, maxZoom: 40, fit: true, center: true, dblClickZoomEnabled: true,
          onUpdatedCTM: () => this.el.dispatchEvent(new CustomEvent("view-moved")) });
        this.fit();
        if (!(before && await this.restore(before))) await this.opening(el);
        if (seq !== this.seq) return;
      }
      this.drawn(view, !!before, !before);
    } catch (err) {
      if (seq !== this.seq) return;
      this.status(esc(err.message), "err");
      this.el.dataset.loaded = "error";
    }
  }

  /* a graph over the server's node limit, whole: laid out here and drawn on a canvas (big_graph.js) */
  async showWhole(seq, base, mode, before) {
    const gb = this.groupBy, by = gb && this.ref === "tensor" && gb.value !== "line" ? `&by=${gb.value}` : "";
    const view = await fetchJSON(`${base}?whole=1${mode === "hide" ? "&index=hide" : ""}${by}`);
    if (seq !== this.seq) return;
    if (gb) gb.hidden = !view.groupings;
    this.status(`<span class="spinner"></span> Laying out ${view.total_nodes.toLocaleString()} nodes…`);
    if ("compact" in this.el.dataset) this.canvas.style.height = `${Math.round(window.innerHeight * 0.7)}px`;  // (a short, wide graph's canvas)
    const big = await BigGraph.create(this.canvas, view, (id) => this.select(id, false), () => seq !== this.seq);
    if (!big) return;
    this.big = big;
    big.onMoved = () => this.el.dispatchEvent(new CustomEvent("view-moved"));
    this.describe(view);
    $(".viewer-notes", this.el).insertAdjacentHTML("afterbegin", `<p data-whole>All ${view.total_nodes.toLocaleString()} nodes, laid out in this ` +
      "browser and drawn on a canvas (too many for graphviz): scroll to zoom, drag to pan, click a node for its pane.</p>");
    $("[data-act=svg]", this.el).hidden = true;
    this.index(view);
    const kept = before && big.keep(before);  // stepping: what both graphs hold where it was on screen
    if (!kept) await this.openBig(view);
    this.drawn(view, !!kept, true);
  }

  drawn(view, stable, pan) {  // a graph in place (SVG or canvas): the search asked again, the node to select selected, said so
    this.el.dataset.loaded = view.ref;
    if (this.big) this.el.dataset.drawn = "canvas"; else delete this.el.dataset.drawn;
    const query = $("[data-act=search]", this.el).value;
    if (query) this.find(query);
    // select by trace number: ?node= (STAGE table links), else the node selected in the previous graph where it survives
    const want = new URL(window.location.href).searchParams.get("node") || (this.keepNum != null ? String(this.keepNum) : null);
    const n = want && this.graph && [...this.graph.byId.values()].find((x) => String(x.num) === want);
    if (n) this.select(n.id, pan);
    this.el.dataset.stable = stable ? "1" : "";
    this.el.dispatchEvent(new CustomEvent("graph-loaded", { detail: view }));
  }

  async openBig(view) {  // as opening() opens an SVG: fitted (it is) where its boxes still show, else readable over its first changed node or its output
    const big = this.big, bigFont = document.documentElement.classList.contains("big");
    if (big.labelPx() >= MIN_FIT_PX && !bigFont) return;
    const consumed = new Set(view.edges.map((e) => e.src)), out = view.nodes.filter((n) => !consumed.has(n.id)).pop();
    const at = (view.highlight || [])[0] || (out && out.id);
    if (at) { await big.reveal(at); big.zoomAt((bigFont ? 14 : 11) / big.labelPx()); }
  }

  async restore(before) {  // the previous zoom, panned so the UOps both graphs hold are where they were in the canvas (median shift)
    const both = this.graph ? [...this.graph.byId.values()].filter((n) => n.num != null && before.at.has(n.num) && this.nodeEl(n.id)) : [];
    if (!both.length) return false;
    this.pz.zoom(this.pz.getZoom() * before.realZoom / this.pz.getSizes().realZoom);  // the same scale on screen (zoom is relative to the fit)
    await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
    const dx = [], dy = [], c = this.canvas.getBoundingClientRect();
    for (const n of both) {
      const was = before.at.get(n.num), now = this.nodeEl(n.id).getBoundingClientRect();
      dx.push(was.x - (now.left + now.width / 2 - c.left)); dy.push(was.y - (now.top + now.height / 2 - c.top));
    }
    const median = (xs) => xs.sort((a, b) => a - b)[Math.floor(xs.length / 2)];
    this.pz.panBy({ x: median(dx), y: median(dy) });
    return true;
  }

  /* the pan and zoom as any screen reads them: the zoom relative to the fit, and the graph's point (in its own units) at the canvas's
     middle (and a canvas-drawn graph's groups open); place() puts another canvas of any size there */
  placement() {
    if (this.big) return this.big.placement();
    if (!this.pz) return null;
    const s = this.pz.getSizes(), pan = this.pz.getPan();
    const at = { zoom: this.pz.getZoom(), cx: (s.width / 2 - pan.x) / s.realZoom, cy: (s.height / 2 - pan.y) / s.realZoom };
    return Object.values(at).every(Number.isFinite) ? at : null;
  }

  async place({ zoom, cx, cy, groups }) {
    if (this.big) { await this.big.place({ zoom, cx, cy, groups }); return; }
    if (!this.pz) return;
    this.pz.zoom(zoom);
    const s = this.pz.getSizes();
    this.pz.pan({ x: s.width / 2 - cx * s.realZoom, y: s.height / 2 - cy * s.realZoom });
  }

  fit() {
    if (this.big) { this.big.fit(); return; }
    if (!this.pz) return;
    this.pz.resize(); this.pz.fit(); this.pz.center();
    if (this.pz.getZoom() > 1.6) this.pz.zoom(1.6);  // small graphs: do not blow them up
  }

  labelPx(el) {  // the on-screen size of a node label now: its font size in the SVG's units times the SVG's scale on screen
    if (this.big) return this.big.labelPx();
    const t = $("g.node text", el), m = t && t.getScreenCTM();
    return t && m ? parseFloat(t.getAttribute("font-size") || "9") * Math.hypot(m.a, m.b) : null;
  }

  async opening(el) {
    // a graph opens fitted (it is, here) while its node shapes still show (labels of MIN_FIT_PX; zoom in to read them). One too big for
    // that, or any in the presenter's big-font mode, opens with readable labels (11 px; 14 px big) over its first changed node or the
    // part holding most nodes: around the sink of a wide graph there are only long edges. Fit still shows the whole graph
    const big = document.documentElement.classList.contains("big"), readable = big ? 14 : 11, px = this.labelPx(el);
    if (!this.pz || !px || px >= readable || (!big && px >= MIN_FIT_PX)) return;
    this.pz.zoom(this.pz.getZoom() * readable * 1.02 / px);  // a hair over: zooming is in floating point
    await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));  // svg-pan-zoom applies transforms on the next frame
    const changed = $$("g.node.changed", el), c = this.canvas.getBoundingClientRect();
    const at = changed.length && changed.length <= 12 ? centre(changed[0].getBoundingClientRect()) : densest($$("g.node", el), c.width, c.height);
    if (at) this.pz.panBy({ x: c.left + c.width / 2 - at.x, y: c.top + c.height / 2 - at.y });
  }

  describe(view) {
    if (view.title) $(".viewer-title", this.el).textContent = view.title;
    const shown = view.shown_nodes === view.total_nodes ? `${view.total_nodes} nodes` : `${view.shown_nodes} of ${view.total_nodes} nodes`;
    $(".viewer-stats", this.el).textContent = shown + (view.highlight && view.highlight.length ? ` · ${view.highlight.length} changed` : "");
    $(".viewer-notes", this.el).innerHTML = (view.notes || []).map((n) => `<p>${esc(n)}</p>`).join("");
    $("[data-act=full]", this.el).hidden = this.full || view.shown_nodes === view.total_nodes;
    $("[data-act=svg]", this.el).href = view.svg_url; $("[data-act=svg]", this.el).hidden = false;
    const rejected = (view.violations || []).length;
    $(".viewer-legend", this.el).innerHTML = (view.legend && view.legend.length && view.ref !== "kernels" ? '<span class="legend-head">fill: op family</span>' : "") +
      (view.legend || []).map((l) =>
      `<span><i class="swatch" style="background:${esc(l.color)}"></i>${esc(l.name)} <span class="mono">${l.count}</span></span>`).join("") +
      (view.highlight && view.highlight.length ? '<span><i class="swatch" style="background:#fff;border:2px solid #e5484d"></i>changed</span>' : "") +
      (rejected ? `<span data-legend-spec title="tinygrad's spec rejects this UOp: hover a marked node for its message"><i class="swatch spec-rejected"></i>` +
        `rejected by tinygrad's spec <span class="mono">${rejected}</span></span>` : "");
    if (view.rule || view.diff) {
      const diff = (view.diff || []).map((ln) => `<span class="${ln.startsWith("+") ? "add" : ln.startsWith("-") ? "del" : ""}">${esc(ln)}</span>`).join("\n");
      $(".viewer-rule", this.el).innerHTML = `<b>rule</b> <code>${esc(view.rule || "?")}</code>${diff ? `<pre>${diff}</pre>` : ""}`;
    }
  }
}

export const viewers = new Map();  // every graph viewer on the page, by element id
