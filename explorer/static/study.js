// The study page while its study runs: poll GET /api/studies/{id} and show the step; reload once it has ended (the page then has
// the results, drawn by the server).
(function () {
  const box = document.getElementById("study-progress");
  if (!box) return;
  const bar = box.querySelector("progress"), step = document.getElementById("study-step");
  const current = document.getElementById("study-current"), detail = document.getElementById("study-detail");
  async function poll() {
    try {
      const r = await fetch(box.dataset.api, {headers: {accept: "application/json"}});
      if (r.ok) {
        const s = await r.json();
        if (s.status !== "running") { location.reload(); return; }
        bar.max = s.steps; bar.value = s.step;
        step.textContent = `step ${s.step} of ${s.steps}`; current.textContent = s.current; detail.textContent = s.detail;
      }
    } catch (e) { detail.textContent = "(the server did not answer; trying again)"; }
    setTimeout(poll, 1000);
  }
  setTimeout(poll, 1000);
})();
// the form on /studies: start a study through the API and go to its page
(function () {
  const form = document.getElementById("study-form");
  if (!form) return;
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const f = new FormData(form), out = document.getElementById("study-error");
    const body = {kind: f.get("kind"), presets: f.getAll("presets"), repeats: Number(f.get("repeats")), warmup: Number(f.get("warmup")),
                  budget_s: Number(f.get("budget_s")), ci_width: f.get("ci_width") ? Number(f.get("ci_width")) : null};
    if (f.get("device")) body.device = f.get("device");
    if (f.get("tinygrad")) body.tinygrad = f.get("tinygrad");
    out.hidden = true;
    const r = await fetch("/api/studies", {method: "POST", headers: {"content-type": "application/json"}, body: JSON.stringify(body)});
    const s = await r.json().catch(() => ({detail: `HTTP ${r.status}`}));
    if (r.status === 202) { location.href = s.url; return; }
    out.textContent = s.detail || `HTTP ${r.status}`; out.hidden = false;
  });
})();
