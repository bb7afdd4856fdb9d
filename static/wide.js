/* Wide tables say that they scroll. A table (or a .scroll-x box) wider than the screen gets a line above it,
   "Scroll sideways: 4 of 13 columns shown", kept true as it scrolls; the box takes the keyboard's focus (the arrow
   keys scroll it) and is a region named by that line. Without this file the box still scrolls, with the shadow
   app.css draws at the edge that has more. */
(function () {
  "use strict";
  var BOXES = ".scroll-x, .rh-matrix, table:not(.stack)";
  var counter = 0;

  function columns(box) {
    var row = box.querySelector("thead tr") || box.querySelector("tr");
    if (!row) return null;
    var right = box.getBoundingClientRect().right + 1, left = box.getBoundingClientRect().left - 1;
    var cells = row.children, shown = 0;
    for (var i = 0; i < cells.length; i++) {
      var r = cells[i].getBoundingClientRect();
      if (r.left >= left && r.right <= right) shown++;
    }
    return {shown: shown, total: cells.length};
  }

  function cueFor(box) {
    var before = box.previousElementSibling;
    return before && before.classList.contains("scroll-cue") ? before : null;
  }

  function say(box) {
    var cue = cueFor(box), count = columns(box);
    if (!cue) return;
    cue.textContent = count && count.total > 1
      ? "Scroll sideways: " + count.shown + " of " + count.total + " columns shown"
      : "Scroll sideways to see all of it";
  }

  function mark(box2) {  // a box that scrolls: a .scroll-x box, or a table shown as a block at phone width
    var wide = box2.scrollWidth > box2.clientWidth + 1;
    var cue = cueFor(box2);
    box2.classList.toggle("overflows", wide);
    if (!wide) {
      if (cue) cue.hidden = true;
      return;
    }
    if (!cue) {
      cue = document.createElement("p");
      cue.className = "scroll-cue";
      cue.id = "scroll-cue-" + (++counter);
      box2.parentNode.insertBefore(cue, box2);
      box2.addEventListener("scroll", function () { say(box2); }, {passive: true});
    }
    cue.hidden = false;
    if (!box2.hasAttribute("tabindex")) box2.tabIndex = 0;  // the arrow keys scroll it
    if (!box2.hasAttribute("role")) box2.setAttribute("role", "region");
    if (!box2.hasAttribute("aria-labelledby") && !box2.hasAttribute("aria-label")) {
      var caption = box2.querySelector("caption");
      box2.setAttribute("aria-label", (caption ? caption.textContent.trim() + ": " : "") + "a wide table");
    }
    box2.setAttribute("aria-describedby", cue.id);
    say(box2);
  }

  function markAll() {
    var boxes = document.querySelectorAll(BOXES);
    for (var i = 0; i < boxes.length; i++) {
      if (boxes[i].matches("table") && boxes[i].parentElement.closest(".scroll-x, .rh-matrix")) continue;  // its box scrolls, not it
      mark(boxes[i]);
    }
  }

  var pending = null;
  function soon() {
    if (pending) return;
    pending = window.requestAnimationFrame(function () { pending = null; markAll(); });
  }
  document.addEventListener("DOMContentLoaded", markAll);
  window.addEventListener("resize", soon);
  document.addEventListener("htmx:afterSettle", soon);
})();
