// The roofline page's "measure this device's peaks" button: run the probe, then show the roofline it makes possible.
document.getElementById("probe")?.addEventListener("click", async (e) => {
  const status = document.getElementById("probe-status");
  e.target.disabled = true;
  status.textContent = "measuring…";
  const r = await fetch(e.target.dataset.url, {method: "POST"});
  if (r.ok) { location.reload(); return; }
  status.textContent = (await r.json()).detail;
  e.target.disabled = false;
});
