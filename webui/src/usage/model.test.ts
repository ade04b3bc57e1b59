import { describe, expect, it } from "vitest";
import {
  bucketStarts,
  exportName,
  minuteEnd,
  pivot,
  rangeFor,
  recordsQuery,
  searchString,
  tokensByKind,
  topConsumers,
  usageQuery,
  usd,
  type UsageReport,
  type UsageRow,
} from "./model";

const zero = { requests: 0, promptTokens: 0, cachedTokens: 0, cacheWriteTokens: 0, completionTokens: 0, reasoningTokens: 0, totalTokens: 0, costMicroUsd: 0, meanLatencyUs: 0 };

function row(start: string, extra: Partial<UsageRow>): UsageRow {
  return { ...zero, start, ...extra };
}

function report(rows: UsageRow[], from = "2026-12-01T10:00:00Z", to = "2026-12-01T13:00:00Z"): UsageReport {
  const totals = { ...zero };
  for (const r of rows) for (const k of Object.keys(zero) as (keyof typeof zero)[]) totals[k] += r[k];
  return { from, to, bucket: "hour", groupBy: ["application"], rows, totals };
}

const now = new Date("2026-12-01T12:34:00Z");

describe("rangeFor", () => {
  const cases: [Parameters<typeof rangeFor>[0], string, string][] = [
    ["1h", "2026-12-01T11:34:00.000Z", "hour"],
    ["24h", "2026-11-30T12:34:00.000Z", "hour"],
    ["7d", "2026-11-24T12:34:00.000Z", "hour"],
    ["30d", "2026-11-01T12:34:00.000Z", "day"],
  ];
  for (const [period, from, bucket] of cases) {
    it(`asks ${period} by ${bucket}, ending now`, () => {
      expect(rangeFor(period, now)).toEqual({ from: new Date(from), to: now, bucket, live: true });
    });
  }
  it("asks a custom range by hour up to 7 days and by day beyond, and refuses an empty one", () => {
    const from = new Date("2026-11-01T00:00:00Z");
    expect(rangeFor("custom", now, { from, to: new Date("2026-11-08T00:00:00Z") })?.bucket).toBe("hour");
    expect(rangeFor("custom", now, { from, to: new Date("2026-11-08T00:00:01Z") })).toMatchObject({ bucket: "day", live: false });
    expect(rangeFor("custom", now, { from, to: from })).toBeNull();
    expect(rangeFor("custom", now, { from, to: null })).toBeNull();
  });
  it("ends a live period at the end of the current minute", () => {
    expect(minuteEnd(Date.parse("2026-12-01T12:34:56.789Z")).toISOString()).toBe("2026-12-01T12:35:00.000Z");
    // In the first minute of an hour, the range still holds that hour.
    expect(minuteEnd(Date.parse("2026-12-01T13:00:00.000Z")).toISOString()).toBe("2026-12-01T13:01:00.000Z");
  });
});

describe("queries", () => {
  const r = rangeFor("24h", now)!;
  it("leaves empty filters out and asks denials by resolution", () => {
    expect(usageQuery(r, { application: "app-1", model: "" }, "model", true)).toEqual({
      from: "2026-11-30T12:34:00.000Z",
      to: "2026-12-01T12:34:00.000Z",
      bucket: "hour",
      groupBy: ["model"],
      resolution: "denied",
      application: "app-1",
    });
  });
  it("asks the records of a live range without an end, of a custom range with it", () => {
    expect(recordsQuery(r, { provider: "openai" }, 50)).toEqual({ from: "2026-11-30T12:34:00.000Z", limit: 50, provider: "openai" });
    const c = rangeFor("custom", now, { from: new Date("2026-11-01T00:00:00Z"), to: new Date("2026-11-02T00:00:00Z") })!;
    expect(recordsQuery(c, {}, 10).to).toBe("2026-11-02T00:00:00.000Z");
  });
  it("writes a search string with arrays comma-separated", () => {
    expect(searchString({ groupBy: ["application", "model"], from: "x", model: "", limit: 5 })).toBe("groupBy=application%2Cmodel&from=x&limit=5");
  });
  it("names an export by its range", () => {
    expect(exportName("records", r)).toBe("usage-records-20261130-1234-20261201-1234.csv");
  });
});

describe("pivot", () => {
  it("gives every bucket a point, the top series by the metric and the rest as Other", () => {
    const rows = [
      row("2026-12-01T10:00:00Z", { application: "a", requests: 5 }),
      row("2026-12-01T10:00:00Z", { application: "b", requests: 1 }),
      row("2026-12-01T12:00:00Z", { application: "c", requests: 2 }),
      row("2026-12-01T12:00:00Z", { application: "a", requests: 1 }),
    ];
    const { data, series } = pivot(report(rows), "application", "requests", (v) => v.toUpperCase(), 2);
    expect(series).toEqual(["A", "C", "Other"]);
    expect(data).toEqual([
      { start: "2026-12-01T10:00:00.000Z", A: 5, C: 0, Other: 1 },
      { start: "2026-12-01T11:00:00.000Z", A: 0, C: 0, Other: 0 },
      { start: "2026-12-01T12:00:00.000Z", A: 1, C: 2, Other: 0 },
    ]);
  });
  it("has no series without usage, and no Other when everything is shown", () => {
    expect(pivot(report([]), "application", "requests", String).series).toEqual([]);
    expect(pivot(report([row("2026-12-01T10:00:00Z", { model: "m", costMicroUsd: 3 })]), "model", "costMicroUsd", String).series).toEqual(["m"]);
  });
  it("lists day buckets in UTC", () => {
    expect(bucketStarts("2026-11-29T00:00:00Z", "2026-12-01T00:00:00Z", "day")).toEqual(["2026-11-29T00:00:00.000Z", "2026-11-30T00:00:00.000Z"]);
  });
});

it("splits tokens by kind so that the kinds add up to the total", () => {
  const r = row("2026-12-01T11:00:00Z", { promptTokens: 100, cachedTokens: 30, cacheWriteTokens: 10, completionTokens: 50, reasoningTokens: 20, totalTokens: 150 });
  const p = tokensByKind(report([r]))[1];
  expect(p).toEqual({
    start: "2026-12-01T11:00:00.000Z",
    Input: 60,
    "Input, cached": 30,
    "Input, cache write": 10,
    Output: 30,
    "Output, reasoning": 20,
  });
  expect(60 + 30 + 10 + 30 + 20).toBe(r.totalTokens);
});

it("ranks the top consumers by cost, with their denials and share", () => {
  const rows = [
    row("2026-12-01T10:00:00Z", { keyId: "k1", requests: 10, totalTokens: 100, costMicroUsd: 1000 }),
    row("2026-12-01T11:00:00Z", { keyId: "k1", requests: 5, totalTokens: 50, costMicroUsd: 500 }),
    row("2026-12-01T11:00:00Z", { keyId: "k2", requests: 20, totalTokens: 400, costMicroUsd: 4500 }),
  ];
  const denied = report([row("2026-12-01T11:00:00Z", { keyId: "k1", requests: 3 })]);
  expect(topConsumers(report(rows), denied, "key")).toEqual([
    { value: "k2", requests: 20, denied: 0, totalTokens: 400, costMicroUsd: 4500, costShare: 0.75 },
    { value: "k1", requests: 15, denied: 3, totalTokens: 150, costMicroUsd: 1500, costShare: 0.25 },
  ]);
});

it("writes micro-USD as dollars without rounding small amounts away", () => {
  expect(usd(0)).toBe("$0.00");
  expect(usd(1_234_567_890)).toBe("$1,234.57");
  expect(usd(125)).toBe("$0.000125");
  expect(usd(10_000)).toBe("$0.01");
  expect(usd(-2_500_000)).toBe("-$2.50");
});
