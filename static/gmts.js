// GMTS Explorer: token tooltips, a pinned detail panel, and chart points linked to tokens.
// Text is only ever set with textContent (never HTML); the panel's bars are JSON read from the
// token's data-detail attribute, its lines of numbers and ranks come from the token's data-tip.
// Event delegation, so re-rendered views keep working.
(function () {
  "use strict";
  if (window.__gmtsTipInstalled) return;
  window.__gmtsTipInstalled = true;

  function element(id, role) {
    var el = document.getElementById(id);
    if (!el) {
      el = document.createElement("div");
      el.id = id;
      el.setAttribute("role", role);
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

  // --- the tooltip (hover or keyboard focus) ---
  var current = null;  // the token whose tooltip is showing

  function pinnedNow() {
    var panel = document.getElementById("gmts-pin");
    return !!(panel && panel.classList.contains("visible"));
  }

  function show(target) {
    if (pinnedNow()) return;  // the pinned panel shows the numbers: no tooltip over it
    var el = element("gmts-tip", "tooltip");
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

  // --- the pinned panel (click, Enter or Space on a token; stays until closed) ---
  function add(parent, tag, cls, text) {
    var el = document.createElement(tag);
    if (cls) el.className = cls;
    if (text !== undefined) el.textContent = text;
    parent.appendChild(el);
    return el;
  }

  function fmt(p) { return p === null || p === undefined ? "—" : Number(p).toPrecision(3); }

  function bars(parent, detail) {
    // the sampled token first, then the alternatives other than it (listed once)
    var rows = [[detail.text, detail.prob, true]].concat(
      (detail.alternatives || []).filter(function (a) { return a[0] !== detail.text; })
        .map(function (a) { return [a[0], a[1], false]; }));
    var chart = add(parent, "div", "pin-bars");
    rows.forEach(function (row) {
      var line = add(chart, "div", "pin-bar" + (row[2] ? " sampled" : ""));
      add(line, "span", "pin-bar-label", JSON.stringify(row[0]));
      var track = add(line, "span", "pin-bar-track");
      var fill = add(track, "span", "pin-bar-fill");
      fill.style.width = Math.max(0, Math.min(1, row[1] || 0)) * 100 + "%";
      add(line, "span", "pin-bar-value", fmt(row[1]) + (row[2] ? " sampled" : ""));
    });
  }

  // room for the panel: on wide screens on the right of the results the pinned token is in (the
  // Explore results, a Runs step, a Train batch; the form and settings above keep their width),
  // at the bottom of the page on narrow ones (inline styles: the app's stylesheet only reaches
  // inside the Gradio container)
  var ROOM_FOR = "#explore-results, #run-step-view, #train-batch, #spotlight-view";
  var roomed = null;

  function makeRoom(on, token) {
    var c = document.querySelector(".gradio-container");
    if (roomed) { roomed.style.paddingRight = ""; roomed = null; }
    if (c) c.style.paddingBottom = "";
    if (!on) return;
    if (window.innerWidth >= 900) {
      roomed = (token && token.closest(ROOM_FOR)) || c;
      if (roomed) roomed.style.paddingRight = "404px";
    } else if (c) {
      c.style.paddingBottom = "44vh";
    }
  }

  function unpin() {
    var panel = document.getElementById("gmts-pin");
    if (panel) panel.classList.remove("visible");
    document.body.classList.remove("gmts-pinned");
    makeRoom(false);
    document.querySelectorAll(".tok.pinned").forEach(function (t) { t.classList.remove("pinned"); });
  }

  function pin(token) {
    hide();
    var detail;
    try { detail = JSON.parse(token.getAttribute("data-detail") || "{}"); } catch (e) { detail = {}; }
    document.querySelectorAll(".tok.pinned").forEach(function (t) { t.classList.remove("pinned"); });
    token.classList.add("pinned");
    var panel = element("gmts-pin", "dialog");
    panel.setAttribute("aria-label", "token details");
    panel.textContent = "";
    var close = add(panel, "button", "pin-close", "×");
    close.type = "button";
    close.setAttribute("aria-label", "close the token details");
    close.addEventListener("click", unpin);
    var tip = (token.getAttribute("data-tip") || "").split("\n");
    add(panel, "div", "pin-title", tip[0] || "");
    add(panel, "div", "pin-head", "next-token probabilities (sampled token first)");
    bars(panel, detail);
    add(panel, "pre", "pin-numbers", tip.slice(1, 4).join("\n"));
    // the tooltip's lines: header, 3 lines of numbers, the rank lines, the alternatives
    add(panel, "pre", "pin-ranks", tip.slice(4, -1).join("\n"));
    panel.classList.add("visible");
    // wide screens: the page makes room on the right (the panel covers no summary); narrow
    // ones: a bottom sheet, with the pinned token kept above it
    document.body.classList.add("gmts-pinned");
    makeRoom(true, token);
    if (window.innerWidth < 900) {
      // the sheet covers the screen's lower part: bring the token near the top, and with it
      // what follows it (the summary) above the sheet where it fits
      var r = token.getBoundingClientRect();
      window.scrollBy(0, r.top - 60);
    }
  }

  // --- chart points linked to their tokens (customdata = [answer, position]) ---
  function showToken(answer, pos, view) {
    var tok = (view || document.querySelector("#token-view") || document).querySelector(
      '.tok[data-answer="' + Number(answer) + '"][data-pos="' + Number(pos) + '"]');
    if (!tok) return;
    document.querySelectorAll(".tok.linked").forEach(function (t) { t.classList.remove("linked"); });
    tok.classList.add("linked");
    tok.scrollIntoView({block: "center"});
    pin(tok);
  }

  function linkCharts() {
    document.querySelectorAll("#scatter-plot .js-plotly-plot, #positions-plot .js-plotly-plot")
      .forEach(function (gd) {
        if (gd.__gmtsLinked || typeof gd.on !== "function") return;
        gd.__gmtsLinked = true;
        gd.on("plotly_click", function (ev) {
          var pt = ev && ev.points && ev.points[0];
          if (pt && pt.customdata) showToken(pt.customdata[0], pt.customdata[1]);
        });
      });
  }
  new MutationObserver(linkCharts).observe(document.documentElement, {childList: true, subtree: true});

  function hiddenPicks(t) {  // predicting: the tooltip would give the ranks away
    var scope = t.closest(".predict-scope");
    return !!scope && scope.classList.contains("predicting");
  }
  document.addEventListener("mouseover", function (ev) {
    var t = tokenOf(ev.target);
    if (t && !hiddenPicks(t)) show(t); else hide();
  });
  document.addEventListener("focusin", function (ev) {
    var t = tokenOf(ev.target);
    if (t) { rove(t); if (!hiddenPicks(t)) show(t); }
  });
  document.addEventListener("click", function (ev) {
    var t = tokenOf(ev.target);
    if (t && t.hasAttribute("data-detail")) { rove(t); pin(t); return; }
    var chip = ev.target && ev.target.closest ? ev.target.closest(".why-tok") : null;
    if (chip) whyClick(chip);
  });

  // --- "why they differ": a token button shows its token, going to its group if need be ---
  // (Explore draws one group at a time in #token-view, Learn its group in #learn-view; a Runs
  // step draws all of its groups in #run-step-view)
  var TOKEN_VIEWS = ["#token-view", "#run-step-view", "#learn-view"];
  var gotoCount = 0;

  function groupView(tab, g) {
    var view = null;
    TOKEN_VIEWS.forEach(function (sel) {
      if (!view) view = tab.querySelector(sel + ' .gmts-view[data-group="' + g + '"]');
    });
    return view;
  }

  // ask the server for group g (app/ui/tabs/explore/tab.py: go_to_group, through the hidden
  // #goto-group box), then show the token once its group is drawn
  function goToGroup(chip, g, tab, note) {
    var box = document.querySelector("#goto-group textarea, #goto-group input");
    if (!box) return false;
    gotoCount += 1;  // a new value each click, so asking for the same group again still fires
    var asked = gotoCount;
    if (note) note.textContent = "Going to group " + g + "\u2026";
    var done = function () {
      var view = groupView(tab, g);
      if (!view || asked !== gotoCount) return asked !== gotoCount;
      if (note && note.isConnected) note.textContent = "";
      showToken(chip.getAttribute("data-answer"), chip.getAttribute("data-pos"), view);
      return true;
    };
    var watch = new MutationObserver(function () { if (done()) watch.disconnect(); });
    watch.observe(document.documentElement, {childList: true, subtree: true});
    setTimeout(function () { watch.disconnect(); }, 120000);
    box.value = g + " " + asked;
    box.dispatchEvent(new Event("input", {bubbles: true}));
    return true;
  }

  function whyClick(chip) {
    var g = chip.getAttribute("data-group");
    var section = chip.closest(".why-differ");
    var note = section ? section.querySelector(".why-note") : null;
    var tab = chip.closest(".tabitem") || document;
    var view = groupView(tab, g);
    if (view) {
      if (note) note.textContent = "";
      showToken(chip.getAttribute("data-answer"), chip.getAttribute("data-pos"), view);
    } else if (!goToGroup(chip, g, tab, note) && note) {
      note.textContent = "That token is in group " + g + ", which this view does not show.";
    }
  }

  // --- the token area is one Tab stop; arrow keys move the focus (roving tabindex) ---
  function rove(tok) {
    var view = tok.closest(".gmts-view");
    if (!view) return;
    view.querySelectorAll('.tok[tabindex="0"]').forEach(function (t) { t.setAttribute("tabindex", "-1"); });
    tok.setAttribute("tabindex", "0");
  }

  var MOVES = {ArrowRight: 1, ArrowDown: 1, ArrowLeft: -1, ArrowUp: -1};

  function move(tok, key) {
    var all = Array.prototype.slice.call(tok.closest(".gmts-view").querySelectorAll(".tok[data-tip]"));
    var i = all.indexOf(tok), next = null;
    if (key === "Home") next = all[0];
    else if (key === "End") next = all[all.length - 1];
    else if (key === "ArrowDown" || key === "ArrowUp") {
      // the same position in the next (previous) answer, else the next (previous) token
      var ans = tok.closest(".answer"), answers = Array.prototype.slice.call(
        tok.closest(".gmts-view").querySelectorAll(".answer"));
      var other = answers[answers.indexOf(ans) + MOVES[key]];
      if (other) {
        var toks = other.querySelectorAll(".tok[data-tip]");
        var pos = Array.prototype.indexOf.call(ans.querySelectorAll(".tok[data-tip]"), tok);
        next = toks[Math.min(pos, toks.length - 1)] || null;
      }
    } else next = all[i + MOVES[key]] || null;
    if (!next) return;
    rove(next);
    next.focus();
    if (pinnedNow()) pin(next);
  }
  document.addEventListener("keydown", function (ev) {
    if (ev.key === "Escape") { hide(); unpin(); return; }
    var t = tokenOf(ev.target);
    if (t && hiddenPicks(t) && (ev.key === "Enter" || ev.key === " ")) {
      ev.preventDefault();
      t.click();  // a guess (the capture handler below), never the panel with the ranks
      return;
    }
    if (t && t.hasAttribute("data-detail") && (ev.key === "Enter" || ev.key === " ")) {
      ev.preventDefault();
      pin(t);
    } else if (t && (MOVES[ev.key] || ev.key === "Home" || ev.key === "End")) {
      ev.preventDefault();
      move(t, ev.key);
    }
  });
  document.addEventListener("scroll", follow, true);

  // --- method pickers: the list reads "name: description", the closed box the name alone ---
  // (a box a third of a column wide cut "gmts: GMTS: exact l..." mid-word); the whole label
  // stays in the box's title. While the box has the focus (typing filters the list) it is left.
  var PICKERS = ["method-a", "method-b", "train-method"];
  function shortPickers() {
    PICKERS.forEach(function (id) {
      var input = document.querySelector("#" + id + " input");
      if (!input || input === document.activeElement) return;
      var cut = input.value.indexOf(": ");
      if (cut > 0) { input.title = input.value; input.value = input.value.slice(0, cut); }
    });
  }
  setInterval(shortPickers, 250);

  // --- a number typed outside a control's range is clamped: say so, in words ---
  function labelOf(input) {
    var block = input.closest(".block, label") || input.parentElement;
    var label = block && block.querySelector("[data-testid=block-info], .block-title, span");
    return label ? label.textContent.trim() : "this value";
  }

  function sayClamped(input) {
    var v = parseFloat(input.value), lo = parseFloat(input.min), hi = parseFloat(input.max);
    if (isNaN(v)) return;
    var msg = null;
    if (!isNaN(hi) && v > hi) msg = labelOf(input) + ": " + v + " is above the maximum " + hi + "; using " + hi + ".";
    if (!isNaN(lo) && v < lo) msg = labelOf(input) + ": " + v + " is below the minimum " + lo + "; using " + lo + ".";
    if (!msg) return;
    // the page clamps, so the value the server gets is the one the note says (a slider's own
    // box clamps as well; a number box would send the typed value on)
    input.value = String(v > hi ? hi : lo);
    input.dispatchEvent(new Event("input", { bubbles: true }));
    var note = element("gmts-clamp", "status");
    note.className = "gmts-note";
    note.textContent = msg;
    clearTimeout(sayClamped.timer);
    sayClamped.timer = setTimeout(function () { note.remove(); }, 6000);
  }
  ["change", "keydown"].forEach(function (type) {
    document.addEventListener(type, function (ev) {
      var t = ev.target;
      if (!t || t.tagName !== "INPUT" || t.type !== "number") return;
      if (type === "keydown" && ev.key !== "Enter") return;
      sayClamped(t);
    }, true);  // capture: before the control clamps the value
  });
  // --- predict, then reveal (app/ui/predict.py): hide the marks, guess, then score ---
  function predictScope(node) {
    return node && node.closest ? node.closest(".predict-scope") : null;
  }
  function predictReset(scope) {
    scope.querySelectorAll(".tok.guess, .tok.guess-hit, .tok.guess-miss, .tok.guess-missed")
      .forEach(function (t) { t.classList.remove("guess", "guess-hit", "guess-miss", "guess-missed"); });
    scope.classList.remove("revealed");
    scope.querySelector(".predict-score").textContent = "";
    scope.querySelector(".predict-count").textContent = "";
  }
  function optionName(t, which) {  // the name of method A or B, as the bar's picker gives it
    var scope = predictScope(t);
    var opt = scope ? scope.querySelector('.predict-method option[value="' + which + '"]') : null;
    return opt ? opt.textContent : which.toUpperCase();
  }
  function tokenLabel(t) {
    return "\u201c" + t.textContent + "\u201d";
  }
  // why a token is picked by one method and not the other: the "why they differ" row that lists
  // it (app/ui/why_differ.py), in the token's tab (Explore's view beside, Learn's in the scope)
  function reasonOf(t) {
    var view = t.closest(".gmts-view");
    if (!view) return "";
    if (t.classList.contains("sel-a") && t.classList.contains("sel-b")) return "both methods pick it";
    if (!t.classList.contains("sel-a") && !t.classList.contains("sel-b")) return "neither method picks it";
    var sel = '.why-tok[data-group="' + view.getAttribute("data-group") + '"][data-answer="' +
      t.getAttribute("data-answer") + '"][data-pos="' + t.getAttribute("data-pos") + '"]';
    var chip = (t.closest('[role="tabpanel"], .tabitem') || document).querySelector(sel);
    var row = chip ? chip.closest(".why-row") : null;
    var label = row ? row.querySelector("summary b") : null;
    var only = "only " + optionName(t, t.classList.contains("sel-a") ? "a" : "b");
    return label ? only + ": " + label.textContent : only;  // a row lists its first tokens only
  }
  function ranked(list, which) {  // by the method's rank, best first
    return list.slice().sort(function (x, y) {
      return Number(x.getAttribute("data-rank-" + which)) - Number(y.getAttribute("data-rank-" + which));
    });
  }
  function predictReveal(scope) {
    var select = scope.querySelector(".predict-method");
    var which = select.value, name = select.options[select.selectedIndex].textContent;
    var all = Array.prototype.slice.call(scope.querySelectorAll(".gmts-view .tok[data-tip]"));
    var picks = all.filter(function (t) { return t.classList.contains("sel-" + which); });
    var guesses = all.filter(function (t) { return t.classList.contains("guess"); });
    var hits = guesses.filter(function (t) { return t.classList.contains("sel-" + which); });
    guesses.forEach(function (t) { t.classList.add(t.classList.contains("sel-" + which) ? "guess-hit" : "guess-miss"); });
    var missed = picks.filter(function (t) { return !t.classList.contains("guess"); });
    missed.forEach(function (t) { t.classList.add("guess-missed"); });
    var out = scope.querySelector(".predict-score");
    out.textContent = "";
    var lines = [
      "Score: " + hits.length + " of your " + guesses.length + " picks are " + name + "\u2019s; " +
        name + " picks " + picks.length + " tokens here and you found " + hits.length + " of them.",
    ];
    var top = ranked(missed, which).slice(0, 3);
    if (top.length) {
      lines.push("Its best-ranked picks you missed: " + top.map(function (t) {
        var why = reasonOf(t);
        return tokenLabel(t) + " (rank " + t.getAttribute("data-rank-" + which) + (why ? "; " + why : "") + ")";
      }).join(", ") + ".");
    }
    var wrong = ranked(guesses.filter(function (t) { return !t.classList.contains("sel-" + which); }), which).slice(0, 3);
    if (wrong.length) {
      lines.push("Your picks it left out: " + wrong.map(function (t) {
        var r = t.getAttribute("data-rank-" + which), why = reasonOf(t);
        return tokenLabel(t) + (r ? " (rank " + r : " (not ranked") + (why ? "; " + why : "") + ")";
      }).join(", ") + ".");
    }
    lines.push("Each token\u2019s tooltip gives its ranks and numbers; \u201cWhy they differ\u201d counts every token where the two methods part, by reason.");
    lines.forEach(function (text) { var p = document.createElement("p"); p.textContent = text; out.appendChild(p); });
    scope.classList.remove("predicting");
    scope.classList.add("revealed");
    scope.querySelector(".predict-toggle").checked = false;
    scope.querySelector(".predict-reveal").disabled = true;
  }
  document.addEventListener("change", function (ev) {
    var t = ev.target;
    if (!t || !t.classList || !t.classList.contains("predict-toggle")) return;
    var scope = predictScope(t);
    if (!scope) return;
    predictReset(scope);
    scope.classList.toggle("predicting", t.checked);
    scope.querySelector(".predict-reveal").disabled = !t.checked;
  });
  document.addEventListener("click", function (ev) {
    var scope = predictScope(ev.target);
    if (!scope) return;
    if (ev.target.closest(".predict-reveal")) { predictReveal(scope); return; }
    if (!scope.classList.contains("predicting")) return;
    var t = tokenOf(ev.target);
    if (!t) return;
    ev.stopPropagation();  // a guess, not the detail panel
    t.classList.toggle("guess");
    var n = scope.querySelectorAll(".tok.guess").length;
    scope.querySelector(".predict-count").textContent = n + " picked";
  }, true);  // capture: before the token's own click (the pinned panel)
})();
