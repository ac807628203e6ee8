// Pegasus dashboard: token exchange, action forms, approvals, live updates. No dependencies;
// every value from the server is put in the page as text (textContent), never as markup.
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
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) { e.className = cls; }
    if (text !== undefined) { e.textContent = text; }
    return e;
  }

  // Approvals: GET /api/approvals, an array of {id, project, task, tool, summary, asked_at, input}.
  // A pegasusd without the endpoint (404) shows no approvals at all.
  function ago(iso) {
    var s = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
    if (!isFinite(s)) { return iso; }
    if (s < 60) { return "just now"; }
    if (s < 3600) { return Math.floor(s / 60) + " min ago"; }
    if (s < 86400) { return Math.floor(s / 3600) + " h ago"; }
    return Math.floor(s / 86400) + " days ago";
  }
  function approvalCard(a, withProject) {
    var card = el("div", "card approval");
    card.dataset.id = a.id;
    var head = el("div", "row");
    head.appendChild(el("b", "", a.tool));
    var where = (withProject ? a.project + " · " : "") + "task " + a.task + " · asked " + ago(a.asked_at);
    head.appendChild(el("small", "", where));
    card.appendChild(head);
    // `summary` comes escaped from pegasusd (control, escape, bidi and zero-width characters
    // written out); the whole input is on the request's own page, escaped the same way.
    card.appendChild(el("pre", "", a.summary));
    var whole = el("a", "", "Whole input");
    whole.href = "/approvals/" + encodeURIComponent(a.id);
    var wp = el("p");
    wp.appendChild(whole);
    card.appendChild(wp);
    var row = el("div", "row");
    var yes = el("form", "inline");
    yes.dataset.post = "/api/approvals/" + encodeURIComponent(a.id) + "/approve";
    var yb = el("button", "primary", "Approve");
    yb.dataset.action = "approve";
    yes.appendChild(yb);
    var always = el("label", "muted");
    var box = el("input");
    box.type = "checkbox";
    box.name = "always";
    always.appendChild(box);
    always.appendChild(document.createTextNode(a.tool === "exec" ? " always allow this command" : " always allow " + a.tool));
    yes.appendChild(always);
    var no = el("form", "row grow");
    no.dataset.post = "/api/approvals/" + encodeURIComponent(a.id) + "/deny";
    var reason = el("input", "grow");
    reason.name = "reason";
    reason.placeholder = "why not (optional)";
    reason.setAttribute("aria-label", "reason to deny");
    var nb = el("button", "danger", "Deny");
    nb.dataset.action = "deny";
    no.appendChild(reason);
    no.appendChild(nb);
    row.appendChild(yes);
    row.appendChild(no);
    card.appendChild(row);
    return card;
  }
  function showApprovals(list) {
    var link = document.getElementById("approvals-link");
    var badge = document.getElementById("approvals-badge");
    if (list === null) {
      if (link) { link.hidden = true; }
      document.querySelectorAll("[data-approvals]").forEach(function (box) {
        box.textContent = "";
        box.appendChild(el("p", "muted", "This pegasusd has no approvals."));
      });
      return;
    }
    if (link) { link.hidden = false; }
    if (badge) { badge.textContent = String(list.length); badge.className = list.length ? "badge" : "badge zero"; }
    var per = {};
    list.forEach(function (a) { per[a.project] = (per[a.project] || 0) + 1; });
    var total = document.getElementById("approvals-total");
    if (total) { total.textContent = String(list.length); }
    document.querySelectorAll(".approvals-count").forEach(function (c) {
      var n = per[c.dataset.project] || 0;
      c.textContent = n ? String(n) : "none";
      c.className = n ? "approvals-count badge" : "approvals-count muted";
    });
    document.querySelectorAll("[data-approvals]").forEach(function (box) {
      var project = box.dataset.approvals;
      var mine = list.filter(function (a) { return !project || a.project === project; });
      box.textContent = "";
      mine.forEach(function (a) { box.appendChild(approvalCard(a, !project)); });
      if (!mine.length) { box.appendChild(el("p", "muted", "Nothing waits for your approval.")); }
      var section = box.closest("section");
      if (section) { section.hidden = !mine.length; }
    });
  }
  var approvalsWanted = true;
  async function loadApprovals() {
    if (!approvalsWanted) { return; }
    var r = await fetch("/api/approvals", { credentials: "same-origin" }).catch(function () { return null; });
    if (!r) { return; }
    if (r.status === 404) { approvalsWanted = false; showApprovals(null); return; }
    if (!r.ok) { return; }
    var list = await r.json().catch(function () { return null; });
    if (Array.isArray(list)) { showApprovals(list); }
  }

  async function refresh() {
    var r = await fetch(location.pathname, { credentials: "same-origin" });
    if (!r.ok) { return; }
    var doc = new DOMParser().parseFromString(await r.text(), "text/html");
    document.querySelectorAll("[data-live]").forEach(function (el) {
      var fresh = doc.getElementById(el.id);
      // Half-typed text (an answer, a reason) is not thrown away by an update.
      var typing = document.activeElement;
      if (typing && el.contains(typing) && typing.value) { return; }
      if (fresh) { el.replaceWith(fresh); }
    });
    await loadApprovals();
  }
  var timer = null;
  function soon() { clearTimeout(timer); timer = setTimeout(function () { refresh().then(function () {
    var live = document.getElementById("live"); if (live && !busy) { live.textContent = ""; } }); }, 250); }
  var busy = false;
  document.addEventListener("submit", async function (e) {
    var f = e.target;
    if (!f.dataset.post) { return; }
    e.preventDefault();
    if (f.dataset.confirm && !window.confirm(f.dataset.confirm)) { return; }
    var body = {}, any = false;
    Array.prototype.forEach.call(f.elements, function (i) {
      if (!i.name) { return; }
      if (i.type === "checkbox") { if (i.checked) { body[i.name] = true; any = true; } return; }
      if (i.value !== "") { body[i.name] = i.value; any = true; }
    });
    var init = { method: "POST", credentials: "same-origin", headers: {} };
    if (any) { init.headers["Content-Type"] = "application/json"; init.body = JSON.stringify(body); }
    // A message keeps its Idempotency-Key until it is answered: sent again after a lost
    // answer, the same text never runs twice (a changed text gets a new key).
    if (f.dataset.idempotent !== undefined) {
      var text = JSON.stringify(body);
      if (f.dataset.keyFor !== text) {
        var a = new Uint8Array(12); crypto.getRandomValues(a);
        f.dataset.key = "dash-" + Array.prototype.map.call(a, function (x) { return ("0" + x.toString(16)).slice(-2); }).join("");
        f.dataset.keyFor = text;
      }
      init.headers["Idempotency-Key"] = f.dataset.key;
    }
    var buttons = f.querySelectorAll("button");
    buttons.forEach(function (b) { b.disabled = true; });
    var r = await fetch(f.dataset.post, init).catch(function () { return null; });
    buttons.forEach(function (b) { b.disabled = false; });
    if (!r) { flash("pegasusd did not answer", true); return; }
    var j = await r.json().catch(function () { return {}; });
    flash(r.ok ? (j.message || "done") : (j.error || r.statusText), !r.ok);
    if (r.ok) { f.reset(); delete f.dataset.key; delete f.dataset.keyFor; soon(); }
  });
  loadApprovals();
  var project = document.body.dataset.project;
  var es = new EventSource("/api/events" + (project ? "?project=" + encodeURIComponent(project) : ""));
  es.addEventListener("text_delta", function (ev) {
    var d = JSON.parse(ev.data), live = document.getElementById("live");
    if (live) { busy = true; live.textContent += d.text; }
  });
  ["task", "task_stage", "worker_state", "crash", "notify", "approval", "approval_answered"].forEach(function (k) {
    es.addEventListener(k, function (ev) {
      var d = JSON.parse(ev.data);
      if (k === "task" && d.state && d.state !== "running") { busy = false; }
      if (k === "crash") { flash("crash in " + d.project + ": " + d.reason, true); }
      soon();
    });
  });
  es.addEventListener("resync", function () { es.close(); setTimeout(function () { location.reload(); }, 500); });
  // A browser allows six connections to a host: a page left behind must give its stream back,
  // or the seventh page waits for one (a page kept for "back" reopens it when shown again).
  window.addEventListener("pagehide", function () { es.close(); });
  window.addEventListener("pageshow", function (e) { if (e.persisted) { location.reload(); } });
})();
