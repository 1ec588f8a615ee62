// Draw every figure from its JSON block, and let each "Table view" button show or hide its table.
document.querySelectorAll("[data-figure]").forEach(function (plot) {
  var figure = JSON.parse(document.getElementById(plot.dataset.figure).textContent);
  Plotly.newPlot(plot, figure.data, figure.layout, {displaylogo: false, responsive: true});
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
