/* Teaching tours on every page: large-font mode (?big=1, remembered in localStorage; big_font.js sets it before the page paints), the
   "?" glossary panel, keyboard steps on tour pages, the progress of a built-in tour's two traces. The notes are notes.js's. */
import { $, $$, el, api } from "./dom.js";

const typing = (el) => !!(el && el.closest && el.closest("input, textarea, select, [contenteditable=''], [contenteditable=true]"));

/* ***** large-font mode: <html class="big">, in the URL while on ***** */

function setBig(on) {
  document.documentElement.classList.toggle("big", on);
  try { window.localStorage.setItem("ke-big", on ? "1" : "0"); } catch (e) { /* storage blocked */ }
  const url = new URL(window.location.href);
  if (on) url.searchParams.set("big", "1"); else url.searchParams.delete("big");
  history.replaceState(history.state, "", url);
  $$("[data-big-toggle]").forEach((b) => b.setAttribute("aria-pressed", String(on)));
  bigLinks(on);
  window.dispatchEvent(new Event("resize"));  // graph viewers refit
}

function bigLinks(on = document.documentElement.classList.contains("big")) {
  $$("a[href]").forEach((a) => {  // in-app links keep the mode, so a shared link opens the same way
    if (!a.getAttribute("href").startsWith("/") || a.getAttribute("href").startsWith("/api/") || a.getAttribute("href").startsWith("/static/")) return;
    const u = new URL(a.href);
    if (on) u.searchParams.set("big", "1"); else u.searchParams.delete("big");
    a.setAttribute("href", u.pathname + u.search + u.hash);
  });
}

/* ***** glossary panel ***** */

function toggleGlossary(open) {
  const panel = $("#glossary-panel");
  if (!panel) return;
  const show = open === undefined ? panel.hidden : open;
  panel.hidden = !show;
  if (show) $(".glossary-close", panel).focus();
}

/* ***** tour keyboard: → / j next, ← / k previous ***** */

function centerIn(box, item) {  // scroll box (not the page) so that item is in its middle
  if (!box || !item) return;
  box.scrollTop += item.getBoundingClientRect().top - box.getBoundingClientRect().top - (box.clientHeight - item.offsetHeight) / 2;
}

function placeTour() {  // a tour step's lists scrolled to what its text discusses (on load, and once a step is put in place)
  if (!$("[data-tour]")) return;
  centerIn($(".tour-steps ol"), $(".tour-steps a.current"));  // the list only: the page stays at its top
  centerIn($("#tour-uops"), $("#tour-uops .uop-line.focus"));  // the uop the step's text discusses, in the middle of its listing
  const src = $("#tour-source[data-focus-line]");  // ...and the source line it discusses
  if (src) {
    const line = $(`[id="S-${src.dataset.focusLine}"]`, src);
    if (line) { line.classList.add("tour-focus"); centerIn(src, line); }
  }
}

function initTourKeys() {
  placeTour();
  document.addEventListener("keydown", (e) => {
    const tour = $("[data-tour]");  // read at each key: a step put in place (in_place.js) brings its own
    if (!tour || typing(e.target) || e.metaKey || e.ctrlKey || e.altKey || e.defaultPrevented) return;
    const dir = { ArrowRight: "next", j: "next", ArrowLeft: "prev", k: "prev" }[e.key];
    const url = dir && tour.dataset[dir];
    if (!url) return;
    e.preventDefault();
    window.location.href = url;
  });
}

/* ***** a built-in tour's two traces: progress, then the tour ***** */

function initTourProgress() {
  const box = $("[data-tour-progress]");
  if (!box) return;
  const jobs = $$("[data-job]", box);
  const pending = () => jobs.filter((j) => ["queued", "running"].includes(j.dataset.status));
  async function poll() {
    for (const job of pending()) {
      try {
        const d = await api(`/api/traces/${job.dataset.job}/status`);
        job.dataset.status = d.status;
        const badge = $("[data-job-status]", job);
        badge.textContent = d.status; badge.className = `badge ${d.status === "error" ? "err" : d.status === "done" ? "ok" : "info"}`;
        for (const s of d.stages || []) {
          const li = $(`li[data-stage="${s.stage}"]`, job);
          if (!li) continue;
          li.className = s.status;
          li.firstElementChild.replaceChildren(s.status === "running" ? el("span", { class: "spinner" }) : el("span", { class: `dot ${s.status}` }));
          $(".detail", li).textContent = s.detail || s.status;
        }
        if (d.status === "error") {
          const err = $("[data-job-error]", job);
          err.hidden = false; err.replaceChildren(el("b", {}, "The trace failed: "), document.createTextNode(d.error || "unknown error"));
        }
      } catch (e) { /* try again */ }
    }
    if (jobs.some((j) => j.dataset.status === "error")) return;
    if (!pending().length) { window.location.reload(); return; }
    setTimeout(poll, 1000);
  }
  if (pending().length) setTimeout(poll, 500);
}

/* ***** boot ***** */

export function initTour() {
  $$("[data-big-toggle]").forEach((b) => {
    b.setAttribute("aria-pressed", String(document.documentElement.classList.contains("big")));
    b.addEventListener("click", () => setBig(!document.documentElement.classList.contains("big")));
  });
  if (document.documentElement.classList.contains("big")) setBig(true);  // links carry the mode
  $$("[data-glossary]").forEach((a) => a.addEventListener("click", (e) => { if ($("#glossary-panel")) { e.preventDefault(); toggleGlossary(); } }));
  $$(".glossary-close").forEach((b) => b.addEventListener("click", () => toggleGlossary(false)));
  document.addEventListener("keydown", (e) => {
    if (typing(e.target) || e.metaKey || e.ctrlKey || e.altKey) return;
    if (e.key === "?") { e.preventDefault(); toggleGlossary(); }
    else if (e.key === "Escape") toggleGlossary(false);
  });
  initTourKeys(); initTourProgress();
  document.addEventListener("page-swapped", () => { placeTour(); bigLinks(); });  // a step put in place (in_place.js)
}
