// Prints where a cold load of the Usage page spends its time, for
// docs/benchmarks.md section 9: when each API answer arrived, when the page
// rendered its tables and drew its four charts, the first paint and the
// main thread's long tasks (over 50 ms), in ms since navigation. Not a
// test: it prints a timeline per load. Run:
//   make build && node browser/trace-usage.mjs DATA_DIR [loads]
import { launchBrowser, startPlatform } from "./harness.mjs";

const dataDir = process.argv[2];
const loads = Number(process.argv[3] ?? 3);
if (!dataDir) {
  console.error("usage: node browser/trace-usage.mjs DATA_DIR [loads]");
  process.exit(2);
}
const token = process.env.USAGEBENCH_TOKEN ?? "usagebench-admin-token";

/** In the page: records when the charts' canvases are drawn and the tables
 * have rows, and the long tasks. */
function observe() {
  const marks = [];
  window.__marks = marks;
  new PerformanceObserver((l) => {
    for (const e of l.getEntries()) marks.push([e.startTime, `long task, ${e.duration.toFixed(0)} ms`]);
  }).observe({ type: "longtask", buffered: true });
  const seen = new Set();
  const watch = { "charts drawn": "canvas[data-drawn]", "top consumers rows": "table[aria-label^='Top consumers by'] tbody tr", "records rows": "table[aria-label='Recent requests, newest first'] tbody tr", "loaders": ".mantine-Loader-root" };
  new MutationObserver(() => {
    for (const [name, q] of Object.entries(watch)) {
      const n = document.querySelectorAll(q).length;
      if (n && !seen.has(name + n)) {
        seen.add(name + n);
        marks.push([performance.now(), `${name}: ${n}`]);
      }
    }
  }).observe(document, { subtree: true, childList: true, attributes: true });
}

const stack = await startPlatform(dataDir, token);
const browser = await launchBrowser();
try {
  for (let i = 0; i < loads; i++) {
    const context = await browser.newContext({ viewport: { width: 1280, height: 860 } });
    await context.addInitScript((t) => sessionStorage.setItem("sluice.adminToken", t), token);
    await context.addInitScript(observe);
    const page = await context.newPage();
    page.setDefaultTimeout(60000);
    await page.goto(stack.consoleURL + "/usage", { waitUntil: "commit" });
    for (const name of ["Tokens by kind", "Cost (USD)", "Requests", "Denials"]) await page.getByTestId("chart-" + name).locator("canvas[data-drawn]").waitFor();
    await page.getByRole("table", { name: "Recent requests, newest first" }).getByRole("row").nth(1).waitFor();
    const lines = await page.evaluate(() => {
      const rows = [...window.__marks];
      for (const p of performance.getEntriesByType("paint")) rows.push([p.startTime, p.name]);
      for (const e of performance.getEntriesByType("resource")) {
        const u = new URL(e.name);
        if (u.pathname.startsWith("/api/")) rows.push([e.responseEnd, `answer ${u.pathname}${u.searchParams.get("groupBy") ? " by " + u.searchParams.get("groupBy") : ""}${u.searchParams.get("resolution") ? " " + u.searchParams.get("resolution") : ""} (asked at ${e.startTime.toFixed(0)})`]);
      }
      return rows.sort((a, b) => a[0] - b[0]).map(([t, what]) => `${t.toFixed(0).padStart(6)}  ${what}`);
    });
    console.log(`load ${i + 1}:\n${lines.join("\n")}\n`);
    await context.close();
  }
} finally {
  await browser.close();
  await stack.stop();
}
