// Measures the console's first page on this machine, for docs/benchmarks.md:
// the bytes a cold browser transfers for it (gzip, as the binary serves
// them), the whole build gzipped, and the time from navigation to the
// sign-in form being usable (rendered, focused, accepting input), over
// cold loads (a new browser context each: empty cache). Not a test: it
// prints figures. Run: make build && node browser/measure.mjs [runs]
import { readdirSync, readFileSync, statSync } from "node:fs";
import path from "node:path";
import { gzipSync } from "node:zlib";
import { launchBrowser, startStack } from "./harness.mjs";

const runs = Number(process.argv[2] ?? 20);
const dist = path.resolve(path.dirname(new URL(import.meta.url).pathname), "../dist/console");

function walk(dir) {
  return readdirSync(dir).flatMap((f) => {
    const p = path.join(dir, f);
    return statSync(p).isDirectory() ? walk(p) : [p];
  });
}
let raw = 0;
let gz = 0;
for (const f of walk(dist)) {
  const b = readFileSync(f);
  raw += b.length;
  gz += /\.(js|css|html|svg)$/.test(f) ? Math.min(b.length, gzipSync(b, { level: 9 }).length) : b.length;
}

const stack = await startStack();
const browser = await launchBrowser();
const times = [];
let firstBytes = 0;
let firstFiles = 0;
try {
  for (let i = 0; i < runs; i++) {
    const context = await browser.newContext({ viewport: { width: 1280, height: 860 } });
    const page = await context.newPage();
    let bytes = 0;
    let files = 0;
    page.on("requestfinished", async (r) => {
      const s = await r.sizes();
      bytes += s.responseBodySize + s.responseHeadersSize;
      files++;
    });
    await page.goto(stack.consoleURL + "/", { waitUntil: "commit" });
    const field = page.getByLabel("Admin token");
    await field.waitFor();
    // Interactive: the field has the focus and takes a keystroke.
    await page.keyboard.type("x");
    await page.waitForFunction(() => document.activeElement?.value === "x");
    const t = await page.evaluate(() => performance.now());
    times.push(t);
    await page.waitForLoadState("networkidle");
    if (i === 0) {
      firstBytes = bytes;
      firstFiles = files;
    }
    await context.close();
  }
} finally {
  await browser.close();
  await stack.stop();
}
times.sort((a, b) => a - b);
const q = (p) => times[Math.min(times.length - 1, Math.floor(p * times.length))];
const kb = (n) => (n / 1024).toFixed(1) + " KiB";
console.log(`whole build: ${kb(raw)} raw, ${kb(gz)} gzip`);
console.log(`first page (cold): ${firstFiles} responses, ${kb(firstBytes)} transferred (gzip, with headers)`);
console.log(`time to interactive (navigation to a usable sign-in field), ${runs} cold loads: median ${q(0.5).toFixed(0)} ms, p90 ${q(0.9).toFixed(0)} ms, max ${times[times.length - 1].toFixed(0)} ms`);
