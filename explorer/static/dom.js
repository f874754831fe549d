/* What every page's script uses: query the DOM, escape text for HTML, keep state in the URL, fetch JSON. */
export const $ = (sel, root = document) => root.querySelector(sel);
export const $$ = (sel, root = document) => Array.from(root.querySelectorAll(sel));
export const esc = (s) => String(s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);

export function setQuery(params, push = false) {
  const url = new URL(window.location.href);
  for (const [k, v] of Object.entries(params)) { if (v === null || v === undefined) url.searchParams.delete(k); else url.searchParams.set(k, v); }
  (push ? history.pushState : history.replaceState).call(history, null, "", url);
}

export async function fetchJSON(url) {
  const r = await fetch(url, { headers: { Accept: "application/json" } });
  let body = null;
  try { body = await r.json(); } catch (e) { /* not JSON */ }
  if (!r.ok) throw new Error((body && body.detail) || `${r.status} ${r.statusText}`);
  return body;
}
