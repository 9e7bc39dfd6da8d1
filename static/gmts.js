// GMTS Explorer: token tooltips. One floating element, filled with textContent (never HTML)
// from the token's data-tip attribute; event delegation so re-rendered views keep working.
(function () {
  "use strict";
  if (window.__gmtsTipInstalled) return;
  window.__gmtsTipInstalled = true;

  function tipElement() {
    var el = document.getElementById("gmts-tip");
    if (!el) {
      el = document.createElement("div");
      el.id = "gmts-tip";
      el.setAttribute("role", "tooltip");
      document.body.appendChild(el);
    }
    return el;
  }

  function place(el, target) {
    var r = target.getBoundingClientRect();
    var w = el.offsetWidth, h = el.offsetHeight;
    var left = Math.min(Math.max(4, r.left), window.innerWidth - w - 4);
    var top = r.bottom + 6;
    if (top + h > window.innerHeight - 4) top = Math.max(4, r.top - h - 6);
    el.style.left = Math.max(4, left) + "px";
    el.style.top = top + "px";
  }

  var current = null;  // the token whose tooltip is showing

  function show(target) {
    var el = tipElement();
    current = target;
    el.textContent = target.getAttribute("data-tip") || "";
    el.classList.add("visible");
    place(el, target);
  }

  function hide() {
    var el = document.getElementById("gmts-tip");
    if (el) el.classList.remove("visible");
    current = null;
  }

  // on scroll the tooltip follows its token, and goes only when the token leaves the screen
  // (hiding on every scroll would drop it when the page scrolls a token into view)
  function follow() {
    var el = document.getElementById("gmts-tip");
    if (!current || !el || !el.classList.contains("visible")) return;
    var r = current.getBoundingClientRect();
    if (!current.isConnected || r.bottom < 0 || r.top > window.innerHeight) hide();
    else place(el, current);
  }

  function tokenOf(node) {
    return node && node.closest ? node.closest(".tok[data-tip]") : null;
  }

  document.addEventListener("mouseover", function (ev) {
    var t = tokenOf(ev.target);
    if (t) show(t); else hide();
  });
  document.addEventListener("focusin", function (ev) {
    var t = tokenOf(ev.target);
    if (t) show(t);
  });
  document.addEventListener("scroll", follow, true);
  document.addEventListener("keydown", function (ev) { if (ev.key === "Escape") hide(); });
})();
