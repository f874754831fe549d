/* Line maps (templates/_partials/line_mapped.html): a source line and the linear UOps that made it, tied by colour (as Compiler Explorer
   ties source and asm). */
import { $, $$, esc } from "./dom.js";
import { viewers } from "./viewer.js";

const LINE_COLOURS = 8;

// scroll a pane (not the page) so that el sits in its middle
function centreWithin(pane, el) {
  const p = pane.getBoundingClientRect(), e = el.getBoundingClientRect();
  pane.scrollTop += e.top - p.top - (pane.clientHeight - e.height) / 2;
}

export function initLineMaps(root = document) {
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
    const pin = (key) => {  // "l12": source line 12, "u3": the fourth linear UOp, null: none
      const line = key && key[0] === "l" ? +key.slice(1) : null, uop = key && key[0] === "u" ? +key.slice(1) : null;
      pinned = key;
      box.classList.toggle("lm-pinned", pinned !== null);
      if (pinned) show(line, uop, true); else light([], [], false);
      if (pinned && line !== null) origins(line); else $(".lm-origins", box).hidden = true;
    };
    box.addEventListener("click", (e) => {
      const line = fromLine(e), uop = fromUop(e);
      if (line === null && uop === null) return;
      const key = line !== null ? `l${line}` : `u${uop}`;
      pin(pinned === key ? null : key);
      box.dispatchEvent(new CustomEvent("line-pinned", { detail: pinned }));  // a live class's presenter tells its students
    });
    box.addEventListener("pin-line", (e) => { if (e.detail !== pinned && (e.detail === null || /^[lu]\d+$/.test(e.detail))) pin(e.detail); });
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
