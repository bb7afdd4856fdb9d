/* Errors htmx does not swap (403, 500, a dropped connection) are shown in
   #flash instead of failing silently. Everything else is htmx attributes;
   every page works without this file. */
(function () {
  "use strict";
  function flash(message) {
    var box = document.getElementById("flash");
    if (!box) return;
    box.textContent = message;
    box.hidden = false;
  }
  document.addEventListener("htmx:responseError", function (event) {
    var xhr = event.detail.xhr;
    var text = (xhr.responseText || "").replace(/<[^>]*>/g, " ").replace(/\s+/g, " ").trim();
    if (xhr.status === 403) {
      flash("Not allowed (403): your role may not do this (operators act on tasks, editors change playbooks), " +
            "or this page is out of date after signing in again: reload it.");
    } else {
      text = text.slice(0, 200);
      flash("The server answered " + xhr.status + (text ? ": " + text : "") + (/[.!?]$/.test(text) ? "" : "."));
    }
  });
  document.addEventListener("htmx:sendError", function () {
    flash("Could not reach the server; nothing was changed by this click. Try again.");
  });
  // A live region (data-keeps-forms) does not swap under a person's hands: its poll waits while the focus is in
  // one of its forms or one of them has been changed and not sent (sending swaps that row, form and all).
  document.addEventListener("input", function (event) {
    var form = event.target.form || (event.target.closest && event.target.closest("form"));
    if (form) form.setAttribute("data-touched", "");
  });
  document.addEventListener("htmx:beforeRequest", function (event) {
    var region = event.detail.elt;
    if (!region.hasAttribute || !region.hasAttribute("data-keeps-forms")) return;
    var active = document.activeElement;
    if ((active && region.contains(active) && (active.form || active.closest("form"))) ||
        region.querySelector("form[data-touched]")) {
      event.preventDefault();
    }
  });
  document.addEventListener("htmx:afterRequest", function (event) {
    var box = document.getElementById("flash");
    if (box && event.detail.successful && !box.hidden && event.detail.requestConfig.verb !== "get") {
      box.hidden = true;
    }
  });
})();
