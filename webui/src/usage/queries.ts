// The Usage page's API queries, apart from the page (no chart code), so that
// the route's loader can start the first ones while the page's code loads.
import type { QueryClient } from "@tanstack/react-query";
import { data, type Client } from "../api/client";
import { alertsOptions, webhookOptions } from "../api/budgets";
import { applicationsOptions, providersOptions } from "../api/queries";
import { minuteEnd, rangeFor, recordsQuery, usageQuery, type Filters, type Range, type TopDimension, type UsageRecordPage, type UsageReport } from "./model";

export const usageStaleTime = 30_000;

/** The query of GET /usage over range and filters, grouped by groupBy,
 * only the denied requests when denied. */
export function usageOptions(client: Client, range: Range, filters: Filters, groupBy?: TopDimension, denied = false) {
  const query = usageQuery(range, filters, groupBy, denied);
  return {
    queryKey: ["usage", query] as const,
    // JSON: the path also answers text/csv, which the CSV export asks for.
    queryFn: () => data(client.GET("/usage", { params: { query } })) as Promise<UsageReport>,
    staleTime: usageStaleTime,
  };
}

export const recordsPageSize = 50;

export function recordsOptions(client: Client, range: Range, filters: Filters) {
  const query = recordsQuery(range, filters, recordsPageSize);
  return {
    queryKey: ["usage-records", query] as const,
    initialPageParam: undefined as string | undefined,
    queryFn: ({ pageParam }: { pageParam: string | undefined }) =>
      data(client.GET("/usage/records", { params: { query: { ...query, cursor: pageParam } } })) as Promise<UsageRecordPage>,
    getNextPageParam: (last: UsageRecordPage) => last.next || undefined,
    staleTime: usageStaleTime,
  };
}

/** The range of the model filter's choices: range by day. The choices are
 * the models with usage in the range's UTC days, from the daily summary
 * (a few rows), where by hour the platform would sort every hour's rows by
 * model, the slowest of the page's queries over a week. */
export function modelChoicesRange(range: Range): Range {
  return { ...range, bucket: "day" };
}

/** The page's default view: the last 24 hours, split by application. */
export const defaultPeriod = "24h" as const;
export const defaultSplit = "application" as const;

/** Starts every query of the page's default view (the charts' reports, the
 * applications that name their series, the model filter's choices, the
 * providers, the first records page, the alerts and the webhook) and
 * settles when each has data (answered, or failed: the page shows a failure
 * itself), so that the route's loader can have the page rendered once with
 * its data rather than once per answer. A query with data in the cache does
 * not hold the page, stale or not: the page refetches it as it mounts. */
export function prefetchUsage(qc: QueryClient, client: Client, now: Date = minuteEnd()): Promise<unknown> {
  const range = rangeFor(defaultPeriod, now);
  if (!range) return Promise.resolve();
  return Promise.allSettled([
    qc.ensureQueryData(usageOptions(client, range, {}, defaultSplit)),
    qc.ensureQueryData(usageOptions(client, range, {}, defaultSplit, true)),
    qc.ensureQueryData(usageOptions(client, modelChoicesRange(range), {}, "model")),
    qc.ensureQueryData(applicationsOptions(client)),
    qc.ensureQueryData(providersOptions(client)),
    qc.ensureInfiniteQueryData(recordsOptions(client, range, {})),
    qc.ensureInfiniteQueryData(alertsOptions(client, {})),
    qc.ensureQueryData(webhookOptions(client)),
  ]);
}
