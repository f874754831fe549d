/* How a time was measured, as a badge: explorer/clocks.py's METHODS (base.html's #clock-methods); a record without a method is tinygrad's
   timer. */
import { esc } from "./dom.js";

const CLOCKS = (() => { try { return JSON.parse(document.getElementById("clock-methods").textContent); } catch (e) { return {}; } })();
export function clockBadge(method) {
  const name = method || "events", m = CLOCKS[name] || { label: name, summary: "" };
  return `<span class="badge clock" data-clock="${esc(name)}" title="${esc(m.summary)}">${esc(m.label)}</span>`;
}
