// The budgets API's screens against a mocked platform: remaining budgets,
// alerts with their delivery, the webhook (secret write-only), and a
// platform without the API.
import { screen, waitFor, within } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { afterEach, beforeEach, expect, it, vi } from "vitest";
import type { AlertPage, Budgets } from "../api/budgets";
import { BudgetsCard } from "../pages/BudgetsCard";
import { mockApi } from "../test/api";
import { renderUI } from "../test/render";
import { AlertsCard, WebhookCard } from "./AlertsCards";

beforeEach(() => sessionStorage.setItem("sluice.adminToken", "sluice-admin-test"));
afterEach(() => {
  sessionStorage.clear();
  vi.unstubAllGlobals();
});

const budgets: Budgets = {
  applicationId: "app-1",
  available: true,
  reason: "",
  budgets: [
    {
      provider: "openai",
      route: "openai",
      policy: "token-based-ratelimit",
      origin: "consumer.global.token",
      scope: "consumer",
      resource: "",
      dimension: "tokens",
      period: "1 hour",
      unit: "tokens",
      limit: "1000",
      remaining: "250",
      usedPercent: 75,
      resetsAt: "2026-12-01T18:00:00Z",
    },
    {
      provider: "openai",
      route: "openai",
      policy: "llm-cost-based-ratelimit",
      origin: "backend.perResource.default.cost",
      scope: "backend",
      resource: "/chat/completions",
      dimension: "cost",
      period: "1 month",
      unit: "usd",
      limit: "5",
      remaining: "-0.25",
      usedPercent: 105,
      resetsAt: "2027-01-01T00:00:00Z",
    },
  ],
};

it("lists the remaining budgets with what is used, and a debt", async () => {
  mockApi({ "GET /applications/app-1/budgets": () => ({ body: budgets }) });
  renderUI(<BudgetsCard applicationId="app-1" />);
  const table = await screen.findByRole("table", { name: "Remaining budgets" });
  const rows = within(table).getAllByRole("row").slice(1);
  expect(rows[0]).toHaveTextContent("Per Consumer · provider-wide · tokens");
  expect(rows[0]).toHaveTextContent("250 tokens of 1,000 tokens");
  expect(within(rows[0]).getByRole("progressbar", { name: "openai, Per Consumer · provider-wide · tokens: 75 % used" })).toBeInTheDocument();
  expect(rows[1]).toHaveTextContent("Backend · /chat/completions · cost");
  expect(rows[1]).toHaveTextContent("over by $0.25 of $5.00");
});

it("says why the budgets cannot be read, and where a key reads its own", async () => {
  mockApi({
    "GET /applications/app-1/budgets": () => ({ body: { ...budgets, available: false, reason: "counters are kept in each gateway's memory", budgets: [] } }),
  });
  renderUI(<BudgetsCard applicationId="app-1" />);
  expect(await screen.findByText(/counters are kept in each gateway's memory/)).toBeInTheDocument();
  expect(screen.getByText("GET /<provider>/v1/quota")).toBeInTheDocument();
});

it("tells a platform without the budgets API from an error", async () => {
  mockApi({});
  renderUI(<BudgetsCard applicationId="app-1" />);
  expect(await screen.findByText(/does not report budgets/)).toBeInTheDocument();
});

const page1: AlertPage = {
  alerts: [
    {
      id: "alr_2",
      at: "2026-12-01T17:10:00Z",
      threshold: 100,
      trigger: "denied",
      applicationId: "app-1",
      provider: "openai",
      route: "openai",
      policy: "token-based-ratelimit",
      origin: "consumer.global.token",
      scope: "consumer",
      resource: "",
      dimension: "tokens",
      period: "1 hour",
      unit: "tokens",
      limit: "1000",
      used: "1012",
      windowResetsAt: "2026-12-01T18:00:00Z",
      delivery: { state: "failed", attempts: 5, lastError: "POST https://hooks.test: 503" },
    },
  ],
  nextCursor: "c1",
};
const page2: AlertPage = {
  alerts: [{ ...page1.alerts[0], id: "alr_1", trigger: "threshold", threshold: 80, used: "812", delivery: { state: "delivered", attempts: 1, lastError: "", deliveredAt: "2026-12-01T17:00:01Z" } }],
  nextCursor: "",
};

it("lists the alerts newest first with their delivery, filtered, and loads older ones", { timeout: 15000 }, async () => {
  const user = userEvent.setup();
  const calls = mockApi({ "GET /alerts": (c) => ({ body: c.search.get("cursor") === "c1" ? page2 : page1 }) });
  renderUI(<AlertsCard filters={{ application: "app-1" }} appName={(id) => (id === "app-1" ? "Team A" : id)} />);
  const table = await screen.findByRole("table", { name: "Budget alerts, newest first" });
  expect(within(table).getAllByRole("row")[1]).toHaveTextContent(/Team A.*openai · Per Consumer · provider-wide · tokens per 1 hour.*denied a request.*1,012 tokens \/ 1,000 tokens.*failed after 5 attempts/);
  expect(within(table).getByText("POST https://hooks.test: 503")).toBeInTheDocument();
  expect(calls[0].search.get("application")).toBe("app-1");
  expect(calls[0].search.has("provider")).toBe(false);
  await user.click(screen.getByRole("button", { name: "Load older alerts" }));
  await waitFor(() => expect(within(table).getAllByRole("row")).toHaveLength(3));
  expect(within(table).getAllByRole("row")[2]).toHaveTextContent(/80 %.*812 tokens.*delivered/);
  expect(screen.queryByRole("button", { name: "Load older alerts" })).not.toBeInTheDocument();
});

it("saves the webhook with a write-only secret, keeps the secret when left empty, and removes it", { timeout: 20000 }, async () => {
  const user = userEvent.setup();
  let stored = { url: "", secretSet: false };
  const calls = mockApi({
    "GET /alerts/webhook": () => ({ body: stored }),
    "PUT /alerts/webhook": (c) => {
      const b = c.body as { url: string; secret?: string };
      stored = { url: b.url, secretSet: stored.secretSet || !!b.secret };
      return { body: stored };
    },
    "DELETE /alerts/webhook": () => {
      stored = { url: "", secretSet: false };
      return { status: 204 };
    },
  });
  renderUI(<WebhookCard />);
  const url = await screen.findByLabelText("URL");
  await user.type(url, "not a url");
  await user.click(screen.getByRole("button", { name: "Save webhook" }));
  expect(await screen.findByText("Enter an http:// or https:// URL.")).toBeInTheDocument();
  expect(calls.filter((c) => c.method === "PUT")).toHaveLength(0);

  await user.clear(url);
  await user.type(url, "https://hooks.test/sluice");
  await user.type(screen.getByLabelText("Signing secret"), "s3cret");
  await user.click(screen.getByRole("button", { name: "Save webhook" }));
  await screen.findByText(/A secret is set; it is never shown/);
  expect(calls.find((c) => c.method === "PUT")?.body).toEqual({ url: "https://hooks.test/sluice", secret: "s3cret" });
  expect(screen.getByLabelText("Signing secret")).toHaveValue("");

  await user.clear(screen.getByLabelText("URL"));
  await user.type(screen.getByLabelText("URL"), "https://hooks.test/v2");
  await user.click(screen.getByRole("button", { name: "Save webhook" }));
  await waitFor(() => expect(calls.filter((c) => c.method === "PUT")).toHaveLength(2));
  expect(calls.filter((c) => c.method === "PUT")[1].body).toEqual({ url: "https://hooks.test/v2" });

  await user.click(await screen.findByRole("button", { name: "Remove webhook" }));
  await waitFor(() => expect(screen.getByLabelText("URL")).toHaveValue(""));
  expect(calls.some((c) => c.method === "DELETE")).toBe(true);
});
