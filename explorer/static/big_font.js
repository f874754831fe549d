/* Large-font mode before the page paints: <html class="big"> from ?big=1, else as remembered in localStorage. A classic script in
   <head>, not a module: a module runs only once the page is parsed. Its toggle is tour.js's. */
"use strict";

(function () {
  const BIG_KEY = "ke-big";
  const asked = new URLSearchParams(window.location.search).get("big");
  let stored = null;
  try { stored = window.localStorage.getItem(BIG_KEY); } catch (e) { /* storage blocked */ }
  if (asked === "1" || (asked !== "0" && stored === "1")) document.documentElement.classList.add("big");
  if (asked === "1" || asked === "0") { try { window.localStorage.setItem(BIG_KEY, asked); } catch (e) { /* storage blocked */ } }
})();
