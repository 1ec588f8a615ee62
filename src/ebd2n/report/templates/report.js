// Draw every figure from its JSON block, and let each "Table view" button show or hide its table.
// Without plotly.js (a campaign page copied away from its report/assets/) the tables still work.
document.querySelectorAll("[data-figure]").forEach(function (plot) {
  if (typeof Plotly === "undefined") {
    plot.textContent = "plotly.js did not load (this page expects the campaign's report/assets/ folder; " +
      "`ebd2n dashboard RUN_DIR --self-contained OUT.html` writes a page that travels alone). Use the table view.";
    return;
  }
  var figure = JSON.parse(document.getElementById(plot.dataset.figure).textContent);
  Plotly.newPlot(plot, figure.data, figure.layout, {displaylogo: false, displayModeBar: "hover", responsive: true});
});
document.querySelectorAll("button.table-toggle").forEach(function (button) {
  button.addEventListener("click", function () {
    var view = document.getElementById(button.getAttribute("aria-controls"));
    var show = view.hidden;
    view.hidden = !show;
    button.setAttribute("aria-expanded", String(show));
    button.textContent = show ? "Hide table" : "Table view";
  });
});
