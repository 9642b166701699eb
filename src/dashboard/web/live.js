// ksync ui: keeps the Applications table current. The server sends an event on /events
// whenever an Application changes (a watch on the API server); the table is then fetched
// again, with the same filters, and swapped in.
(function () {
  var live = document.getElementById("live");
  var note = document.getElementById("live-status");
  if (!live || !window.EventSource) { return; }
  var busy = false, again = false;
  function refresh() {
    if (busy) { again = true; return; }
    busy = true;
    fetch(live.getAttribute("data-fragment"), { headers: { "Accept": "text/html" } })
      .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
      .then(function (html) { live.innerHTML = html; note.textContent = "Live: updated " + new Date().toLocaleTimeString() + "."; })
      .catch(function (e) { note.textContent = "Live: refresh failed (" + e + "); retrying on the next change."; })
      .then(function () { busy = false; if (again) { again = false; refresh(); } });
  }
  var source = new EventSource("/events");
  source.addEventListener("applications", refresh);
  source.onerror = function () { note.textContent = "Live: connection to ksync ui lost; reconnecting..."; };
  source.onopen = function () { note.textContent = "Live: the table is redrawn when an Application changes."; };
})();
