/* A measurement of two stored traces run as a background job and polled for progress (explorer.web.routes.diff): the interleaved
   re-timing (the ratio with its interval and clock) or the outputs compared. The diff page has both; a tour's A-against-B step the
   timing (data-auto: measured on first view where it was not yet, as the diff page does). */
import { $, $$, esc, fetchJSON } from "./dom.js";
import { clockBadge } from "./clock_badge.js";

const fmtS = (s) => (s == null ? "–" : s < 1e-3 ? `${(s * 1e6).toFixed(1)} µs` : s < 1 ? `${(s * 1e3).toFixed(3)} ms` : `${s.toFixed(2)} s`);
const fmtX = (x) => (x == null ? "–" : `${x >= 100 ? x.toFixed(0) : x >= 10 ? x.toFixed(1) : x >= 0.1 ? x.toFixed(2) : x.toPrecision(2)}×`);  // a ratio
const fmtG = (x) => (x == null ? "–" : Math.abs(x) >= 1e-3 && Math.abs(x) < 1e4 ? x.toPrecision(4) : x.toExponential(2));

function resultHTML(kind, r) {
  if (!r.compared) return `<span class="muted">${esc(r.reason)}</span>`;
  const where = r.ran_on ? ` by ${esc(r.ran_on.by || `${r.ran_on.worker}@${r.ran_on.host}`)}` : "";  // NAME@HOST: a queue worker, else PID@HOST
  const when = r.measured ? ` <span class="muted small" data-ran-on>· measured ${esc(new Date(r.measured * 1000).toLocaleString())}${where}, tinygrad ${esc(r.tinygrad || "?")}</span>` : "";
  if (kind === "timing") {
    const q = r.ratio, badge = clockBadge(r.method);
    const span = r.span_verdict ? `<div class="small" data-span-verdict>the schedule replayed back to back (its span, first start to last end): <b>${esc(r.span_verdict)}</b>` +
      ` · A ${fmtS(r.a_span_s.median)}, B ${fmtS(r.b_span_s.median)}</div>` : "";
    return `<div><span class="ratio" data-time-verdict>${esc(r.verdict || "not compared")}</span> ${badge} <span class="muted">the kernels each alone, summed: ` +
      `median B/A ${fmtX(q.median)} of ${q.n} interleaved repeats</span></div>` + span +
      `<div class="small">spread of B/A: IQR ${fmtX(q.q1)}–${fmtX(q.q3)}, range ${fmtX(q.min)}–${fmtX(q.max)} · ` +
      `A ${fmtS(r.a_total_s.median)}, B ${fmtS(r.b_total_s.median)} on ${esc(r.device)} (${esc(r.compiler)})` +
      `${r.fallback ? ` · <span class="badge warn">${esc(r.fallback)}</span>` : ""}${r.notice ? ` · <span class="badge warn">${esc(r.notice)}</span>` : ""}` +
      ` · ${r.warmup} warmup + ${r.repeats} repeats` +
      `${r.tinygrads ? ` · A on tinygrad ${esc(r.tinygrads[0])}, B on ${esc(r.tinygrads[1])}, each in its own worker, in turns` : ""}${when}</div>`;
  }
  return `<div><span class="ratio">max |A−B| = ${fmtG(r.max_abs)}</span> <span class="muted">(${fmtG(r.max_rel)} of the largest |output| ${fmtG(r.scale)})</span></div>` +
    `<div class="small">mean |A−B| ${fmtG(r.mean_abs)} · largest at [${(r.argmax || []).join(", ")}] of shape [${(r.shape || []).join(", ")}]${when}</div>`;
}

class Measure {
  constructor(el) {
    this.el = el; this.kind = el.dataset.kind; this.api = el.dataset.api; this.body = $(".measure-body", el); this.button = $("[data-start]", el);
    this.button.addEventListener("click", () => this.start());
    const state = JSON.parse(el.dataset.state || "{}");
    this.render(state);
    if (["queued", "running"].includes(state.status)) this.poll();
    else if ("auto" in el.dataset && state.status === "none") this.start();
  }

  render(s) {
    this.el.dataset.status = s.status;
    this.button.disabled = ["queued", "running"].includes(s.status);
    if (s.status === "none") this.body.innerHTML = '<span class="muted">Not measured yet.</span>';
    else if (s.status === "queued" || s.status === "running")
      this.body.innerHTML = `<span class="spinner"></span> ${esc(s.detail || s.status)} <span class="muted small">${s.elapsed_s != null ? `${s.elapsed_s}s` : ""}</span>`;
    else if (s.status === "error") this.body.innerHTML = `<span class="source-error" style="padding:0">${esc(s.error)}</span>`;
    else this.body.innerHTML = resultHTML(this.kind, s.result);
    const slot = $("#diff-verdict [data-verdict-time]");  // the verdict line waits for the timing
    if (slot && this.kind === "timing" && s.status === "done") {
      slot.className = "";
      slot.textContent = s.result && s.result.verdict ? `, ${s.result.verdict}` : "";
    } else if (slot && this.kind === "timing" && s.status === "error") { slot.textContent = ", not timed"; }
  }

  async start() {
    const reps = $("[data-repeats]", this.el);
    const q = reps ? `?repeats=${encodeURIComponent(reps.value)}` : "";
    try {
      const r = await fetch(this.api + q, { method: "POST", headers: { Accept: "application/json" } });
      const body = await r.json();
      if (!r.ok) throw new Error(body.detail || r.status);
      this.render(body); this.poll();
    } catch (err) { this.render({ status: "error", error: err.message }); }
  }

  async poll() {
    for (;;) {
      await new Promise((r) => setTimeout(r, 700));
      let s;
      try { s = await fetchJSON(this.api); } catch (err) { this.render({ status: "error", error: err.message }); return; }
      this.render(s);
      if (!["queued", "running"].includes(s.status)) return;
    }
  }
}

export function initMeasures(root = document) { $$(".measure", root).forEach((el) => new Measure(el)); }
