/* The kernel page's parts computed on first view (templates/kernel.html): its record on another target, its analysis, its compile facts. */
import { $ } from "./dom.js";
import { follow, swapIn } from "./pending.js";
import { initLineMaps } from "./line_mapped.js";

/* ***** its record on another target: follow the job, then put the page in place ***** */

export function initPendingTarget(root = document) {
  const box = $("#pending-target", root);
  if (!box || box.classList.contains("err")) return;
  follow(box.dataset.poll, {
    done: () => swapIn("kernel-body", ["nav.ribbon"]),
    detail: (text) => { $("[data-pending-detail]", box).textContent = text; },
    failed: (text) => { box.className = "alert err"; box.textContent = text; },
  });
}

/* ***** a record's analysis computed on first view: follow the job, then put the live values, spec checks and line map in place ***** */

export function initPendingAnalysis(root = document) {
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

export function initPendingFacts(root = document) {
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
