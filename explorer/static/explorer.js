/* Kernel Explorer pages: graph viewers (fetch view JSON + SVG, pan/zoom), pass stepper, tabs, copy, live progress, the trace form.
   Plain ES2017, no build step. State that matters lives in the URL (?code=, ?pass=&at=). */
"use strict";

const $ = (sel, root = document) => root.querySelector(sel);
const $$ = (sel, root = document) => Array.from(root.querySelectorAll(sel));
const esc = (s) => String(s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);

function setQuery(params, push = false) {
  const url = new URL(window.location.href);
  for (const [k, v] of Object.entries(params)) { if (v === null || v === undefined) url.searchParams.delete(k); else url.searchParams.set(k, v); }
  (push ? history.pushState : history.replaceState).call(history, null, "", url);
}

/* how a time was measured: explorer/clocks.py's METHODS (base.html's #clock-methods); a record without a method is tinygrad's timer */
const CLOCKS = (() => { try { return JSON.parse(document.getElementById("clock-methods").textContent); } catch (e) { return {}; } })();
function clockBadge(method) {
  const name = method || "events", m = CLOCKS[name] || { label: name, summary: "" };
  return `<span class="badge clock" data-clock="${esc(name)}" title="${esc(m.summary)}">${esc(m.label)}</span>`;
}

async function fetchJSON(url) {
  const r = await fetch(url, { headers: { Accept: "application/json" } });
  let body = null;
  try { body = await r.json(); } catch (e) { /* not JSON */ }
  if (!r.ok) throw new Error((body && body.detail) || `${r.status} ${r.statusText}`);
  return body;
}

/* ***** graph viewer ***** */

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

class Viewer {
  constructor(el) {
    this.el = el; this.trace = el.dataset.trace; this.canvas = $(".viewer-canvas", el); this.pz = null; this.seq = 0; this.full = false;
    $("[data-act=zoom-in]", el).addEventListener("click", () => this.pz && this.pz.zoomIn());
    $("[data-act=zoom-out]", el).addEventListener("click", () => this.pz && this.pz.zoomOut());
    $("[data-act=fit]", el).addEventListener("click", () => this.fit());
    $("[data-act=full]", el).addEventListener("click", () => { this.full = true; this.show(this.ref); });
    window.addEventListener("resize", () => { if (this.pz) this.pz.resize(); });  // keep the user's zoom and pan
    const index = $("[data-act=index]", el);
    if (index) index.addEventListener("change", () => this.show(this.ref, true));
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

  nodeEl(id) { return this.canvas.querySelector(`g.node[id="n${CSS.escape(id)}"]`); }

  find(q) {
    $$("g.node.hit", this.canvas).forEach((g) => g.classList.remove("hit"));
    const out = $("[data-hits]", this.el);
    q = q.trim().toLowerCase();
    if (!q || !this.graph) { this.hits = []; out.textContent = ""; return; }
    this.hits = [...this.graph.byId.values()].filter((n) => n.id === q || String(n.num) === q || n.label.toLowerCase().includes(q)).map((n) => n.id);
    this.hits.forEach((id) => { const g = this.nodeEl(id); if (g) g.classList.add("hit"); });
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

  panTo(g) {  // the node to the middle of the part of the graph the node pane leaves uncovered
    if (!this.pz || !g) return;
    const c = this.canvas.getBoundingClientRect(), t = g.getBoundingClientRect(), pane = $(".viewer-detail", this.el);
    const free = c.width - (pane && !pane.hidden ? pane.offsetWidth + 16 : 0);
    this.pz.panBy({ x: c.left + free / 2 - (t.left + t.width / 2), y: c.top + c.height / 2 - (t.top + t.height / 2) });
  }

  select(id, pan = true) {
    const n = this.graph && this.graph.byId.get(id);
    this.keepNum = n && n.num != null ? n.num : null;
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
    if (pan) this.panTo(g);
  }

  status(html, cls = "") {
    this.canvas.innerHTML = `<div class="viewer-status ${cls}">${html}</div>`;
  }

  /* where each recorded UOp is on screen now (by trace number), and the zoom: a stable step puts the survivors back there */
  screenState() {
    if (!this.pz || !this.graph) return null;
    const at = new Map();
    for (const n of this.graph.byId.values()) {
      if (n.num == null) continue;
      const g = this.nodeEl(n.id);
      if (g) { const r = g.getBoundingClientRect(); at.set(n.num, { x: r.left + r.width / 2, y: r.top + r.height / 2 }); }
    }
    return { realZoom: this.pz.getSizes().realZoom, at };
  }

  async show(ref, keepFull = false, stableFrom = null) {
    const seq = ++this.seq;
    if (ref !== this.ref && !keepFull) { this.full = false; this.opened = new Set(); }
    const before = stableFrom ? this.screenState() : null;
    this.ref = ref; this.el.dataset.ref = ref; delete this.el.dataset.loaded;
    if (this.pz) { this.pz.destroy(); this.pz = null; }
    this.status('<span class="spinner"></span> Expanding and laying out the graph…');
    $(".viewer-notes", this.el).innerHTML = ""; $(".viewer-legend", this.el).innerHTML = ""; $(".viewer-rule", this.el).innerHTML = "";
    const idx = $("[data-act=index]", this.el), mode = idx ? idx.value : "auto";
    const opened = [...(this.opened || [])].sort((a, b) => a - b).join(",");
    const q = "?" + [this.full ? "full=1" : "", mode !== "auto" ? `index=${mode}` : "", opened ? `expand=${opened}` : ""].filter(Boolean).join("&");
    const base = `/api/traces/${this.trace}/graphs/${ref}`;
    try {
      const view = await fetchJSON(base + q);
      if (seq !== this.seq) return;
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
        this.pz = window.svgPanZoom(el, { zoomScaleSensitivity: 0.3, minZoom: 0.02, maxZoom: 40, fit: true, center: true, dblClickZoomEnabled: true });
        this.fit();
        if (!(before && await this.restore(before))) await this.opening(el);
        if (seq !== this.seq) return;
      }
      this.el.dataset.loaded = ref;
      const query = $("[data-act=search]", this.el).value;
      if (query) this.find(query);
      // select by trace number: ?node= (STAGE table links), else the node selected in the previous graph where it survives
      const want = new URL(window.location.href).searchParams.get("node") || (this.keepNum != null ? String(this.keepNum) : null);
      if (want && this.graph) {
        const n = [...this.graph.byId.values()].find((x) => String(x.num) === want);
        if (n) this.select(n.id, !before);
      }
      this.el.dataset.stable = before ? "1" : "";
      this.el.dispatchEvent(new CustomEvent("graph-loaded", { detail: view }));
    } catch (err) {
      if (seq !== this.seq) return;
      this.status(esc(err.message), "err");
      this.el.dataset.loaded = "error";
    }
  }

  async restore(before) {  // the previous zoom, panned so the UOps both graphs hold are where they were on screen (median shift)
    const both = this.graph ? [...this.graph.byId.values()].filter((n) => n.num != null && before.at.has(n.num) && this.nodeEl(n.id)) : [];
    if (!both.length) return false;
    this.pz.zoom(this.pz.getZoom() * before.realZoom / this.pz.getSizes().realZoom);  // the same scale on screen (zoom is relative to the fit)
    await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
    const dx = [], dy = [];
    for (const n of both) {
      const was = before.at.get(n.num), now = this.nodeEl(n.id).getBoundingClientRect();
      dx.push(was.x - (now.left + now.width / 2)); dy.push(was.y - (now.top + now.height / 2));
    }
    const median = (xs) => xs.sort((a, b) => a - b)[Math.floor(xs.length / 2)];
    this.pz.panBy({ x: median(dx), y: median(dy) });
    return true;
  }

  fit() {
    if (!this.pz) return;
    this.pz.resize(); this.pz.fit(); this.pz.center();
    if (this.pz.getZoom() > 1.6) this.pz.zoom(1.6);  // small graphs: do not blow them up
  }

  labelPx(el) {  // the on-screen size of a node label now: its font size in the SVG's units times the SVG's scale on screen
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
    $("[data-act=svg]", this.el).href = view.svg_url;
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

/* ***** pass stepper: ?pass=P&at=before|after|mJ ***** */

class Stepper {
  constructor(bar, viewer) {
    this.bar = bar; this.viewer = viewer; this.prefix = bar.dataset.prefix; this.maxSteps = +bar.dataset.maxSteps;
    this.list = document.getElementById(bar.dataset.list);
    this.items = $$("a[data-pass]", this.list);
    this.pass = +bar.dataset.pass; this.at = bar.dataset.at;
    this.items.forEach((a) => a.addEventListener("click", (e) => { e.preventDefault(); this.go(+a.dataset.pass, "after"); }));
    $$("[data-toggle-nested]", this.list).forEach((t) => {
      const toggle = (e) => { e.preventDefault(); e.stopPropagation(); this.openNested(t.dataset.toggleNested, t.getAttribute("aria-expanded") !== "true"); };
      t.addEventListener("click", toggle);
      t.addEventListener("keydown", (e) => { if (e.key === "Enter" || e.key === " ") toggle(e); });
    });
    $$("[data-at-choice]", bar).forEach((r) => r.addEventListener("change", () => this.go(this.pass, r.value)));
    $$("[data-step]", bar).forEach((b) => b.addEventListener("click", () => this.step(b.dataset.step)));
    const goto = $("[data-goto-match]", bar);
    if (goto) goto.addEventListener("change", () => {
      const n = Math.round(+goto.value);
      if (n >= 1 && n <= this.matches()) { this.go(this.pass, `m${n}`); goto.blur(); }
    });
    const slider = $("[data-pass-slider]", bar);
    if (slider) slider.addEventListener("input", () => this.go(+slider.value, this.at.startsWith("m") ? "after" : this.at));
    const panel = $("[data-match-list]");
    this.matchList = panel && bar.dataset.trace ? new MatchList(panel, this) : null;
    document.addEventListener("keydown", (e) => {
      if (!this.bar.isConnected) return;  // a part of the page put in place since brought its own stepper
      // a radio or checkbox keeps the keys (clicking "before" must not stop j/k); a field one types into takes them
      const typing = e.target.closest("textarea, select, input:not([type=radio]):not([type=checkbox]):not([type=button])");
      if (typing || e.metaKey || e.ctrlKey || e.altKey) return;
      const act = { j: "next-pass", k: "prev-pass", l: "next-match", h: "prev-match" }[e.key];
      if (act) { e.preventDefault(); this.step(act); }
    });
    window.addEventListener("popstate", () => {
      if (!this.bar.isConnected) return;
      const u = new URL(window.location.href);
      if (u.searchParams.has("pass")) this.go(+u.searchParams.get("pass"), u.searchParams.get("at") || "after", false);
    });
    this.render(); this.viewer.show(this.ref());
    this.reveal(true);
  }

  ref() { return `${this.prefix}/${this.pass}/${this.at}`; }

  reveal(center) {  // scroll the pass list (only the list, not the page) to the current pass
    const a = this.items[this.pass];
    if (!a || !a.offsetParent) return;
    const top = a.offsetTop, h = this.list.clientHeight;
    if (center) this.list.scrollTop = top - h / 2;
    else if (top < this.list.scrollTop) this.list.scrollTop = top;
    else if (top + a.offsetHeight > this.list.scrollTop + h) this.list.scrollTop = top + a.offsetHeight - h;
  }
  matches() { return +(this.items[this.pass] ? this.items[this.pass].dataset.matches : 0); }
  matchedOnly() { return this.list.classList.contains("matched-only"); }

  go(pass, at, push = true) {
    const from = this.ref();
    this.pass = pass; this.at = at;
    setQuery({ pass, at }, push);
    const stable = $("[data-stable-layout]", this.bar);
    this.render(); this.viewer.show(this.ref(), false, stable && stable.checked && from !== this.ref() ? from : null);
  }

  current() { return this.at.startsWith("m") ? +this.at.slice(1) : 0; }
  item() { return this.items[this.pass]; }

  step(act) {
    const m = this.matches();
    const cur = this.at.startsWith("m") ? +this.at.slice(1) : (this.at === "after" ? m + 1 : 0);
    if (act === "next-pass" || act === "prev-pass") {
      const dir = act === "next-pass" ? 1 : -1;
      for (let i = this.pass + dir; i >= 0 && i < this.items.length; i += dir) {
        const a = this.items[i], shown = !a.classList.contains("nested") || a.classList.contains("open");  // a closed group is one step
        if (shown && (!this.matchedOnly() || +a.dataset.matches > 0)) { this.go(i, "after"); this.reveal(false); return; }
      }
    } else if (act === "next-match") {
      if (cur < m) this.go(this.pass, `m${cur + 1}`); else if (cur === m) this.go(this.pass, "after");
      else { const i = this.passWithMatches(1); if (i !== null) { this.go(i, "m1"); this.reveal(false); } }  // past the last match: the next pass's first
    } else if (act === "prev-match") {
      if (cur > 1 && cur <= m) this.go(this.pass, `m${cur - 1}`); else if (cur > m) this.go(this.pass, m ? `m${m}` : "before");
      else if (cur === 1 || this.at !== "before") this.go(this.pass, "before");
      else { const i = this.passWithMatches(-1); if (i !== null) { this.go(i, `m${+this.items[i].dataset.matches}`); this.reveal(false); } }
    }
  }

  passWithMatches(dir) {  // the nearest pass in that direction that matched anything (null: none)
    for (let i = this.pass + dir; i >= 0 && i < this.items.length; i += dir) if (+this.items[i].dataset.matches > 0) return i;
    return null;
  }

  openNested(top, open) {  // show (or hide) the nested rewrites a top-level pass ran
    $$(`a[data-top="${top}"]`, this.list).forEach((a) => a.classList.toggle("open", open));
    const t = $(`[data-toggle-nested="${top}"]`, this.list);
    if (t) { t.setAttribute("aria-expanded", String(open)); t.textContent = `${open ? "▾" : "▸"} ${t.textContent.slice(2)}`; }
  }

  render() {
    this.items.forEach((a, i) => a.classList.toggle("active", i === this.pass));
    if (this.items[this.pass] && this.items[this.pass].dataset.top) this.openNested(this.items[this.pass].dataset.top, true);  // stepped into a group
    const item = this.items[this.pass];
    const m = this.matches(), steppable = m;
    $("[data-pos-pass]", this.bar).textContent = `${this.pass + 1} / ${this.items.length}`;
    $("[data-pass-name]", this.bar).textContent = item ? `${item.dataset.name} · ${m} match${m === 1 ? "" : "es"}${m > this.maxSteps ? ` (whole graph for the first ${this.maxSteps}, then each match's own UOps)` : ""}` : "";
    const goto = $("[data-goto-match]", this.bar);
    if (goto) { goto.max = m; goto.disabled = !m; goto.placeholder = m ? `1..${m}` : "–"; }
    const slider = $("[data-pass-slider]", this.bar);
    if (slider) slider.value = this.pass;
    if (this.matchList) this.matchList.show();
    $$("[data-at-choice]", this.bar).forEach((r) => { r.checked = r.value === this.at; });
    const pos = this.at.startsWith("m") ? this.at.slice(1) : (this.at === "before" ? "0" : "end");
    $("[data-pos-match]", this.bar).textContent = steppable ? `${pos} / ${steppable}` : "–";
    $("[data-step=prev-match]", this.bar).disabled = this.at === "before" && this.passWithMatches(-1) === null;
    $("[data-step=next-match]", this.bar).disabled = this.at === "after" && this.passWithMatches(1) === null;
  }
}

/* ***** every match of the current pass, a page at a time ***** */

const MATCH_PAGE = 100;

class MatchList {
  constructor(panel, stepper) {
    this.panel = panel; this.stepper = stepper; this.key = null; this.offset = 0; this.total = 0;
    $$("[data-match-page]", panel).forEach((b) => b.addEventListener("click", () => {
      const off = this.offset + (b.dataset.matchPage === "next" ? MATCH_PAGE : -MATCH_PAGE);
      if (off >= 0 && off < this.total) this.load(off);
    }));
    $("[data-pass-python]", panel).addEventListener("click", () => this.python());
  }

  url(kind, extra = "") {
    const item = this.stepper.item(), target = this.stepper.bar.dataset.target;
    return `/api/traces/${this.stepper.bar.dataset.trace}/rewrites/${item.dataset.group}/${item.dataset.step}/${kind}?` +
      (target ? `target=${encodeURIComponent(target)}&` : "") + extra;
  }

  show() {  // the page holding the current match, loaded when the pass or the page changes
    const item = this.stepper.item();
    if (!item || item.dataset.group === "" || item.dataset.group === undefined) { this.panel.hidden = true; return; }
    this.panel.hidden = false;
    const cur = this.stepper.current(), offset = cur ? Math.floor((cur - 1) / MATCH_PAGE) * MATCH_PAGE : 0;
    const key = `${this.stepper.pass}`;
    if (key !== this.key) { $("[data-pass-python-text]", this.panel).hidden = true; }
    if (key !== this.key || (cur && offset !== this.offset)) { this.key = key; this.load(offset); } else this.mark();
  }

  async load(offset) {
    const body = $("tbody", this.panel), key = this.key;
    this.offset = offset; this.total = this.stepper.matches();
    if (!this.total) { body.innerHTML = '<tr><td colspan="5" class="muted">This pass matched nothing.</td></tr>'; this.head(null); return; }
    body.innerHTML = '<tr><td colspan="5" class="muted">loading the matches…</td></tr>';
    let got;
    try { got = await fetchJSON(this.url("matches", `offset=${offset}&limit=${MATCH_PAGE}`)); } catch (e) {
      if (key === this.key) body.innerHTML = `<tr><td colspan="5" class="err">${esc(e.message)}</td></tr>`;
      return;
    }
    if (key !== this.key || offset !== this.offset) return;  // the user moved on
    this.head(got);
    body.innerHTML = got.matches.map((m) => {
      const diff = m.diff.map((ln) => `<span class="${ln.startsWith("+") ? "add" : ln.startsWith("-") ? "del" : ""}">${esc(ln)}</span>`).join("\n");
      return `<tr data-match="${m.index}"><td><a href="?pass=${this.stepper.pass}&amp;at=m${m.index}" data-go="${m.index}">${m.index}</a></td>` +
        `<td class="mono">${esc(m.op)}</td><td><details><summary><code>${esc(m.rule)}</code></summary><pre class="listing">${esc(m.rule_source)}</pre></details>` +
        (m.error ? `<div class="err small">${esc(m.error)}</div>` : "") + `</td><td class="num mono">${fmtMicros(m.time_s)}</td>` +
        `<td><details><summary class="muted">${m.diff.length} lines</summary><pre class="diff">${diff}</pre></details></td></tr>`;
    }).join("");
    $$("a[data-go]", body).forEach((a) => a.addEventListener("click", (e) => { e.preventDefault(); this.stepper.go(this.stepper.pass, `m${a.dataset.go}`); }));
    this.mark();
  }

  head(got) {
    $("[data-match-call]", this.panel).textContent = got ? `${got.total} in all · run at ${got.call}: ${got.call_code}` : "";
    this.stack(got ? got.stack || [] : []);
    const end = Math.min(this.offset + MATCH_PAGE, this.total);
    $("[data-match-range]", this.panel).textContent = this.total ? ` ${this.offset + 1}–${end} of ${this.total} ` : "";
    $("[data-match-page=prev]", this.panel).disabled = this.offset === 0;
    $("[data-match-page=next]", this.panel).disabled = end >= this.total;
  }

  stack(frames) {  // the Python stack that opened the pass's rewrite group, outermost first; the program's own lines link to its source
    const box = $("[data-pass-stack]", this.panel);
    box.hidden = !frames.length;
    if (!frames.length) return;
    const file = this.panel.dataset.programFile, trace = this.stepper.bar.dataset.trace;
    const where = (f) => `${f.file.startsWith("tinygrad/") ? f.file : f.file.split("/").pop()}:${f.line}`;
    const caller = [...frames].reverse().find((f) => !f.file.startsWith("tinygrad/")) || frames[0];
    $("summary", box).textContent = `called from ${where(caller)} (${caller.function}) · the stack that opened this pass's group, ${frames.length} frames`;
    $("ol", box).innerHTML = frames.map((f) => {
      const at = file && f.file === file ? `<a href="/t/${esc(trace)}/source#L${f.line}">${esc(where(f))}</a>` : `<span title="${esc(f.file)}">${esc(where(f))}</span>`;
      return `<li data-frame><span class="mono">${at}</span> <span class="muted">${esc(f.function)}</span> <code>${esc(f.code)}</code></li>`;
    }).join("");
  }

  mark() {
    const cur = this.stepper.current();
    $$("tr[data-match]", this.panel).forEach((tr) => tr.classList.toggle("current", +tr.dataset.match === cur));
  }

  async python() {
    const pre = $("[data-pass-python-text]", this.panel);
    if (!pre.hidden) { pre.hidden = true; return; }
    pre.hidden = false; pre.textContent = "loading…";
    try {
      const got = await fetchJSON(this.url("python"));
      pre.textContent = got.python + (got.cut ? "\n# ... cut here (the graph is longer)" : "");
    } catch (e) { pre.textContent = e.message; }
  }
}

function fmtMicros(s) { return s >= 1e-3 ? `${(s * 1e3).toFixed(2)} ms` : `${(s * 1e6).toFixed(1)} µs`; }

/* ***** line maps: a source line and the linear UOps that made it, tied by colour (as Compiler Explorer ties source and asm) ***** */

const LINE_COLOURS = 8;

// scroll a pane (not the page) so that el sits in its middle
function centreWithin(pane, el) {
  const p = pane.getBoundingClientRect(), e = el.getBoundingClientRect();
  pane.scrollTop += e.top - p.top - (pane.clientHeight - e.height) / 2;
}

function initLineMaps(root = document) {
  $$(".line-mapped", root).forEach((box) => {
    const uopsOf = new Map(), linesOf = new Map();
    for (const [line, uops] of JSON.parse(box.dataset.lineMap)) {
      uopsOf.set(line, uops);
      for (const u of uops) { if (!linesOf.has(u)) linesOf.set(u, []); linesOf.get(u).push(line); }
    }
    const lineEl = (n) => box.querySelector(`.lm-source [id="S-${n}"]`);
    const rowEl = (u) => box.querySelector(`.uop-row[data-uop="${u}"]`);
    for (const [line, uops] of uopsOf) {
      const c = `lm-c${line % LINE_COLOURS}`, el = lineEl(line);
      if (el) { el.classList.add("lm-line", c); el.dataset.line = line; }
      for (const u of uops) { const r = rowEl(u); if (r && !r.dataset.colour) { r.classList.add(c); r.dataset.colour = c; } }
    }
    let pinned = null;
    const nums = JSON.parse(box.dataset.nums || "[]"), uopOfNum = new Map(nums.map((n, i) => [n, i]));
    const graph = box.dataset.graph && document.getElementById(box.dataset.graph);
    const light = (lines, uops, scroll) => {
      $$(".lm-hot", box).forEach((e) => e.classList.remove("lm-hot"));
      lines.forEach((n) => { const e = lineEl(n); if (e) e.classList.add("lm-hot"); });
      uops.forEach((u) => { const e = rowEl(u); if (e) e.classList.add("lm-hot"); });
      if (graph) {  // the same UOps in the pass graph, where it shows them (the graphs after codegen's last passes)
        const want = new Set(uops.map((u) => String(nums[u])));
        const v = viewers.get(graph.id);
        $$("g.node.linked", graph).forEach((g) => g.classList.remove("linked"));
        if (v && v.graph) for (const n of v.graph.byId.values()) if (want.has(String(n.num))) { const g = v.nodeEl(n.id); if (g) g.classList.add("linked"); }
      }
      if (scroll) {  // to a line's own UOp (one no other line shares: a CAST every load line uses says little), else its last
        const own = lines.length === 1 ? uops.find((u) => (linesOf.get(u) || []).length === 1) : undefined;
        const r = uops.length && rowEl(own ?? uops[uops.length - 1]), l = lines.length && lineEl(lines[0]);
        if (r) centreWithin($(".lm-uops", box), r);
        if (l) l.scrollIntoView({ block: "nearest" });
      }
    };
    const fromLine = (e) => { const el = e.target.closest(".lm-line"); return el ? +el.dataset.line : null; };
    const fromUop = (e) => { const el = e.target.closest(".uop-row"); return el ? +el.dataset.uop : null; };
    const show = (line, uop, scroll) => {
      if (line !== null) light([line], uopsOf.get(line) || [], scroll);
      else if (uop !== null) light(linesOf.get(uop) || [], [uop], scroll);
    };
    if (graph) graph.addEventListener("node-selected", (e) => {  // a node of the pass graph that is a linear UOp: its lines
      const u = e.detail && uopOfNum.get(e.detail.num);
      if (u === undefined || u === null) return;
      pinned = `u${u}`; box.classList.add("lm-pinned"); show(null, u, true);
    });
    box.addEventListener("mouseover", (e) => { if (!pinned) show(fromLine(e), fromUop(e), false); });
    box.addEventListener("mouseleave", () => { if (!pinned) light([], [], false); });
    box.addEventListener("click", (e) => {
      const line = fromLine(e), uop = fromUop(e);
      if (line === null && uop === null) return;
      const key = line !== null ? `l${line}` : `u${uop}`;
      pinned = pinned === key ? null : key;
      box.classList.toggle("lm-pinned", pinned !== null);
      if (pinned) show(line, uop, true); else light([], [], false);
      if (pinned && line !== null) origins(line); else $(".lm-origins", box).hidden = true;
    });
    // line -> rule: the passes and rules that made a clicked line's UOps, read from the rewrite log by the server
    const origins = async (line) => {
      const all = uopsOf.get(line) || [], out = $(".lm-origins", box), uops = all.slice(0, 32);  // the API takes 32 at a time
      if (!box.dataset.origins || !uops.length) return;
      out.hidden = false; out.textContent = `line ${line}: finding the passes that made its ${uops.length} UOps…`;
      try {
        const r = await fetch(box.dataset.origins + uops.map((u) => nums[u]).join(","));
        if (!r.ok) throw new Error(`${r.status}`);
        const counts = new Map();
        for (const o of await r.json()) {
          const what = o.kind === "match" ? `pass ${o.step + 1} ${o.name}: rule ${o.rule}` : o.kind === "start" ? `no rule (rebuilt before pass ${o.step + 1} ${o.name})`
            : o.kind === "input" ? "the kernel AST (before codegen)" : "not in the rewrite log";
          counts.set(what, (counts.get(what) || 0) + 1);
        }
        if (pinned !== `l${line}`) return;
        out.innerHTML = `<span class="muted">line ${line} is made of UOps from${all.length > uops.length ? ` (its first ${uops.length} of ${all.length})` : ""}:</span> ` +
          [...counts].map(([w, c]) => `<span class="lm-origin">${esc(w)}${c > 1 ? ` ×${c}` : ""}</span>`).join(" · ");
      } catch (e) { out.textContent = `line ${line}: where its UOps came from could not be read (${e.message})`; }
    };
  });
}

/* ***** tabs (?code=...), copy ***** */

function initTabs(root = document) {
  $$("[data-tabs]", root).forEach((bar) => {
    const param = bar.dataset.tabs, root = bar.parentElement;
    $$("[data-tab]", bar).forEach((b) => b.addEventListener("click", () => {
      $$("[data-tab]", bar).forEach((x) => x.classList.toggle("active", x === b));
      $$("[data-panel]", root).forEach((p) => { p.hidden = p.dataset.panel !== b.dataset.tab; });
      setQuery({ [param]: b.dataset.tab });
    }));
    const copy = $("[data-copy]", bar);
    if (copy) copy.addEventListener("click", async () => {
      const panel = $$("[data-panel]", root).find((p) => !p.hidden);
      const raw = panel && $("[data-raw]", panel);
      const text = raw ? (raw.value !== undefined ? raw.value : raw.textContent) : "";
      try { await navigator.clipboard.writeText(text); } catch (e) {
        const ta = document.createElement("textarea"); ta.value = text; document.body.appendChild(ta); ta.select(); document.execCommand("copy"); ta.remove();
      }
      copy.textContent = "Copied"; setTimeout(() => { copy.textContent = "Copy"; }, 1200);
    });
  });
}

/* ***** live progress of a running trace ***** */

function initProgress(root = document) {
  const box = $("#progress", root);
  if (!box || !["queued", "running"].includes(box.dataset.status)) return;
  const trace = box.dataset.trace;
  const setStage = (s) => {
    const li = $(`li[data-stage="${s.stage}"]`, box);
    if (!li) return;
    li.className = s.status;
    li.firstElementChild.innerHTML = s.status === "running" ? '<span class="spinner"></span>' : `<span class="dot ${esc(s.status)}"></span>`;
    $(".detail", li).textContent = s.detail || s.status;
  };
  const finish = (d) => {
    if (d.status === "error" && d.error && !$("#job-error").textContent.includes(d.error)) {
      $("#job-status").textContent = "error"; $("#job-status").className = "badge err";
      const e = $("#job-error"); e.hidden = false; e.innerHTML = `<b>The trace failed:</b> ${esc(d.error)}`;
      return;
    }
    window.location.reload();
  };
  const live = $("#live");
  let refreshing = null, again = false;  // at most one refresh of the live panels in flight; a report meanwhile asks for one more
  const refresh = async () => {
    if (!live) return;
    if (refreshing) { again = true; return; }
    refreshing = (async () => {
      try { const r = await fetch(live.dataset.live, { cache: "no-store" }); if (r.ok) live.innerHTML = await r.text(); } catch (e) { /* the next report */ }
    })();
    await refreshing;
    refreshing = null;
    if (again) { again = false; setTimeout(refresh, 300); }
  };
  if (window.EventSource) {
    const es = new EventSource(`/api/traces/${trace}/events`);
    es.addEventListener("partial", refresh);
    es.addEventListener("snapshot", (e) => { const d = JSON.parse(e.data); (d.stages || []).forEach(setStage); $("#job-status").textContent = d.status; });
    es.addEventListener("stage", (e) => setStage(JSON.parse(e.data)));
    es.addEventListener("status", (e) => { $("#job-status").textContent = JSON.parse(e.data).status; });
    es.addEventListener("done", (e) => { es.close(); finish(JSON.parse(e.data)); });
    es.onerror = () => { es.close(); setTimeout(poll, 1000); };
  } else poll();
  async function poll() {
    try {
      const d = await fetchJSON(`/api/traces/${trace}/status`);
      (d.stages || []).forEach(setStage);
      if (["done", "error", "interrupted"].includes(d.status)) return finish(d);
    } catch (e) { /* try again */ }
    setTimeout(poll, 1000);
  }
}

/* ***** a kernel's record on another target, computed on first view: follow its job, then put the page in place (no reload) ***** */

async function swapIn(id, also = []) {  // the element of this id as the same page renders it now, in place of the one shown, brought to
  // life; `also`: selectors of other parts that change with it (the pipeline ribbon's facts), replaced as they are
  const html = await (await fetch(window.location.href, { headers: { Accept: "text/html" }, cache: "no-store" })).text();
  const doc = new DOMParser().parseFromString(html, "text/html");
  const fresh = doc.getElementById(id), now = document.getElementById(id);
  if (!fresh || !now) { window.location.reload(); return; }
  const node = document.importNode(fresh, true);
  now.replaceWith(node);
  boot(node);
  for (const sel of also) {
    const was = document.querySelector(sel), is = doc.querySelector(sel);
    if (was && is) was.replaceWith(document.importNode(is, true));
  }
}

function follow(url, { detail, done, failed }) {  // a lazy part's job, polled until it is stored (done), fails (failed) or while it waits
  // (detail: the job's words as it goes); refused a place in the line (429, 503), the page waits as Retry-After says and asks again
  const poll = async () => {
    let wait = 700;
    try {
      const r = await fetch(url);
      if (r.status === 200) { await done(r); return; }
      const d = await r.json();
      if (r.status === 202) detail(d.detail || d.status);
      else if (r.status === 429 || r.status === 503) {
        detail(`waits for a place in the line (${d.detail})`);
        wait = 1000 * (Number(r.headers.get("Retry-After")) || 5);
      } else { failed(d.detail || `${r.status}`); return; }
    } catch (e) { /* try again */ }
    setTimeout(poll, wait);
  };
  setTimeout(poll, 500);
}

function initPendingTarget(root = document) {
  const box = $("#pending-target", root);
  if (!box || box.classList.contains("err")) return;
  follow(box.dataset.poll, {
    done: () => swapIn("kernel-body", ["nav.ribbon"]),
    detail: (text) => { $("[data-pending-detail]", box).textContent = text; },
    failed: (text) => { box.className = "alert err"; box.textContent = text; },
  });
}

/* ***** a record's analysis computed on first view: follow the job, then put the live values, spec checks and line map in place ***** */

function initPendingAnalysis(root = document) {
  const box = $("#analysis[data-analysis-poll]", root);
  if (!box) return;
  follow(box.dataset.analysisPoll, {
    done: async () => {
      const got = new DOMParser().parseFromString(await (await fetch(box.dataset.analysisFragment)).text(), "text/html");
      for (const id of ["analysis", "code-own"]) {
        const now = document.getElementById(id), fresh = got.getElementById(id);
        if (now && fresh) { const node = document.importNode(fresh, true); now.replaceWith(node); initLineMaps(node); }
      }
    },
    detail: (text) => { const at = $("[data-analysis-detail]", box); if (at) at.textContent = text; },
    failed: (text) => box.replaceChildren(Object.assign(document.createElement("div"), { className: "small muted", textContent: `analysis: ${text}` })),
  });
}

/* ***** compile facts computed on first view: follow the job, then put the stored facts in place (no reload) ***** */

function initPendingFacts(root = document) {
  const box = $("#compile-facts[data-facts-poll]", root);
  if (!box) return;
  follow(box.dataset.factsPoll, {
    done: async () => {
      const got = new DOMParser().parseFromString(await (await fetch(box.dataset.factsFragment)).text(), "text/html");
      for (const id of ["compile-facts", "compiled-pane"]) {
        const now = document.getElementById(id), fresh = got.getElementById(id);
        if (now && fresh) now.replaceWith(document.importNode(fresh, true));
      }
    },
    detail: (text) => { const at = $("[data-facts-detail]", box); if (at) at.textContent = text; },
    failed: (text) => { box.innerHTML = ""; box.append(Object.assign(document.createElement("span"), { className: "muted", textContent: `compile: ${text}` })); },
  });
}

/* ***** schedule it yourself: opts as chips, applied in a worker (POST), the result beside the original ***** */

function initOpts(root = document) {
  const panel = $("#opts-panel", root);
  if (!panel) return;
  const status = $("#opts-status", panel), out = $("#opts-out", panel), chips = $("#opts-chips", panel), input = $("#opts-add", panel);
  const split = (text) => (text || "").split(/,(?=[A-Za-z]+:)/).map((o) => o.trim().toUpperCase()).filter(Boolean);  // TC:0:-1,2,1 keeps its commas
  let opts = split(panel.dataset.current);
  const say = (text, error) => { status.textContent = text; status.className = `small ${error ? "err" : "muted"}`; };
  const draw = () => {
    chips.replaceChildren(...opts.map((o, i) => {
      const chip = Object.assign(document.createElement("button"), { type: "button", className: "chip", textContent: `${o} ×`, title: `remove ${o}` });
      chip.dataset.opt = o;
      chip.addEventListener("click", () => { opts.splice(i, 1); draw(); });
      return chip;
    }));
    if (!opts.length) chips.textContent = "none";
  };
  let vs = null, shown = null;  // vs: another schedule to compare with (A; else the original); shown: the schedule on screen
  const query = (start, list) => `target=${encodeURIComponent(panel.dataset.target)}&opts=${encodeURIComponent(list.join(","))}&from=${start}`;
  const show = async (start, list) => {
    const r = await fetch(`${panel.dataset.fragment}?${query(start, list)}${vs !== null ? `&vs=${encodeURIComponent(vs.opts)}&vs_from=${vs.start}` : ""}`);
    out.innerHTML = await r.text();
    shown = { start, opts: [...list] };
    const result = $("#opts-result", out);
    if (result) { opts = split(result.dataset.opts); draw(); }
    $$("[data-add-opt]", out).forEach((b) => b.addEventListener("click", () => { opts.push(b.dataset.addOpt); draw(); apply("none", opts); }));
    $$("[data-opts-as-a]", out).forEach((b) => b.addEventListener("click", () => {
      vs = b.dataset.optsAsA === "this" ? { start: shown.start, opts: shown.opts.join(",") } : null;
      show(shown.start, shown.opts);
    }));
    const pin = $("[data-opts-tour]", out);
    if (pin) pin.addEventListener("click", async () => {
      const body = JSON.stringify({ target: panel.dataset.target, opts: shown.opts, from: shown.start });
      const r = await fetch(`${panel.dataset.api}/tour`, { method: "POST", headers: { "Content-Type": "application/json" }, body });
      const d = await r.json().catch(() => ({}));
      const said = $("[data-opts-tour-said]", out);
      if (!r.ok) { said.textContent = d.detail || `failed (${r.status})`; return; }
      said.replaceChildren("added: ", Object.assign(document.createElement("a"), { href: d.tour, textContent: "the tour" }), ` (${d.pinned} of this kernel's)`);
    });
    say(`applied: ${opts.join(", ") || "no opts"}`);
  };
  const previous = () => {  // an apply that failed leaves the last result on screen, dimmed and named: it is not what was asked
    const result = $("#opts-result", out);
    if (!result || !shown) return;
    result.classList.add("opts-previous");
    const note = $("[data-opts-previous]", out) || out.insertBefore(Object.assign(document.createElement("p"), { className: "alert err small" }), out.firstChild);
    note.dataset.optsPrevious = shown.opts.join(",");
    note.textContent = `Not applied. Below, dimmed: the previous result (${shown.opts.join(", ") || "no opts"}), not these opts.`;
  };
  let ticket = 0;  // the latest apply wins: an earlier one that answers later is not shown
  const apply = async (start, list) => {
    const mine = ++ticket;
    say("asking a worker for tinygrad's codegen with these opts…");
    const body = JSON.stringify({ target: panel.dataset.target, opts: list, from: start });
    let r = await fetch(panel.dataset.api, { method: "POST", headers: { "Content-Type": "application/json" }, body });
    while (r.status === 202) {
      const d = await r.json();
      if (mine === ticket) say(d.detail || d.status);
      await new Promise((ok) => setTimeout(ok, 500));
      r = await fetch(`${panel.dataset.api}?${query(start, list)}`);
    }
    if (mine !== ticket) return;
    if (r.status !== 200) { const d = await r.json().catch(() => ({})); say(d.detail || `failed (${r.status})`, true); previous(); return; }
    await show(start, list);
  };
  const pattern = new RegExp(`^(${panel.dataset.optPattern})$`);
  const add = () => {  // "UPCAST 0 4" is read as UPCAST:0:4; anything else that is no OP:AXIS:ARG is said at once, not added
    const o = input.value.trim().toUpperCase().replace(/\s*:\s*|\s+/g, ":");
    if (!o) return;
    if (!pattern.test(o)) { say(`${o} is not an opt: write OP:AXIS:ARG (UPCAST:0:4)`, true); return; }
    opts.push(o); input.value = ""; draw(); say(`added ${o}: Apply to see it`);
  };
  $("#opts-add-button", panel).addEventListener("click", add);
  input.addEventListener("keydown", (e) => { if (e.key === "Enter") { e.preventDefault(); add(); } });
  $("#opts-apply", panel).addEventListener("click", () => apply("none", opts));
  $$("[data-opts-from]", panel).forEach((b) => b.addEventListener("click", () => {
    const start = b.dataset.optsFrom;
    if (start === "current") { opts = split(panel.dataset.current); draw(); apply("none", opts); }
    else if (start === "none") { opts = []; draw(); apply("none", opts); }
    else apply("heuristic", []);
  }));
  draw();
  if (panel.dataset.asked !== undefined) { opts = split(panel.dataset.asked); draw(); apply(panel.dataset.askedFrom || "none", opts); }
  // opened: the kernel as it is, with the opts tinygrad offers next (a worker's codegen, asked for by opening the panel)
  panel.addEventListener("toggle", () => { if (panel.open && !shown && !status.textContent) apply("none", opts); });
}

/* ***** the trace form: preset fills the shape, Winograd options only where they apply ***** */

function initForm(root = document) {
  const form = $("#trace-form", root);
  if (!form) return;
  const preset = $("#preset", form), shape = ["batch", "cin", "cout", "height", "width", "kernel", "stride", "padding", "groups", "dtype"];
  const val = (name) => { const r = $(`input[name="${name}"]:checked`, form); return r ? r.value : null; };
  preset.addEventListener("change", () => {
    const opt = preset.selectedOptions[0];
    if (!opt.dataset.spec) return;
    const spec = JSON.parse(opt.dataset.spec);
    for (const f of shape) {
      if (f === "dtype") { const r = $(`input[name="dtype"][value="${spec.dtype}"]`, form); if (r) r.checked = true; continue; }
      form.elements[f].value = spec[f] === null ? "" : spec[f];
    }
  });
  for (const f of shape) $$(`[name="${f}"]`, form).forEach((el) => el.addEventListener("input", () => { preset.value = "custom"; }));
  const sync = () => {
    const wino = val("algo") === "winograd", explorer = wino && val("wino_impl") === "explorer";
    $$('[data-seg="wino_impl"] input', form).forEach((i) => { i.disabled = !wino; });
    for (const name of ["tile", "staging", "consts"]) $$(`[data-seg="${name}"] input`, form).forEach((i) => { i.disabled = !explorer; });
    if (!wino) { const b = $('input[name="wino_impl"][value="builtin"]', form); if (b) b.checked = true; }
    if (!explorer) for (const [n, v] of [["tile", "F(4,3)"], ["staging", "staged"], ["consts", "symbolic"]]) { const r = $(`input[name="${n}"][value="${v}"]`, form); if (r) r.checked = true; }
    form.elements.beam.disabled = val("opt") !== "beam";
  };
  form.addEventListener("change", sync); sync();
  form.addEventListener("submit", () => {
    // disabled radios are not submitted: the server falls back to their defaults, which sync() already selected
    $("#submit", form).disabled = true; $("#submit", form).textContent = "Starting…";
  });
}

/* ***** boot ***** */

const viewers = new Map();  // every graph viewer on the page, by element id

/* ***** SASS beside its source: a line, an instruction or a UOp clicked lights up the others (templates/sass.html) ***** */

function initSass(root = document) {
  const pending = $("#sass-pending[data-sass-poll]", root);
  if (pending) {
    follow(pending.dataset.sassPoll, {
      done: () => swapIn("sass-body"),
      detail: (text) => { $("[data-sass-detail]", pending).textContent = text; },
      failed: (text) => { pending.className = "alert err"; pending.textContent = `No SASS: ${text}`; },
    });
  }
  const split = $("#sass-split", root);
  if (!split) return;
  const source = $("#sass-source", split), listing = $("#sass-listing", split);
  const light = (rows, lines, scrollTo) => {
    $$(".lit", split).forEach((el) => el.classList.remove("lit"));
    rows.forEach((r) => r.classList.add("lit"));
    lines.forEach((n) => { const tr = document.getElementById(`L${n}`); if (tr) tr.classList.add("lit"); });
    const first = scrollTo === "source" ? document.getElementById(`L${lines[0]}`) : rows[0];
    const pane = first && first.closest(".sass-pane");  // scrolled itself, vertically only: the page and the code stay where they are
    if (pane) pane.scrollTop = first.offsetTop - pane.clientHeight / 3;
  };
  source.addEventListener("click", (e) => {
    if (e.target.closest("[data-uop]")) return;
    const tr = e.target.closest("tr[data-line]");
    if (tr) light($$(`tr[data-line="${tr.dataset.line}"]`, listing), [tr.dataset.line], "sass");
  });
  listing.addEventListener("click", (e) => {
    const tr = e.target.closest("tr[data-offset]");
    if (tr && tr.dataset.line) light($$(`tr[data-line="${tr.dataset.line}"]`, listing), [tr.dataset.line], "source");
  });
  root.addEventListener("click", (e) => {
    const chip = e.target.closest("[data-uop]");
    if (!chip || !split.isConnected) return;
    const u = chip.dataset.uop;
    const rows = $$("tr[data-uops]", listing).filter((tr) => tr.dataset.uops.split(" ").includes(u));
    light(rows, [...new Set(rows.map((tr) => tr.dataset.line))], "sass");
  });
  $$("[data-goto]", root).forEach((a) => a.addEventListener("click", () => {
    const tr = document.getElementById(`i${a.dataset.goto}`);
    if (tr) light([tr], tr.dataset.line ? [tr.dataset.line] : [], "sass");
  }));
}

function boot(root = document) {  // everything a page (or a part of it put in place later) brings to life
  const fresh = [];
  $$(".viewer", root).forEach((el) => { viewers.set(el.id, new Viewer(el)); fresh.push(el.id); });
  $$("[data-pass-filter]", root).forEach((box) => {
    const list = document.getElementById(box.dataset.passFilter);
    box.addEventListener("input", () => {
      const q = box.value.trim().toLowerCase();
      $$("a[data-pass]", list).forEach((a) => a.classList.toggle("filtered-out", !!q && !a.dataset.name.toLowerCase().includes(q)));
    });
  });
  $$("[data-matched-only]", root).forEach((cb) => {
    const list = document.getElementById(cb.dataset.matchedOnly);
    const apply = () => list.classList.toggle("matched-only", cb.checked);
    cb.addEventListener("change", apply);
    const active = $("a.active", list);
    if (active && active.classList.contains("zero")) cb.checked = false;
    apply();
  });
  const stepped = new Set();
  $$("[data-stepper]", root).forEach((bar) => {
    const v = viewers.get("pass-graph");
    if (v) { new Stepper(bar, v); stepped.add("pass-graph"); }
  });
  fresh.forEach((id) => { const v = viewers.get(id); if (!stepped.has(id)) v.show(v.el.dataset.ref); });
  initTabs(root); initProgress(root); initForm(root); initPendingTarget(root); initPendingAnalysis(root); initPendingFacts(root); initOpts(root);
  initLineMaps(root); initSass(root);
}

document.addEventListener("DOMContentLoaded", () => boot(document));

/* ***** "compare with..." on trace pages: the menu loads its picks on first open ***** */

document.addEventListener("DOMContentLoaded", () => {
  $$("details.compare-menu[data-src]").forEach((menu) => menu.addEventListener("toggle", async () => {
    if (!menu.open || menu.dataset.loaded) return;
    menu.dataset.loaded = "1";
    const pop = $(".compare-pop", menu);
    try {
      const r = await fetch(menu.dataset.src, { headers: { Accept: "text/html" } });
      if (r.ok) pop.innerHTML = await r.text();
    } catch (e) { /* keep the plain link */ }
  }));
});
