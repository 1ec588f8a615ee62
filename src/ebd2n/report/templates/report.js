// Draw every figure from its JSON block, and let each "Table view" button show or hide its table.
// Without plotly.js (a campaign page copied away from its report/assets/) the tables still work.
document.querySelectorAll("[data-figure]").forEach(function (plot) {
  if (typeof Plotly === "undefined") {
    plot.textContent = "plotly.js did not load: this page reads it from the assets/ folder beside it, so copy " +
      "the whole report/ folder with it (a run's page that travels alone: `ebd2n dashboard RUN_DIR " +
      "--self-contained OUT.html`). Use the table view.";
    return;
  }
  var figure = JSON.parse(document.getElementById(plot.dataset.figure).textContent);
  Plotly.newPlot(plot, figure.data, figure.layout, {displaylogo: false, displayModeBar: "hover", responsive: true});
});
// Packed data: base64 of gzip-compressed JSON, decoded by the browser's own DecompressionStream.
function unpackJson(text) {
  var bytes = Uint8Array.from(atob(text.trim()), function (c) { return c.charCodeAt(0); });
  return new Response(new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"))).json();
}
// A packed table is filled the first time it is shown.
function unpackRows(table) {
  var block = document.getElementById(table.dataset.packed);
  delete table.dataset.packed;
  return unpackJson(block.textContent).then(function (rows) {
    var body = document.createDocumentFragment();
    rows.forEach(function (row) {
      var line = body.appendChild(document.createElement("tr"));
      row.forEach(function (cell) { line.appendChild(document.createElement("td")).textContent = cell; });
    });
    table.tBodies[0].appendChild(body);
  });
}
document.querySelectorAll("button.table-toggle").forEach(function (button) {
  button.addEventListener("click", function () {
    var view = document.getElementById(button.getAttribute("aria-controls"));
    var show = view.hidden;
    var packed = view.querySelector("table[data-packed]");
    if (show && packed) unpackRows(packed);
    view.hidden = !show;
    button.setAttribute("aria-expanded", String(show));
    button.textContent = show ? "Hide table" : "Table view";
  });
});
// A table wider than its box says so: a cue above it while columns lie beyond the right edge.
document.querySelectorAll(".scroll").forEach(function (box) {
  var cue = document.createElement("p");
  cue.className = "scroll-cue";
  cue.textContent = "\u21c6 Wider than the window: scroll the table sideways for more columns.";
  box.parentNode.insertBefore(cue, box);
  var update = function () {
    cue.hidden = !(box.clientWidth > 0 && box.scrollWidth > box.clientWidth + 1);
  };
  if (typeof ResizeObserver !== "undefined") new ResizeObserver(update).observe(box);
  update();
});
