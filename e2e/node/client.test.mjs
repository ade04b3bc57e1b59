// Drives a running Sluice gateway with the official openai npm client.
// Environment: SLUICE_BASE_URL (e.g. http://127.0.0.1:8080/openai/v1) and
// SLUICE_API_KEY (an application key the gateway accepts).
import { test } from "node:test";
import assert from "node:assert/strict";
import OpenAI from "openai";

const baseURL = process.env.SLUICE_BASE_URL;
const apiKey = process.env.SLUICE_API_KEY;
if (!baseURL || !apiKey) {
  throw new Error("SLUICE_BASE_URL and SLUICE_API_KEY must be set");
}
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0 });

test("chat completion", async () => {
  const res = await client.chat.completions.create({
    model: "gpt-4o-mini",
    messages: [{ role: "user", content: "hello from node" }],
    max_tokens: 5,
  });
  assert.equal(res.choices.length, 1);
  assert.equal(res.usage.completion_tokens, 5);
  assert.ok(res.usage.prompt_tokens > 0);
});

test("streaming chat completion with usage", async () => {
  const stream = await client.chat.completions.create({
    model: "gpt-4o-mini",
    messages: [{ role: "user", content: "stream please" }],
    max_tokens: 4,
    stream: true,
    stream_options: { include_usage: true },
  });
  let content = "";
  let usage = null;
  let finished = false;
  for await (const chunk of stream) {
    for (const c of chunk.choices) {
      content += c.delta?.content ?? "";
      if (c.finish_reason) finished = true;
    }
    if (chunk.usage) usage = chunk.usage;
  }
  assert.ok(content.length > 0);
  assert.ok(finished);
  assert.equal(usage?.completion_tokens, 4);
});

test("embeddings", async () => {
  const res = await client.embeddings.create({
    model: "text-embedding-3-small",
    input: ["a", "b"],
  });
  assert.equal(res.data.length, 2);
  assert.ok(res.usage.prompt_tokens > 0);
});

test("invalid key is a 401 with the OpenAI envelope", async () => {
  const bad = new OpenAI({ baseURL, apiKey: "sk-wrong", maxRetries: 0 });
  await assert.rejects(
    bad.chat.completions.create({ model: "gpt-4o-mini", messages: [{ role: "user", content: "x" }] }),
    (err) => {
      assert.equal(err.status, 401);
      assert.equal(err.code, "invalid_api_key");
      assert.equal(err.type, "authentication_error");
      return true;
    },
  );
});

test("upstream error passes through", async () => {
  await assert.rejects(
    client.chat.completions.create(
      { model: "gpt-4o-mini", messages: [{ role: "user", content: "x" }] },
      { headers: { "x-mock-status": "400" } },
    ),
    (err) => {
      assert.equal(err.status, 400);
      return true;
    },
  );
});

// A spent budget at the client's DEFAULT retry settings (maxRetries 2,
// Retry-After obeyed without a cap): the gateway's x-should-retry: false
// makes the call fail at once with the 429 instead of sleeping until the
// budget resets (Retry-After is the seconds to 00:00 UTC, hours away). The
// Go side (npm_test.go) checks that the gateway saw exactly one denied
// request; the timeout fails a client that went to sleep.
const budgetURL = process.env.SLUICE_BUDGET_BASE_URL;
test("a spent budget fails at once at default retry settings", { skip: !budgetURL, timeout: 30_000 }, async () => {
  const defaults = new OpenAI({ baseURL: budgetURL, apiKey });
  assert.equal(defaults.maxRetries, 2);
  const spent = await defaults.chat.completions.create({
    model: "gpt-4o",
    messages: [{ role: "user", content: "spend the budget" }],
    max_tokens: 1000,
  });
  assert.equal(spent.usage.completion_tokens, 1000);
  await assert.rejects(
    defaults.chat.completions.create({ model: "gpt-4o", messages: [{ role: "user", content: "one more" }], max_tokens: 5 }),
    (err) => {
      assert.equal(err.status, 429);
      assert.equal(err.code, "budget_exceeded");
      assert.equal(err.headers.get("x-should-retry"), "false");
      assert.ok(Number(err.headers.get("retry-after")) > 3600, `retry-after ${err.headers.get("retry-after")}`);
      assert.match(err.message, /resets at \d{4}-\d\d-\d\dT00:00:00Z/);
      return true;
    },
  );
});
