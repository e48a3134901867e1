/* The case queue's own script (templates/review_console/cases/case_list.html); a file,
   since the Content-Security-Policy allows scripts from 'self' only.

   - "Select all": the header checkbox (data-select-all names the form) ticks or
     clears every case checkbox of that form on the page, and shows "mixed" when
     only some are ticked.
   - Whole-row links: a click anywhere on a row opens its case (data-href), except
     on a link, a button or a checkbox of its own, or while text is being selected.
     Keyboard users reach the same page through the row's case link. */
(function () {
  "use strict";
  function boxes(all) {
    var form = all.getAttribute("data-select-all");
    return Array.prototype.slice.call(
      document.querySelectorAll('input[type="checkbox"][name="case"][form="' + form + '"]')
    );
  }
  function syncAll(all) {
    var list = boxes(all);
    var ticked = list.filter(function (b) { return b.checked; }).length;
    all.checked = list.length > 0 && ticked === list.length;
    all.indeterminate = ticked > 0 && ticked < list.length;
  }
  function setUp() {
    var all = document.querySelector("input[data-select-all]");
    if (all) {
      all.addEventListener("change", function () {
        boxes(all).forEach(function (b) { b.checked = all.checked; });
        all.indeterminate = false;
      });
      boxes(all).forEach(function (b) {
        b.addEventListener("change", function () { syncAll(all); });
      });
    }
    document.querySelectorAll("[data-href]").forEach(function (row) {
      row.addEventListener("click", function (event) {
        if (event.target.closest("a, button, input, label, select, textarea")) {
          return;
        }
        if (window.getSelection && String(window.getSelection()).length) {
          return;
        }
        window.location.assign(row.getAttribute("data-href"));
      });
    });
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", setUp);
  } else {
    setUp();
  }
})();
