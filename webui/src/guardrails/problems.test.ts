import { describe, expect, it } from "vitest";
import { pathSegments, splitProblems } from "./problems";

describe("guardrail problems", () => {
  it("reads paths below $.params", () => {
    expect(pathSegments("$.params.allow[0]")).toEqual(["allow", "0"]);
    expect(pathSegments("$.params.totalTokenLimits[0].duration")).toEqual(["totalTokenLimits", "0", "duration"]);
    expect(pathSegments('$.params.perApplication["app 1"][2]')).toEqual(["perApplication", "app 1", "2"]);
    expect(pathSegments("$.params")).toEqual([]);
    expect(pathSegments("$.paramsX")).toBeNull();
    expect(pathSegments("$.name")).toBeNull();
    expect(pathSegments("$")).toBeNull();
    expect(pathSegments("$.params.a[x]")).toBeNull();
  });

  it("puts each problem at its field, and the rest apart", () => {
    const { errorSchema, other } = splitProblems([
      { path: "$.params.allow[0]", message: "model pattern: * only at the end" },
      { path: "$.params.allow[0]", message: "second problem" },
      { path: "$.params.limits[1].duration", message: "invalid duration" },
      { path: "$.params", message: "unknown parameter" },
      { path: "$.name", message: "unknown policy" },
      { path: "$", message: "list llm-cost after llm-cost-based-ratelimit" },
    ]);
    expect(errorSchema).toEqual({
      allow: { 0: { __errors: ["model pattern: * only at the end", "second problem"] } },
      limits: { 1: { duration: { __errors: ["invalid duration"] } } },
    });
    expect(other.map((p) => p.path)).toEqual(["$.params", "$.name", "$"]);
  });
});
