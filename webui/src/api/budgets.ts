// Remaining budgets, budget alerts and the alert webhook: hand-written types
// of the platform's budgets API (GET /applications/{id}/budgets, /alerts,
// /alerts/webhook) while platform/api/openapi.yaml does not describe it yet.
// They are written in openapi-typescript's shape (`BudgetPaths`), so that
// once the document has these paths and `npm run generate` has run, this
// module's types become `Schemas["..."]` and budgetClient the plain client.
import { useMutation, useQuery, useQueryClient, useInfiniteQuery } from "@tanstack/react-query";
import type { Client as OpenAPIClient } from "openapi-fetch";
import { useClient } from "../auth";
import { call, data, type Client, type Schemas } from "./client";

export interface Budget {
  provider: string;
  route: string;
  /** The chain entry's name. */
  policy: string;
  /** The chain entry's position in the route's chain. */
  entry?: number;
  /** The policy's own name of the counter (total, requests, cost, ...). */
  counter?: string;
  /** The Rate Limit row it comes from (consumer.global.token, ...), if any. */
  origin: string;
  scope: "consumer" | "backend";
  /** "" for provider-wide, else the endpoint (/chat/completions). */
  resource: string;
  dimension: "requests" | "tokens" | "cost";
  /** The reset period in words ("1 hour"). */
  period: string;
  unit: "requests" | "tokens" | "usd";
  /** Decimal strings (USD as a decimal amount). */
  limit: string;
  /** May be negative (debt). */
  remaining: string;
  usedPercent: number;
  resetsAt: string;
  /** The row's alert thresholds, percents. */
  alertAt?: number[];
}

export interface Budgets {
  applicationId: string;
  /** False when the platform cannot read the counters; reason says why. */
  available: boolean;
  reason: string;
  budgets: Budget[];
}

export interface AlertDelivery {
  state: "pending" | "delivered" | "failed" | "none";
  attempts: number;
  lastError: string;
  deliveredAt?: string;
}

export interface BudgetAlert {
  id: string;
  at: string;
  /** The percent of the limit that was reached. */
  threshold: number;
  trigger: "threshold" | "denied";
  applicationId: string;
  provider: string;
  route: string;
  policy: string;
  origin: string;
  scope: string;
  resource: string;
  dimension: string;
  period: string;
  unit: string;
  limit: string;
  used: string;
  usedPercent?: number;
  windowResetsAt: string;
  delivery: AlertDelivery;
}

export interface AlertPage {
  alerts: BudgetAlert[];
  nextCursor: string;
}

export interface Webhook {
  /** "" when none is set. */
  url: string;
  secretSet: boolean;
}

export interface WebhookInput {
  url: string;
  /** Write-only; left out to keep the current one. */
  secret?: string;
}

type Json<T> = { content: { "application/json": T } };
type ErrorAnswer = { default: Json<Schemas["Error"]> };

/** The budgets API's paths as openapi-typescript would generate them. */
export interface BudgetPaths {
  "/applications/{applicationId}/budgets": {
    get: {
      parameters: { path: { applicationId: string }; query?: { provider?: string } };
      responses: { 200: Json<Budgets> } & ErrorAnswer;
    };
  };
  "/alerts": {
    get: {
      parameters: { query?: { application?: string; provider?: string; cursor?: string; limit?: number } };
      responses: { 200: Json<AlertPage> } & ErrorAnswer;
    };
  };
  "/alerts/webhook": {
    get: { responses: { 200: Json<Webhook> } & ErrorAnswer };
    put: { requestBody: Json<WebhookInput>; responses: { 200: Json<Webhook> } & ErrorAnswer };
    delete: { responses: { 204: { content?: never } } & ErrorAnswer };
  };
}

/** The session's client, typed for the budgets paths: the same instance
 * (token, 401 handling), only its types differ. */
export function budgetClient(c: Client): OpenAPIClient<BudgetPaths> {
  return c as unknown as OpenAPIClient<BudgetPaths>;
}

export const budgetKeys = {
  budgets: (appId: string) => ["budgets", appId] as const,
  alerts: (f: { application?: string; provider?: string }) => ["alerts", f] as const,
  webhook: ["alerts-webhook"] as const,
};

export function useBudgets(applicationId: string) {
  const client = budgetClient(useClient());
  return useQuery({
    queryKey: budgetKeys.budgets(applicationId),
    queryFn: () => data(client.GET("/applications/{applicationId}/budgets", { params: { path: { applicationId } } })),
    refetchInterval: 15_000,
  });
}

export function useAlerts(f: { application?: string; provider?: string }, limit = 20) {
  const client = budgetClient(useClient());
  return useInfiniteQuery({
    queryKey: budgetKeys.alerts(f),
    initialPageParam: undefined as string | undefined,
    queryFn: ({ pageParam }) => data(client.GET("/alerts", { params: { query: { ...f, limit, cursor: pageParam } } })),
    getNextPageParam: (last) => last.nextCursor || undefined,
    refetchInterval: 30_000,
  });
}

export function useWebhook() {
  const client = budgetClient(useClient());
  return useQuery({ queryKey: budgetKeys.webhook, queryFn: () => data(client.GET("/alerts/webhook")) });
}

/** Saves (input) or removes (null) the webhook; the cached setting follows. */
export function useSaveWebhook() {
  const client = budgetClient(useClient());
  const qc = useQueryClient();
  return useMutation({
    mutationFn: async (input: WebhookInput | null): Promise<Webhook> => {
      if (input === null) {
        await call(client.DELETE("/alerts/webhook"));
        return { url: "", secretSet: false };
      }
      return data(client.PUT("/alerts/webhook", { body: input }));
    },
    onSuccess: (w) => qc.setQueryData(budgetKeys.webhook, w),
  });
}

/** A budget's amount in its unit: "1,000 tokens", "$5.25". */
export function amount(value: string, unit: string): string {
  const n = Number(value);
  if (!Number.isFinite(n)) return value;
  if (unit === "usd") return (n < 0 ? "-$" : "$") + Math.abs(n).toLocaleString("en-US", { minimumFractionDigits: 2, maximumFractionDigits: 6 });
  return `${n.toLocaleString("en-US")} ${unit}`;
}
