/* The quota tree's expand/collapse (no framework): a row's toggle hides or shows every row below
   it (rows carry data-node and data-parent). Which subtrees are collapsed is remembered in
   localStorage per table (data-tree: the flavor, or "all"), so a reload or another visit keeps
   them; the page without JavaScript shows every row. */
(function () {
  "use strict";
  var KEY = "gpupool.quotaTree.collapsed.";

  function load(name) {
    try { return JSON.parse(window.localStorage.getItem(KEY + name) || "[]"); } catch (e) { return []; }
  }
  function save(name, list) {
    try { window.localStorage.setItem(KEY + name, JSON.stringify(list)); } catch (e) { /* private mode */ }
  }

  function apply(table) {
    var collapsed = load(table.dataset.tree);
    var rows = table.querySelectorAll("tbody tr[data-node]");
    var parentOf = {};
    rows.forEach(function (row) { parentOf[row.dataset.node] = row.dataset.parent; });
    rows.forEach(function (row) {
      var hidden = false, up = row.dataset.parent;
      while (up && !hidden) { hidden = collapsed.indexOf(up) >= 0; up = parentOf[up]; }
      row.hidden = hidden;
      var button = row.querySelector("button[data-tree-toggle]");
      if (button) {
        var open = collapsed.indexOf(row.dataset.node) < 0;
        button.setAttribute("aria-expanded", open ? "true" : "false");
        button.querySelector("span[aria-hidden]").textContent = open ? "▾" : "▸";
      }
    });
  }

  document.addEventListener("click", function (event) {
    var button = event.target.closest("button[data-tree-toggle]");
    var table = button && button.closest("table[data-tree]");
    if (!table) { return; }
    var collapsed = load(table.dataset.tree), node = button.dataset.treeToggle;
    var at = collapsed.indexOf(node);
    if (at >= 0) { collapsed.splice(at, 1); } else { collapsed.push(node); }
    save(table.dataset.tree, collapsed);
    apply(table);
  });

  function start() { document.querySelectorAll("table[data-tree]").forEach(apply); }
  if (document.readyState === "loading") { document.addEventListener("DOMContentLoaded", start); } else { start(); }
})();
