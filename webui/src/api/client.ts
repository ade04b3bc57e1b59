// Typed calls to the platform API (/api/v1), generated from
// platform/api/openapi.yaml (src/api/schema.d.ts, `npm run generate`).
// Every call goes through `call`, which turns an error response into an
// ApiError and hands back the ETag where the API sends one.
import createClient, { type Middleware } from "openapi-fetch";
import type { components, paths } from "./schema";

export type Schemas = components["schemas"];
export type Provider = Schemas["Provider"];
export type ProviderInput = Schemas["ProviderInput"];
export type Application = Schemas["Application"];
export type Key = Schemas["Key"];
export type CreatedKey = Schemas["CreatedKey"];
export type RateLimits = Schemas["RateLimits"];
export type RateLimitScope = Schemas["RateLimitScope"];
export type Limits = Schemas["Limits"];
export type Guardrail = Schemas["Guardrail"];
export type GuardrailInput = Schemas["GuardrailInput"];
export type Policy = Schemas["Policy"];
export type ProviderDeployment = Schemas["ProviderDeployment"];
export type DeploymentEntry = Schemas["DeploymentEntry"];
export type Gateway = Schemas["Gateway"];
export type GatewayList = Schemas["GatewayList"];
export type AuditEntry = Schemas["AuditEntry"];
export type Problem = Schemas["Problem"];

/** An error answer of the API: its status, code, message and the problems
 * of a 422 with the JSON path of each field. */
export class ApiError extends Error {
  readonly status: number;
  readonly code: string;
  readonly details: Problem[];
  constructor(status: number, code: string, message: string, details: Problem[] = []) {
    super(message);
    this.name = "ApiError";
    this.status = status;
    this.code = code;
    this.details = details;
  }
}

/** The ApiError of an error answer (or of a network failure when response
 * is undefined); an answer that is not the API's JSON gets a generic one. */
export function toApiError(response: Response | undefined, body: unknown): ApiError {
  const e = (body as { error?: { code?: string; message?: string; details?: Problem[] } } | undefined)?.error;
  if (response && e?.code) {
    return new ApiError(response.status, e.code, e.message ?? e.code, e.details ?? []);
  }
  const status = response?.status ?? 0;
  return new ApiError(status, status ? "http_" + status : "network", status ? `The platform answered ${status}.` : "The platform cannot be reached.");
}

export type TokenSource = () => string | null;

/** The client for the platform at baseUrl (the console's own origin in the
 * binary), sending the admin token from getToken. onUnauthorized runs on
 * every 401 (the token was revoked or replaced). */
export function makeClient(getToken: TokenSource, onUnauthorized: () => void, baseUrl = "/api/v1") {
  const client = createClient<paths>({ baseUrl });
  const auth: Middleware = {
    onRequest({ request }) {
      const t = getToken();
      if (t) request.headers.set("Authorization", "Bearer " + t);
      return request;
    },
    onResponse({ response }) {
      if (response.status === 401) onUnauthorized();
      return response;
    },
  };
  client.use(auth);
  return client;
}

export type Client = ReturnType<typeof makeClient>;

type Result<T> = { data?: T; error?: unknown; response: Response };

/** Awaits an openapi-fetch call: its data (and ETag), or throws ApiError. */
export async function call<T>(p: Promise<Result<T>>): Promise<{ data: T; etag: string | null }> {
  let r: Result<T>;
  try {
    r = await p;
  } catch {
    throw toApiError(undefined, undefined);
  }
  if (!r.response.ok) throw toApiError(r.response, r.error);
  return { data: r.data as T, etag: r.response.headers.get("ETag") };
}

/** The data of a call, for queries that need no ETag. */
export async function data<T>(p: Promise<Result<T>>): Promise<T> {
  return (await call(p)).data;
}
