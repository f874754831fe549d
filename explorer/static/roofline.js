// The roofline page's "measure this device's peaks" button: start the probe (a job: POST answers at once), poll its status and show
// what it measures, then reload to show the roofline it makes possible.
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

document.getElementById("probe")?.addEventListener("click", async (e) => {
  const button = e.target, status = document.getElementById("probe-status");
  button.disabled = true;
  status.textContent = "starting the probe…";
  try {
    let r = await fetch(button.dataset.url, {method: "POST"});
    let probe = await r.json();
    while (r.ok && (probe.status === "queued" || probe.status === "running")) {
      status.textContent = `${probe.detail || probe.status}… (${Math.round(probe.elapsed_s)} s)`;
      await sleep(1000);
      r = await fetch(probe.url);
      probe = await r.json();
    }
    if (r.ok && probe.status === "done") { location.reload(); return; }
    status.textContent = r.ok ? `the probe failed: ${probe.error}` : probe.detail;
  } catch (err) {
    status.textContent = `the probe could not be followed: ${err}`;
  }
  button.disabled = false;
});
