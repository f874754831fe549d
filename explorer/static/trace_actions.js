/* A trace page's actions (templates/_partials/trace_actions.html): the "compare with..." menu loads its picks on first open. */
import { $, $$ } from "./dom.js";

export function initCompareMenus() {
  $$("details.compare-menu[data-src]").forEach((menu) => menu.addEventListener("toggle", async () => {
    if (!menu.open || menu.dataset.loaded) return;
    menu.dataset.loaded = "1";
    const pop = $(".compare-pop", menu);
    try {
      const r = await fetch(menu.dataset.src, { headers: { Accept: "text/html" } });
      if (r.ok) pop.innerHTML = await r.text();
    } catch (e) { /* keep the plain link */ }
  }));
}
