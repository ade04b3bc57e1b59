// The console's pages. Every route needs a session: without one the sign-in
// form shows at the requested address and the page follows once signed in.
import type { QueryClient } from "@tanstack/react-query";
import { createRootRouteWithContext, createRoute, createRouter, lazyRouteComponent, redirect } from "@tanstack/react-router";
import type { Client } from "./api/client";
import { Layout, NotFound } from "./components/Layout";
import { Loading } from "./components/states";
import { prefetchUsage } from "./usage/queries";

/** What the routes' loaders get (App passes the session's). */
export interface RouterContext {
  queryClient: QueryClient;
  client: Client;
  signedIn: boolean;
}

// Pages are loaded on first visit, so that the first page (sign-in, or the
// one asked for) loads only what it needs.
const ProvidersPage = lazyRouteComponent(() => import("./pages/ProvidersPage"), "ProvidersPage");
const ProviderPage = lazyRouteComponent(() => import("./pages/ProviderPage"), "ProviderPage");
const ProviderSettingsTab = lazyRouteComponent(() => import("./pages/ProviderPage"), "ProviderSettingsTab");
const RateLimitTab = lazyRouteComponent(() => import("./pages/RateLimitTab"), "RateLimitTab");
const GuardrailsTab = lazyRouteComponent(() => import("./pages/GuardrailsTab"), "GuardrailsTab");
const DeploymentTab = lazyRouteComponent(() => import("./pages/DeploymentTab"), "DeploymentTab");
const ProviderGatewaysTab = lazyRouteComponent(() => import("./pages/GatewaysPage"), "ProviderGatewaysTab");
const GatewaysPage = lazyRouteComponent(() => import("./pages/GatewaysPage"), "GatewaysPage");
const ApplicationsPage = lazyRouteComponent(() => import("./pages/ApplicationsPage"), "ApplicationsPage");
const ApplicationPage = lazyRouteComponent(() => import("./pages/ApplicationPage"), "ApplicationPage");
const UsagePage = lazyRouteComponent(() => import("./pages/UsagePage"), "UsagePage");
const AuditPage = lazyRouteComponent(() => import("./pages/AuditPage"), "AuditPage");

const rootRoute = createRootRouteWithContext<RouterContext>()({ component: Layout, notFoundComponent: NotFound });

const indexRoute = createRoute({
  getParentRoute: () => rootRoute,
  path: "/",
  beforeLoad: () => {
    throw redirect({ to: "/providers" });
  },
});
const providersRoute = createRoute({ getParentRoute: () => rootRoute, path: "providers", component: ProvidersPage });
const providerRoute = createRoute({ getParentRoute: () => rootRoute, path: "providers/$providerId", component: ProviderPage });
const providerIndexRoute = createRoute({
  getParentRoute: () => providerRoute,
  path: "/",
  beforeLoad: ({ params }) => {
    throw redirect({ to: "/providers/$providerId/rate-limits", params });
  },
});
const rateLimitsRoute = createRoute({ getParentRoute: () => providerRoute, path: "rate-limits", component: RateLimitTab });
const guardrailsRoute = createRoute({ getParentRoute: () => providerRoute, path: "guardrails", component: GuardrailsTab });
const deploymentRoute = createRoute({ getParentRoute: () => providerRoute, path: "deployment", component: DeploymentTab });
const providerGatewaysRoute = createRoute({ getParentRoute: () => providerRoute, path: "gateways", component: ProviderGatewaysTab });
const providerSettingsRoute = createRoute({ getParentRoute: () => providerRoute, path: "settings", component: ProviderSettingsTab });
const applicationsRoute = createRoute({ getParentRoute: () => rootRoute, path: "applications", component: ApplicationsPage });
const applicationRoute = createRoute({ getParentRoute: () => rootRoute, path: "applications/$applicationId", component: ApplicationPage });
const gatewaysRoute = createRoute({ getParentRoute: () => rootRoute, path: "gateways", component: GatewaysPage });
// The default view's queries start with the navigation, while the page's
// code loads, and the page is rendered when they have answered: once, with
// its charts, top consumers and records, instead of once per answer (the
// router shows its pending page after pendingMs if they are slow).
const usageRoute = createRoute({
  getParentRoute: () => rootRoute,
  path: "usage",
  component: UsagePage,
  loader: ({ context }) => (context.signedIn ? prefetchUsage(context.queryClient, context.client) : undefined),
});
const auditRoute = createRoute({ getParentRoute: () => rootRoute, path: "audit", component: AuditPage });

const routeTree = rootRoute.addChildren([
  indexRoute,
  providersRoute,
  providerRoute.addChildren([providerIndexRoute, rateLimitsRoute, guardrailsRoute, deploymentRoute, providerGatewaysRoute, providerSettingsRoute]),
  applicationsRoute,
  applicationRoute,
  gatewaysRoute,
  usageRoute,
  auditRoute,
]);

export const router = createRouter({
  routeTree,
  // Replaced by App's RouterProvider context before the first load.
  context: undefined as unknown as RouterContext,
  defaultPreload: "intent",
  scrollRestoration: true,
  defaultPendingComponent: () => <Loading />,
});

declare module "@tanstack/react-router" {
  interface Register {
    router: typeof router;
  }
}
