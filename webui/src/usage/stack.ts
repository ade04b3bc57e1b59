// The numbers behind a stacked area chart, apart from the chart library so
// that they can be tested without a canvas.

/** Stacked series: the running sum of the series in order at each point
 * (the first series is the bottom one), and the bands that fill each series
 * down to the one below it (uPlot's [upper, lower] series indices, 1-based:
 * index 0 is the x series). A missing value counts as 0. */
export function stack(values: number[][]): { sums: number[][]; bands: { series: [number, number] }[] } {
  const n = values[0]?.length ?? 0;
  const acc = new Array<number>(n).fill(0);
  const sums = values.map((v) => acc.map((a, i) => (acc[i] = a + (v[i] || 0))));
  const bands = values.slice(1).map((_, i) => ({ series: [i + 2, i + 1] as [number, number] }));
  return { sums, bands };
}

/** The y scale of a stacked chart: from 0 to a little above the top of the
 * stack, rounded to a number with at most two significant digits, so that
 * the axis' labels are round. An empty or all-zero stack gets [0, 1]. */
export function yRange(top: number): [number, number] {
  if (!(top > 0)) return [0, 1];
  const t = top * 1.05;
  const step = 10 ** (Math.floor(Math.log10(t)) - 1);
  return [0, Math.ceil(t / step) * step];
}
