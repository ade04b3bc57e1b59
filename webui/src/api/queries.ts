// Query keys and the queries several pages share. A change invalidates the
// keys of what it changes (and the deployment views, which every change of
// what gateways serve moves on).
import { queryOptions, useQuery, type QueryClient } from "@tanstack/react-query";
import { useClient } from "../auth";
import { call, data, type Client, type GatewayList } from "./client";

export const keys = {
  providers: ["providers"] as const,
  provider: (id: string) => ["providers", id] as const,
  rateLimits: (id: string) => ["rate-limits", id] as const,
  guardrails: (id: string) => ["guardrails", id] as const,
  deployment: (id: string) => ["deployment", id] as const,
  applications: ["applications"] as const,
  application: (id: string) => ["applications", id] as const,
  keys: (appId: string) => ["keys", appId] as const,
  gateways: ["gateways"] as const,
  policies: ["policies"] as const,
  audit: ["audit"] as const,
};

/** After a change of what gateways serve: the generated views and the
 * gateways' states are stale, and so is the audit log. */
export function invalidateDeployment(qc: QueryClient) {
  void qc.invalidateQueries({ queryKey: ["deployment"] });
  void qc.invalidateQueries({ queryKey: keys.gateways });
  void qc.invalidateQueries({ queryKey: keys.audit });
}

export function providersOptions(client: Client) {
  return queryOptions({ queryKey: keys.providers, queryFn: () => data(client.GET("/providers")).then((d) => d.providers) });
}

export function useProviders() {
  return useQuery(providersOptions(useClient()));
}

export function useProvider(id: string) {
  const client = useClient();
  return useQuery({
    queryKey: keys.provider(id),
    queryFn: () => data(client.GET("/providers/{providerId}", { params: { path: { providerId: id } } })),
  });
}

/** The applications list's query (the Usage page's loader prefetches it: its
 * names label the charts' series). */
export function applicationsOptions(client: Client) {
  return queryOptions({ queryKey: keys.applications, queryFn: () => data(client.GET("/applications")).then((d) => d.applications) });
}

export function useApplications() {
  return useQuery(applicationsOptions(useClient()));
}

export function usePolicies() {
  const client = useClient();
  return useQuery({ queryKey: keys.policies, queryFn: () => data(client.GET("/policies")).then((d) => d.policies), staleTime: Infinity });
}

/** The gateways; refetched every interval ms while it says so (to follow a
 * change being applied). */
export function useGateways(interval?: number | false | ((d: GatewayList | undefined) => number | false)) {
  const client = useClient();
  return useQuery({
    queryKey: keys.gateways,
    queryFn: () => data(client.GET("/gateways")),
    refetchInterval: typeof interval === "function" ? (q) => interval(q.state.data) : interval,
  });
}

/** A provider's guardrails in chain order, with the list's ETag (for
 * reordering). */
export function useGuardrails(providerId: string) {
  const client = useClient();
  return useQuery({
    queryKey: keys.guardrails(providerId),
    queryFn: async () => {
      const r = await call(client.GET("/providers/{providerId}/guardrails", { params: { path: { providerId } } }));
      return { guardrails: r.data.guardrails, etag: r.etag ?? "*" };
    },
  });
}
