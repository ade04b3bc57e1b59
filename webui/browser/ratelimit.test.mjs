// The Rate Limit tab's Per Resource mode and the server's field errors, in
// the browser against a real `sluice serve`: a default block and endpoint
// limits saved as the API's perResource document; the mode switch keeps the
// other mode's values until saved; a 422 from the server is shown at the
// field its JSON path names (the response is replaced in the browser, as no
// form value passes the console's checks and fails the server's); Reset.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { api, axeViolations, launchBrowser, newPage, shoot, startStack } from "./harness.mjs";

let stack, browser, page, errors, A, providerId;

describe("rate limit tab", { timeout: 120_000 }, () => {
  before(async () => {
    stack = await startStack();
    A = api(stack);
    browser = await launchBrowser();
    ({ page, errors } = await newPage(browser));
    const p = await A("POST", "/providers", { name: "anthropic", type: "anthropic", url: stack.mockURL });
    providerId = p.body.id;
    await page.goto(`${stack.consoleURL}/providers/${providerId}/rate-limits`);
    await page.getByLabel("Admin token").fill(stack.token);
    await page.keyboard.press("Enter");
    await page.getByRole("heading", { name: "Backend", level: 2 }).waitFor();
  });
  after(async () => {
    await browser?.close();
    await stack?.stop();
  });

  it("saves a per-resource backend limit: a default and an endpoint of its own", async () => {
    // A provider-wide value first: it stays in the form, not in the document.
    await page.getByRole("switch", { name: "Backend, provider-wide: Request limit" }).check();
    await page.getByLabel("Backend, provider-wide: Request count").fill("999");
    await page.getByRole("radiogroup", { name: "Backend mode" }).locator("label", { hasText: "Per Resource" }).click();
    await page.getByRole("switch", { name: "Backend, default: Token limit" }).check();
    await page.getByLabel("Backend, default: Token count").fill("50000");
    await page.getByRole("button", { name: "Add endpoint" }).click();
    await page.getByRole("menuitem", { name: "/messages" }).click();
    await page.getByRole("switch", { name: "Backend, /messages: Cost limit" }).check();
    await page.getByLabel("Backend, /messages: Cost amount in USD").fill("2.50");
    await page.getByLabel("Backend, /messages: Cost reset period, unit").selectOption("day");
    // Switching modes keeps each mode's values until the save.
    const mode = page.getByRole("radiogroup", { name: "Backend mode" });
    await mode.locator("label", { hasText: "Provider-wide" }).click();
    assert.equal(await page.getByLabel("Backend, provider-wide: Request count").inputValue(), "999");
    await mode.locator("label", { hasText: "Per Resource" }).click();
    assert.equal(await page.getByLabel("Backend, default: Token count").inputValue(), "50000");
    assert.deepEqual(await axeViolations(page), []);
    await shoot(page, "rate-limit-per-resource");
    await page.getByRole("button", { name: "Save rate limits" }).click();
    await page.getByText(/applied deployment version/).waitFor();
    const rl = await A("GET", `/providers/${providerId}/rate-limits`);
    assert.deepEqual(rl.body, {
      backend: {
        perResource: {
          default: { token: { enabled: true, count: 50000, reset: { duration: 1, unit: "hour" } } },
          resources: [{ resource: "/messages", limit: { cost: { enabled: true, amount: 2.5, reset: { duration: 1, unit: "day" } } } }],
        },
      },
    });
    const dep = await A("GET", `/providers/${providerId}/deployment`);
    const names = dep.body.entries.map((e) => `${e.name}:${e.origin.ref ?? e.origin.kind}`);
    assert.deepEqual(names, [
      "api-key-auth:access",
      "llm-cost-based-ratelimit:$.backend.perResource.resources[0].limit.cost",
      "token-based-ratelimit:$.backend.perResource.default.token",
      "llm-cost:cost",
    ]);
  });

  it("shows a server's 422 at the field its path names, and Reset drops the edit", async () => {
    await page.route("**/api/v1/providers/*/rate-limits", (route) =>
      route.request().method() === "PUT"
        ? route.fulfill({
            status: 422,
            contentType: "application/json",
            body: JSON.stringify({
              error: {
                code: "validation_failed",
                message: "invalid",
                details: [
                  { path: "$.backend.perResource.resources[0].limit.cost.amount", message: "the server says no to this amount" },
                  { path: "$", message: "a chain-level problem" },
                ],
              },
            }),
          })
        : route.continue(),
    );
    await page.getByLabel("Backend, /messages: Cost amount in USD").fill("3");
    await page.getByRole("button", { name: "Save rate limits" }).click();
    const field = page.locator('[data-row="$.backend.perResource.resources[0].limit.cost"]');
    await field.getByText("the server says no to this amount").waitFor();
    await page.getByRole("alert").filter({ hasText: "a chain-level problem" }).waitFor();
    await page.unroute("**/api/v1/providers/*/rate-limits");
    // Editing the field clears its server error.
    await page.getByLabel("Backend, /messages: Cost amount in USD").fill("4");
    assert.equal(await field.getByText("the server says no to this amount").count(), 0);
    await page.getByRole("button", { name: "Reset" }).click();
    assert.equal(await page.getByLabel("Backend, /messages: Cost amount in USD").inputValue(), "2.5");
    await page.getByText("No unsaved changes.").waitFor();
  });

  it("removes an endpoint and goes back to provider-wide", async () => {
    await page.getByRole("button", { name: "Remove the /messages limits" }).click();
    await page.getByRole("radiogroup", { name: "Backend mode" }).locator("label", { hasText: "Provider-wide" }).click();
    // The saved document had no provider-wide limits: the block is empty.
    assert.equal(await page.getByLabel("Backend, provider-wide: Request count").inputValue(), "");
    await page.getByRole("switch", { name: "Backend, provider-wide: Request limit" }).check();
    await page.getByLabel("Backend, provider-wide: Request count").fill("999");
    await page.getByRole("button", { name: "Save rate limits" }).click();
    await page.getByText(/applied deployment version/).waitFor();
    const rl = await A("GET", `/providers/${providerId}/rate-limits`);
    assert.deepEqual(rl.body, { backend: { global: { request: { enabled: true, count: 999, reset: { duration: 1, unit: "hour" } } } } });
  });

  it("logged no console errors", () => {
    assert.deepEqual(errors, []);
  });
});
