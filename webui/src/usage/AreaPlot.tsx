// Stacked areas on a canvas (uPlot): one path per series over the buckets,
// the y axis from 0, and a legend under the plot that reads the hovered
// bucket's values (uPlot's live legend, in place of a tooltip). A canvas and
// no React subtree per element: the Usage page's four charts cost the
// browser a fraction of what they did as SVG (docs/benchmarks.md section 9).
import { alpha, useMantineTheme } from "@mantine/core";
import { useLayoutEffect, useRef } from "react";
import uPlot from "uplot";
import "uplot/dist/uPlot.min.css";
import "./AreaPlot.css";
import { stack, yRange } from "./stack";

export interface AreaPlotProps {
  /** The x axis' label of each bucket, in order. */
  labels: string[];
  /** The legend's name of the x value ("Hour", "Day"). */
  xName: string;
  /** One list of values per series, each as long as labels; the first
   * series is drawn at the bottom. */
  values: number[][];
  series: string[];
  /** Mantine colors ("blue.7"), one per series. */
  colors: string[];
  height: number;
  /** The legend's values. */
  format: (n: number) => string;
  /** The y axis' labels. */
  axisFormat: (n: number) => string;
  /** Minimum pixels between two x labels (about a label's width). */
  xSpace: number;
}

/** Draws the plot into a div as wide as its container once the browser has
 * laid the div out, and redraws it at the container's new width. Once the areas are drawn, the canvas carries a
 * data-drawn attribute (what the browser tests and measure-usage.mjs wait
 * for). The plot is made anew when a prop changes (callers memoize them). */
export function AreaPlot({ labels, xName, values, series, colors, height, format, axisFormat, xSpace }: AreaPlotProps) {
  const theme = useMantineTheme();
  const ref = useRef<HTMLDivElement>(null);
  useLayoutEffect(() => {
    const el = ref.current;
    if (!el) return;
    const color = (c: string) => {
      const [name, shade] = c.split(".");
      return theme.colors[name]?.[Number(shade)] ?? c;
    };
    const text = theme.colors.gray[7];
    const { sums, bands } = stack(values);
    const top = sums.length ? Math.max(0, ...sums[sums.length - 1]) : 0;
    const x = labels.map((_, i) => i);
    const opts: uPlot.Options = {
      width: 0,
      height,
      // Room on the right for the last bucket's label, centred on the edge.
      padding: [8, Math.ceil(xSpace / 2), 0, 0],
      scales: {
        x: { time: false, range: [0, Math.max(1, labels.length - 1)] },
        y: { range: () => yRange(top) },
      },
      axes: [
        {
          stroke: text,
          space: xSpace,
          size: 28,
          incrs: [1, 2, 3, 4, 6, 8, 12, 24, 48, 96],
          values: (_u, splits) => splits.map((i) => labels[i] ?? ""),
          grid: { show: false },
          ticks: { show: false },
        },
        {
          stroke: text,
          size: 64,
          values: (_u, splits) => splits.map((v) => axisFormat(v)),
          grid: { stroke: theme.colors.gray[3], width: 1 },
          ticks: { show: false },
        },
      ],
      series: [
        { label: xName, value: (_u, i) => (i == null ? "" : (labels[i] ?? "")) },
        ...series.map((name, s) => {
          const c = color(colors[s]);
          return {
            label: name,
            stroke: c,
            fill: alpha(c, 0.75),
            width: 1,
            points: { show: false },
            // The series' own value at the hovered bucket, not the stack's.
            value: (_u: uPlot, _v: number | null, _si: number, i: number | null) => (i == null ? "–" : format(values[s][i] || 0)),
          };
        }),
      ],
      bands,
      legend: { live: true },
      cursor: { points: { show: false }, drag: { x: false, y: false } },
      hooks: { draw: [(u) => u.ctx.canvas.setAttribute("data-drawn", "")] },
    };
    // Made in the observer's first callback, which has the width from the
    // layout the browser does anyway: reading el.clientWidth here would force
    // a layout of the whole page for each chart.
    let plot: uPlot | null = null;
    const ro = new ResizeObserver(([entry]) => {
      const width = Math.floor(entry.contentRect.width);
      if (width === 0) return;
      if (!plot) plot = new uPlot({ ...opts, width }, [x, ...sums], el);
      else if (width !== plot.width) plot.setSize({ width, height });
    });
    ro.observe(el);
    return () => {
      ro.disconnect();
      plot?.destroy();
    };
  }, [theme, labels, xName, values, series, colors, height, format, axisFormat, xSpace]);
  return <div ref={ref} className="area-plot" />;
}
