/* A graph too big for graphviz and SVG, drawn whole on a canvas. It comes grouped (the view's `groups`: a tensor graph by the module
   objects and model line that made each UOp, groups within groups; a kernel's by loop nest, a program's kernel graph by realize and
   line) and opens as one box per outermost group beside the nodes no group holds. A click on a box opens the group in place: its
   UOps and the groups inside it laid out on their own, in a frame whose top left is the box's, moved right past anything it would
   cover, so nothing on screen moves (as the small graphs' stable stepping keeps what was there; a frame around it grows to hold it,
   over what lies beside that frame, which stays where it is);
   a click on the frame's title folds it back. Layouts run in a worker (graph_worker.js: graph_layout.js's
   layered layout, 20,000 nodes in a fraction of a second); a frame draws only what is on screen, labels only where they are big
   enough to read. viewer.js drives it: the same node pane, search and selection, in explorer.css's colours for g.node.selected,
   .parent, .child, .hit. */

const FONT_PX = 9, CHAR_PX = 5.45, LINE_PX = 11, PAD_X = 6, PAD_Y = 5, MAX_CHARS = 30, GROUP_CHARS = 52, LABEL_LINES = 3;
const FRAME_PAD = 16, FRAME_HEAD = 22, GAP = 14;
const ZOOM_SETTLE_MS = 150;  // a zoom draws its frames scaled from the last sharp one, and sharp this long after it stops
const MIN_TEXT_PX = 5;  // a label smaller than this on screen is not drawn: the boxes' colours still show
const MAX_GROUPS_TEXT = 190;  // placement()'s open groups, as a live class's view holds them (a value of at most 200 characters)
const COLOR = { edge: "#8a8f98", text: "#111111", border: "#5c6370", changed: "#e5484d", downstream: "#d9931c", spec: "#7c3aed", hit: "#d4a72c",
                selected: "#0969da", parent: "#1a7f37", child: "#8250df", group: "#eef1f5", groupBorder: "#57606a", frame: "rgba(238,241,245,0.55)" };
const WORKER = new URL("./graph_worker.js", import.meta.url);

function cut(ln, most) { return ln.length > most ? ln.slice(0, most - 1) + "…" : ln; }

function sized(item, lines, most = MAX_CHARS) {  // a box's lines and size, from its label
  item.lines = lines.map((ln) => cut(ln, most));
  item.w = Math.max(...item.lines.map((l) => l.length)) * CHAR_PX + 2 * PAD_X;
  item.h = item.lines.length * LINE_PX + 2 * PAD_Y;
  return item;
}

function textColor(fill) {  // graphs.text_color: dark text on light fills
  const m = /^#?([0-9a-f]{6})$/i.exec(fill || "");
  if (!m) return COLOR.text;
  const v = parseInt(m[1], 16), r = v >> 16, g = (v >> 8) & 255, b = v & 255;
  return 0.299 * r + 0.587 * g + 0.114 * b < 140 ? "#ffffff" : COLOR.text;
}

let worker = null, asked = 0, inPage = null;
const waiting = new Map();  // request number -> [resolve, reject]

function layoutWorker() {  // one for the page, started on first use: a module worker takes a while to start
  if (worker) return worker;
  worker = new Worker(WORKER, { type: "module" });
  worker.onmessage = (e) => { const [ok] = waiting.get(e.data.id) || []; waiting.delete(e.data.id); if (ok) ok(e.data); };
  worker.onerror = (e) => {
    for (const [, fail] of waiting.values()) fail(new Error(`laying the graph out failed: ${e.message || "the worker stopped"}`));
    waiting.clear(); worker = null;
  };
  return worker;
}

/* a page that cannot start a worker lays out on its own thread: an export opened from a file (its scripts are inline, and a file's
   page may not start a worker from a file) */
export function layOutInPage(layout) { inPage = layout; }

export function layOut(items, edges) {  // items [{id, w, h}], edges [{src, dst}] by id: resolves to graph_layout.js's {x, y, width, height}
  if (inPage) return Promise.resolve(inPage(items.map(({ id: key, w, h }) => ({ id: key, w, h })), edges));
  return new Promise((resolve, reject) => {
    const id = ++asked;
    waiting.set(id, [resolve, reject]);
    layoutWorker().postMessage({ id, nodes: items.map(({ id: key, w, h }) => ({ id: key, w, h })), edges });
  });
}

const overlaps = (a, b, gap = 0) => Math.abs(a.x - b.x) * 2 < a.w + b.w + 2 * gap && Math.abs(a.y - b.y) * 2 < a.h + b.h + 2 * gap;

export class BigGraph {
  /* box: the element to fill once laid out; view: the graph's whole view JSON; onPick(id | null): a click on a node or on nothing;
     stale(): the page has since asked for another graph (then null, and the box is left as it is) */
  static async create(box, view, onPick, stale = () => false) {
    const g = new BigGraph(box, view, onPick);
    return (await g.start(stale)) ? g : null;
  }

  constructor(box, view, onPick) {
    this.box = box; this.view = view; this.onPick = onPick;
    this.nodes = view.nodes.map((n) => sized({ ...n, key: n.id }, n.label.split("\n").slice(0, LABEL_LINES)));
    this.byId = new Map(this.nodes.map((n) => [n.id, n]));
    this.groups = (view.groups || []).map((g, i) => sized({ ...g, key: `group:${i}`, index: i, open: null, members: [], children: [], all: [] },
      [g.label, `${g.nodes.toLocaleString()} nodes · ${Object.entries(g.ops).slice(0, 3).map(([op, c]) => `${c} ${op}`).join(" ")}`], GROUP_CHARS));
    this.groups.forEach((g, i) => {  // groups within groups: a parent comes before its children (graph_groups.nested)
      g.up = g.parent != null && g.parent < i ? this.groups[g.parent] : null;
      if (g.up) g.up.children.push(g);
      g.path = g.up ? `${g.up.path} / ${g.label}` : g.label;
    });
    for (const n of this.nodes) {
      const g = n.group != null ? this.groups[n.group] : null;
      if (!g) continue;
      g.members.push(n);
      for (let a = g; a; a = a.up) a.all.push(n);
    }
    this.roots = this.groups.filter((g) => !g.up);
    [...this.nodes, ...this.groups].forEach((t, i) => { t.uid = i; });  // a pair of boxes is one number: uid * span + uid
    this.span = this.nodes.length + this.groups.length;
    this.links = view.edges.map((e) => [this.byId.get(e.src), this.byId.get(e.dst), e.via]).filter(([s, d]) => s && d);
    this.mark = new Map(); this.lit = new Map();
    this.changed = new Set(view.highlight || []); this.spec = new Set(view.violations || []); this.downstream = new Set(view.downstream || []);
    this.canvas = document.createElement("canvas");
    this.canvas.className = "big-graph";
    this.k = 1; this.tx = 0; this.ty = 0; this.frame = null; this.frames = 0; this.cache = null;
    this.openOrder = [];  // the open groups, in the order they opened: placement() hands it on, so that another screen opens them alike
    this.onMoved = () => {};  // the pan, zoom or the groups open changed (viewer.js: its view-moved event, which a live class follows)
  }

  async start(stale) {
    const top = [...this.nodes.filter((n) => !this.closedGroup(n)), ...this.roots];
    const at = await layOut(top.map((t) => ({ id: t.key, w: t.w, h: t.h })), this.visibleEdges().map(([s, d]) => ({ src: s.key, dst: d.key })));
    if (stale()) return false;
    top.forEach((t, i) => { t.x = at.x[i]; t.y = at.y[i]; });
    this.box.replaceChildren(this.canvas);
    this.wire();
    this.resize(); this.fit();
    this.prefetch();
    return true;
  }

  closedGroup(n) {  // the outermost closed group n is inside (its box stands for n), or null where every group around it is open
    let out = null;
    for (let g = n.group != null ? this.groups[n.group] : null; g; g = g.up) if (!g.open) out = g;
    return out;
  }

  showing(g) { for (let a = g.up; a; a = a.up) if (!a.open) return false; return true; }  // every group around g is open
  end(n) { return this.closedGroup(n) || n; }  // where an edge to n is drawn: n, or its group's box while closed
  shownNodes() { return this.nodes.filter((n) => !this.closedGroup(n)); }

  pair(a, b) { return a.uid * this.span + b.uid; }

  visibleEdges() {  // [source box, user box, via], one per pair of boxes
    const out = new Map();
    for (const [s, d, via] of this.links) {
      const a = this.end(s), b = this.end(d), key = this.pair(a, b);
      if (a !== b && !out.has(key)) out.set(key, [a, b, via]);
    }
    return [...out.values()];
  }

  items() {  // what takes room at the top: nodes outside any group, the outermost groups' boxes or frames (what is inside a frame is in it)
    return [...this.nodes.filter((n) => n.group == null || !this.groups[n.group]), ...this.roots.map((g) => g.open || g)];
  }

  refresh() {  // after a group opened or closed: what is drawn, by fill (a frame fills each colour's boxes in one path)
    this.edges = this.visibleEdges(); this.shown = this.shownNodes(); this.byFill = new Map();
    this.boxes = this.groups.filter((g) => !g.open && this.showing(g));
    this.opened = this.groups.filter((g) => g.open && this.showing(g)).map((g) => g.open);  // open frames shown, outer ones first: drawn under inner ones
    for (const n of this.shown) { const f = n.color || "#ffffff"; if (!this.byFill.has(f)) this.byFill.set(f, []); this.byFill.get(f).push(n); }
    this.setMarks(this.mark, this.litIds || new Map());
  }

  // ***** a group opened in place, and closed again *****

  async openGroup(g) {
    if (g.open) return;
    if (g.up && !g.up.open) await this.openGroup(g.up);
    const inside = [...g.members, ...g.children], at = await this.layoutOf(g);
    if (g.open || (g.up && !g.up.open)) return;  // opened meanwhile, or its parent closed while it was laid out
    const frame = { key: `frame:${g.index}`, group: g, w: at.width + 2 * FRAME_PAD, h: at.height + 2 * FRAME_PAD + FRAME_HEAD };
    this.placedClear(frame, g);
    frame.base = { x: frame.x, y: frame.y, w: frame.w, h: frame.h };
    const left = frame.x - frame.w / 2, top = frame.y - frame.h / 2;
    inside.forEach((t, i) => { t.x = left + FRAME_PAD + at.x[i]; t.y = top + FRAME_HEAD + FRAME_PAD + at.y[i]; });
    g.open = frame;
    this.openOrder.push(g);
    this.grow(g.up);
    this.refresh();
    this.prefetch();  // (the groups it holds)
  }

  layoutOf(g) {  /* what g's frame holds (its own UOps and its groups, closed), laid out on its own once: a promise kept on the group
    (a group opened again comes back as it was; one asked for while its layout runs waits for that one) */
    if (g.layout) return g.layout;
    const inside = [...g.members, ...g.children], within = new Set(g.all);
    const standIn = (n) => {  // what stands for n inside g's frame: n, or the group of g's that holds it
      let a = this.groups[n.group];
      if (a === g) return n;
      while (a && a.up !== g) a = a.up;
      return a;
    };
    const edges = new Map();
    for (const [s, d] of this.links) {
      if (!within.has(s) || !within.has(d)) continue;
      const a = standIn(s), b = standIn(d);
      if (a && b && a !== b) edges.set(this.pair(a, b), { src: a.key, dst: b.key });
    }
    g.layout = layOut(inside.map((t) => ({ id: t.key, w: t.w, h: t.h })), [...edges.values()]);
    g.layout.catch(() => { g.layout = null; });  // (a failed layout is asked again at the next click)
    return g.layout;
  }

  prefetch() {  /* the boxes shown laid out ahead in the worker, biggest first, one at a time (a click's layout waits behind one at
    most), so that a click on one only places it; none in a page that lays out on its own thread: that would hold the page up */
    if (inPage) return;
    this.ahead = [...this.boxes].filter((g) => !g.layout).sort((a, b) => b.all.length - a.all.length);
    if (!this.pumping) this.pump();
  }

  pump() {
    const g = (this.ahead || []).find((h) => !h.layout);
    this.pumping = !!g;
    if (g) this.layoutOf(g).then(() => this.pump(), () => { this.pumping = false; });
  }

  closeGroup(g) {  // it folds back with every group inside it
    if (!g.open) return;
    const shut = (h) => { h.open = null; h.children.forEach(shut); };
    shut(g);
    this.openOrder = this.openOrder.filter((h) => h.open);
    this.grow(g.up);
    this.refresh();
  }

  grow(g) {  // each open frame from g out made to hold the frames opened inside it: what it held stays where it was
    for (; g && g.open; g = g.up) {
      const f = g.open, b = f.base;
      let x0 = b.x - b.w / 2, y0 = b.y - b.h / 2, x1 = b.x + b.w / 2, y1 = b.y + b.h / 2;
      for (const c of g.children) {
        if (!c.open) continue;
        const o = c.open;
        x0 = Math.min(x0, o.x - o.w / 2 - FRAME_PAD); y0 = Math.min(y0, o.y - o.h / 2 - FRAME_PAD);
        x1 = Math.max(x1, o.x + o.w / 2 + FRAME_PAD); y1 = Math.max(y1, o.y + o.h / 2 + FRAME_PAD);
      }
      f.w = x1 - x0; f.h = y1 - y0; f.x = (x0 + x1) / 2; f.y = (y0 + y1) / 2;
    }
  }

  placedClear(frame, box) {  // the frame's top left at the box's, moved right past whatever it would cover: nothing else moves
    const around = new Set();
    for (let a = box.up; a; a = a.up) around.add(a.open);  // (the frames it opens inside)
    frame.x = box.x - box.w / 2 + frame.w / 2; frame.y = box.y - box.h / 2 + frame.h / 2;
    const band = [...this.shown, ...this.boxes, ...this.opened].filter((t) => t !== box && !around.has(t)  // (it moves along its row)
      && Math.abs(t.y - frame.y) * 2 < t.h + frame.h + GAP);
    for (let hit; (hit = band.find((t) => overlaps(t, frame, GAP / 2)));) frame.x = hit.x + hit.w / 2 + GAP + frame.w / 2;
  }

  async reveal(id, freeWidth = this.w) {  // a node put in view, readable, its group opened first where it was closed
    const n = this.byId.get(id);
    if (!n) return;
    for (let g; (g = this.closedGroup(n));) await this.openGroup(g);
    if (this.k * FONT_PX < 11) this.k = 11 / FONT_PX;
    this.tx = freeWidth / 2 - n.x * this.k; this.ty = this.h / 2 - n.y * this.k;
    this.draw();
  }

  // ***** stepping from one graph to the next: what both hold stays where it was in the canvas (viewer.js's screenState) *****

  screenState() {  // where each UOp (by trace number) and each closed group (by its labels from the outermost) is in the canvas, and the zoom
    const at = new Map(), put = (key, t) => at.set(key, { x: t.x * this.k + this.tx, y: t.y * this.k + this.ty });
    for (const n of this.shown) if (n.num != null) put(n.num, n);
    for (const g of this.boxes) put(`group:${g.path}`, g);
    return { realZoom: this.k, at };
  }

  keep(before) {  /* at the earlier zoom, each UOp and closed group the earlier graph showed where it was on screen; each new one
    beside the nearest it is joined to that stayed (as far as its layout put it from that one), pushed right off those placed
    before it. False where nothing stayed (then the graph keeps its own fitted view). */
    const k = before.realZoom;
    const items = [...this.shown, ...this.boxes];  // (a graph just laid out: every group closed)
    const keyOf = (t) => (t.members ? `group:${t.path}` : t.num), fresh = new Map(items.map((t) => [t, [t.x, t.y]]));
    this.k = k; this.tx = 0; this.ty = 0;
    const stayed = new Set();
    for (const t of items) {
      const p = before.at.get(keyOf(t));
      if (p) { t.x = p.x / k; t.y = p.y / k; stayed.add(t); }
    }
    if (!stayed.size) { for (const [t, [x, y]] of fresh) { t.x = x; t.y = y; } this.fit(); return false; }
    const near = new Map(items.map((t) => [t, []]));
    for (const [s, d] of this.edges) if (near.has(s) && near.has(d)) { near.get(s).push(d); near.get(d).push(s); }
    const shift = [0, 1].map((i) => [...stayed].reduce((a, t) => a + [t.x, t.y][i] - fresh.get(t)[i], 0) / stayed.size);
    const placed = [...stayed];
    for (const t of items.filter((u) => !stayed.has(u)).sort((a, b) => fresh.get(a)[1] - fresh.get(b)[1] || fresh.get(a)[0] - fresh.get(b)[0])) {
      const anchor = this.nearestOf(t, near, stayed), [fx, fy] = fresh.get(t);
      if (anchor) { t.x = anchor.x + fx - fresh.get(anchor)[0]; t.y = anchor.y + fy - fresh.get(anchor)[1]; }
      else { t.x = fx + shift[0]; t.y = fy + shift[1]; }
      for (let hit; (hit = placed.find((o) => overlaps(o, t, GAP / 2)));) t.x = hit.x + hit.w / 2 + GAP + t.w / 2;
      placed.push(t);
    }
    const view = { x: this.w / 2 / k, y: this.h / 2 / k, w: this.w / k, h: this.h / k };
    if (!items.some((t) => overlaps(t, view))) {  // nothing that stayed was on screen, nor is anything now: the nearest to the middle
      const d = (t) => Math.hypot(t.x - view.x, t.y - view.y), near = items.reduce((a, t) => (d(t) < d(a) ? t : a));
      this.tx = this.w / 2 - near.x * k; this.ty = this.h / 2 - near.y * k;
    }
    this.refresh();
    return true;
  }

  nearestOf(t, near, stayed) {  // the nearest item joined to t that stayed, a few edges out at most
    let frontier = [t];
    const seen = new Set(frontier);
    for (let step = 0; step < 4 && frontier.length; step++) {
      frontier = frontier.flatMap((u) => near.get(u)).filter((u) => !seen.has(u) && seen.add(u));
      const hit = frontier.find((u) => stayed.has(u));
      if (hit) return hit;
    }
    return null;
  }

  // ***** input *****

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
      if (moved) return;
      const r = c.getBoundingClientRect();
      this.click(e.clientX - r.left, e.clientY - r.top);
    });
    c.addEventListener("wheel", (e) => {
      e.preventDefault();
      const r = c.getBoundingClientRect();
      this.zoomAt(Math.exp(-e.deltaY * (e.deltaMode ? 0.05 : 0.002)), e.clientX - r.left, e.clientY - r.top);
    }, { passive: false });
    c.addEventListener("dblclick", (e) => { const r = c.getBoundingClientRect(); this.zoomAt(2, e.clientX - r.left, e.clientY - r.top); });
  }

  click(px, py) {
    const hit = this.itemAt(px, py);
    if (hit && hit.members && !hit.open) this.openGroup(hit).catch((e) => console.warn(e.message));  // (the worker failed: click again)
    else if (hit && hit.group && hit.group.open === hit) this.closeGroup(hit.group);
    else this.onPick(hit ? hit.id : null);
  }

  itemAt(px, py) {  // the node, closed group or open group's title under a canvas pixel
    const p = { x: (px - this.tx) / this.k, y: (py - this.ty) / this.k, w: 0, h: 0 };
    const node = this.shown.find((n) => overlaps(n, p));
    if (node) return node;
    const box = this.boxes.find((g) => overlaps(g, p));
    if (box) return box;
    const title = (f) => Math.abs(p.x - f.x) * 2 < f.w && p.y >= f.y - f.h / 2 && p.y <= f.y - f.h / 2 + FRAME_HEAD;
    return [...this.opened].reverse().find(title) || null;  // the innermost frame whose title is there
  }

  // ***** the view: graph point (gx, gy) is drawn at canvas pixel (gx * k + tx, gy * k + ty) *****

  resize() {
    const r = this.box.getBoundingClientRect(), dpr = window.devicePixelRatio || 1;
    this.w = Math.max(1, r.width); this.h = Math.max(1, r.height);
    this.canvas.width = Math.round(this.w * dpr); this.canvas.height = Math.round(this.h * dpr);
    this.canvas.style.width = `${this.w}px`; this.canvas.style.height = `${this.h}px`;
    this.cache = null;
    this.refresh();
  }

  bounds() {
    let x0 = Infinity, y0 = Infinity, x1 = -Infinity, y1 = -Infinity;
    for (const t of this.items()) { x0 = Math.min(x0, t.x - t.w / 2); y0 = Math.min(y0, t.y - t.h / 2); x1 = Math.max(x1, t.x + t.w / 2); y1 = Math.max(y1, t.y + t.h / 2); }
    return x0 <= x1 ? { x0, y0, x1, y1 } : { x0: 0, y0: 0, x1: 1, y1: 1 };
  }

  fitZoom() { const b = this.bounds(); return Math.min(this.w / (b.x1 - b.x0 + 40), this.h / (b.y1 - b.y0 + 40)); }

  fit() {
    const b = this.bounds();
    this.k = this.fitZoom();
    this.tx = (this.w - (b.x1 + b.x0) * this.k) / 2; this.ty = (this.h - (b.y1 + b.y0) * this.k) / 2;
    this.draw();
  }

  panBy(dx, dy) { this.tx += dx; this.ty += dy; this.draw(); }

  zoomAt(f, px = this.w / 2, py = this.h / 2) {
    const k = Math.min(Math.max(this.k * f, this.fitZoom() / 4), 8);
    this.tx = px - (px - this.tx) * (k / this.k); this.ty = py - (py - this.ty) * (k / this.k); this.k = k;
    this.zooming = true;
    clearTimeout(this.settled);
    this.settled = setTimeout(() => { this.zooming = false; this.draw(); }, ZOOM_SETTLE_MS);
    this.draw();
  }

  placement() {  // viewer.js's placement(): the zoom relative to the fit, the graph point at the canvas middle, the groups open in order
    let groups = "";
    for (const g of this.openOrder) {  // (those that fit, from the first: a screen opens them in this order)
      if (groups.length + String(g.index).length >= MAX_GROUPS_TEXT) break;
      groups += (groups ? "," : "") + g.index;
    }
    return { zoom: this.k / this.fitZoom(), cx: (this.w / 2 - this.tx) / this.k, cy: (this.h / 2 - this.ty) / this.k, groups };
  }

  async place({ zoom, cx, cy, groups }) {  // another screen's placement(): its groups opened as it opened them, then its pan and zoom
    const mine = (this.placing = (this.placing || 0) + 1);  // a newer placement arriving meanwhile wins
    if (typeof groups === "string" && !(await this.openOnly(groups.split(",").filter(Boolean).map(Number), () => mine !== this.placing))) return;
    if (mine !== this.placing) return;
    this.k = zoom * this.fitZoom(); this.tx = this.w / 2 - cx * this.k; this.ty = this.h / 2 - cy * this.k;
    this.draw();
  }

  async openOnly(indices, stale = () => false) {  /* these groups open, in this order (each where it opens after those before it; a
    group's parent before it), every other closed; false where stale() said a newer call took over */
    const want = [];
    const add = (g) => { if (g && !want.includes(g)) { add(g.up); want.push(g); } };
    for (const i of indices) add(this.groups[i]);
    if (want.length === this.openOrder.length && want.every((g, i) => g === this.openOrder[i])) return true;
    for (const g of [...this.openOrder].reverse()) this.closeGroup(g);
    for (const g of want) {
      await this.openGroup(g);
      if (stale()) return false;
    }
    return true;
  }

  labelPx() { return FONT_PX * this.k; }  // a label's size on screen now

  screenOf(id) {  // where a node (or, while its group is closed, the group's box) is drawn, in canvas pixels
    const n = this.byId.get(id), t = n && this.end(n);
    return t && { x: t.x * this.k + this.tx, y: t.y * this.k + this.ty };
  }

  select(hits, id) {  // the search's hits marked, and node id (or none: null) selected with its parents and children lit
    const mark = new Map(hits.map((h) => [h, "hit"])), lit = new Map();
    if (id != null && this.byId.has(id)) {
      for (const e of this.view.edges) {
        if (e.dst === id) { mark.set(e.src, "parent"); lit.set(`${e.src}>${id}`, "parent"); }
        if (e.src === id) { mark.set(e.dst, "child"); lit.set(`${id}>${e.dst}`, "child"); }
      }
      mark.set(id, "selected");
    }
    this.setMarks(mark, lit);
  }

  setMarks(mark, lit) {  // mark: node id -> its mark; lit: "src>dst" (node ids) -> "parent" | "child", drawn between the boxes shown
    this.mark = mark; this.litIds = lit; this.lit = new Map();
    for (const [pair, kind] of lit) {
      const [s, d] = pair.split(">").map((id) => this.byId.get(id));
      if (s && d) this.lit.set(this.pair(this.end(s), this.end(d)), kind);
    }
    this.invalidate();
  }

  // ***** drawing, at most once a frame *****

  draw() {
    this.onMoved();
    if (this.frame === null) this.frame = requestAnimationFrame(() => { this.frame = null; this.paint(); });
  }

  /* A frame is the scene drawn once into a bitmap (this.cache) a margin wider than the canvas, then copied: a pan copies it again at
     its new offset until it leaves the margin, so that a pan over 10,000 boxes and their edges costs a copy a frame (their raster
     is most of a frame's time). A zoom scales the last one (scaled) and draws anew once it stops; what changes the scene (marks, a
     group opened) draws it anew at once: without the margin, then with it at the next pan. */
  paint() {
    this.frames++;
    const dpr = window.devicePixelRatio || 1, c = this.cache;
    if (c && c.k !== this.k && this.zooming) { this.scaled(c, dpr); return; }
    const fits = c && c.k === this.k && Math.abs(this.tx - c.tx) <= c.m && Math.abs(this.ty - c.ty) <= c.m;
    if (!fits) this.cache = this.rendered(c && c.k === this.k ? Math.max(this.w, this.h) / 2 : 0);
    const ctx = this.canvas.getContext("2d"), got = this.cache;
    ctx.setTransform(1, 0, 0, 1, 0, 0);
    ctx.clearRect(0, 0, this.canvas.width, this.canvas.height);
    ctx.drawImage(got.canvas, Math.round((this.tx - got.tx - got.m) * dpr), Math.round((this.ty - got.ty - got.m) * dpr));
  }

  scaled(c, dpr) {  // while a zoom goes on: the last frame drawn, scaled to the zoom (drawn sharp once the zoom stops)
    const f = this.k / c.k, ctx = this.canvas.getContext("2d");
    ctx.setTransform(1, 0, 0, 1, 0, 0);
    ctx.clearRect(0, 0, this.canvas.width, this.canvas.height);
    ctx.drawImage(c.canvas, (this.tx - (c.tx + c.m) * f) * dpr, (this.ty - (c.ty + c.m) * f) * dpr, c.canvas.width * f, c.canvas.height * f);
  }

  invalidate() { this.cache = null; this.draw(); }

  rendered(m) {  // the scene at the current zoom and pan, m pixels beyond each side of the canvas
    const dpr = window.devicePixelRatio || 1, k = this.k, old = this.cache && this.cache.canvas;
    const canvas = old || document.createElement("canvas"), w = Math.round((this.w + 2 * m) * dpr), h = Math.round((this.h + 2 * m) * dpr);
    if (canvas.width !== w || canvas.height !== h) { canvas.width = w; canvas.height = h; }
    const ctx = canvas.getContext("2d");
    ctx.setTransform(1, 0, 0, 1, 0, 0);
    ctx.clearRect(0, 0, w, h);
    ctx.setTransform(dpr * k, 0, 0, dpr * k, dpr * (this.tx + m), dpr * (this.ty + m));
    this.scene(ctx, { x: (this.w / 2 - this.tx) / k, y: (this.h / 2 - this.ty) / k, w: (this.w + 2 * m) / k, h: (this.h + 2 * m) / k });
    return { canvas, k, tx: this.tx, ty: this.ty, m };
  }

  scene(ctx, view) {
    const k = this.k, text = k * FONT_PX >= MIN_TEXT_PX;
    ctx.font = `${FONT_PX}px "DejaVu Sans Mono", monospace`; ctx.textBaseline = "top";
    for (const f of this.opened) if (overlaps(f, view)) this.paintFrame(ctx, f, text);
    this.paintEdges(ctx, view);
    for (const g of this.boxes) if (overlaps(g, view)) this.paintBox(ctx, g, COLOR.group, this.groupMark(g), text, 1.6);
    if (!text) {  // zoomed out: each fill's boxes in one path, only the marked outlined
      for (const [fill, nodes] of this.byFill) {
        ctx.fillStyle = fill; ctx.beginPath();
        for (const n of nodes) if (overlaps(n, view)) ctx.rect(n.x - n.w / 2, n.y - n.h / 2, n.w, n.h);
        ctx.fill();
      }
    }
    for (const n of this.shown) {
      const mark = this.mark.get(n.id), stroke = mark || (this.changed.has(n.id) ? "changed" : this.downstream.has(n.id) ? "downstream"
        : this.spec.has(n.id) ? "spec" : null);
      if ((text || stroke) && overlaps(n, view)) this.paintBox(ctx, n, n.color || "#ffffff", stroke, text, 1, n.addrspace);
    }
  }

  groupMark(g) {  // a closed group holding the selection or a search hit says so, else one holding a changed (or downstream) node
    let best = null, changed = null;
    for (const n of g.all) {
      const m = this.mark.get(n.id);
      if (m === "selected") return m;
      if (m) best = best || m;
      if (this.changed.has(n.id)) changed = "changed"; else if (!changed && this.downstream.has(n.id)) changed = "downstream";
    }
    return best || changed;
  }

  paintBox(ctx, t, fill, stroke, text, width, border = null) {
    const left = t.x - t.w / 2, top = t.y - t.h / 2, k = this.k;
    ctx.fillStyle = fill;
    ctx.fillRect(left, top, t.w, t.h);
    if (stroke || text) {
      ctx.lineWidth = stroke ? (stroke === "selected" ? 4 : 3) / Math.max(k, 0.25) : width;
      ctx.strokeStyle = stroke ? COLOR[stroke] : border || (t.members ? COLOR.groupBorder : COLOR.border);
      ctx.strokeRect(left, top, t.w, t.h);
    }
    if (text) {
      ctx.fillStyle = textColor(fill);
      t.lines.forEach((ln, i) => ctx.fillText(ln, left + PAD_X, top + PAD_Y + i * LINE_PX));
    }
  }

  paintFrame(ctx, f, text) {
    const left = f.x - f.w / 2, top = f.y - f.h / 2;
    ctx.fillStyle = COLOR.frame; ctx.fillRect(left, top, f.w, f.h);
    ctx.setLineDash([6, 4]); ctx.lineWidth = 1.4; ctx.strokeStyle = COLOR.groupBorder; ctx.strokeRect(left, top, f.w, f.h); ctx.setLineDash([]);
    ctx.fillStyle = COLOR.group; ctx.fillRect(left, top, f.w, FRAME_HEAD);
    if (text) { ctx.fillStyle = COLOR.text; ctx.fillText(`${f.group.lines[0]}  (click to close)`, left + PAD_X, top + 6); }
  }

  paintEdges(ctx, view) {
    const k = this.k;
    const curve = k < 0.3 ? (s, d) => { ctx.moveTo(s.x, s.y + s.h / 2); ctx.lineTo(d.x, d.y - d.h / 2); }  // too small to see a bend
      : (s, d) => {
        const sy = s.y + s.h / 2, dy = d.y - d.h / 2, bend = Math.max(12, Math.abs(dy - sy) / 2);
        ctx.moveTo(s.x, sy); ctx.bezierCurveTo(s.x, sy + bend, d.x, dy - bend, d.x, dy);
      };
    const inView = (s, d) => Math.max(s.x, d.x) >= view.x - view.w / 2 && Math.min(s.x, d.x) <= view.x + view.w / 2
      && Math.max(s.y, d.y) >= view.y - view.h / 2 && Math.min(s.y, d.y) <= view.y + view.h / 2;
    ctx.lineWidth = Math.max(0.8, 1 / k); ctx.strokeStyle = COLOR.edge; ctx.globalAlpha = k < 0.3 ? 0.45 : 0.8;  // at least a pixel wide
    ctx.beginPath();
    const lit = this.lit.size ? this.lit : null;  // (most frames light nothing: no pair looked up)
    for (const [s, d] of this.edges) if (inView(s, d) && !(lit && lit.has(this.pair(s, d)))) curve(s, d);
    ctx.stroke();
    ctx.globalAlpha = 1;
    for (const kind of lit ? ["parent", "child"] : []) {
      ctx.lineWidth = 2.5; ctx.strokeStyle = COLOR[kind]; ctx.beginPath();
      for (const [s, d] of this.edges) if (lit.get(this.pair(s, d)) === kind) curve(s, d);
      ctx.stroke();
    }
  }
}
