/* The review console's one script of its own (templates/review_console/base.html); a
   file, since the Content-Security-Policy allows scripts from 'self' only.

   Announces a bulk replay's progress to screen readers (issue 14, item 9). htmx
   replaces the whole progress block every 2 seconds, and a live region that is
   itself replaced is not announced reliably; so the page keeps one stable, visually
   hidden live region (#progress-live, aria-live="polite") and this copies the new
   status into it after each swap, only when the words changed, so an unchanged
   status is not read out again every 2 seconds. */
(function () {
  "use strict";
  function announceProgress() {
    var live = document.getElementById("progress-live");
    var text = document.getElementById("progress-text");
    if (!live || !text) {
      return;
    }
    var badge = document.querySelector("#bulk-progress h1 .badge");
    var words = (badge ? badge.textContent.trim() + ". " : "") + text.textContent.trim();
    if (live.textContent !== words) {
      live.textContent = words;
    }
  }
  document.addEventListener("htmx:afterSettle", announceProgress);
})();
