/* SASS beside its source (templates/sass.html): a line, an instruction or a UOp clicked lights up the others; the SASS computed on first
   view is followed, then put in place. */
import { $, $$ } from "./dom.js";
import { follow, swapIn } from "./pending.js";

export function initSass(root = document) {
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
