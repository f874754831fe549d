/* What the pages' modules share: query and build the DOM, escape text for HTML, keep state in the URL, fetch JSON (fetchJSON: a GET;
   api: any method, a JSON body, null for a 204). */
export const $ = (sel, root = document) => root.querySelector(sel);
export const $$ = (sel, root = document) => Array.from(root.querySelectorAll(sel));
export const esc = (s) => String(s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);

export function el(tag, attrs = {}, text = null) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text !== null) e.textContent = text;
  return e;
}

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

export async function api(url, opts = {}) {
  const r = await fetch(url, { headers: { Accept: "application/json", "Content-Type": "application/json" }, ...opts });
  if (r.status === 204) return null;
  let body = null;
  try { body = await r.json(); } catch (e) { /* not JSON */ }
  if (!r.ok) throw new Error((body && body.detail) || `${r.status} ${r.statusText}`);
  return body;
}
