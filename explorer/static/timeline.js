// The timeline page: the trace's lanes (the explorer's stages, Tensor functions, tinygrad's passes, each device's kernel launches)
// and each device's memory in use, drawn as SVG from the page's JSON (explorer.present.timeline). Zoom with the wheel or the
// buttons, drag to pan, double-click a range to zoom to it; a stage is a link to its page.
(() => {
  const holder = document.getElementById("timeline"), dataEl = document.getElementById("timeline-data");
  if (!holder || !dataEl) return;
  const data = JSON.parse(dataEl.textContent);
  const SVG = "http://www.w3.org/2000/svg", LABEL = 180, ROW = 15, GAP = 10, AXIS = 24, MEM = 54;
  const whole = [0, Math.max(data.end, 1)];
  let view = whole.slice();

  const el = (name, attrs, parent) => {
    const e = document.createElementNS(SVG, name);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
    if (parent) parent.appendChild(e);
    return e;
  };
  const text = (parent, x, y, s, cls) => { const t = el("text", {x, y, class: cls || ""}, parent); t.textContent = s; return t; };
  const fmt = (us) => us >= 1e6 ? `${(us / 1e6).toFixed(us >= 1e7 ? 1 : 2)} s` : us >= 1e3 ? `${(us / 1e3).toFixed(us >= 1e4 ? 1 : 2)} ms`
    : `${us.toFixed(1)} µs`;
  const bytes = (n) => n >= 2 ** 30 ? `${(n / 2 ** 30).toFixed(2)} GiB` : n >= 2 ** 20 ? `${(n / 2 ** 20).toFixed(1)} MiB`
    : n >= 1024 ? `${(n / 1024).toFixed(1)} KiB` : `${n} B`;
  const hue = (s) => { let h = 0; for (const c of s) h = (h * 31 + c.charCodeAt(0)) % 360; return h; };
  const kind = (s) => s.split(" for ")[0].replace(/( \d+ \w+)? n\d+$/, "");

  function ticks(width) {
    const span = view[1] - view[0], raw = span / Math.max(2, width / 110), p = 10 ** Math.floor(Math.log10(raw));
    const step = [1, 2, 5, 10].map((m) => m * p).find((s) => s >= raw);
    const out = [];
    for (let t = Math.ceil(view[0] / step) * step; t <= view[1]; t += step) out.push(t);
    return out;
  }

  function draw() {
    const width = Math.max(holder.clientWidth, 480), plot = width - LABEL - 12;
    const x = (t) => LABEL + ((t - view[0]) / (view[1] - view[0])) * plot;
    const heights = data.lanes.map((l) => l.rows * ROW + (l.runs && l.runs.length ? ROW : 0));
    const height = AXIS + heights.reduce((a, h) => a + h + GAP, 0) + data.memory.length * (MEM + GAP) + 4;
    const svg = el("svg", {width, height, class: "timeline-svg"});
    const clip = el("clipPath", {id: "tl-clip"}, el("defs", {}, svg));
    el("rect", {x: LABEL, y: 0, width: plot, height}, clip);
    for (const t of ticks(plot)) {
      el("line", {x1: x(t), x2: x(t), y1: AXIS - 6, y2: height, class: "tl-grid"}, svg);
      text(svg, x(t) + 3, AXIS - 10, fmt(t), "tl-tick");
    }
    const body = el("g", {"clip-path": "url(#tl-clip)"}, svg);
    let y = AXIS;
    data.lanes.forEach((lane, i) => {
      const g = el("g", {class: `tl-lane tl-${lane.kind}`, "data-lane": lane.name}, body);
      text(svg, 4, y + 11, lane.title, "tl-label");
      const last = new Array(lane.rows).fill(-1);
      for (const [row, st, en, name, url] of lane.items) {
        if (en < view[0] || st > view[1]) continue;
        const x0 = Math.max(x(st), LABEL - 2), x1 = Math.min(x(en), width), w = Math.max(x1 - x0, 1);
        if (w < 2 && x0 < last[row]) continue;  // under a pixel and on one drawn already
        last[row] = x0 + w;
        const parent = url ? el("a", {href: url, class: "tl-stage", "data-stage": name}, g) : g;
        const light = lane.kind === "stages" ? 62 : 70 - Math.min(row, 6) * 4;
        const r = el("rect", {x: x0, y: y + row * ROW, width: w, height: ROW - 2, rx: 2, "data-st": st, "data-en": en,
          fill: `hsl(${hue(lane.kind === "host" ? kind(name) : name)} 55% ${light}%)`}, parent);
        el("title", {}, r).textContent = `${name} · ${fmt(en - st)} (at ${fmt(st)})`;
        if (w > 40) text(parent, x0 + 3, y + row * ROW + 10, name.length * 6 > w ? name.slice(0, Math.floor(w / 6)) : name, "tl-name");
      }
      if (lane.runs && lane.runs.length) {
        const ry = y + lane.rows * ROW;
        let lastPx = -1;
        for (const [at, name] of lane.runs) {
          if (at < view[0] || at > view[1] || x(at) - lastPx < 1) continue;
          lastPx = x(at);
          const tick = el("line", {x1: lastPx, x2: lastPx, y1: ry, y2: ry + ROW - 2, class: "tl-run"}, g);
          el("title", {}, tick).textContent = `${name} launched at ${fmt(at)}`;
        }
      }
      y += heights[i] + GAP;
    });
    for (const m of data.memory) {
      text(svg, 4, y + 12, `${m.device} memory`, "tl-label");
      text(svg, 4, y + 26, `peak ${bytes(m.peak)}`, "tl-tick");
      const scale = (n) => y + MEM - (m.peak ? (n / m.peak) * (MEM - 4) : 0);
      let d = `M ${LABEL} ${y + MEM}`, prev = 0;
      for (const [at, n] of m.points) { d += ` L ${x(at)} ${scale(prev)} L ${x(at)} ${scale(n)}`; prev = n; }
      d += ` L ${width} ${scale(prev)} L ${width} ${y + MEM} Z`;
      el("path", {d, class: "tl-memory", "data-device": m.device}, body);
      y += MEM + GAP;
    }
    holder.replaceChildren(svg);
    document.getElementById("timeline-window").textContent =
      `showing ${fmt(view[0])} to ${fmt(view[1])} of ${fmt(whole[1])}`;
  }

  const zoom = (factor, at) => {
    const span = Math.min((view[1] - view[0]) * factor, whole[1]), c = at ?? (view[0] + view[1]) / 2;
    const f = (c - view[0]) / (view[1] - view[0]);
    let a = c - f * span;
    a = Math.max(whole[0], Math.min(a, whole[1] - span));
    view = [a, a + Math.max(span, 1)];
    draw();
  };
  const timeAt = (e) => {
    const box = holder.getBoundingClientRect(), plot = Math.max(holder.clientWidth, 480) - LABEL - 12;
    return view[0] + ((e.clientX - box.left - LABEL) / plot) * (view[1] - view[0]);
  };
  holder.addEventListener("wheel", (e) => { e.preventDefault(); zoom(e.deltaY < 0 ? 0.8 : 1.25, timeAt(e)); }, {passive: false});
  holder.addEventListener("dblclick", (e) => {
    const r = e.target.closest("rect[data-st]");
    if (!r) { view = whole.slice(); draw(); return; }
    const st = +r.dataset.st, en = +r.dataset.en, pad = Math.max((en - st) * 0.05, 1);
    view = [Math.max(whole[0], st - pad), Math.min(whole[1], en + pad)];
    draw();
  });
  let drag = null;
  holder.addEventListener("mousedown", (e) => { if (!e.target.closest("a")) drag = {x: e.clientX, view: view.slice()}; });
  window.addEventListener("mouseup", () => { drag = null; });
  window.addEventListener("mousemove", (e) => {
    if (!drag) return;
    const plot = Math.max(holder.clientWidth, 480) - LABEL - 12, span = drag.view[1] - drag.view[0];
    let a = drag.view[0] - ((e.clientX - drag.x) / plot) * span;
    a = Math.max(whole[0], Math.min(a, whole[1] - span));
    view = [a, a + span];
    draw();
  });
  document.querySelectorAll("[data-zoom]").forEach((b) => b.addEventListener("click", () => {
    if (b.dataset.zoom === "all") { view = whole.slice(); draw(); } else zoom(b.dataset.zoom === "in" ? 0.5 : 2);
  }));
  window.addEventListener("resize", draw);
  draw();
})();
