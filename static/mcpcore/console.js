// Small enhancements; every page works without this file.
(function () {
  "use strict";

  // The live socket: while it is open, the polling fallbacks (the parts marked
  // data-live-quiet, hx-trigger "every Ns") stay quiet. On every (re)connect the live parts
  // fetch themselves once, so nothing that happened before the socket opened is missed.
  // (A trigger filter "[!window.agvLive]" would need eval, which the pages' CSP forbids.)
  window.agvLive = false;
  document.addEventListener("htmx:confirm", function (e) {
    var polled = !e.detail.triggeringEvent;
    if (window.agvLive && polled && e.detail.elt.hasAttribute("data-live-quiet")) e.preventDefault();
  });
  document.addEventListener("htmx:wsOpen", function () {
    window.agvLive = true;
    htmx.trigger(document.body, "agv-resync");
  });
  document.addEventListener("htmx:wsClose", function () { window.agvLive = false; });
  document.addEventListener("htmx:wsError", function () { window.agvLive = false; });

  // Pushes name elements of other pages too (the badge is everywhere, rows are not).
  document.addEventListener("htmx:oobErrorNoTarget", function (e) { e.preventDefault(); });

  // A live part is not swapped while a request of it or from inside it is in flight (the
  // form would be detached and its answer lost; the part's own refresh would land on the
  // detached part, and htmx's swap there took the page's kept fields, hx-preserve, out of the
  // page: a Reason label left with no field); the page catches up once that request is done.
  // A part re-sent unchanged (same data-sig) is not swapped either: that would replace the
  // buttons under the pointer and drop focus. Actions (POST) always swap their own answer.
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
    if (busy(target) || (target && target.classList && target.classList.contains("htmx-request"))) {
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
  // Browser notifications (SPEC 15). "Notify me" asks for the browser's permission and opts
  // this browser in; from then on a confirmation that arrives while the page is in the
  // background raises a system notification, and clicking it opens the confirmation's page.
  // News comes from the live socket (every push carries the badge) or, while the socket is
  // down, from polling; what is waiting comes from /pending/feed/.
  var NOTIFY_KEY = "agvNotify";
  window.agvNotifySeen = null; // confirmation ids this page knows of; null until the first look
  function notifyButton() { return document.getElementById("notify-me"); }
  function canNotify() { return "Notification" in window; }
  function optedIn() {
    try {
      return canNotify() && Notification.permission === "granted" && localStorage.getItem(NOTIFY_KEY) === "on";
    } catch (err) { return false; }
  }
  function showNotifyButton() {
    var button = notifyButton();
    if (!button) return;
    button.hidden = !canNotify();
    var on = optedIn();
    button.textContent = on ? "Notifications on" : "Notify me";
    button.setAttribute("aria-pressed", on ? "true" : "false");
    button.title = on
      ? "This browser shows a notification for each new confirmation while the console is in the background. Click to stop."
      : "Show a system notification for each new confirmation while the console is in the background";
  }
  function notifyNew(item) {
    var note;
    try {
      // A server's question carries its own words; a confirmation is worded here.
      note = new Notification(item.title || "Approval needed: " + item.tool, {
        body: item.body || item.tool + " on " + item.server + " is waiting for approval",
        tag: "agv-" + item.id, // one notification per confirmation, however many tabs are open
      });
    } catch (err) {
      return; // Android's Chrome allows notifications from service workers only: use ntfy there
    }
    note.onclick = function () {
      window.focus();
      window.location.href = item.url;
      note.close();
    };
  }
  var looking = false, lookAgain = false;
  function look() {
    var button = notifyButton();
    if (!button || !optedIn()) return;
    if (looking) { lookAgain = true; return; }
    looking = true;
    fetch(button.dataset.feed, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (body) {
        if (!body) return;
        var first = window.agvNotifySeen === null;
        var seen = window.agvNotifySeen || {};
        body.pending.forEach(function (item) {
          if (seen[item.id]) return;
          seen[item.id] = true;
          // What waited before this page looked, or arrives while it is in front, is seen here.
          if (!first && document.hidden) notifyNew(item);
        });
        window.agvNotifySeen = seen;
      })
      .catch(function () {})
      .then(function () {
        looking = false;
        if (lookAgain) { lookAgain = false; look(); }
      });
  }
  document.addEventListener("click", function (e) {
    var button = e.target.closest && e.target.closest("#notify-me");
    if (!button || !canNotify()) return;
    if (optedIn()) {
      localStorage.removeItem(NOTIFY_KEY);
      showNotifyButton();
      return;
    }
    Promise.resolve(Notification.requestPermission()).then(function (permission) {
      if ((permission || Notification.permission) === "granted") localStorage.setItem(NOTIFY_KEY, "on");
      showNotifyButton();
      look();
    });
  });
  // Every push about confirmations swaps the badge: look for new ones, and let a
  // confirmation's own page (listening for agv-pending) refresh itself.
  document.addEventListener("htmx:oobAfterSwap", function (e) {
    if (e.target && e.target.id === "pending-badge") {
      htmx.trigger(document.body, "agv-pending");
      look();
    }
  });
  setInterval(function () { if (!window.agvLive) look(); }, 3000);

  document.addEventListener("DOMContentLoaded", function () {
    tick();
    document.querySelectorAll("form.server-form").forEach(showTransport);
    showNotifyButton();
    look();
  });

  // Copy buttons (data-copy="<id of the text>"): the clipboard API where the page is a secure
  // context (https, or 127.0.0.1), else the selection and the older copy command.
  document.addEventListener("click", function (e) {
    var button = e.target.closest && e.target.closest("button[data-copy]");
    var source = button && document.getElementById(button.getAttribute("data-copy"));
    if (!source) return;
    var word = button.querySelector(".copy-word") || button;
    var done = function () {
      word.textContent = "Copied";
      setTimeout(function () { word.textContent = "Copy"; }, 2000);
    };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(source.innerText).then(done);
      return;
    }
    var range = document.createRange();
    range.selectNodeContents(source);
    var selection = window.getSelection();
    selection.removeAllRanges();
    selection.addRange(range);
    if (document.execCommand("copy")) done();
  });

  // Forms that ask first (data-confirm="question"): a removal that loses something.
  document.addEventListener("submit", function (e) {
    var question = e.target.getAttribute && e.target.getAttribute("data-confirm");
    if (question && !window.confirm(question)) e.preventDefault();
  }, true);
})();
