import { describe, expect, it } from "vitest";
import { originText, rateLimitRef } from "./origin";

describe("origin", () => {
  it("names the Rate Limit row", () => {
    expect(rateLimitRef("$.backend.global.token")).toBe("Backend · provider-wide · Token");
    expect(rateLimitRef("$.consumer.perResource.default.cost")).toBe("Per Consumer · default per endpoint · Cost");
    expect(rateLimitRef("$.consumer.perResource.resources[1].limit.request", ["/embeddings"])).toBe("Per Consumer · /embeddings · Request");
    expect(rateLimitRef("$.consumer.perResource.resources[1].limit.request")).toBe("Per Consumer · endpoint 2 · Request");
    expect(rateLimitRef("$.odd")).toBe("$.odd");
  });
  it("names guardrails by position", () => {
    const g = [{ id: "grd-1" }, { id: "grd-2" }] as never;
    expect(originText({ name: "model-access", version: "v1", origin: { kind: "guardrail", ref: "grd-2" } }, g)).toBe("Guardrail #2 (grd-2)");
    expect(originText({ name: "llm-cost", version: "v1", origin: { kind: "cost" } })).toMatch(/^Cost/);
    expect(originText({ name: "api-key-auth", version: "v1", origin: { kind: "access" } })).toMatch(/^Access/);
  });
});
