import { describe, expect, it } from "vitest";
import type { RateLimits } from "../api/client";
import { canonical, describe as describeLimits, emptyScope, fromForm, periodText, serverErrors, toForm, type FormState } from "./model";

const full: RateLimits = {
  backend: { global: { token: { enabled: true, count: 1000000, reset: { duration: 1, unit: "hour" } } } },
  consumer: {
    perResource: {
      default: { request: { enabled: false, count: 10, reset: { duration: 5, unit: "minute" } } },
      resources: [
        { resource: "/chat/completions", limit: { cost: { enabled: true, amount: 2.5, reset: { duration: 1, unit: "month" } } } },
        { resource: "/embeddings", limit: {} },
      ],
    },
  },
};

function form(): FormState {
  return { backend: emptyScope(), consumer: emptyScope() };
}

describe("rate limit form", () => {
  it("round-trips the API document", () => {
    const { value, errors } = fromForm(toForm(full));
    expect(errors).toEqual({});
    expect(value).toEqual(full);
    expect(canonical(full)).toBe(JSON.stringify(full));
  });

  it("sends nothing for an empty form", () => {
    expect(fromForm(form())).toEqual({ value: {}, errors: {} });
  });

  it("keeps only the active mode of a scope", () => {
    const f = toForm(full);
    f.consumer.mode = "global";
    f.consumer.global.token = { enabled: true, value: "500", duration: "1", unit: "day", alertAt: "" };
    expect(fromForm(f).value.consumer).toEqual({ global: { token: { enabled: true, count: 500, reset: { duration: 1, unit: "day" } } } });
  });

  const bad: [string, Partial<{ value: string; duration: string; unit: "month" | "hour"; alertAt: string }>, "token" | "cost", string, RegExp][] = [
    ["empty count", { value: "" }, "token", "$.consumer.global.token.count", /number of tokens/],
    ["zero count", { value: "0" }, "token", "$.consumer.global.token.count", /at least 1/],
    ["negative count", { value: "-5" }, "token", "$.consumer.global.token.count", /whole number/],
    ["fractional count", { value: "1.5" }, "token", "$.consumer.global.token.count", /whole number/],
    ["huge count", { value: "10000000000000001" }, "token", "$.consumer.global.token.count", /at most/],
    ["zero amount", { value: "0" }, "cost", "$.consumer.global.cost.amount", /at least/],
    ["text amount", { value: "five" }, "cost", "$.consumer.global.cost.amount", /amount such as/],
    ["zero duration", { duration: "0" }, "token", "$.consumer.global.token.reset.duration", /at least 1/],
    ["two months", { duration: "2", unit: "month" }, "token", "$.consumer.global.token.reset.duration", /calendar month/],
    ["an alert percent over 100", { alertAt: "50, 120" }, "token", "$.consumer.global.token.alertAt", /from 1 to 100/],
    ["alert percents out of order", { alertAt: "80, 50" }, "cost", "$.consumer.global.cost.alertAt", /ascending/],
    ["an alert percent twice", { alertAt: "80, 80" }, "token", "$.consumer.global.token.alertAt", /ascending/],
    ["a fractional alert percent", { alertAt: "50.5" }, "token", "$.consumer.global.token.alertAt", /whole percents/],
    ["eleven alert percents", { alertAt: "1,2,3,4,5,6,7,8,9,10,11" }, "token", "$.consumer.global.token.alertAt", /At most 10/],
  ];
  for (const [name, row, kind, path, msg] of bad) {
    it(`refuses an enabled row with ${name} at ${path}`, () => {
      const f = form();
      f.consumer.global[kind] = { enabled: true, value: "100", duration: "1", unit: "hour", alertAt: "", ...row };
      const { value, errors } = fromForm(f);
      expect(Object.keys(errors)).toEqual([path]);
      expect(errors[path]).toMatch(msg);
      expect(value.consumer).toBeUndefined();
    });
    it(`drops a disabled row with ${name} without an error`, () => {
      const f = form();
      f.consumer.global[kind] = { enabled: false, value: "100", duration: "1", unit: "hour", alertAt: "", ...row };
      expect(fromForm(f)).toEqual({ value: {}, errors: {} });
    });
  }

  it("accepts a dollar sign and a fractional amount", () => {
    const f = form();
    f.backend.global.cost = { enabled: true, value: "$0.25", duration: "1", unit: "day", alertAt: "" };
    expect(fromForm(f).value).toEqual({ backend: { global: { cost: { enabled: true, amount: 0.25, reset: { duration: 1, unit: "day" } } } } });
  });

  it("refuses a resource listed twice, at the second row", () => {
    const f = form();
    f.backend.mode = "perResource";
    const row = { enabled: true, value: "5", duration: "1", unit: "minute" as const, alertAt: "" };
    f.backend.resources = [
      { resource: "/chat/completions", limits: { ...toForm({}).backend.global, request: row } },
      { resource: "/chat/completions", limits: { ...toForm({}).backend.global, request: row } },
    ];
    expect(fromForm(f).errors).toEqual({ "$.backend.perResource.resources[1].resource": "/chat/completions is already listed above." });
  });

  it("sends alert percents as alertAt, reads them back, and leaves an empty field out", () => {
    const f = form();
    f.consumer.global.token = { enabled: true, value: "1000", duration: "1", unit: "hour", alertAt: " 50,80 , 100% " };
    f.consumer.global.request = { enabled: true, value: "10", duration: "1", unit: "minute", alertAt: "" };
    const { value, errors } = fromForm(f);
    expect(errors).toEqual({});
    expect(value).toEqual({
      consumer: {
        global: {
          request: { enabled: true, count: 10, reset: { duration: 1, unit: "minute" } },
          token: { enabled: true, count: 1000, reset: { duration: 1, unit: "hour" }, alertAt: [50, 80, 100] },
        },
      },
    });
    expect(toForm(value).consumer.global.token.alertAt).toBe("50, 80, 100");
    expect(describeLimits(value)).toContain("Per consumer, provider-wide: 1,000 tokens per hour, alerts at 50, 80, 100 %");
  });

  it("shows the server's alertAt problem at the row's Alert at field", () => {
    const { fields } = serverErrors([{ path: "$.backend.global.cost.alertAt[1]", message: "must be above 80" }]);
    expect(fields).toEqual({ "$.backend.global.cost.alertAt": "must be above 80" });
  });

  it("maps server problems to fields, and keeps the rest apart", () => {
    const { fields, other } = serverErrors([
      { path: "$.backend.global.token.count", message: "number must be at least 1" },
      { path: "$.consumer.perResource.resources[2].limit.cost.reset.duration", message: "a month limit" },
      { path: "$.consumer.perResource.resources[0].resource", message: "unknown resource" },
      { path: "$.backend", message: "holds both global and perResource" },
      { path: "$", message: "list llm-cost after llm-cost-based-ratelimit" },
    ]);
    expect(fields).toEqual({
      "$.backend.global.token.count": "number must be at least 1",
      "$.consumer.perResource.resources[2].limit.cost.reset.duration": "a month limit",
      "$.consumer.perResource.resources[0].resource": "unknown resource",
    });
    expect(other).toEqual(["$.backend: holds both global and perResource", "list llm-cost after llm-cost-based-ratelimit"]);
  });

  it("reads periods", () => {
    expect(periodText("1", "hour")).toBe("per hour");
    expect(periodText("5", "minute")).toBe("per 5 minutes");
    expect(periodText("1", "day")).toBe("per UTC day");
    expect(periodText("1", "month")).toBe("per calendar month (UTC)");
    expect(periodText("2", "month")).toBe("");
  });
});

describe("describe", () => {
  it("writes each limit as a sentence", () => {
    expect(describeLimits(full)).toEqual([
      "Backend, provider-wide: 1,000,000 tokens per hour",
      "Per consumer, default per endpoint: 10 requests per 5 minutes (off)",
      "Per consumer, /chat/completions: $2.5 per calendar month (UTC)",
    ]);
    expect(describeLimits({})).toEqual(["No limits."]);
  });
});
