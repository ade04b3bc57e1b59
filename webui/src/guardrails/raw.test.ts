import { describe, expect, it } from "vitest";
import { parseRaw, rawText } from "./raw";

describe("raw guardrail entries", () => {
  it("reads YAML and JSON", () => {
    expect(parseRaw("name: model-access\nparams:\n  allow: [gpt-4o*]\n")).toEqual({
      value: { name: "model-access", version: "v1", params: { allow: ["gpt-4o*"] } },
    });
    expect(parseRaw('{"name":"llm-cost","version":"v1"}')).toEqual({ value: { name: "llm-cost", version: "v1", params: {} } });
  });
  it("round-trips what the form holds", () => {
    const v = { name: "basic-ratelimit", version: "v1", params: { limits: [{ requests: 5, duration: "1m" }], consumerBased: true } };
    expect(parseRaw(rawText(v))).toEqual({ value: v });
  });
  const bad: [string, RegExp][] = [
    ["name: [", /Not valid YAML or JSON/],
    ["- a\n- b", /one entry/],
    ["version: v1", /name: the policy's name is required/],
    ["name: x\nparams: [1]", /params: an object/],
    ["name: x\nversion: 1", /version: a string/],
    ["name: x\nconsumerBased: true", /Unknown field "consumerBased"/],
  ];
  for (const [text, msg] of bad) {
    it(`refuses ${JSON.stringify(text)}`, () => {
      expect(parseRaw(text).error).toMatch(msg);
    });
  }
});
