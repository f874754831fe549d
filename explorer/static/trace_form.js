/* The trace form (templates/home.html): a preset fills the shape, Winograd options only where they apply. */
import { $, $$ } from "./dom.js";

export function initForm(root = document) {
  const form = $("#trace-form", root);
  if (!form) return;
  const preset = $("#preset", form), shape = ["batch", "cin", "cout", "height", "width", "kernel", "stride", "padding", "groups", "dtype"];
  const val = (name) => { const r = $(`input[name="${name}"]:checked`, form); return r ? r.value : null; };
  preset.addEventListener("change", () => {
    const opt = preset.selectedOptions[0];
    if (!opt.dataset.spec) return;
    const spec = JSON.parse(opt.dataset.spec);
    for (const f of shape) {
      if (f === "dtype") { const r = $(`input[name="dtype"][value="${spec.dtype}"]`, form); if (r) r.checked = true; continue; }
      form.elements[f].value = spec[f] === null ? "" : spec[f];
    }
  });
  for (const f of shape) $$(`[name="${f}"]`, form).forEach((el) => el.addEventListener("input", () => { preset.value = "custom"; }));
  const sync = () => {
    const wino = val("algo") === "winograd", explorer = wino && val("wino_impl") === "explorer";
    $$('[data-seg="wino_impl"] input', form).forEach((i) => { i.disabled = !wino; });
    for (const name of ["tile", "staging", "consts"]) $$(`[data-seg="${name}"] input`, form).forEach((i) => { i.disabled = !explorer; });
    if (!wino) { const b = $('input[name="wino_impl"][value="builtin"]', form); if (b) b.checked = true; }
    if (!explorer) for (const [n, v] of [["tile", "F(4,3)"], ["staging", "staged"], ["consts", "symbolic"]]) { const r = $(`input[name="${n}"][value="${v}"]`, form); if (r) r.checked = true; }
    form.elements.beam.disabled = val("opt") !== "beam";
  };
  form.addEventListener("change", sync); sync();
  form.addEventListener("submit", () => {
    // disabled radios are not submitted: the server falls back to their defaults, which sync() already selected
    $("#submit", form).disabled = true; $("#submit", form).textContent = "Starting…";
  });
}
