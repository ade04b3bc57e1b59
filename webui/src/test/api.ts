// A fake platform API for component tests: fetch answers from a table of
// "METHOD /path" handlers and records each call. openapi-fetch builds a
// Request from the console's relative base URL, which Node's Request
// refuses; relative URLs are resolved against http://console.test here.
import { vi } from "vitest";

export interface Call {
  method: string;
  path: string;
  search: URLSearchParams;
  body: unknown;
}

export type Handler = (c: Call) => { status?: number; body?: unknown } | undefined;

const origin = "http://console.test";

export function json(status: number, body?: unknown): Response {
  return new Response(body === undefined ? null : JSON.stringify(body), { status, headers: { "Content-Type": "application/json" } });
}

/** Stubs fetch and Request until vi.unstubAllGlobals(); an unhandled call
 * answers 404 as the platform's router does. Returns the calls made. */
export function mockApi(routes: Record<string, Handler>): Call[] {
  const calls: Call[] = [];
  const BaseRequest = Request;
  class RelativeRequest extends BaseRequest {
    constructor(input: RequestInfo | URL, init?: RequestInit) {
      super(typeof input === "string" && input.startsWith("/") ? origin + input : input, init);
    }
  }
  vi.stubGlobal("Request", RelativeRequest);
  vi.stubGlobal(
    "fetch",
    vi.fn(async (input: RequestInfo | URL, init?: RequestInit) => {
      const req = input instanceof BaseRequest ? input : new RelativeRequest(input, init);
      const url = new URL(req.url);
      const text = await req.text();
      const c: Call = { method: req.method, path: url.pathname.replace(/^\/api\/v1/, ""), search: url.searchParams, body: text ? JSON.parse(text) : undefined };
      calls.push(c);
      const h = routes[`${c.method} ${c.path}`];
      const r = h?.(c);
      if (!r) return json(404, { error: { code: "not_found", message: "Not Found" } });
      return json(r.status ?? 200, r.body);
    }),
  );
  return calls;
}
