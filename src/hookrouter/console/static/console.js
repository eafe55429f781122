// hookrouter console: progressive enhancement only; every page works without it.
// Loaded as a file (the Content-Security-Policy allows no inline script).
//
// data-poll="URL" data-interval="ms": refresh the element from an HTML fragment
//   the server renders (escaped there), while the tab is visible; polling
//   stops once the element holds a [data-final] (a finished job).
// data-confirm="question": ask before submitting a form (replay, delete, rotate).
"use strict";

(function () {
  function poll(element) {
    var url = element.getAttribute("data-poll");
    var every = parseInt(element.getAttribute("data-interval") || "5000", 10);
    function refresh() {
      if (document.hidden) { return; }
      fetch(url, { credentials: "same-origin", headers: { "accept": "text/html" } })
        .then(function (response) {
          if (!response.ok) { throw new Error("HTTP " + response.status); }
          return response.text();
        })
        .then(function (text) {
          var parsed = new DOMParser().parseFromString(text, "text/html");
          element.replaceChildren.apply(element, Array.from(parsed.body.childNodes));
          element.removeAttribute("data-stale");
          if (element.querySelector("[data-final]")) { window.clearInterval(timer); }
        })
        .catch(function () { element.setAttribute("data-stale", "true"); });
    }
    if (element.querySelector("[data-final]")) { return; }
    var timer = window.setInterval(refresh, Math.max(1000, every));
  }

  function confirmSubmit(event) {
    var question = event.target.getAttribute("data-confirm");
    if (question && !window.confirm(question)) { event.preventDefault(); }
  }

  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("[data-poll]").forEach(poll);
    document.querySelectorAll("form[data-confirm]").forEach(function (form) {
      form.addEventListener("submit", confirmSubmit);
    });
  });
})();
