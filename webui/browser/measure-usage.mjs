// Measures the Usage page over a large usage store, for docs/benchmarks.md
// section 9: the time from navigation (signed in) to the four charts, the top
// consumers and the recent records drawn, over cold loads (a new browser
// context each), and then the time from choosing another period to its
// charts drawn, and the CPU time the browser and the platform spent on a
// load (a figure the machine's load does not inflate the way it does the
// wall time). Not a test: it prints figures. The data directory is one
// that `bench/usagebench generate` wrote (its admin token is
// usagebench-admin-token). Run:
//   make build && node browser/measure-usage.mjs DATA_DIR [runs]
import { readdirSync, readFileSync } from "node:fs";
import { launchBrowser, startPlatform } from "./harness.mjs";

const tick = 100; // USER_HZ: /proc/<pid>/stat counts CPU time in 1/100 s

/** The CPU time (user + system, ms) used so far by the processes descended
 * from root, root excluded, and apart the one process except (the platform). */
function cpu(root, except) {
  const procs = new Map();
  for (const d of readdirSync("/proc")) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const st = readFileSync(`/proc/${d}/stat`, "utf8");
      const f = st.slice(st.lastIndexOf(")") + 2).split(" ");
      procs.set(Number(d), { ppid: Number(f[1]), ms: ((Number(f[11]) + Number(f[12])) * 1000) / tick });
    } catch {
      // gone meanwhile
    }
  }
  const under = (pid) => {
    for (let p = procs.get(pid)?.ppid; p; p = procs.get(p)?.ppid) if (p === root) return true;
    return false;
  };
  let browser = 0;
  for (const [pid, p] of procs) if (pid !== except && under(pid)) browser += p.ms;
  return { browser, platform: procs.get(except)?.ms ?? 0 };
}

const dataDir = process.argv[2];
const runs = Number(process.argv[3] ?? 10);
if (!dataDir) {
  console.error("usage: node browser/measure-usage.mjs DATA_DIR [runs]");
  process.exit(2);
}
const token = process.env.USAGEBENCH_TOKEN ?? "usagebench-admin-token";

const stack = await startPlatform(dataDir, token);
const browser = await launchBrowser();
const loads = [];
const cpuBrowser = [];
const cpuPlatform = [];
const switches = { "7d": [], "30d": [] };
const navigations = [];

/** Waits until the four charts show the period (summary label matching
 * span) and have drawn their areas (the canvas' data-drawn, set by uPlot's
 * draw hook once it has painted the series), the top consumers table and
 * the recent requests are drawn. */
async function drawn(page, span) {
  for (const name of ["Tokens by kind", "Cost (USD)", "Requests", "Denials"]) {
    await page.getByTestId("chart-" + name).getByRole("img", { name: span }).locator("canvas[data-drawn]").first().waitFor();
  }
  await page.getByRole("table", { name: /^Top consumers by/ }).getByRole("row").nth(1).waitFor();
  await page.getByRole("table", { name: "Recent requests, newest first" }).getByRole("row").nth(1).waitFor();
}

try {
  for (let i = 0; i < runs; i++) {
    const context = await browser.newContext({ viewport: { width: 1280, height: 860 } });
    await context.addInitScript((t) => sessionStorage.setItem("sluice.adminToken", t), token);
    const page = await context.newPage();
    page.setDefaultTimeout(60000);
    const c0 = cpu(process.pid, stack.pid);
    await page.goto(stack.consoleURL + "/usage", { waitUntil: "commit" });
    await drawn(page, /in 2[45] hours/);
    loads.push(await page.evaluate(() => performance.now()));
    const c1 = cpu(process.pid, stack.pid);
    cpuBrowser.push(c1.browser - c0.browser);
    cpuPlatform.push(c1.platform - c0.platform);
    for (const [period, label, span] of [
      ["7d", "7 d", /in 16[89] hours/],
      ["30d", "30 d", /in 3[01] days/],
    ]) {
      const t0 = Date.now();
      await page.getByText(label, { exact: true }).click();
      await drawn(page, span);
      switches[period].push(Date.now() - t0);
    }
    await context.close();
  }
  // The page opened from the console's navigation: the console already
  // loaded (the Providers page, in a new context: nothing of the Usage page
  // cached, neither its code nor its data), from the click on Usage to the
  // same drawn state.
  for (let i = 0; i < runs; i++) {
    const context = await browser.newContext({ viewport: { width: 1280, height: 860 } });
    await context.addInitScript((t) => sessionStorage.setItem("sluice.adminToken", t), token);
    const page = await context.newPage();
    page.setDefaultTimeout(60000);
    await page.goto(stack.consoleURL + "/providers");
    await page.getByRole("heading", { name: "Providers", level: 1 }).waitFor();
    await page.waitForLoadState("networkidle");
    const link = page.getByRole("navigation", { name: "Main" }).getByRole("link", { name: "Usage" });
    await link.waitFor();
    const t0 = Date.now();
    await link.click();
    await drawn(page, /in 2[45] hours/);
    navigations.push(Date.now() - t0);
    await context.close();
  }
} finally {
  await browser.close();
  await stack.stop();
}
const stats = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const q = (p) => s[Math.min(s.length - 1, Math.floor(p * s.length))];
  return `median ${q(0.5).toFixed(0)} ms, p90 ${q(0.9).toFixed(0)} ms, max ${s[s.length - 1].toFixed(0)} ms`;
};
console.log(`Usage page, navigation to the charts, top consumers and records drawn (24 h by hour), ${runs} cold loads: ${stats(loads)}`);
console.log(`Usage page opened from the navigation (the console loaded, nothing of the page cached), ${runs} loads: ${stats(navigations)}`);
console.log(`CPU time of one load: browser (every chromium process) ${stats(cpuBrowser)}; platform ${stats(cpuPlatform)}`);
console.log(`switch to 7 days (by hour): ${stats(switches["7d"])}`);
console.log(`switch to 30 days (by day): ${stats(switches["30d"])}`);
