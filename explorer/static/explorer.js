/* Kernel Explorer's pages, every one: the entry module (base.html) that brings to life what the page has. Each widget's code is the
   module of its name: viewer.js (graph viewers), stepper.js (the pass stepper), tabs.js, progress.js (a running trace), trace_form.js,
   kernel.js (a kernel page's parts computed on first view), opts_panel.js, line_mapped.js, sass.js, trace_actions.js, tour.js, notes.js, measure.js (a
   diff's measurements), live_class.js (a live class), in_place.js (a tour step put in place of another).
   Plain ES modules, no build step. State that matters lives in the URL (?code=, ?pass=&at=). */
import { $$ } from "./dom.js";
import { Viewer, viewers } from "./viewer.js";
import { Stepper, initPassList } from "./stepper.js";
import { initTabs } from "./tabs.js";
import { initProgress } from "./progress.js";
import { initForm } from "./trace_form.js";
import { initPendingTarget, initPendingAnalysis, initPendingFacts } from "./kernel.js";
import { initOpts } from "./opts_panel.js";
import { initLineMaps } from "./line_mapped.js";
import { initSass } from "./sass.js";
import { initCompareMenus } from "./trace_actions.js";
import { initTour } from "./tour.js";
import { initNotes } from "./notes.js";
import { initLiveClass } from "./live_class.js";
import { initMeasures } from "./measure.js";

function boot(root = document) {  // everything a page (or a part of it put in place later) brings to life
  const fresh = [];
  $$(".viewer", root).forEach((el) => { viewers.set(el.id, new Viewer(el)); fresh.push(el.id); });
  initPassList(root);
  const stepped = new Set();
  $$("[data-stepper]", root).forEach((bar) => {
    const v = viewers.get("pass-graph");
    if (v) { new Stepper(bar, v); stepped.add("pass-graph"); }
  });
  fresh.forEach((id) => { const v = viewers.get(id); if (!stepped.has(id)) v.show(v.el.dataset.ref); });
  initTabs(root); initProgress(root); initForm(root); initPendingTarget(root); initPendingAnalysis(root); initPendingFacts(root); initOpts(root);
  initLineMaps(root); initSass(root); initMeasures(root);
}

// a module runs once the page is parsed: no DOMContentLoaded to wait for. The tours' and notes' first, as when tour.js ran from <head>
initTour(); initNotes();
window.explorerViewers = viewers;  // the page's graph viewers by element id: the console's (and the browser tests') way in
boot(document);
initCompareMenus();
initLiveClass();
document.addEventListener("swapped-in", (e) => boot(e.target));  // a part pending.js's swapIn put in place
document.addEventListener("page-swapped", (e) => e.detail.parts.forEach((part) => boot(part)));  // a page in_place.js put in place
