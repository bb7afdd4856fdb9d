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
    if (xhr.status === 403 && (xhr.responseText || "").indexOf("csrf-denied") !== -1) {
      flash("This page is out of date: you signed in again since it was loaded. Reload it and try again; " +
            "nothing was changed.");
    } else if (xhr.status === 403) {
      flash("Not allowed (403): your role may not do this (operators act on tasks, editors change playbooks); " +
            "nothing was changed.");
    } else {
      text = text.slice(0, 200);
      flash("The server answered " + xhr.status + (text ? ": " + text : "") + (/[.!?]$/.test(text) ? "" : "."));
    }
  });
  document.addEventListener("htmx:sendError", function () {
    flash("Could not reach the server; nothing was changed by this click. Try again.");
  });
  // A live region (data-keeps-forms) does not swap under a person's hands: while the focus is in one of its forms,
  // or one of them has been changed and not sent (sending swaps that row, form and all), its poll does not start,
  // and a poll already in flight when the person began is not swapped in (htmx:beforeSwap): ticks, typed reasons
  // and open forms stay as they are; the next poll after the form is sent brings the page up to date.
  document.addEventListener("input", function (event) {
    var form = event.target.form || (event.target.closest && event.target.closest("form"));
    if (form) form.setAttribute("data-touched", "");
  });
  function inUse(region) {
    var active = document.activeElement;
    return Boolean((active && region.contains(active) && active.form) ||  // a form's control, not its answer
                   region.querySelector("form[data-touched]"));
  }
  function livePoll(detail) {  // the region's own refresh, not an answer to something the person sent
    var region = detail.elt;
    return region && region.hasAttribute && region.hasAttribute("data-keeps-forms") &&
      (detail.requestConfig ? detail.requestConfig.verb === "get" : true);
  }
  function paused(region, yes) {
    var note = document.getElementById(region.id + "-paused");
    if (note) note.hidden = !yes;
  }
  document.addEventListener("htmx:beforeRequest", function (event) {
    if (!livePoll(event.detail)) return;
    var busy = inUse(event.detail.elt);
    paused(event.detail.elt, busy);
    if (busy) event.preventDefault();
  });
  document.addEventListener("htmx:beforeSwap", function (event) {
    if (!livePoll(event.detail) || !inUse(event.detail.elt)) return;
    event.detail.shouldSwap = false;
    paused(event.detail.elt, true);
  });
  // After a swap of the part the person was working in (an approval's row, the task's controls), the focus goes
  // to what the answer says (its alert or status) instead of falling back to the top of the page.
  // A live view's poll keeps the focus where it was: the same element, or the nearest part of the page around
  // it that is still there (by id).
  var refocus = new Map();  // per request: a poll's swap between an answer's swap and settle keeps its own
  document.addEventListener("htmx:beforeSwap", function (event) {
    var target = event.detail.target, active = document.activeElement, ids = [];
    if (!target || !target.contains(active) || active === document.body) return;
    for (var el = active; el && el !== document.body; el = el.parentElement) { if (el.id) ids.push(el.id); }
    refocus.set(event.detail.xhr, {place: target.id, ids: ids, answer: event.detail.requestConfig.verb !== "get"});
  });
  document.addEventListener("htmx:afterSettle", function (event) {
    var then = refocus.get(event.detail.xhr);
    refocus.delete(event.detail.xhr);
    if (!then || (document.activeElement && document.activeElement !== document.body)) return;
    var place = then.place && document.getElementById(then.place), into = null;
    if (then.answer && place) into = place.querySelector("[role=alert], [role=status], .status") || place;
    for (var i = 0; !into && i < then.ids.length; i++) into = document.getElementById(then.ids[i]);
    if (!into) return;
    if (!into.hasAttribute("tabindex") && !into.matches("a[href], button, input, select, textarea, summary")) {
      into.setAttribute("tabindex", "-1");
    }
    into.focus({preventScroll: !then.answer});
  });
  document.addEventListener("htmx:afterRequest", function (event) {
    var box = document.getElementById("flash");
    if (box && event.detail.successful && !box.hidden && event.detail.requestConfig.verb !== "get") {
      box.hidden = true;
    }
  });
})();
