/* Schedule it yourself (templates/_partials/opts_panel.html): opts as chips, applied in a worker (POST), the result beside the original. */
import { $, $$ } from "./dom.js";

export function initOpts(root = document) {
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
