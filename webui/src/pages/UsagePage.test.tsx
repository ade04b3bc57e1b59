// The Usage page against a mocked platform: the queries it asks, the charts'
// labels, the split switch, a custom range and the summary CSV export.
import { screen, waitFor, within } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { afterEach, beforeEach, expect, it, vi } from "vitest";
import { mockApi, type Call } from "../test/api";
import { renderUI } from "../test/render";
import type { UsageReport } from "../usage/model";
import { UsagePage } from "./UsagePage";

beforeEach(() => {
  sessionStorage.setItem("sluice.adminToken", "sluice-admin-test");
});
afterEach(() => {
  sessionStorage.clear();
  vi.unstubAllGlobals();
  vi.restoreAllMocks();
});

const zero = { requests: 0, promptTokens: 0, cachedTokens: 0, cacheWriteTokens: 0, completionTokens: 0, reasoningTokens: 0, totalTokens: 0, costMicroUsd: 0, meanLatencyUs: 0 };

/** A report of one hour with usage by app-1 (or gpt-4o when grouped by model). */
function report(c: Call): UsageReport {
  const dim = c.search.get("groupBy") ?? "application";
  const denied = c.search.get("resolution") === "denied";
  const value = dim === "model" ? "gpt-4o" : dim === "key" ? "key-1" : "app-1";
  const row = { ...zero, start: "2026-12-01T10:00:00Z", [dim === "key" ? "keyId" : dim]: value, requests: denied ? 2 : 7, totalTokens: denied ? 0 : 700, promptTokens: denied ? 0 : 500, completionTokens: denied ? 0 : 200, costMicroUsd: denied ? 0 : 1_250_000 };
  return { from: "2026-12-01T10:00:00Z", to: "2026-12-01T12:00:00Z", bucket: "hour", groupBy: [dim as "application"], rows: [row], totals: { ...zero, requests: row.requests, totalTokens: row.totalTokens, costMicroUsd: row.costMicroUsd } };
}

function api() {
  return mockApi({
    "GET /applications": () => ({ body: { applications: [{ id: "app-1", name: "Team A", providers: [], createdAt: "", updatedAt: "" }] } }),
    "GET /providers": () => ({ body: { providers: [] } }),
    "GET /usage": (c) => ({ body: report(c) }),
    "GET /usage/records": () => ({ body: { records: [] } }),
    "GET /alerts": () => ({ body: { alerts: [], nextCursor: "" } }),
    "GET /alerts/webhook": () => ({ body: { url: "", secretSet: false } }),
  });
}

it("charts the last 24 hours split by application, with the denials, and splits by model on demand", { timeout: 20000 }, async () => {
  const user = userEvent.setup();
  const calls = api();
  renderUI(<UsagePage />);
  expect(await screen.findByRole("img", { name: "Requests: 7 in 2 hours, split by Team A." })).toBeInTheDocument();
  expect(await screen.findByRole("img", { name: "Denials: 2 in 2 hours, split by Team A." })).toBeInTheDocument();
  expect(screen.getByRole("img", { name: /^Cost \(USD\): \$1\.25 in 2 hours/ })).toBeInTheDocument();
  const usage = calls.filter((c) => c.path === "/usage");
  expect(usage.map((c) => [c.search.get("groupBy"), c.search.get("resolution"), c.search.get("bucket")])).toEqual(
    expect.arrayContaining([
      ["application", null, "hour"],
      ["application", "denied", "hour"],
    ]),
  );
  const from = new Date(usage[0].search.get("from")!).getTime();
  const to = new Date(usage[0].search.get("to")!).getTime();
  expect(to - from).toBe(24 * 3600_000);

  const top = screen.getByRole("table", { name: "Top consumers by application" });
  expect(within(top).getAllByRole("row")[1]).toHaveTextContent(/Team A\s*7\s*2\s*700\s*\$1\.25\s*100\.0 %/);

  await user.click(screen.getByRole("radio", { name: "Model" }));
  expect(await screen.findByRole("img", { name: "Requests: 7 in 2 hours, split by gpt-4o." })).toBeInTheDocument();
});

it("asks a custom range only once it ends after it starts", { timeout: 20000 }, async () => {
  const user = userEvent.setup();
  const calls = api();
  renderUI(<UsagePage />);
  await screen.findByRole("img", { name: /^Requests:/ });
  await user.click(screen.getByRole("radio", { name: "Custom" }));
  expect(screen.getByText("Choose a range")).toBeInTheDocument();
  const before = calls.length;
  await user.type(screen.getByLabelText("From"), "2026-11-20T10:00");
  await user.type(screen.getByLabelText("To"), "2026-11-19T10:00");
  expect(screen.getByText("The end must be after the start.")).toBeInTheDocument();
  expect(calls.slice(before).filter((c) => c.path === "/usage")).toHaveLength(0);
  await user.clear(screen.getByLabelText("To"));
  await user.type(screen.getByLabelText("To"), "2026-11-29T10:00");
  await waitFor(() => expect(calls.slice(before).some((c) => c.path === "/usage" && c.search.get("bucket") === "day")).toBe(true));
});

it("exports the summary as CSV with the admin token", { timeout: 20000 }, async () => {
  const user = userEvent.setup();
  const calls = api();
  const saved: string[] = [];
  vi.stubGlobal("URL", Object.assign(URL, { createObjectURL: () => "blob:x", revokeObjectURL: () => {} }));
  const click = vi.spyOn(HTMLAnchorElement.prototype, "click").mockImplementation(function (this: HTMLAnchorElement) {
    saved.push(this.download);
  });
  renderUI(<UsagePage />);
  await screen.findByRole("img", { name: /^Requests:/ });
  await user.click(screen.getByRole("button", { name: "Export CSV" }));
  await user.click(await screen.findByRole("menuitem", { name: /Summary by application/ }));
  await waitFor(() => expect(saved).toHaveLength(1));
  expect(saved[0]).toMatch(/^usage-by-application-\d{8}-\d{4}-\d{8}-\d{4}\.csv$/);
  const fetchMock = vi.mocked(fetch);
  // The export's own fetch (a URL string; openapi-fetch's calls pass a Request).
  const csvCall = fetchMock.mock.calls.find(([input]) => typeof input === "string" && input.startsWith("/api/v1/usage?"));
  expect(csvCall).toBeDefined();
  const headers = new Headers(csvCall![1]?.headers);
  expect(headers.get("Accept")).toBe("text/csv");
  expect(headers.get("Authorization")).toBe("Bearer sluice-admin-test");
  expect(new URLSearchParams((csvCall![0] as string).split("?")[1]).get("groupBy")).toBe("application");
  expect(calls.some((c) => c.path === "/usage" && c.search.get("groupBy") === "application")).toBe(true);
  click.mockRestore();
});
