// Pegasus dashboard: token exchange, action forms, live updates. No dependencies.
(function () {
  "use strict";
  var m = location.hash.match(/token=([0-9a-f]+)/);
  if (m) {
    fetch("/api/session", { method: "POST", headers: { Authorization: "Bearer " + m[1] } })
      .then(function (r) {
        history.replaceState(null, "", location.pathname);
        if (r.ok) { location.reload(); } else { document.body.textContent = "The token was refused: get a new URL with `pegasusctl dashboard`."; }
      });
    return;
  }
  if (document.getElementById("login")) { return; }
  function flash(msg, bad) {
    var f = document.getElementById("flash");
    if (f) { f.textContent = msg; f.className = bad ? "flash bad" : "flash"; }
  }
  async function refresh() {
    var r = await fetch(location.pathname, { credentials: "same-origin" });
    if (!r.ok) { return; }
    var doc = new DOMParser().parseFromString(await r.text(), "text/html");
    document.querySelectorAll("[data-live]").forEach(function (el) {
      var fresh = doc.getElementById(el.id);
      if (fresh) { el.replaceWith(fresh); }
    });
  }
  var timer = null;
  function soon() { clearTimeout(timer); timer = setTimeout(function () { refresh().then(function () {
    var live = document.getElementById("live"); if (live && !busy) { live.textContent = ""; } }); }, 250); }
  var busy = false;
  document.addEventListener("submit", async function (e) {
    var f = e.target;
    if (!f.dataset.post) { return; }
    e.preventDefault();
    var body = {}, any = false;
    new FormData(f).forEach(function (v, k) { if (v !== "") { body[k] = v; any = true; } });
    var init = { method: "POST", credentials: "same-origin" };
    if (any) { init.headers = { "Content-Type": "application/json" }; init.body = JSON.stringify(body); }
    var r = await fetch(f.dataset.post, init);
    var j = await r.json().catch(function () { return {}; });
    flash(r.ok ? (j.message || "done") : (j.error || r.statusText), !r.ok);
    if (r.ok) { f.reset(); soon(); }
  });
  var project = document.body.dataset.project;
  var es = new EventSource("/api/events" + (project ? "?project=" + encodeURIComponent(project) : ""));
  es.addEventListener("text_delta", function (ev) {
    var d = JSON.parse(ev.data), live = document.getElementById("live");
    if (live) { busy = true; live.textContent += d.text; }
  });
  ["task", "task_stage", "worker_state", "crash", "notify"].forEach(function (k) {
    es.addEventListener(k, function (ev) {
      var d = JSON.parse(ev.data);
      if (k === "task" && d.state && d.state !== "running") { busy = false; }
      if (k === "crash") { flash("crash in " + d.project + ": " + d.reason, true); }
      soon();
    });
  });
  es.addEventListener("resync", function () { es.close(); setTimeout(function () { location.reload(); }, 500); });
})();
