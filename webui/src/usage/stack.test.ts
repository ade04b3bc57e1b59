import { describe, expect, it } from "vitest";
import { stack, yRange } from "./stack";

describe("stack", () => {
  it.each([
    { name: "no series", values: [], sums: [], bands: [] },
    { name: "one series", values: [[1, 2, 3]], sums: [[1, 2, 3]], bands: [] },
    {
      name: "three series, each on the ones below",
      values: [
        [1, 0, 2],
        [3, 1, 0],
        [0, 5, 1],
      ],
      sums: [
        [1, 0, 2],
        [4, 1, 2],
        [4, 6, 3],
      ],
      bands: [{ series: [2, 1] }, { series: [3, 2] }],
    },
    {
      name: "a missing value counts as 0",
      values: [
        [1, NaN],
        [2, 2],
      ],
      sums: [
        [1, 0],
        [3, 2],
      ],
      bands: [{ series: [2, 1] }],
    },
  ])("$name", ({ values, sums, bands }) => {
    expect(stack(values)).toEqual({ sums, bands });
  });
});

describe("yRange", () => {
  it.each([
    { top: 0, want: [0, 1] },
    { top: NaN, want: [0, 1] },
    { top: 1, want: [0, 1.1] },
    { top: 95, want: [0, 100] },
    { top: 1234, want: [0, 1300] },
    { top: 7_000_000, want: [0, 7_400_000] },
  ])("$top", ({ top, want }) => {
    const [lo, hi] = yRange(top);
    expect(lo).toBe(want[0]);
    expect(hi).toBeCloseTo(want[1], 9);
    if (top > 0) expect(hi).toBeGreaterThan(top);
  });
});
