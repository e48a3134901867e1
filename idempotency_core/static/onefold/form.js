/* Onefold form.js: one submission id per filled-in form, and a honeypot.
 *
 * Served at the hook's path followed by form.js. For each form that posts to an
 * Onefold hook it adds a hidden `submission_id` and a hidden honeypot `website`
 * (a person never sees it; a bot fills it). The id is kept in sessionStorage
 * under the form's action and content, so a double click, the browser's re-post
 * after a reload, and back-then-submit all send the same id: Onefold makes one
 * event of them. A different message is a new submission with a new id.
 */
(function () {
  "use strict";
  var HOOK = document.currentScript && document.currentScript.src.replace(/form\.js(\?.*)?$/, "");

  function newId() {
    if (window.crypto && crypto.randomUUID) return crypto.randomUUID();
    return "s-" + Date.now().toString(36) + "-" + Math.random().toString(36).slice(2);
  }

  function hidden(form, name) {
    var input = form.querySelector('input[name="' + name + '"]');
    if (!input) {
      input = document.createElement("input");
      input.type = "hidden";
      input.name = name;
      form.appendChild(input);
    }
    return input;
  }

  function contentOf(form) {
    var parts = [];
    var data = new FormData(form);
    data.forEach(function (value, name) {
      if (name !== "submission_id" && name !== "website") parts.push(name + "=" + value);
    });
    return parts.sort().join("&");
  }

  function honeypot(form) {
    // A text field out of sight (bots skip type=hidden, but fill text fields).
    if (form.querySelector('input[name="website"]')) return;
    var trap = document.createElement("input");
    trap.type = "text";
    trap.name = "website";
    trap.autocomplete = "off";
    trap.tabIndex = -1;
    trap.setAttribute("aria-hidden", "true");
    trap.style.cssText = "position:absolute;left:-10000px;width:1px;height:1px;overflow:hidden";
    form.appendChild(trap);
  }

  function prepare(form) {
    honeypot(form);
    var idInput = hidden(form, "submission_id");
    form.addEventListener("submit", function (event) {
      if (form.dataset.onefoldSent === "1") {
        event.preventDefault(); // a second click while the first post is on its way
        return;
      }
      var slot = "onefold:" + form.action + ":" + contentOf(form);
      var id = null;
      try { id = sessionStorage.getItem(slot); } catch (e) { /* storage off: keep a page id */ }
      if (!id) {
        // The page's own id only for the content it was made for: a page restored by
        // Back (bfcache) still holds the last id, and a changed message is a new one.
        id = (idInput.value && idInput.dataset.onefoldSlot === slot) ? idInput.value : newId();
        try { sessionStorage.setItem(slot, id); } catch (e) { /* ignore */ }
      }
      idInput.value = id;
      idInput.dataset.onefoldSlot = slot;
      form.dataset.onefoldSent = "1";
      Array.prototype.forEach.call(form.querySelectorAll('[type="submit"]'), function (b) {
        b.disabled = true;
      });
    });
    // Back/forward cache: the page comes back as it was left; allow a new send.
    window.addEventListener("pageshow", function () {
      form.dataset.onefoldSent = "";
      Array.prototype.forEach.call(form.querySelectorAll('[type="submit"]'), function (b) {
        b.disabled = false;
      });
    });
  }

  function start() {
    Array.prototype.forEach.call(document.querySelectorAll("form"), function (form) {
      if (!HOOK || form.action.indexOf(HOOK) === 0 || form.hasAttribute("data-onefold")) {
        prepare(form);
      }
    });
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
