/* Live progress of a running trace (templates/progress.html): its stages from the event stream (else polled), the live panels. */
import { $, esc, fetchJSON } from "./dom.js";

export function initProgress(root = document) {
  const box = $("#progress", root);
  if (!box || !["queued", "running"].includes(box.dataset.status)) return;
  const trace = box.dataset.trace;
  const setStage = (s) => {
    const li = $(`li[data-stage="${s.stage}"]`, box);
    if (!li) return;
    li.className = s.status;
    li.firstElementChild.innerHTML = s.status === "running" ? '<span class="spinner"></span>' : `<span class="dot ${esc(s.status)}"></span>`;
    $(".detail", li).textContent = s.detail || s.status;
  };
  const finish = (d) => {
    if (d.status === "error" && d.error && !$("#job-error").textContent.includes(d.error)) {
      $("#job-status").textContent = "error"; $("#job-status").className = "badge err";
      const e = $("#job-error"); e.hidden = false; e.innerHTML = `<b>The trace failed:</b> ${esc(d.error)}`;
      return;
    }
    window.location.reload();
  };
  const live = $("#live");
  let refreshing = null, again = false;  // at most one refresh of the live panels in flight; a report meanwhile asks for one more
  const refresh = async () => {
    if (!live) return;
    if (refreshing) { again = true; return; }
    refreshing = (async () => {
      try { const r = await fetch(live.dataset.live, { cache: "no-store" }); if (r.ok) live.innerHTML = await r.text(); } catch (e) { /* the next report */ }
    })();
    await refreshing;
    refreshing = null;
    if (again) { again = false; setTimeout(refresh, 300); }
  };
  if (window.EventSource) {
    const es = new EventSource(`/api/traces/${trace}/events`);
    es.addEventListener("partial", refresh);
    es.addEventListener("snapshot", (e) => { const d = JSON.parse(e.data); (d.stages || []).forEach(setStage); $("#job-status").textContent = d.status; });
    es.addEventListener("stage", (e) => setStage(JSON.parse(e.data)));
    es.addEventListener("status", (e) => { $("#job-status").textContent = JSON.parse(e.data).status; });
    es.addEventListener("done", (e) => { es.close(); finish(JSON.parse(e.data)); });
    es.onerror = () => { es.close(); setTimeout(poll, 1000); };
  } else poll();
  async function poll() {
    try {
      const d = await fetchJSON(`/api/traces/${trace}/status`);
      (d.stages || []).forEach(setStage);
      if (["done", "error", "interrupted"].includes(d.status)) return finish(d);
    } catch (e) { /* try again */ }
    setTimeout(poll, 1000);
  }
}
