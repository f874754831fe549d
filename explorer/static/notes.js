/* Annotations: a teacher's notes on tour steps, graph nodes and source lines (templates/_partials/notes.html, kernel_notes.html,
   trace_notes.html). Note text is only ever set with textContent. */
import { $, $$, el, api } from "./dom.js";

const Notes = {
  byTrace: new Map(),  // trace id -> Promise<list of notes>
  load(trace) {
    if (!this.byTrace.has(trace)) this.byTrace.set(trace, api(`/api/traces/${trace}/annotations`).catch(() => []));
    return this.byTrace.get(trace);
  },
  async add(trace, note) {
    const list = await this.load(trace);
    list.push(note);
    refreshAnchored(trace);
  },
  async remove(trace, id) {
    await api(`/api/traces/${trace}/annotations/${id}`, { method: "DELETE" });
    const list = await this.load(trace);
    const i = list.findIndex((n) => n.id === id);
    if (i >= 0) list.splice(i, 1);
    refreshAnchored(trace);
  },
};

function parseLine(anchor) { const m = /^(\d+):([a-z]+):(\d+)$/.exec(anchor); return m ? { kernel: +m[1], target: m[2], line: +m[3] } : null; }
function parseNode(anchor) { const i = anchor.lastIndexOf("#"); return i < 0 ? null : { ref: anchor.slice(0, i), node: +anchor.slice(i + 1) }; }
function describe(n, ops = []) {
  if (n.anchor_kind === "node") { const p = parseNode(n.anchor); return p ? `node ${p.node}${ops[p.node] ? ` ${ops[p.node]}` : ""}` : n.anchor; }
  if (n.anchor_kind === "line") { const p = parseLine(n.anchor); return p ? `${p.target === "uops" ? "UOps" : p.target} line ${p.line}` : n.anchor; }
  return "step";
}

function noteItem(trace, n, where = "") {
  const li = el("li", { "data-note-id": String(n.id) });
  li.append(el("span", { class: "note-pin" }, "✎"));
  if (where) li.append(el("span", { class: "note-where" }, where));
  li.append(el("span", { class: "note-text" }, n.text));
  const del = el("button", { type: "button", class: "small", "data-note-delete": "", title: "delete this note" }, "×");
  li.append(del);
  return li;
}

function onDelete(e) {
  const btn = e.target.closest("[data-note-delete]");
  if (!btn) return;
  const li = btn.closest("li[data-note-id]"), list = btn.closest("[data-trace]");
  btn.disabled = true;  // one DELETE per note: a second click while it is on its way would find the note gone
  Notes.remove(list.dataset.trace, +li.dataset.noteId).then(() => {
    $$(`li[data-note-id="${li.dataset.noteId}"]`).forEach((x) => x.remove());
  }).catch((err) => { btn.disabled = false; window.alert(err.message); });
}

/* A node anchor counts nodes in the graph view's own order (GET /api/traces/{id}/graphs/{ref}: nodes[i]), which does not change when the
   graph is expanded again; graphviz draws them in another order, so the SVG's g#n{id} are looked up by the view's ids. */
const views = new Map();  // "trace|ref" -> Promise<{ids, ops}>
function viewNodes(trace, ref) {
  const key = `${trace}|${ref}`;
  if (!views.has(key)) {
    views.set(key, api(`/api/traces/${trace}/graphs/${ref}`).then((v) => ({ ids: v.nodes.map((n) => n.id), ops: v.nodes.map((n) => n.op) }))
      .catch(() => ({ ids: [], ops: [] })));
  }
  return views.get(key);
}

async function markGraph(viewer, notes) {
  const ref = viewer.dataset.loaded, trace = viewer.dataset.trace;
  if (!ref || ref === "error") return;
  $$("g.node.annotated", viewer).forEach((g) => { g.classList.remove("annotated"); $$(".node-note", g).forEach((x) => x.remove()); });
  const mine = notes.filter((n) => n.anchor_kind === "node" && parseNode(n.anchor) && parseNode(n.anchor).ref === ref);
  if (!mine.length) return;
  const { ids } = await viewNodes(trace, ref);
  for (const n of mine) {
    const i = parseNode(n.anchor).node, g = ids[i] !== undefined && $(`g.node[id="n${ids[i]}"]`, viewer);
    if (!g) continue;
    const box = g.getBBox();
    g.classList.add("annotated");
    const pin = document.createElementNS("http://www.w3.org/2000/svg", "text");
    pin.setAttribute("class", "node-note"); pin.setAttribute("x", String(box.x + box.width - 4)); pin.setAttribute("y", String(box.y + 4));
    pin.textContent = "✎";
    const title = document.createElementNS("http://www.w3.org/2000/svg", "title");
    title.textContent = n.text;
    pin.append(title);
    g.append(pin);
  }
}

function markLines(kernel, notes) {
  $$(".line-note").forEach((x) => x.remove());
  $$(".tab-panel[data-panel] .noted").forEach((x) => x.classList.remove("noted"));
  for (const n of notes) {
    const p = n.anchor_kind === "line" && parseLine(n.anchor);
    if (!p || p.kernel !== kernel) continue;
    const panel = $(`.tab-panel[data-panel="${p.target}"]`);
    if (!panel) continue;
    let at = $(`a[id="L-${p.line}"], a[id$="-L-${p.line}"]`, panel);  // a tab other than the page's own prefixes its ids (cuda-L-6)
    if (!at && p.target === "uops") at = uopsLine(panel, p.line);
    if (!at) continue;
    const pin = el("span", { class: "line-note", title: n.text, "data-note-id": String(n.id) }, `✎ ${n.text.length > 60 ? n.text.slice(0, 59) + "…" : n.text}`);
    at.after(pin);
    const gutter = $$("td.linenos pre > span", panel)[p.line - 1];
    if (gutter) { gutter.classList.add("noted"); gutter.title = n.text; }
  }
}

function uopsLine(panel, line) {
  // the UOp listing is plain text: split it into per-line anchors once (text nodes only, so nothing is parsed as HTML)
  const pre = $("pre.listing", panel);
  if (!pre) return null;
  if (!pre.dataset.split) {
    const lines = pre.textContent.split("\n");
    pre.replaceChildren(...lines.flatMap((ln, i) => [el("a", { id: `uops-L-${i + 1}` }), document.createTextNode(ln + (i < lines.length - 1 ? "\n" : ""))]));
    pre.dataset.split = "1";  // ids of their own: the page's source holds L-1...
  }
  return $(`a[id="uops-L-${line}"]`, pre);
}

async function refreshAnchored(trace) {
  const notes = await Notes.load(trace);
  $$(`[data-anchored-notes][data-trace="${trace}"]`).forEach((ul) => {
    const kernel = ul.dataset.kernel === undefined ? null : +ul.dataset.kernel, ref = ul.dataset.graphRef;
    const mine = notes.filter((n) => (n.anchor_kind === "node" && ref && parseNode(n.anchor) && parseNode(n.anchor).ref === ref) ||
                                     (n.anchor_kind === "line" && kernel !== null && parseLine(n.anchor) && parseLine(n.anchor).kernel === kernel));
    const render = (ops) => ul.replaceChildren(...mine.map((n) => noteItem(trace, n, describe(n, ops))));
    render([]);
    if (ref && mine.some((n) => n.anchor_kind === "node")) viewNodes(trace, ref).then((v) => render(v.ops));
    if (kernel !== null) markLines(kernel, notes);
  });
  $$(`.viewer[data-trace="${trace}"]`).forEach((v) => markGraph(v, notes));
}

function initNoteForm(form) {
  const trace = form.dataset.trace, kind = $("[name=anchor_kind]", form), err = $(".note-error", form);
  const sync = () => $$("[data-for]", form).forEach((x) => { x.hidden = x.dataset.for !== kind.value; });
  kind.addEventListener("change", sync); sync();
  const pick = async (viewer, g) => {  // clicking a node of the form's graph pins the note there
    if (!form.dataset.graphRef || viewer.dataset.loaded !== form.dataset.graphRef || !$("[name=node]", form)) return;
    const i = (await viewNodes(trace, form.dataset.graphRef)).ids.indexOf(g.id.slice(1));
    if (i < 0) return;
    kind.value = "node"; sync();
    $("[name=node]", form).value = String(i);
    $$("g.node.picked", viewer).forEach((x) => x.classList.remove("picked"));
    g.classList.add("picked");
  };
  $$(`.viewer[data-trace="${trace}"]`).forEach((v) => v.addEventListener("click", (e) => {
    const g = e.target.closest && e.target.closest("g.node");
    if (g && !g.classList.contains("call")) pick(v, g);
  }));
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    err.textContent = "";
    const text = $("[name=text]", form).value.trim();
    let anchor = form.dataset.stepAnchor;
    if (kind.value === "node") anchor = `${form.dataset.graphRef}#${$("[name=node]", form).value}`;
    if (kind.value === "line") anchor = `${form.dataset.kernel}:${$("[name=target]", form).value}:${$("[name=line]", form).value}`;
    if (!text) { err.textContent = "write the note first"; return; }
    if (kind.value === "node" && !$("[name=node]", form).value) { err.textContent = "click a node in the graph (or type its number)"; return; }
    if (kind.value === "line" && !$("[name=line]", form).value) { err.textContent = "give the line number"; return; }
    try {
      const note = await api(`/api/traces/${trace}/annotations`, { method: "POST", body: JSON.stringify({ anchor_kind: kind.value, anchor, text }) });
      $("[name=text]", form).value = "";
      if (note.anchor_kind === "step") {
        const list = $(`[data-note-list][data-trace="${trace}"]`);
        if (list) list.append(noteItem(trace, note));
      }
      await Notes.add(trace, note);
    } catch (e2) { err.textContent = e2.message; }
  });
}

function noteLink(trace, n) {
  const base = `/t/${trace}`;
  if (n.anchor_kind === "step") return `${base}/tour?step=${encodeURIComponent(n.anchor)}`;
  if (n.anchor_kind === "line") { const p = parseLine(n.anchor); return p ? `${base}/k/${p.kernel}?code=${p.target}` : base; }
  const p = parseNode(n.anchor), k = p && /^ast\/(\d+)$/.exec(p.ref);
  if (k) return `${base}/k/${k[1]}`;
  return p && p.ref === "tensor" ? `${base}/graph/tensor` : base;
}

async function initTraceNotes() {
  const box = $("[data-trace-notes]");
  if (!box) return;
  const trace = box.dataset.trace, notes = await Notes.load(trace);
  if (!notes.length) return;
  $("[data-trace-notes-count]", box).textContent = String(notes.length);
  $("ul", box).replaceChildren(...notes.map((n) => {
    const li = noteItem(trace, n), where = el("a", { class: "note-where", href: noteLink(trace, n) },
      n.anchor_kind === "step" ? `step ${n.anchor}` : n.anchor_kind === "node" ? `node ${n.anchor}` : `line ${n.anchor}`);
    li.insertBefore(where, li.children[1]);
    return li;
  }));
  box.dataset.trace = trace;
  box.hidden = false;
}

function notesIn(root) {
  $$("[data-note-form]", root).forEach(initNoteForm);
  const traces = new Set($$("[data-anchored-notes]", root).map((x) => x.dataset.trace));
  $$(".viewer[data-trace]", root).forEach((v) => {
    v.addEventListener("graph-loaded", () => Notes.load(v.dataset.trace).then((notes) => markGraph(v, notes)));
    if ($("[data-anchored-notes]") || $("[data-note-form]")) traces.add(v.dataset.trace);
  });
  traces.forEach((t) => refreshAnchored(t));
}

export function initNotes() {
  document.addEventListener("click", onDelete);
  notesIn(document);
  initTraceNotes();
  document.addEventListener("page-swapped", (e) => {  // a page put in place (in_place.js): its notes as they are now
    Notes.byTrace.clear();
    e.detail.parts.forEach(notesIn);
    initTraceNotes();
  });
}
