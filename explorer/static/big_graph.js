/* A graph too big for graphviz and SVG, drawn whole on a canvas: laid out in a worker (graph_worker.js: graph_layout.js's layered
   layout, 20,000 nodes in a fraction of a second), drawn each frame from plain arrays (only what is on screen; labels only where
   they are big enough to read), panned by dragging and zoomed by the wheel. Its selection, search hits and highlights are the SVG
   viewer's (viewer.js drives it: the same node pane, the same colours as explorer.css gives g.node.selected, .parent, .child, .hit). */

const FONT_PX = 9, CHAR_PX = 5.45, LINE_PX = 11, PAD_X = 6, PAD_Y = 5, MAX_CHARS = 30, LABEL_LINES = 3;
const MIN_TEXT_PX = 5;  // a label smaller than this on screen is not drawn: the boxes' colours still show
const COLOR = { edge: "#8a8f98", text: "#111111", border: "#5c6370", changed: "#e5484d", spec: "#7c3aed", hit: "#d4a72c",
                selected: "#0969da", parent: "#1a7f37", child: "#8250df" };
const WORKER = new URL("./graph_worker.js", import.meta.url);

function labelLines(label) {  // the op and the first lines after it, each cut to MAX_CHARS
  return label.split("\n").slice(0, LABEL_LINES).map((ln) => (ln.length > MAX_CHARS ? ln.slice(0, MAX_CHARS - 1) + "…" : ln));
}

function textColor(fill) {  // graphs.text_color: dark text on light fills
  const m = /^#?([0-9a-f]{6})$/i.exec(fill || "");
  if (!m) return COLOR.text;
  const v = parseInt(m[1], 16), r = v >> 16, g = (v >> 8) & 255, b = v & 255;
  return 0.299 * r + 0.587 * g + 0.114 * b < 140 ? "#ffffff" : COLOR.text;
}

export function laidOut(view) {  // the view's nodes and edges laid out in a worker: resolves to {x, y, width, height}
  const nodes = view.nodes.map((n) => {
    const lines = labelLines(n.label);
    return { id: n.id, w: Math.max(...lines.map((l) => l.length)) * CHAR_PX + 2 * PAD_X, h: lines.length * LINE_PX + 2 * PAD_Y };
  });
  return new Promise((resolve, reject) => {
    const worker = new Worker(WORKER, { type: "module" });
    worker.onmessage = (e) => { worker.terminate(); resolve({ ...e.data, sizes: nodes }); };
    worker.onerror = (e) => { worker.terminate(); reject(new Error(`laying the graph out failed: ${e.message || "the worker stopped"}`)); };
    worker.postMessage({ nodes, edges: view.edges.map((e) => ({ src: e.src, dst: e.dst })) });
  });
}

export class BigGraph {
  /* box: the element to fill; view: the graph's view JSON (whole); at: laidOut(view); onPick(id | null): a click on a node or on
     nothing */
  constructor(box, view, at, onPick) {
    this.box = box; this.view = view; this.onPick = onPick;
    this.nodes = view.nodes.map((n, i) => ({ ...n, x: at.x[i], y: at.y[i], w: at.sizes[i].w, h: at.sizes[i].h, lines: labelLines(n.label) }));
    this.byId = new Map(this.nodes.map((n) => [n.id, n]));
    this.edges = view.edges.map((e) => [this.byId.get(e.src), this.byId.get(e.dst), e.via]).filter(([s, d]) => s && d);
    this.width = at.width; this.height = at.height;
    this.mark = new Map();  // node id -> "selected" | "parent" | "child" | "hit"
    this.lit = new Map();  // edge key -> "parent" | "child"
    this.changed = new Set(view.highlight || []); this.spec = new Set(view.violations || []);
    this.canvas = document.createElement("canvas");
    this.canvas.className = "big-graph";
    box.replaceChildren(this.canvas);
    this.k = 1; this.tx = 0; this.ty = 0; this.frame = null; this.frames = 0;
    this.wire();
    this.resize(); this.fit();
  }

  wire() {
    const c = this.canvas;
    let drag = null, moved = false;
    c.addEventListener("pointerdown", (e) => { drag = { x: e.clientX, y: e.clientY }; moved = false; c.setPointerCapture(e.pointerId); });
    c.addEventListener("pointermove", (e) => {
      if (!drag) return;
      const dx = e.clientX - drag.x, dy = e.clientY - drag.y;
      if (Math.abs(dx) + Math.abs(dy) > 2) moved = true;
      drag = { x: e.clientX, y: e.clientY };
      this.panBy(dx, dy);
    });
    c.addEventListener("pointerup", (e) => {
      drag = null;
      if (!moved) { const r = c.getBoundingClientRect(), n = this.nodeAt(e.clientX - r.left, e.clientY - r.top); this.onPick(n ? n.id : null); }
    });
    c.addEventListener("wheel", (e) => {
      e.preventDefault();
      const r = c.getBoundingClientRect();
      this.zoomAt(Math.exp(-e.deltaY * (e.deltaMode ? 0.05 : 0.002)), e.clientX - r.left, e.clientY - r.top);
    }, { passive: false });
    c.addEventListener("dblclick", (e) => { const r = c.getBoundingClientRect(); this.zoomAt(2, e.clientX - r.left, e.clientY - r.top); });
  }

  // ***** the view: graph point (gx, gy) is drawn at canvas pixel (gx * k + tx, gy * k + ty) *****

  resize() {
    const r = this.box.getBoundingClientRect(), dpr = window.devicePixelRatio || 1;
    this.w = Math.max(1, r.width); this.h = Math.max(1, r.height);
    this.canvas.width = Math.round(this.w * dpr); this.canvas.height = Math.round(this.h * dpr);
    this.canvas.style.width = `${this.w}px`; this.canvas.style.height = `${this.h}px`;
    this.draw();
  }

  fitZoom() { return Math.min(this.w / (this.width + 40), this.h / (this.height + 40)); }

  fit() {
    this.k = this.fitZoom();
    this.tx = (this.w - this.width * this.k) / 2; this.ty = (this.h - this.height * this.k) / 2;
    this.draw();
  }

  panBy(dx, dy) { this.tx += dx; this.ty += dy; this.draw(); }

  zoomAt(f, px = this.w / 2, py = this.h / 2) {
    const k = Math.min(Math.max(this.k * f, this.fitZoom() / 4), 8);
    this.tx = px - (px - this.tx) * (k / this.k); this.ty = py - (py - this.ty) * (k / this.k); this.k = k;
    this.draw();
  }

  centreOn(id, freeWidth = this.w) {  // a node to the middle of the canvas part the node pane leaves free, readable
    const n = this.byId.get(id);
    if (!n) return;
    if (this.k * FONT_PX < 11) this.k = 11 / FONT_PX;
    this.tx = freeWidth / 2 - n.x * this.k; this.ty = this.h / 2 - n.y * this.k;
    this.draw();
  }

  placement() {  // viewer.js's placement(): the zoom relative to the fit, the graph point at the canvas middle
    return { zoom: this.k / this.fitZoom(), cx: (this.w / 2 - this.tx) / this.k, cy: (this.h / 2 - this.ty) / this.k };
  }

  place({ zoom, cx, cy }) {
    this.k = zoom * this.fitZoom(); this.tx = this.w / 2 - cx * this.k; this.ty = this.h / 2 - cy * this.k;
    this.draw();
  }

  screenOf(id) {  // a node's centre in canvas pixels
    const n = this.byId.get(id);
    return n && { x: n.x * this.k + this.tx, y: n.y * this.k + this.ty };
  }

  nodeAt(px, py) {
    const gx = (px - this.tx) / this.k, gy = (py - this.ty) / this.k;
    return this.nodes.find((n) => Math.abs(n.x - gx) <= n.w / 2 && Math.abs(n.y - gy) <= n.h / 2) || null;
  }

  // ***** marks: what viewer.js selects, finds and lights *****

  setMarks(mark, lit) { this.mark = mark; this.lit = lit; this.draw(); }

  // ***** drawing, at most once a frame *****

  draw() {
    if (this.frame === null) this.frame = requestAnimationFrame(() => { this.frame = null; this.paint(); });
  }

  paint() {
    this.frames++;
    const ctx = this.canvas.getContext("2d"), dpr = window.devicePixelRatio || 1, k = this.k;
    ctx.setTransform(1, 0, 0, 1, 0, 0);
    ctx.clearRect(0, 0, this.canvas.width, this.canvas.height);
    ctx.setTransform(dpr * k, 0, 0, dpr * k, dpr * this.tx, dpr * this.ty);
    const x0 = -this.tx / k, y0 = -this.ty / k, x1 = x0 + this.w / k, y1 = y0 + this.h / k;
    const seen = (n) => n.x + n.w / 2 >= x0 && n.x - n.w / 2 <= x1 && n.y + n.h / 2 >= y0 && n.y - n.h / 2 <= y1;
    const edge = (s, d) => {
      const sy = s.y + s.h / 2, dy = d.y - d.h / 2, bend = Math.max(12, (dy - sy) / 2);
      ctx.moveTo(s.x, sy); ctx.bezierCurveTo(s.x, sy + bend, d.x, dy - bend, d.x, dy);
    };
    const between = (s, d) => Math.max(s.x, d.x) >= x0 && Math.min(s.x, d.x) <= x1 && Math.max(s.y, d.y) >= y0 && Math.min(s.y, d.y) <= y1;
    ctx.lineWidth = 0.8; ctx.strokeStyle = COLOR.edge; ctx.globalAlpha = k < 0.3 ? 0.45 : 0.8;
    ctx.beginPath();
    for (const [s, d] of this.edges) if (between(s, d) && !this.lit.has(`${s.id}>${d.id}`)) edge(s, d);
    ctx.stroke();
    ctx.globalAlpha = 1;
    for (const kind of ["parent", "child"]) {
      ctx.lineWidth = 2.5; ctx.strokeStyle = COLOR[kind]; ctx.beginPath();
      for (const [s, d] of this.edges) if (this.lit.get(`${s.id}>${d.id}`) === kind) edge(s, d);
      ctx.stroke();
    }
    const text = k * FONT_PX >= MIN_TEXT_PX;
    ctx.font = `${FONT_PX}px "DejaVu Sans Mono", monospace`; ctx.textBaseline = "top";
    for (const n of this.nodes) {
      if (!seen(n)) continue;
      const left = n.x - n.w / 2, top = n.y - n.h / 2, mark = this.mark.get(n.id);
      ctx.fillStyle = n.color || "#ffffff";
      ctx.fillRect(left, top, n.w, n.h);
      const stroke = mark ? COLOR[mark] : this.changed.has(n.id) ? COLOR.changed : this.spec.has(n.id) ? COLOR.spec : null;
      if (stroke || text) {
        ctx.lineWidth = stroke ? (mark === "selected" ? 4 : 3) / Math.max(k, 0.25) : 1;
        ctx.strokeStyle = stroke || n.addrspace || COLOR.border;
        ctx.strokeRect(left, top, n.w, n.h);
      }
      if (text) {
        ctx.fillStyle = textColor(n.color);
        n.lines.forEach((ln, i) => ctx.fillText(ln, left + PAD_X, top + PAD_Y + i * LINE_PX));
      }
    }
  }
}
