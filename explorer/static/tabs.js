/* Tabs (?code=...) and their copy button: the kernel page's source, a tour step's views. */
import { $, $$, setQuery } from "./dom.js";

export function initTabs(root = document) {
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
