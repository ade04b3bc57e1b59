// Remaining budgets, budget alerts and the alert webhook (GET
// /applications/{id}/budgets, /alerts, /alerts/webhook): queries over the
// types generated from platform/api/openapi.yaml.
import { infiniteQueryOptions, queryOptions, useMutation, useQuery, useQueryClient, useInfiniteQuery } from "@tanstack/react-query";
import { useClient } from "../auth";
import { call, data, type Client, type Schemas } from "./client";

export type Budget = Schemas["Budget"];
export type Budgets = Schemas["ApplicationBudgets"];
export type AlertDelivery = Schemas["AlertDelivery"];
export type BudgetAlert = Schemas["Alert"];
export type AlertPage = Schemas["AlertPage"];
export type Webhook = Schemas["AlertWebhook"];
export type WebhookInput = Schemas["AlertWebhookInput"];

export const budgetKeys = {
  budgets: (appId: string) => ["budgets", appId] as const,
  alerts: (f: { application?: string; provider?: string }) => ["alerts", f] as const,
  webhook: ["alerts-webhook"] as const,
};

export function useBudgets(applicationId: string) {
  const client = useClient();
  return useQuery({
    queryKey: budgetKeys.budgets(applicationId),
    queryFn: () => data(client.GET("/applications/{applicationId}/budgets", { params: { path: { applicationId } } })),
    refetchInterval: 15_000,
  });
}

/** The budget alerts' query, newest first, limit a page (the Usage page's
 * loader prefetches the unfiltered one). */
export function alertsOptions(client: Client, f: { application?: string; provider?: string }, limit = 20) {
  return infiniteQueryOptions({
    queryKey: budgetKeys.alerts(f),
    initialPageParam: undefined as string | undefined,
    queryFn: ({ pageParam }) => data(client.GET("/alerts", { params: { query: { ...f, limit, cursor: pageParam } } })),
    getNextPageParam: (last) => last.nextCursor || undefined,
    refetchInterval: 30_000,
  });
}

export function useAlerts(f: { application?: string; provider?: string }, limit = 20) {
  return useInfiniteQuery(alertsOptions(useClient(), f, limit));
}

export function webhookOptions(client: Client) {
  return queryOptions({ queryKey: budgetKeys.webhook, queryFn: () => data(client.GET("/alerts/webhook")) });
}

export function useWebhook() {
  return useQuery(webhookOptions(useClient()));
}

/** Saves (input) or removes (null) the webhook; the cached setting follows. */
export function useSaveWebhook() {
  const client = useClient();
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
