// The "Must show" flow through the console, against a real
// `sluice serve` and `sluice mock-llm`: sign in; create a provider pointing
// at the mock; set a Per Consumer token limit with alerts at 80 and 100 %
// and the alert webhook (a receiver the test runs, checking the signature);
// create an application and a key; send requests through the gateway with
// that key until the 429; see them and the denial on the Usage page and
// export them as CSV; see both alerts delivered (each received once) and the
// application's remaining budget; add
// guardrails through the schema form (one the server refuses, with the error
// at its field) and as YAML, reorder and delete; a stale save (412); revoke
// the key and see the next request refused. Every page is checked with
// axe-core (no serious or critical violations), must not be wider than a
// 390 px window, and is saved at 1280 and 390 px.
import assert from "node:assert/strict";
import { createHmac, timingSafeEqual } from "node:crypto";
import { readFile } from "node:fs/promises";
import { createServer } from "node:http";
import { after, before, describe, it } from "node:test";
import { api, axeViolations, chat, eventually, launchBrowser, newPage, shoot, startStack } from "./harness.mjs";

let stack, browser, page, errors, A, receiver;
const state = {};
const webhookSecret = "whsec-console-flow-test";

/** The alert webhook's receiver on loopback: it checks each POST's signature
 * (docs/platform.md "Budget alerts") and keeps the verified bodies, parsed,
 * in received (a bad signature is kept in refused and answered 401). */
async function startReceiver() {
  const received = [];
  const refused = [];
  const server = createServer((req, res) => {
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => {
      const body = Buffer.concat(chunks).toString("utf8");
      const sig = /^t=(\d+),v1=([0-9a-f]{64})$/.exec(req.headers["x-sluice-signature"] ?? "");
      const want = sig && createHmac("sha256", webhookSecret).update(`${sig[1]}.${body}`).digest();
      if (req.method !== "POST" || !sig || !timingSafeEqual(want, Buffer.from(sig[2], "hex"))) {
        refused.push({ method: req.method, headers: req.headers, body });
        res.writeHead(401).end();
        return;
      }
      received.push({ eventId: req.headers["x-sluice-event-id"], body: JSON.parse(body) });
      res.writeHead(204).end();
    });
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  return { url: `http://127.0.0.1:${server.address().port}/hooks/sluice`, received, refused, close: () => new Promise((r) => server.close(r)) };
}
const nav = (name) => page.getByRole("navigation", { name: "Main" }).getByRole("link", { name });

/** axe-core, the 390 px width and the screenshots of the page as it is now. */
async function checkPage(name) {
  const violations = await axeViolations(page);
  assert.deepEqual(violations, [], `axe-core on ${name}`);
  const widths = await shoot(page, name);
  assert.ok(widths[390] <= 390, `${name} is ${widths[390]} px wide in a 390 px window`);
}

describe("console flow", { timeout: 240_000 }, () => {
  before(async () => {
    stack = await startStack();
    A = api(stack);
    receiver = await startReceiver();
    browser = await launchBrowser();
    ({ page, errors } = await newPage(browser));
  });
  after(async () => {
    await browser?.close();
    await stack?.stop();
    await receiver?.close();
  });

  it("signs in with the admin token, from the keyboard", async () => {
    await page.goto(stack.consoleURL + "/");
    const field = page.getByLabel("Admin token");
    await field.waitFor();
    // The field has the focus: type and press Enter.
    assert.equal(await page.evaluate(() => document.activeElement?.getAttribute("placeholder")), "sluice-admin-…");
    await page.keyboard.type("sluice-admin-wrong");
    await page.keyboard.press("Enter");
    await page.getByText("The platform does not accept this token.").waitFor();
    await checkPage("sign-in");
    await field.fill("");
    await field.focus();
    await page.keyboard.type(stack.token);
    await page.keyboard.press("Enter");
    await page.getByRole("heading", { name: "Providers", level: 1 }).waitFor();
    await page.getByText("No providers yet").waitFor();
    // The first Tab stop is the skip link.
    await page.keyboard.press("Tab");
    assert.equal(await page.evaluate(() => document.activeElement?.textContent), "Skip to content");
    await checkPage("providers-empty");
  });

  it("creates a provider pointing at the mock", async () => {
    await page.getByRole("button", { name: "New provider" }).first().click();
    const dialog = page.getByRole("dialog", { name: "New provider" });
    await dialog.getByLabel("Name").fill("openai");
    await dialog.getByLabel("Upstream URL").fill(stack.mockURL);
    await dialog.getByLabel("Upstream API key").fill("sk-upstream-console-test");
    await checkPage("provider-new");
    await dialog.getByRole("button", { name: "Create provider" }).click();
    await page.getByRole("heading", { name: "openai", level: 1 }).waitFor();
    state.providerId = page.url().match(/providers\/(prv-[0-9a-f]+)\//)[1];
    const p = await A("GET", `/providers/${state.providerId}`);
    assert.equal(p.body.url, stack.mockURL);
    assert.equal(p.body.hasApiKey, true);
    assert.ok(!JSON.stringify(p.body).includes("sk-upstream-console-test"), "the upstream key is not readable");
  });

  it("sets a Per Consumer token limit, with inline validation, and sees every gateway apply it", async () => {
    const toggle = page.getByRole("switch", { name: "Per Consumer, provider-wide: Token limit" });
    await toggle.check();
    const count = page.getByLabel("Per Consumer, provider-wide: Token count");
    await count.fill("0");
    await page.getByText("The count must be at least 1.").waitFor();
    await count.fill("12.5");
    await page.getByText("Enter a whole number.").waitFor();
    const unit = page.getByLabel("Per Consumer, provider-wide: Token reset period, unit");
    await unit.selectOption("month");
    await page.getByLabel("Per Consumer, provider-wide: Token reset period, number of units").fill("2");
    await page.getByText(/A month limit resets every calendar month/).waitFor();
    await page.getByRole("button", { name: "Save rate limits" }).click();
    await page.getByText("2 fields need fixing before saving.").waitFor();
    let rl = await A("GET", `/providers/${state.providerId}/rate-limits`);
    assert.deepEqual(rl.body, {}, "nothing is saved while fields are invalid");

    await count.fill("200");
    await unit.selectOption("hour");
    await page.getByLabel("Per Consumer, provider-wide: Token reset period, number of units").fill("1");
    await page.getByRole("button", { name: "Save rate limits" }).click();
    await page.getByText(/Every gateway \(1 gateway\) applied deployment version \d+/).waitFor();
    rl = await A("GET", `/providers/${state.providerId}/rate-limits`);
    assert.deepEqual(rl.body, { consumer: { global: { token: { enabled: true, count: 200, reset: { duration: 1, unit: "hour" } } } } });
    await checkPage("rate-limit");
  });

  it("explains a stale save (412) and keeps the edit", async () => {
    // Someone else saves a backend limit meanwhile.
    const other = {
      backend: { global: { request: { enabled: true, count: 1000, reset: { duration: 1, unit: "minute" } } } },
      consumer: { global: { token: { enabled: true, count: 200, reset: { duration: 1, unit: "hour" } } } },
    };
    const put = await A("PUT", `/providers/${state.providerId}/rate-limits`, other, { "If-Match": "*" });
    assert.equal(put.status, 200);
    await page.getByRole("switch", { name: "Per Consumer, provider-wide: Request limit" }).check();
    await page.getByLabel("Per Consumer, provider-wide: Request count").fill("500");
    await page.getByRole("button", { name: "Save rate limits" }).click();
    const alert = page.getByRole("alert").filter({ hasText: "Someone else changed these limits" });
    await alert.waitFor();
    assert.equal(await page.getByLabel("Per Consumer, provider-wide: Request count").inputValue(), "500", "the edit is kept");
    await alert.getByRole("button", { name: "Compare versions" }).click();
    const dialog = page.getByRole("dialog", { name: "Their version and yours" });
    await dialog.getByText("Backend, provider-wide: 1,000 requests per minute").waitFor();
    await dialog.getByText("Per consumer, provider-wide: 500 requests per hour").waitFor();
    await checkPage("rate-limit-conflict");
    // Take theirs: the form shows their backend limit and drops the edit.
    await dialog.getByRole("button", { name: "Discard mine, load theirs" }).click();
    assert.equal(await page.getByLabel("Backend, provider-wide: Request count").inputValue(), "1000");
    assert.equal(await page.getByRole("switch", { name: "Per Consumer, provider-wide: Request limit" }).isChecked(), false);
    // Put the test's settings back through the console, then a second stale
    // save resolved with "save mine over theirs".
    await page.getByRole("switch", { name: "Backend, provider-wide: Request limit" }).uncheck();
    await A("PUT", `/providers/${state.providerId}/rate-limits`, other, { "If-Match": "*" });
    await page.getByRole("button", { name: "Save rate limits" }).click();
    await alert.waitFor();
    await alert.getByRole("button", { name: "Save mine over theirs" }).click();
    await alert.waitFor({ state: "detached" });
    await page.getByText(/Every gateway \(1 gateway\) applied deployment version \d+/).waitFor();
    const rl = await A("GET", `/providers/${state.providerId}/rate-limits`);
    assert.equal(rl.body.backend.global.request.enabled, false, "mine is saved over theirs");
    assert.equal(rl.body.consumer.global.token.count, 200);
  });

  it("gives the token limit alerts at 80 and 100 %, and sets the alert webhook on the Usage page", async () => {
    const alertAt = page.getByLabel("Per Consumer, provider-wide: Token alert at, percents");
    await alertAt.fill("80, 100");
    await page.getByRole("button", { name: "Save rate limits" }).click();
    await page.getByText(/Every gateway \(1 gateway\) applied deployment version \d+/).waitFor();
    const rl = await A("GET", `/providers/${state.providerId}/rate-limits`);
    assert.deepEqual(rl.body.consumer.global.token, { enabled: true, count: 200, reset: { duration: 1, unit: "hour" }, alertAt: [80, 100] });

    await nav("Usage").click();
    const card = page.getByRole("region", { name: "Alert webhook" });
    await card.getByLabel("URL").fill(receiver.url);
    await card.getByLabel("Signing secret").fill(webhookSecret);
    await card.getByRole("button", { name: "Save webhook" }).click();
    await page.getByText("New alerts are sent to " + receiver.url).waitFor();
    const w = await A("GET", "/alerts/webhook");
    assert.deepEqual(w.body, { url: receiver.url, secretSet: true });
    await page.getByRole("region", { name: "Budget alerts", exact: true }).getByText("No alerts").waitFor();
    await checkPage("usage-webhook");
  });

  it("creates an application granted the provider, and a key shown once", async () => {
    await nav("Applications").click();
    await page.getByText("No applications yet").waitFor();
    await checkPage("applications-empty");
    await page.getByRole("button", { name: "New application" }).first().click();
    const dialog = page.getByRole("dialog", { name: "New application" });
    await dialog.getByLabel("Name").fill("Team A");
    await dialog.getByRole("checkbox", { name: /openai/ }).check();
    await dialog.getByRole("button", { name: "Create application" }).click();
    await page.getByRole("heading", { name: "Team A", level: 1 }).waitFor();
    state.appId = page.url().match(/applications\/(app-[0-9a-f]+)/)[1];
    await page.getByText("No keys").waitFor();
    await page.getByRole("button", { name: "Create key" }).click();
    await page.getByRole("dialog", { name: "Create a key" }).getByRole("button", { name: "Create key" }).click();
    const shown = page.getByRole("dialog", { name: "Your new key" });
    await shown.getByText("Copy it now: you will not see it again").waitFor();
    state.key = (await shown.getByTestId("new-key").textContent()).trim();
    assert.match(state.key, /^sk-sluice-[0-9a-f]{40}$/);
    await shown.getByRole("button", { name: "Copy" }).click();
    await shown.getByRole("button", { name: "Copied", exact: true }).waitFor();
    assert.equal(await page.evaluate(() => navigator.clipboard.readText()), state.key);
    await checkPage("key-created");
    await shown.getByRole("button", { name: "I have copied it" }).click();
    const row = page.getByRole("row", { name: new RegExp(state.key.slice(0, 14)) });
    await row.getByText("active").waitFor();
    assert.equal(await page.getByText(state.key).count(), 0, "the key is not shown again");
    await checkPage("application");
  });

  it("sends requests with the key through the gateway until the 429", async () => {
    const first = await eventually(async () => {
      const r = await chat(stack, "openai", state.key);
      return r.status === 200 ? r : null;
    }, 5000);
    assert.ok(first, "the new key is accepted by the gateway");
    const perRequest = first.body.usage.total_tokens;
    assert.ok(perRequest > 0);
    let served = 1;
    let denied = null;
    for (let i = 0; i < 200 && !denied; i++) {
      const r = await chat(stack, "openai", state.key);
      if (r.status === 200) served++;
      else denied = r;
    }
    assert.ok(denied, "a 429 came");
    assert.equal(denied.status, 429, JSON.stringify(denied.body));
    assert.ok(served * perRequest <= 200 + 16, `served ${served} x ${perRequest} tokens against a 200-token limit`);
    state.served = served;
  });

  it("shows the usage and the denial on the Usage page, and exports the records as CSV", async () => {
    // The in-process gateway ships its records to the platform within seconds.
    const shipped = await eventually(async () => {
      const r = await A("GET", `/usage/records?application=${state.appId}&limit=1000`);
      const recs = r.body?.records ?? [];
      return recs.some((x) => x.resolution === "denied") && recs.filter((x) => x.resolution === "settled").length >= state.served ? recs : null;
    }, 30000, 250);
    assert.ok(shipped, "the gateway's records reached the platform");
    const deniedRecord = shipped.find((x) => x.resolution === "denied");

    // A new load: the page keeps its reports for 30 s (usageStaleTime), and
    // it was open a moment ago to set the webhook.
    await page.goto(stack.consoleURL + "/usage");
    await page.getByRole("heading", { name: "Usage", level: 1 }).waitFor();
    const requests = page.getByTestId("chart-Requests");
    await requests.getByRole("img", { name: new RegExp(`^Requests: ${state.served + 1} in \\d+ hours`) }).waitFor();
    // The canvas has its areas drawn (AreaPlot's data-drawn).
    await requests.locator("canvas[data-drawn]").waitFor();
    const denials = page.getByTestId("chart-Denials");
    await denials.getByRole("img", { name: /^Denials: 1 in \d+ hours/ }).waitFor();
    // The chart's table alternative, from the keyboard.
    await denials.getByRole("radio", { name: "Table" }).focus();
    await page.keyboard.press("Space");
    await denials.getByRole("table", { name: "Denials" }).getByRole("columnheader", { name: "Team A" }).waitFor();

    const top = page.getByRole("table", { name: "Top consumers by application" });
    const row = top.getByRole("row", { name: /Team A/ });
    await row.waitFor();
    const cells = await row.getByRole("cell").allTextContents();
    assert.equal(cells[1], String(state.served + 1), "requests of Team A");
    assert.equal(cells[2], "1", "denials of Team A");

    const recent = page.getByRole("table", { name: "Recent requests, newest first" });
    const deniedRow = recent.getByRole("row").filter({ has: page.getByText("denied", { exact: true }) });
    await deniedRow.first().waitFor();
    assert.match(await deniedRow.first().textContent(), new RegExp(deniedRecord.deniedBy));
    assert.match(await deniedRow.first().textContent(), /429/);
    await checkPage("usage");

    // Filter by model: nothing matches a model that was never asked for.
    await page.getByRole("combobox", { name: "Model" }).fill("no-such-model");
    await page.getByText("No requests in this period").first().waitFor();
    await page.getByRole("combobox", { name: "Model" }).fill("");
    await requests.getByRole("img").waitFor();

    const download = page.waitForEvent("download");
    await page.getByRole("button", { name: "Export CSV" }).click();
    await page.getByRole("menuitem", { name: "Every record in the period" }).click();
    const file = await download;
    assert.match(file.suggestedFilename(), /^usage-records-\d{8}-\d{4}-\d{8}-\d{4}\.csv$/);
    const csv = await readFile(await file.path(), "utf8");
    const lines = csv.trim().split("\n");
    assert.match(lines[0], /resolution/);
    // Records still being shipped when `shipped` was read may be in the
    // file: compare with the platform's count now.
    const now = await A("GET", "/usage/records?limit=1000");
    assert.equal(lines.length - 1, (now.body?.records ?? []).length, "one line per record");
    assert.ok(lines.some((l) => l.includes(state.appId) && l.includes("denied")));
  });

  it("delivers the 80 % and 100 % alerts once each, signed, and shows them and the remaining budget", async () => {
    const alerts = await eventually(async () => {
      const r = await A("GET", "/alerts");
      const as = r.body?.alerts ?? [];
      return as.length >= 2 && as.every((a) => a.delivery.state === "delivered") ? as : null;
    }, 30000, 250);
    assert.ok(alerts, "both alerts were delivered");
    assert.deepEqual(alerts.map((a) => a.threshold).sort((a, b) => a - b), [80, 100]);
    assert.deepEqual(receiver.refused, [], "every POST was signed with the secret");
    assert.deepEqual(
      receiver.received.map((r) => r.body.threshold).sort((a, b) => a - b),
      [80, 100],
      "the receiver got each alert exactly once",
    );
    for (const r of receiver.received) {
      assert.equal(r.eventId, r.body.id);
      assert.equal(r.body.type, "budget.alert");
      assert.equal(r.body.applicationId, state.appId);
      assert.equal(r.body.origin, "$.consumer.global.token");
    }

    await page.reload();
    const table = page.getByRole("table", { name: "Budget alerts, newest first" });
    for (const pct of ["80 %", "100 %"]) {
      const row = table.getByRole("row").filter({ hasText: pct });
      await row.getByText(/^delivered /).waitFor();
      assert.match(await row.textContent(), /Team A.*openai · Per Consumer · provider-wide · tokens per /);
    }
    assert.equal(await table.getByRole("row").count(), 3, "a header and two alerts");
    await checkPage("usage-alerts");

    await page.goto(`${stack.consoleURL}/applications/${state.appId}`);
    const budgets = page.getByRole("table", { name: "Remaining budgets" });
    const line = budgets.getByRole("row").filter({ hasText: "Per Consumer · provider-wide · tokens" });
    await line.waitFor();
    const text = await line.textContent();
    assert.match(text, /alerts at 80, 100 %/);
    assert.match(text, /(^|\D)0 tokens of 200 tokens|over by [\d,]+ tokens of 200 tokens/, text);
    await checkPage("application-budgets");
  });

  it("adds a guardrail through the schema form, with the server's refusal at its field", async () => {
    await page.goto(`${stack.consoleURL}/providers/${state.providerId}/guardrails`);
    await page.getByText("No guardrails").waitFor();
    await checkPage("guardrails-empty");
    await page.getByRole("button", { name: "Add guardrail" }).first().click();
    const dialog = page.getByRole("dialog", { name: "Add a guardrail" });
    await dialog.getByLabel("Policy").click();
    await page.getByRole("option", { name: "model-access (v1)" }).click();
    // The form generated from model-access's schema: add an item to allow.
    const allow = dialog.locator("#params_allow");
    await allow.waitFor();
    await allow.getByRole("button", { name: /add/i }).first().click();
    const item = dialog.locator("#params_allow_0");
    await item.fill("gpt*4");
    await checkPage("guardrail-form");
    await dialog.getByRole("button", { name: "Add guardrail" }).click();
    // The server refuses the pattern: the message is at the item, not only in a summary.
    const message = /is only allowed at the end/;
    const field = dialog.locator('[id="params_allow_0"]').locator("xpath=ancestor::*[contains(@class,'mantine-') and .//*[contains(text(),'only allowed at the end')]][1]");
    await field.first().waitFor();
    assert.match(await field.first().textContent(), message);
    await checkPage("guardrail-refused");
    await item.fill("gpt-4o*");
    await dialog.getByRole("button", { name: "Add guardrail" }).click();
    await dialog.waitFor({ state: "hidden" });
    const list = page.getByRole("list", { name: "Guardrails in chain order" });
    await list.getByRole("heading", { name: "model-access" }).waitFor();
    const gs = await A("GET", `/providers/${state.providerId}/guardrails`);
    assert.deepEqual(
      gs.body.guardrails.map((g) => [g.name, g.params]),
      [["model-access", { allow: ["gpt-4o*"] }]],
    );
  });

  it("adds a guardrail as YAML, toggles consumerBased, reorders and deletes", async () => {
    await page.getByRole("button", { name: "Add guardrail" }).first().click();
    const dialog = page.getByRole("dialog", { name: "Add a guardrail" });
    await dialog.locator("label", { hasText: "YAML / JSON" }).click();
    await dialog.getByLabel("Entry").fill("name: basic-ratelimit\nversion: v1\nparams:\n  limits:\n    - requests: 1000\n      duration: 1x\n");
    await dialog.getByRole("button", { name: "Add guardrail" }).click();
    await dialog.getByText("$.params.limits[0].duration").waitFor();
    await checkPage("guardrail-yaml");
    await dialog.getByLabel("Entry").fill("name: basic-ratelimit\nversion: v1\nparams:\n  limits:\n    - requests: 1000\n      duration: 1h\n");
    await dialog.getByRole("button", { name: "Add guardrail" }).click();
    await dialog.waitFor({ state: "hidden" });
    const list = page.getByRole("list", { name: "Guardrails in chain order" });
    await list.getByRole("heading", { name: "basic-ratelimit" }).waitFor();

    await list.getByRole("switch", { name: /consumerBased/ }).check();
    await eventually(async () => (await A("GET", `/providers/${state.providerId}/guardrails`)).body.guardrails[1].params.consumerBased === true);

    await page.getByRole("button", { name: "Move basic-ratelimit up" }).click();
    await eventually(async () => (await A("GET", `/providers/${state.providerId}/guardrails`)).body.guardrails[0].name === "basic-ratelimit");
    await list.getByRole("listitem").first().getByRole("heading", { name: "basic-ratelimit" }).waitFor();
    await checkPage("guardrails");

    await page.getByRole("button", { name: "Delete basic-ratelimit" }).click();
    const confirm = page.getByRole("dialog", { name: "Delete basic-ratelimit?" });
    await confirm.getByRole("button", { name: "Delete guardrail" }).click();
    await confirm.waitFor({ state: "hidden" });
    await list.getByRole("heading", { name: "basic-ratelimit" }).waitFor({ state: "detached" });
    const gs = await A("GET", `/providers/${state.providerId}/guardrails`);
    assert.deepEqual(gs.body.guardrails.map((g) => g.name), ["model-access"]);
  });

  it("shows the generated chain with origins, the YAML, the gateways and the settings", async () => {
    await page.getByRole("tab", { name: "Deployment" }).click();
    const chain = page.getByRole("table", { name: "Policy chain in order" });
    await chain.waitFor();
    const rows = await chain.locator("tbody tr").allTextContents();
    assert.equal(rows.length, 4, rows.join("\n"));
    assert.match(rows[0], /api-key-auth.*Access/);
    assert.match(rows[1], /token-based-ratelimit.*Rate Limit: Per Consumer · provider-wide · Token/);
    assert.match(rows[2], /model-access.*Guardrail #1/);
    assert.match(rows[3], /llm-cost.*Cost: prices every request/);
    await checkPage("deployment");
    await page.locator("label", { hasText: /^YAML$/ }).click();
    await page.getByLabel("Deployment YAML").getByText(/token-based-ratelimit/).first().waitFor();
    assert.ok(!(await page.getByLabel("Deployment YAML").textContent()).includes("sk-upstream-console-test"), "the upstream key is redacted");
    await checkPage("deployment-yaml");

    await page.getByRole("tab", { name: "Gateways" }).click();
    await page.getByRole("cell", { name: /in-process gateway/ }).waitFor();
    await page.getByText(/1 of 1/).waitFor();
    await checkPage("provider-gateways");

    await page.getByRole("tab", { name: "Settings" }).click();
    await page.getByRole("button", { name: "Replace key" }).click();
    await page.getByLabel("New upstream API key").fill("sk-upstream-replaced");
    await page.getByRole("button", { name: "Save provider" }).click();
    await page.getByText("Provider saved").waitFor();
    await checkPage("provider-settings");
  });

  it("revokes the key with confirmation, and the next request is refused", async () => {
    await page.goto(`${stack.consoleURL}/applications/${state.appId}`);
    await page.getByRole("button", { name: /Revoke key/ }).click();
    const confirm = page.getByRole("dialog", { name: "Revoke this key?" });
    await checkPage("key-revoke");
    await confirm.getByRole("button", { name: "Revoke key" }).click();
    await page.getByRole("row", { name: new RegExp(state.key.slice(0, 14)) }).getByText("revoked").waitFor();
    const refused = await eventually(async () => {
      const r = await chat(stack, "openai", state.key);
      return r.status === 401 ? r : null;
    }, 2000);
    assert.ok(refused, "the revoked key is refused within 2 s");
  });

  it("lists the applications, gateways and the audit log", async () => {
    await nav("Applications").click();
    await page.getByRole("link", { name: "Team A" }).waitFor();
    await checkPage("applications");
    await nav("Gateways").click();
    await page.getByText("Current deployment version").waitFor();
    await checkPage("gateways");
    await nav("Audit log").click();
    await page.getByText("key.revoke").waitFor();
    await page.getByRole("button", { name: /Show the change of entry/ }).first().click();
    await checkPage("audit");
    await nav("Providers").click();
    await page.getByRole("link", { name: "openai" }).waitFor();
    await checkPage("providers");
  });

  it("signs out, and the token is forgotten", async () => {
    await page.getByRole("button", { name: "Sign out" }).click();
    await page.getByLabel("Admin token").waitFor();
    const stored = await page.evaluate(() => JSON.stringify({ ...sessionStorage }) + JSON.stringify({ ...localStorage }) + document.cookie);
    assert.ok(!stored.includes(stack.token), "the token is not kept anywhere after sign-out");
    await page.reload();
    await page.getByLabel("Admin token").waitFor();
  });

  it("logged no console errors", () => {
    assert.deepEqual(errors, []);
  });
});
