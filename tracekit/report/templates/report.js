(function () {
  "use strict";
  function showError(message) {
    var el = document.getElementById("tk-error");
    el.textContent = message;
    el.hidden = false;
    console.error(message);
  }
  async function loadPlotly() {
    if (window.Plotly) return;
    var el = document.getElementById("tk-plotly");
    if (!el) throw new Error("plotly.js did not load (the report links it from cdn.plot.ly: are you offline?)");
    var text = atob(el.textContent.trim());
    var bytes = new Uint8Array(text.length);
    for (var i = 0; i < text.length; i++) bytes[i] = text.charCodeAt(i);
    var stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
    var source = await new Response(stream).text();
    (0, eval)(source);
  }
  async function main() {
    var payload = JSON.parse(document.getElementById("tk-data").textContent);
    await loadPlotly();
    var base = {
      margin: { l: 60, r: 20, t: 28, b: 45 },
      font: { family: "system-ui, -apple-system, Segoe UI, Roboto, DejaVu Sans, sans-serif", size: 12 },
      legend: { orientation: "h", x: 0, xanchor: "left", y: 1.0, yanchor: "bottom" },
      paper_bgcolor: "white",
      plot_bgcolor: "white",
    };
    for (var k = 0; k < payload.figures.length; k++) {
      var fig = payload.figures[k];
      await Plotly.newPlot(fig.id, fig.data, Object.assign({}, base, fig.layout), { displaylogo: false, responsive: true });
    }
    document.body.setAttribute("data-plots-rendered", String(payload.figures.length));
  }
  main().catch(function (e) { showError("The plots could not be drawn: " + e); });
})();
