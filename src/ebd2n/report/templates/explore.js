// Explore: every run's curve overlaid, grouped (seed mean and a ± SD band), smoothed, filtered, log x.
// The runs and their downsampled curves come packed (base64 of gzip JSON) in #explore-data.
(function () {
  var block = document.getElementById("explore-data");
  var plot = document.getElementById("plot-explore");
  if (!block || !plot) return;
  var PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf"];
  var control = function (name) { return document.getElementById("explore-" + name); };
  function colour(index, count) {  // the palette while it lasts, else hues spread evenly: one colour per group
    if (count <= PALETTE.length) return PALETTE[index];
    return "hsl(" + Math.round(index * 360 / count) + ", 70%, " + (index % 2 ? 36 : 50) + "%)";
  }
  function translucent(color) {
    return color.charAt(0) === "#" ? color + "33" : color.replace("hsl(", "hsla(").replace(")", ", 0.2)");
  }
  function span(values) {  // the converged curves' range, a little padded; null when there is none
    var low = Infinity, high = -Infinity;  // a loop: Math.min.apply overflows the stack at 1,000 runs' points
    values.forEach(function (y) {
      if (y !== null && isFinite(y)) { low = Math.min(low, y); high = Math.max(high, y); }
    });
    if (low === Infinity) return null;
    var pad = (high - low) * 0.05 || 0.05;
    return [low - pad, high + pad];
  }
  var axes = JSON.parse(control("axes").textContent);
  var runs = [];

  function smooth(ys, weight) {  // exponential moving average, debiased as TensorBoard's
    if (!weight) return ys;
    var last = 0, count = 0;
    return ys.map(function (y) {
      if (y === null) return null;
      last = last * weight + (1 - weight) * y;
      count += 1;
      return last / (1 - Math.pow(weight, count));
    });
  }
  function at(xs, ys, x) {  // linear interpolation inside the curve's range; null outside it
    if (!xs.length || x < xs[0] || x > xs[xs.length - 1]) return null;
    var i = 0;
    while (xs[i] < x) i += 1;
    if (xs[i] === x || i === 0) return ys[i];
    var share = (x - xs[i - 1]) / (xs[i] - xs[i - 1]);
    return ys[i - 1] === null || ys[i] === null ? null : ys[i - 1] + share * (ys[i] - ys[i - 1]);
  }
  function label(run, fields) {
    return fields.map(function (axis) {
      return axis === "mode" || axis === "preset" ? run[axis] : (axis === "lr" ? "LR" : axis) + " " + run[axis];
    }).join(", ");
  }
  function chosen() {  // the runs every filter lets through
    var allowed = {};
    axes.forEach(function (axis) {
      allowed[axis] = {};
      document.querySelectorAll("#explore-filters input[data-axis='" + axis + "']").forEach(function (box) {
        allowed[axis][box.value] = box.checked;
      });
    });
    return runs.filter(function (run) {
      return axes.every(function (axis) { return allowed[axis][String(run[axis])] !== false; });
    });
  }
  function traces() {
    var metric = control("metric").value, weight = Number(control("smooth").value);
    var fields = control("group").value ? control("group").value.split(",") : [];
    var groups = {}, order = [];
    var converged = [], diverged = [], scaled = !control("diverged").checked;
    chosen().forEach(function (run) {
      var key = fields.length ? label(run, fields) : run.run;
      if (!groups[key]) { groups[key] = []; order.push(key); }
      var curve = run.curves[metric], ys = smooth(curve[1], weight), failed = run.status === "diverged";
      if (!failed) ys.forEach(function (y) { converged.push(y); });
      else if (curve[0].length) diverged.push({key: key, run: run.run, xs: curve[0]});
      groups[key].push({xs: curve[0], ys: ys, diverged: failed});
    });
    var drawn = [], colours = {};
    order.forEach(function (key, index) {
      var color = colour(index, order.length), members = groups[key].filter(function (m) {
        return !scaled || !m.diverged;  // scaled to the converged runs, a group's mean and band are theirs
      });
      colours[key] = color;
      if (!members.length) members = groups[key];  // every run diverged: their curves, above the top edge
      if (members.length === 1) {
        drawn.push({x: members[0].xs, y: members[0].ys, name: key, mode: "lines", line: {color: color, width: 1.4}});
        return;
      }
      var xs = Array.from(new Set([].concat.apply([], members.map(function (m) { return m.xs; })))).sort(
        function (a, b) { return a - b; });
      var mean = [], upper = [], lower = [];
      xs.forEach(function (x) {
        var ys = members.map(function (m) { return at(m.xs, m.ys, x); }).filter(function (y) { return y !== null; });
        var m = ys.reduce(function (a, b) { return a + b; }, 0) / ys.length;
        var squares = ys.reduce(function (a, y) { return a + (y - m) * (y - m); }, 0);
        var sd = ys.length > 1 ? Math.sqrt(squares / (ys.length - 1)) : 0;
        mean.push(ys.length ? m : null); upper.push(ys.length ? m + sd : null); lower.push(ys.length ? m - sd : null);
      });
      drawn.push({x: xs, y: upper, mode: "lines", line: {width: 0}, hoverinfo: "skip", showlegend: false,
        legendgroup: key});
      drawn.push({x: xs, y: lower, mode: "lines", line: {width: 0}, fill: "tonexty", fillcolor: translucent(color),
        hoverinfo: "skip", showlegend: false, legendgroup: key});
      drawn.push({x: xs, y: mean, name: key + " (" + members.length + " runs)", mode: "lines", legendgroup: key,
        line: {color: color, width: 1.8}});
    });
    var range = scaled ? span(converged) : null;
    if (range) {  // each diverged run: a mark at the top edge where its curve ends
      diverged.forEach(function (mark) {
        drawn.push({x: [mark.xs[mark.xs.length - 1]], y: [range[1]], mode: "markers", cliponaxis: false,
          marker: {symbol: "x", size: 9, color: colours[mark.key]}, showlegend: false,
          hovertext: mark.run + ": diverged", hoverinfo: "text"});
      });
    }
    return {data: drawn, range: range, diverged: diverged.length};
  }
  function draw() {
    keep();
    var metric = control("metric");
    control("smooth-value").textContent = Number(control("smooth").value).toFixed(2);
    var drawn = traces(), data = drawn.data;
    var hidden = drawn.range && drawn.diverged ? "; y axis scaled to the converged runs, " + drawn.diverged +
      " diverged run(s) marked ✕ at the top edge" : "";
    control("count").textContent = chosen().length + " of " + runs.length + " runs drawn" + hidden;
    var layout = {
      height: 460, margin: {l: 60, r: 20, t: 20, b: 50}, hovermode: "closest",
      xaxis: {title: {text: "step"}, type: control("logx").checked ? "log" : "linear"},
      yaxis: drawn.range ? {title: {text: metric.options[metric.selectedIndex].text}, range: drawn.range}
        : {title: {text: metric.options[metric.selectedIndex].text}},
      showlegend: data.length <= 60, legend: {orientation: "h", y: -0.18, yanchor: "top"},
    };
    if (typeof Plotly === "undefined") {
      plot.textContent = "plotly.js did not load; the runs table below holds every run's final values.";
      return;
    }
    Plotly.react(plot, data, layout, {displaylogo: false, displayModeBar: "hover", responsive: true});
  }
  function filters() {
    var box = document.getElementById("explore-filters");
    axes.forEach(function (axis) {
      var values = Array.from(new Set(runs.map(function (run) { return String(run[axis]); })));
      var group = box.appendChild(document.createElement("fieldset"));
      group.appendChild(document.createElement("legend")).textContent = axis === "lr" ? "LR" : axis;
      values.forEach(function (value) {
        var item = group.appendChild(document.createElement("label"));
        var input = item.appendChild(document.createElement("input"));
        input.type = "checkbox"; input.checked = true; input.value = value; input.dataset.axis = axis;
        item.appendChild(document.createTextNode(" " + value));
      });
    });
    box.addEventListener("change", draw);
  }
  // The controls' settings outlive a reload (the status page reloads itself while the campaign trains).
  var KEPT = "ebd2n-explore:" + location.pathname, VALUES = ["metric", "group", "smooth"], BOXES = ["logx", "diverged"];
  function keep() {
    var state = {off: []};
    VALUES.forEach(function (name) { state[name] = control(name).value; });
    BOXES.forEach(function (name) { state[name] = control(name).checked; });
    document.querySelectorAll("#explore-filters input:not(:checked)").forEach(function (box) {
      state.off.push([box.dataset.axis, box.value]);
    });
    try { sessionStorage.setItem(KEPT, JSON.stringify(state)); } catch (error) { /* storage refused: not kept */ }
  }
  function restore() {
    var state = null;
    try { state = JSON.parse(sessionStorage.getItem(KEPT)); } catch (error) { /* storage refused: defaults */ }
    if (!state) return;
    VALUES.forEach(function (name) {
      var element = control(name);
      var offered = element.options ? Array.from(element.options).some(function (o) { return o.value === state[name]; })
        : typeof state[name] === "string";
      if (offered) element.value = state[name];
    });
    BOXES.forEach(function (name) { control(name).checked = state[name] === true; });
    (state.off || []).forEach(function (pair) {
      document.querySelectorAll("#explore-filters input[data-axis='" + pair[0] + "']").forEach(function (box) {
        if (box.value === pair[1]) box.checked = false;
      });
    });
  }
  unpackJson(block.textContent).then(function (unpacked) {
    runs = unpacked;
    filters();
    restore();
    ["metric", "group", "smooth", "logx", "diverged"].forEach(function (name) {
      control(name).addEventListener("input", draw);
    });
    draw();
  });
})();
// The runs table: a click on a column's header sorts by it (again: the other way); the filter box
// keeps the rows whose text holds every word typed.
(function () {
  var table = document.querySelector("table.runs");
  var filter = document.getElementById("runs-filter");
  if (!table) return;
  var body = table.tBodies[0];
  var value = function (row, index) {
    var text = row.cells[index].textContent.trim(), number = Number(text.replace(/,/g, ""));
    return text && !isNaN(number) ? number : text;
  };
  table.querySelectorAll("thead th button").forEach(function (button, index) {
    button.addEventListener("click", function () {
      var th = button.parentNode, ascending = th.getAttribute("aria-sort") !== "ascending";
      table.querySelectorAll("thead th").forEach(function (other) { other.removeAttribute("aria-sort"); });
      th.setAttribute("aria-sort", ascending ? "ascending" : "descending");
      var rows = Array.from(body.rows).sort(function (a, b) {
        var x = value(a, index), y = value(b, index);
        var order = typeof x === typeof y ? (x < y ? -1 : x > y ? 1 : 0) : (typeof x === "number" ? -1 : 1);
        return ascending ? order : -order;
      });
      rows.forEach(function (row) { body.appendChild(row); });
    });
  });
  if (filter) {
    filter.addEventListener("input", function () {
      var words = filter.value.toLowerCase().split(/\s+/).filter(Boolean);
      var shown = 0;
      Array.from(body.rows).forEach(function (row) {
        var text = row.textContent.toLowerCase();
        row.hidden = !words.every(function (word) { return text.indexOf(word) >= 0; });
        shown += row.hidden ? 0 : 1;
      });
      document.getElementById("runs-shown").textContent = shown + " of " + body.rows.length + " runs shown";
    });
  }
})();
