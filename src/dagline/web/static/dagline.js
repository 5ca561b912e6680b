/* dagline web UI: live refresh over server-sent events, log following, small conveniences.
   No framework, no build step: this file is served as it is. Everything put in the page from the
   server goes in as parsed HTML the server escaped, or as textContent (log lines). */
(function () {
  "use strict";

  // --- live regions: on a `change` event, fetch this page again and swap every [data-live] element
  var busy = false, again = false;

  function checkedIn(el) {
    var kept = [];
    el.querySelectorAll("input[type=checkbox]:checked").forEach(function (box) { kept.push(box.name + "\u0000" + box.value); });
    return kept;
  }

  function refresh() {
    if (busy) { again = true; return; }
    busy = true;
    fetch(window.location.href, { headers: { "X-Dagline-Live": "1" }, credentials: "same-origin" })
      .then(function (answer) { return answer.ok ? answer.text() : null; })
      .then(function (text) {
        if (text === null) { return; }
        var fresh = new DOMParser().parseFromString(text, "text/html");
        document.querySelectorAll("[data-live]").forEach(function (old) {
          var next = old.id && fresh.getElementById(old.id);
          if (!next) { return; }
          var kept = checkedIn(old);
          old.replaceWith(next);
          next.querySelectorAll("input[type=checkbox]").forEach(function (box) {
            if (kept.indexOf(box.name + "\u0000" + box.value) >= 0) { box.checked = true; }
          });
        });
        document.body.dataset.refreshed = String((Number(document.body.dataset.refreshed) || 0) + 1);
      })
      .catch(function () { /* the next change tries again */ })
      .then(function () {
        busy = false;
        if (again) { again = false; refresh(); }
      });
  }

  function listen() {
    var url = document.body.dataset.liveEvents;
    if (!url || !window.EventSource) { return; }
    var dot = document.getElementById("live-dot");
    var source = new EventSource(url), lost = false, rendered = document.body.dataset.liveVersion;
    source.addEventListener("hello", function (event) {
      if (dot) { dot.classList.add("on"); }
      // a change between this page's rendering and its stream's start, or a reconnection (maybe to
      // another replica, whose counter differs): catch up once
      if (lost || event.data !== rendered) { lost = false; refresh(); }
      rendered = null;
    });
    source.addEventListener("change", refresh);
    source.onerror = function () { lost = true; if (dot) { dot.classList.remove("on"); } };
    window.addEventListener("pagehide", function () { source.close(); });
  }

  // --- a running try's log: fetch what was added since the last offset, while the try runs
  function follow(pre) {
    var url = pre.dataset.logUrl, offset = Number(pre.dataset.offset) || 0;
    function tick() {
      fetch(url + "?offset=" + offset, { credentials: "same-origin" })
        .then(function (answer) {
          if (!answer.ok) { throw new Error(String(answer.status)); }
          var running = answer.headers.get("X-Try-Running") === "1";
          offset = Number(answer.headers.get("X-Log-Offset")) || offset;
          return answer.text().then(function (text) { return { text: text, running: running }; });
        })
        .then(function (got) {
          if (got.text) {
            var atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
            pre.appendChild(document.createTextNode(got.text));
            if (atEnd) { pre.scrollTop = pre.scrollHeight; }
          }
          pre.dataset.offset = String(offset);
          if (got.running) { window.setTimeout(tick, 1000); }
          else {
            pre.dataset.follow = "0";
            var note = document.getElementById("following");
            if (note) { note.textContent = "the try has ended"; }
          }
        })
        .catch(function () { window.setTimeout(tick, 3000); });
    }
    tick();
  }

  // --- the grid: a click on a cell opens that run at that task (delegated: live swaps keep working)
  function gridClick(event) {
    var cell = event.target.closest("table.grid td");
    if (!cell) { return; }
    var table = cell.closest("table.grid"), row = cell.parentElement;
    var head = table.querySelector("tr.run-states").cells[cell.cellIndex];
    var task = row.cells[0].textContent.trim();
    if (head && head.dataset.run) {
      window.location.href = "/runs/" + head.dataset.run + "?task=" + encodeURIComponent(task);
    }
  }

  document.addEventListener("DOMContentLoaded", function () {
    listen();
    document.querySelectorAll("pre.log[data-follow='1']").forEach(follow);
    document.addEventListener("click", gridClick);
    document.querySelectorAll("[data-autosubmit]").forEach(function (el) {
      el.addEventListener("change", function () { el.form.submit(); });
    });
    document.querySelectorAll("a[data-back]").forEach(function (a) {
      if (document.referrer && new URL(document.referrer).origin === window.location.origin) { a.href = document.referrer; }
    });
  });
})();
