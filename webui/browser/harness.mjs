// Test harness of the console's browser tests: a real `sluice serve` and
// `sluice mock-llm` on free loopback ports, and Debian's chromium driven by
// playwright-core (never a downloaded browser).
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import net from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { chromium } from "playwright-core";

const require = createRequire(import.meta.url);
const here = path.dirname(new URL(import.meta.url).pathname);

export const sluiceBin = process.env.SLUICE_BIN ?? path.resolve(here, "../../bin/sluice");
export const chromiumPath = process.env.CHROMIUM ?? "/usr/bin/chromium";
export const screenshotsDir = process.env.SCREENSHOTS_DIR ?? path.resolve(here, "../test-results/screenshots");

export function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.unref();
    s.on("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

// Every process started here is killed when the test process exits, also
// when a test times out before its after() hook could stop them.
const children = new Set();
const dataDirs = new Set();
process.on("exit", () => {
  for (const p of children) p.kill("SIGKILL");
  for (const d of dataDirs) rmSync(d, { recursive: true, force: true });
});

/** Starts bin with args; resolves when a stdout line matches ready (with the
 * match), rejects when it exits first or after timeoutMs. */
function start(args, env, ready, timeoutMs = 20000) {
  const proc = spawn(sluiceBin, args, { env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"] });
  children.add(proc);
  proc.on("exit", () => children.delete(proc));
  let out = "";
  let err = "";
  proc.stderr.on("data", (d) => (err += d));
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      proc.kill("SIGKILL");
      reject(new Error(`${args[0]} not ready after ${timeoutMs} ms: ${out}\n${err}`));
    }, timeoutMs);
    proc.stdout.on("data", (d) => {
      out += d;
      const m = ready.exec(out);
      if (m) {
        clearTimeout(timer);
        resolve({ proc, match: m, logs: () => err });
      }
    });
    proc.on("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`${args[0]} exited ${code}: ${out}\n${err}`));
    });
  });
}

async function stop(proc) {
  if (proc.exitCode !== null) return;
  const done = new Promise((r) => proc.once("exit", r));
  proc.kill("SIGTERM");
  const t = setTimeout(() => proc.kill("SIGKILL"), 10000);
  await done;
  clearTimeout(t);
}

/** sluice mock-llm and sluice serve, with a fresh data directory and a known admin token. */
export async function startStack() {
  const data = mkdtempSync(path.join(tmpdir(), "sluice-console-"));
  dataDirs.add(data);
  const token = "sluice-admin-" + randomBytes(20).toString("hex");
  const [mockPort, gwPort, adminPort] = [await freePort(), await freePort(), await freePort()];
  const mock = await start(["mock-llm", "--listen", `127.0.0.1:${mockPort}`], {}, /listening on (http:\/\/\S+)/);
  let serve;
  try {
    serve = await start(
      ["serve", "--listen", `127.0.0.1:${gwPort}`, "--admin-listen", `127.0.0.1:${adminPort}`, "--data", path.join(data, "data")],
      { SLUICE_ADMIN_TOKEN: token },
      /sluice console: (http:\/\/\S+)\/\n[\s\S]*sluice gateway listening on (http:\/\/\S+)/,
    );
  } catch (e) {
    await stop(mock.proc);
    throw e;
  }
  return {
    token,
    mockURL: mock.match[1],
    consoleURL: serve.match[1],
    gatewayURL: serve.match[2],
    serveLogs: serve.logs,
    async stop() {
      await stop(serve.proc);
      await stop(mock.proc);
      rmSync(data, { recursive: true, force: true });
      dataDirs.delete(data);
    },
  };
}

/** `sluice platform` alone on a free loopback port, over an existing data
 * directory (such as one `bench/usagebench generate` wrote), raw usage kept
 * forever. */
export async function startPlatform(dataDir, token) {
  const port = await freePort();
  const p = await start(
    ["platform", "--admin-listen", `127.0.0.1:${port}`, "--data", dataDir, "--usage-retention", "0"],
    { SLUICE_ADMIN_TOKEN: token },
    /sluice console: (http:\/\/\S+)\//,
    120000,
  );
  return { token, consoleURL: p.match[1], pid: p.proc.pid, stop: () => stop(p.proc) };
}

/** Debian's chromium, headless, with a fresh profile (playwright makes a
 * temporary user-data-dir per launch) and none of its background traffic. */
export async function launchBrowser() {
  return chromium.launch({
    executablePath: chromiumPath,
    headless: true,
    args: ["--no-sandbox", "--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-gpu", "--no-first-run"],
  });
}

/** Responses the tests provoke on purpose (a wrong token, a refused
 * guardrail, a stale save): Chromium logs each failed fetch as a console
 * error, which is the browser's report, not the console's. */
const expectedFailure = /^Failed to load resource: the server responded with a status of (401|404|412|422) /;

/** A page that records console errors and uncaught exceptions. */
export async function newPage(browser, { width = 1280, height = 860 } = {}) {
  // bypassCSP lets the test inject axe-core; the console itself runs under
  // the server's Content-Security-Policy (checked by the handler's tests).
  const context = await browser.newContext({ viewport: { width, height }, bypassCSP: true, reducedMotion: "reduce" });
  await context.grantPermissions(["clipboard-read", "clipboard-write"]);
  const page = await context.newPage();
  page.setDefaultTimeout(Number(process.env.PW_TIMEOUT ?? 10000));
  const errors = [];
  page.on("console", (m) => {
    if (m.type() === "error" && !expectedFailure.test(m.text())) errors.push(m.text());
  });
  page.on("pageerror", (e) => errors.push("uncaught: " + e.message));
  return { page, context, errors };
}

const axeSource = readFileSync(require.resolve("axe-core/axe.min.js"), "utf8");

/** axe-core on the page as it is; returns the serious and critical violations. */
export async function axeViolations(page) {
  if (!(await page.evaluate(() => typeof window.axe !== "undefined"))) await page.addScriptTag({ content: axeSource });
    // Notifications fade in; axe reads colours as they are at the moment.
  await page.waitForTimeout(100);
  const result = await page.evaluate(() =>
    window.axe.run(document, { runOnly: { type: "tag", values: ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "best-practice"] } }),
  );
  return result.violations
    .filter((v) => v.impact === "serious" || v.impact === "critical")
    .map((v) => `${v.id} (${v.impact}): ${v.help} at ${v.nodes.map((n) => n.html.slice(0, 160)).slice(0, 4).join(" | ")}`);
}

/** The page saved at 1280 and 390 px as NAME-1280.png and NAME-390.png; at
 * 390 px nothing may be wider than the window. Notifications are hidden for
 * the pictures; with a dialog open only the window is taken (a full-page
 * picture would show the overlay over part of the page). */
export async function shoot(page, name) {
  mkdirSync(screenshotsDir, { recursive: true });
  const { width, height } = page.viewportSize();
  const dialog = await page.getByRole("dialog").count();
  const hide = await page.addStyleTag({ content: ".mantine-Notifications-root { display: none !important; }" });
  const out = {};
  for (const w of [1280, 390]) {
    await page.setViewportSize({ width: w, height: w === 390 ? 844 : 860 });
    await page.evaluate(() => {
      document.activeElement?.blur?.();
      window.scrollTo(0, 0);
    });
    await page.waitForTimeout(150); // layout settles (no animation: reduced motion)
    await page.screenshot({ path: path.join(screenshotsDir, `${name}-${w}.png`), fullPage: dialog === 0 });
    out[w] = await page.evaluate(() => document.documentElement.scrollWidth);
  }
  await hide.evaluate((el) => el.remove());
  await page.setViewportSize({ width, height });
  return out;
}

/** The platform API with the admin token, for setting up and checking. */
export function api(stack) {
  return async (method, p, body, headers = {}) => {
    const r = await fetch(stack.consoleURL + "/api/v1" + p, {
      method,
      headers: { Authorization: "Bearer " + stack.token, "Content-Type": "application/json", ...headers },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await r.text();
    return { status: r.status, etag: r.headers.get("etag"), body: text ? JSON.parse(text) : null };
  };
}

/** A chat completion through the gateway with key. */
export async function chat(stack, route, key) {
  const r = await fetch(`${stack.gatewayURL}/${route}/v1/chat/completions`, {
    method: "POST",
    headers: { Authorization: "Bearer " + key, "Content-Type": "application/json" },
    body: JSON.stringify({ model: "gpt-4o-mini", messages: [{ role: "user", content: "Say hello to the console test." }], max_tokens: 16 }),
  });
  const text = await r.text();
  let body;
  try {
    body = JSON.parse(text);
  } catch {
    body = text;
  }
  return { status: r.status, body };
}

/** Polls fn until it returns a truthy value or timeoutMs passes. */
export async function eventually(fn, timeoutMs = 5000, everyMs = 50) {
  const until = Date.now() + timeoutMs;
  let last;
  for (;;) {
    last = await fn();
    if (last) return last;
    if (Date.now() > until) return last;
    await new Promise((r) => setTimeout(r, everyMs));
  }
}
