/* The review console's one script of its own (templates/review_console/base.html); a
   file, since the Content-Security-Policy allows scripts from 'self' only.

   Announces a bulk replay's progress to screen readers. htmx
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

/* Keyboard shortcuts (listed in the footer's "Keyboard shortcuts", opened with "?"):
   n takes the next case (posts the footer's form: taking a case is a POST), d presses
   the page's main decision ([data-main-decision]), / focuses the search box, q opens
   the queue. Ignored while typing in a box, or with a modifier key held. */
(function () {
  "use strict";
  function typing(target) {
    return target.closest && target.closest("input, textarea, select, [contenteditable]");
  }
  document.addEventListener("keydown", function (event) {
    if (event.defaultPrevented || event.ctrlKey || event.metaKey || event.altKey || typing(event.target)) {
      return;
    }
    var key = event.key;
    if (key === "?") {
      var list = document.getElementById("shortcuts");
      if (list) {
        list.open = !list.open;
        if (list.open) { list.querySelector("summary").focus(); list.scrollIntoView({block: "nearest"}); }
        event.preventDefault();
      }
    } else if (key === "n") {
      var next = document.getElementById("next-case-shortcut");
      if (next) { event.preventDefault(); next.submit(); }
    } else if (key === "d") {
      // The last one: a lookup's answer, swapped in below the buttons, offers the newer decision.
      var mains = document.querySelectorAll("[data-main-decision]:not([disabled])");
      var main = mains[mains.length - 1];
      if (main) { event.preventDefault(); main.click(); }
    } else if (key === "/") {
      var box = document.getElementById("header-search");
      if (box) { event.preventDefault(); box.focus(); }
    } else if (key === "q") {
      var queue = document.querySelector("header.top nav a[href$='/console/cases/']");
      if (queue) { event.preventDefault(); window.location.assign(queue.href); }
    }
  });
})();

/* Times: the server writes "3 minutes ago" in a <time datetime> whose title is the exact
   time in the server's zone; here the title becomes the exact time in the reader's own. */
(function () {
  "use strict";
  function localTitles(root) {
    root.querySelectorAll("time[datetime]").forEach(function (el) {
      var at = new Date(el.getAttribute("datetime"));
      if (!isNaN(at)) {
        el.title = at.toLocaleString(undefined, {
          weekday: "short", day: "numeric", month: "short", year: "numeric",
          hour: "2-digit", minute: "2-digit", timeZoneName: "short"
        });
      }
    });
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", function () { localTitles(document); });
  } else {
    localTitles(document);
  }
  document.addEventListener("htmx:afterSettle", function (event) { localTitles(event.target); });
})();
