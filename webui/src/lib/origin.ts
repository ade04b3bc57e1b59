// Reads a deployment entry's origin (docs/platform.md "Generation"): which
// Rate Limit row, guardrail or rule put it in the chain.
import type { DeploymentEntry, Guardrail } from "../api/client";

const scope: Record<string, string> = { backend: "Backend", consumer: "Per Consumer" };
const kind: Record<string, string> = { request: "Request", token: "Token", cost: "Cost" };

/** "$.consumer.perResource.resources[0].limit.token" -> "Per Consumer · /chat/completions · Token" */
export function rateLimitRef(ref: string, resources?: string[]): string {
  const m = /^\$\.(backend|consumer)\.(global|perResource\.default|perResource\.resources\[(\d+)\]\.limit)\.(request|token|cost)$/.exec(ref);
  if (!m) return ref;
  let where = "provider-wide";
  if (m[2] === "perResource.default") where = "default per endpoint";
  else if (m[3] !== undefined) where = resources?.[0] ?? `endpoint ${Number(m[3]) + 1}`;
  return `${scope[m[1]]} · ${where} · ${kind[m[4]]}`;
}

export function originText(e: DeploymentEntry, guardrails: Guardrail[] = []): string {
  switch (e.origin.kind) {
    case "access":
      return "Access: the applications granted this provider";
    case "cost":
      return "Cost: prices every request, for the usage records and the cost limits";
    case "rate-limit":
      return "Rate Limit: " + rateLimitRef(e.origin.ref ?? "", e.resources?.include);
    case "guardrail": {
      const i = guardrails.findIndex((g) => g.id === e.origin.ref);
      return i >= 0 ? `Guardrail #${i + 1} (${e.origin.ref})` : `Guardrail ${e.origin.ref ?? ""}`.trim();
    }
  }
  return e.origin.kind;
}
