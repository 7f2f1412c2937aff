// Small enhancements; every page works without this file.
(function () {
  "use strict";

  // The live socket: while it is open, the polling fallbacks (hx-trigger "every Ns
  // [!window.agvLive]") stay quiet. On every (re)connect the live parts fetch themselves once,
  // so nothing that happened before the socket opened is missed.
  window.agvLive = false;
  document.addEventListener("htmx:wsOpen", function () {
    window.agvLive = true;
    htmx.trigger(document.body, "agv-resync");
  });
  document.addEventListener("htmx:wsClose", function () { window.agvLive = false; });
  document.addEventListener("htmx:wsError", function () { window.agvLive = false; });

  // Pushes name elements of other pages too (the badge is everywhere, rows are not).
  document.addEventListener("htmx:oobErrorNoTarget", function (e) { e.preventDefault(); });

  // A live part is not swapped while a request from inside it is in flight (the form would be
  // detached and its answer lost); the page catches up once that request is done. A part
  // re-sent unchanged (same data-sig) is not swapped either: that would replace the buttons
  // under the pointer and drop focus. Actions (POST) always swap their own answer.
  var missed = false;
  function busy(target) {
    return !!(target && target.querySelector && target.querySelector(".htmx-request"));
  }
  function sameSig(target, html) {
    var sig = target && target.dataset && target.dataset.sig;
    if (!sig) return false;
    var match = /data-sig="([^"]*)"/.exec(html || "");
    return !!match && match[1] === sig;
  }
  document.addEventListener("htmx:oobBeforeSwap", function (e) {
    var target = e.detail.target;
    var incoming = e.detail.fragment && e.detail.fragment.firstElementChild;
    if (busy(target)) {
      e.detail.shouldSwap = false;
      missed = true;
    } else if (incoming && sameSig(target, incoming.outerHTML.slice(0, 300))) {
      e.detail.shouldSwap = false;
    }
  });
  document.addEventListener("htmx:beforeSwap", function (e) {
    var verb = e.detail.requestConfig && e.detail.requestConfig.verb;
    if (verb !== "get") return;
    if (busy(e.detail.target)) {
      e.detail.shouldSwap = false;
      missed = true;
    } else if (sameSig(e.detail.target, (e.detail.serverResponse || "").slice(0, 300))) {
      e.detail.shouldSwap = false;
    }
  });
  document.addEventListener("htmx:afterRequest", function () {
    if (!missed || document.querySelector(".htmx-request")) return;
    missed = false;
    setTimeout(function () { htmx.trigger(document.body, "agv-resync"); }, 0);
  });

  // Time left on pending confirmations.
  function clock(seconds) {
    var s = Math.max(0, Math.floor(seconds));
    var h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), r = s % 60;
    var mm = h ? String(m).padStart(2, "0") : String(m);
    return (h ? h + ":" : "") + mm + ":" + String(r).padStart(2, "0");
  }
  function tick() {
    var now = Date.now();
    document.querySelectorAll("time[data-expires]").forEach(function (el) {
      var left = (Date.parse(el.dataset.expires) - now) / 1000;
      el.textContent = clock(left);
      el.classList.toggle("soon", left < 60);
    });
  }
  setInterval(tick, 1000);

  document.addEventListener("change", function (e) {
    var box = e.target;
    // Trust editor: "All tools" ticks (unticks) every tool; unticking one unticks "All tools".
    var form = box.closest && box.closest("#trust-editor");
    if (form && box.type === "checkbox") {
      var all = form.querySelector("[data-all-tools]");
      if (box === all) {
        form.querySelectorAll("input[name=tools]").forEach(function (b) { b.checked = all.checked; });
      } else if (!box.checked && all) {
        all.checked = false;
      }
    }
    if (box.name === "transport") showTransport(box.form);
  });

  // Server form: show the fields of the chosen transport.
  function showTransport(form) {
    if (!form) return;
    var select = form.querySelector("select[name=transport]");
    if (!select) return;
    var stdio = select.value === "stdio";
    form.querySelectorAll(".for-stdio").forEach(function (f) { f.hidden = !stdio; });
    form.querySelectorAll(".for-http").forEach(function (f) { f.hidden = stdio; });
  }
  document.addEventListener("DOMContentLoaded", function () {
    tick();
    document.querySelectorAll("form.server-form").forEach(showTransport);
  });
})();
