import { QueryClient } from "@tanstack/react-query";
import { afterEach, expect, it, vi } from "vitest";
import { makeClient } from "../api/client";
import { mockApi, type Handler } from "../test/api";
import { prefetchUsage } from "./queries";

afterEach(() => vi.unstubAllGlobals());

const now = new Date("2026-12-01T12:00:00Z");
const report = { from: "", to: "", bucket: "hour", groupBy: [], rows: [], totals: {} };
const routes = (over: Record<string, Handler> = {}): Record<string, Handler> => ({
  "GET /usage": () => ({ body: report }),
  "GET /usage/records": () => ({ body: { records: [] } }),
  "GET /applications": () => ({ body: { applications: [] } }),
  "GET /providers": () => ({ body: { providers: [] } }),
  "GET /alerts": () => ({ body: { alerts: [], nextCursor: "" } }),
  "GET /alerts/webhook": () => ({ body: { url: "", secretSet: false } }),
  ...over,
});
const every = ["/usage application", "/usage application denied", "/usage model", "/usage/records", "/applications", "/providers", "/alerts", "/alerts/webhook"];

it.each<{ name: string; cached: boolean; over: Record<string, Handler>; asked: string[] }>([
  { name: "a cold cache: every query of the default view", cached: false, over: {}, asked: every },
  { name: "a failed answer does not hold the page", cached: false, over: { "GET /alerts": () => ({ status: 500, body: { error: { code: "internal", message: "x" } } }) }, asked: every },
  {
    name: "cached lists are not asked again",
    cached: true,
    over: {},
    asked: ["/usage application", "/usage application denied", "/usage model", "/usage/records"],
  },
])("$name", async ({ cached, over, asked }) => {
  const calls = mockApi(routes(over));
  const qc = new QueryClient({ defaultOptions: { queries: { retry: false } } });
  const client = makeClient(
    () => "t",
    () => {},
  );
  if (cached) {
    await prefetchUsage(qc, client, now);
    calls.length = 0;
  }
  // A minute on: new report ranges, the same lists.
  await prefetchUsage(qc, client, new Date(now.getTime() + 60_000));
  const got = calls.map((c) => [c.path, c.search.get("groupBy"), c.search.get("resolution")].filter(Boolean).join(" "));
  expect(got.sort()).toEqual([...asked].sort());
});

it("asks the model filter's choices by day and the charts' reports by hour", async () => {
  const calls = mockApi(routes());
  const qc = new QueryClient({ defaultOptions: { queries: { retry: false } } });
  const client = makeClient(
    () => "t",
    () => {},
  );
  await prefetchUsage(qc, client, now);
  const buckets = calls.filter((c) => c.path === "/usage").map((c) => [c.search.get("groupBy"), c.search.get("resolution") ?? "", c.search.get("bucket")].join(" "));
  expect(buckets.sort()).toEqual(["application  hour", "application denied hour", "model  day"]);
});
