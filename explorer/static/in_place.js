/* A page put in place of this one without a navigation: a live class's students follow a tour step this way. One fetch of the step's
   HTML (the server's response cache keeps it, so a class costs one render) replaces this page's parts, where a navigation would have
   every tab parse its styles and modules again and reopen its event stream: on a busy machine that is most of a second per tab.
   Only a tour step is put in place of a tour step (the same template, so the same styles and scripts); anything else navigates. */
import { $, $$ } from "./dom.js";

const KEPT = "header.topbar, #glossary-panel, script, .class-bar, .class-poll";  // the body's own parts, not the page's
const pageParts = (doc) => [...doc.body.children].filter((e) => !e.matches(KEPT));
const assets = (doc) => $$("link[rel=stylesheet], script[src]", doc).map((e) => e.getAttribute("href") || e.getAttribute("src")).join(" ");
const isTourStep = (doc) => !!$("[data-tour]", doc);

let shown = null;  // the address whose page this document shows, once one was put in place

function onHistory() {  // Back or Forward to another address than the page shown (not a #fragment of it): that page, loaded
  if (location.pathname + location.search !== shown) location.reload();
}

async function fetched(url) {  // the page at url as a document, or null where it is not a page to put in place
  try {
    const r = await fetch(url, { headers: { Accept: "text/html" } });
    if (!r.ok || r.redirected || !(r.headers.get("content-type") || "").startsWith("text/html")) return null;
    return new DOMParser().parseFromString(await r.text(), "text/html");
  } catch (e) { return null; }
}

/* Bring this tab to url: in place when both are tour steps, else by a navigation. Resolves true once put in place (the
   "page-swapped" event, whose detail names the new parts, has been dispatched), false when it navigates. stale(): the tab has
   since been sent elsewhere, so the page that came is dropped. */
export async function goTo(url, stale = () => false) {
  const doc = isTourStep(document) ? await fetched(url) : null;
  if (stale()) return false;
  if (!doc || !isTourStep(doc) || assets(doc) !== assets(document)) { location.assign(url); return false; }
  const old = pageParts(document), parts = pageParts(doc), at = old[0] || $("body > script");
  parts.forEach((p) => document.body.insertBefore(document.adoptNode(p), at));
  old.forEach((p) => p.remove());
  document.title = doc.title;
  const env = $("header.topbar .env"), newEnv = $("header.topbar .env", doc);
  if (env && newEnv) env.replaceWith(document.adoptNode(newEnv));
  history.pushState(null, "", url);
  if (shown === null) window.addEventListener("popstate", onHistory);
  shown = location.pathname + location.search;
  window.scrollTo(0, 0);
  document.dispatchEvent(new CustomEvent("page-swapped", { detail: { parts } }));
  return true;
}
