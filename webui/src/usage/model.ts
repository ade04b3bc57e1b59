// The Usage page's model: the period to the usage API's from/to/bucket, the
// API's rows (one per bucket and dimension value) to chart data with a
// point per bucket, sums per consumer, and the display of tokens and
// micro-USD. Pure functions, no React (src/usage/model.test.ts).
import type { Schemas } from "../api/client";
import type { operations } from "../api/schema";

export type UsageRow = Schemas["UsageRow"];
export type UsageReport = Schemas["UsageReport"];
export type UsageRecord = Schemas["UsageRecord"];
export type UsageRecordPage = Schemas["UsageRecordPage"];
export type Bucket = UsageReport["bucket"];

export type Period = "1h" | "24h" | "7d" | "30d" | "custom";
export const periods: { value: Period; label: string }[] = [
  { value: "1h", label: "1 h" },
  { value: "24h", label: "24 h" },
  { value: "7d", label: "7 d" },
  { value: "30d", label: "30 d" },
  { value: "custom", label: "Custom" },
];

/** The dimension a chart is split by; the top consumers table also lists keys. */
export type Split = "application" | "model";
export type TopDimension = "application" | "key" | "model";

export interface Range {
  from: Date;
  to: Date;
  bucket: Bucket;
  /** The range ends now (a period, not a custom range): the records are
   * asked for without an end, so that those of the last seconds are shown. */
  live: boolean;
}

const hour = 3_600_000;
const day = 24 * hour;
/** The API answers at most 1,000 buckets; a custom range longer than this
 * many hours is asked for by day. */
const maxHourBuckets = 7 * 24;

/** The query range of a period ending at now. A custom range (from, to as
 * Date) is asked by hour up to 7 days, by day beyond; the API rounds from
 * down and to up to whole buckets (UTC). Returns null for a custom range
 * that is not set or ends before it starts. */
export function rangeFor(period: Period, now: Date, custom?: { from: Date | null; to: Date | null }): Range | null {
  const t = now.getTime();
  switch (period) {
    case "1h":
      return { from: new Date(t - hour), to: now, bucket: "hour", live: true };
    case "24h":
      return { from: new Date(t - day), to: now, bucket: "hour", live: true };
    case "7d":
      return { from: new Date(t - 7 * day), to: now, bucket: "hour", live: true };
    case "30d":
      return { from: new Date(t - 30 * day), to: now, bucket: "day", live: true };
    case "custom": {
      const from = custom?.from;
      const to = custom?.to;
      if (!from || !to || to.getTime() <= from.getTime()) return null;
      const bucket: Bucket = to.getTime() - from.getTime() <= maxHourBuckets * hour ? "hour" : "day";
      return { from, to, bucket, live: false };
    }
  }
}

/** The end of the current minute: a live period ends there, so queries of
 * the same period made within a minute share their cache key and still
 * cover every request up to now (rounded down, a page loaded in the first
 * minute of an hour would end its range at that hour and leave out the
 * requests made since). */
export function minuteEnd(ms: number = Date.now()): Date {
  return new Date((Math.floor(ms / 60_000) + 1) * 60_000);
}

export interface Filters {
  application?: string;
  provider?: string;
  model?: string;
}

export type UsageQuery = NonNullable<operations["getUsage"]["parameters"]["query"]>;
export type RecordsQuery = NonNullable<operations["listUsageRecords"]["parameters"]["query"]>;

function setFilters<Q extends Filters>(q: Q, f: Filters): Q {
  for (const k of ["application", "provider", "model"] as const) if (f[k]) q[k] = f[k];
  return q;
}

/** The query of GET /usage: empty filters are left out. */
export function usageQuery(r: Range, f: Filters, groupBy?: TopDimension, denied = false): UsageQuery {
  const q: UsageQuery = { from: r.from.toISOString(), to: r.to.toISOString(), bucket: r.bucket };
  if (groupBy) q.groupBy = [groupBy];
  if (denied) q.resolution = "denied";
  return setFilters(q, f);
}

/** The query of GET /usage/records over the same range and filters (no
 * end for a live range). */
export function recordsQuery(r: Range, f: Filters, limit: number): RecordsQuery {
  const q: RecordsQuery = { from: r.from.toISOString(), limit };
  if (!r.live) q.to = r.to.toISOString();
  return setFilters(q, f);
}

/** A query as a URL's search part (arrays comma-separated, as the API reads
 * them), for the CSV exports that are fetched without openapi-fetch. */
export function searchString(q: Record<string, string | number | string[] | undefined>): string {
  const s = new URLSearchParams();
  for (const [k, v] of Object.entries(q)) {
    if (v === undefined || v === "") continue;
    s.set(k, Array.isArray(v) ? v.join(",") : String(v));
  }
  return s.toString();
}

/** The value of row's dimension dim ("key" is keyId in a row). */
export function dimValue(row: UsageRow, dim: TopDimension): string {
  const v = dim === "key" ? row.keyId : row[dim];
  return v ?? "";
}

/** Every bucket start from from (included) to to (excluded), as the API
 * aligns them (whole UTC hours or days). */
export function bucketStarts(from: string, to: string, bucket: Bucket): string[] {
  const step = bucket === "hour" ? hour : day;
  const out: string[] = [];
  const end = new Date(to).getTime();
  for (let t = new Date(from).getTime(); t < end && out.length < 1000; t += step) out.push(new Date(t).toISOString());
  return out;
}

export type Metric = "requests" | "costMicroUsd" | "totalTokens";

export const otherSeries = "Other";

/** Chart data: one point per bucket of the report (buckets without usage
 * are zeros), with one value per series. The series are the dimension's
 * values with the largest sums of metric over the range, at most top of
 * them (named by label), the rest summed as "Other". */
export function pivot(
  report: UsageReport,
  dim: TopDimension,
  metric: Metric,
  label: (value: string) => string,
  top = 5,
  scale = 1,
): { data: Record<string, string | number>[]; series: string[] } {
  const sums = new Map<string, number>();
  for (const r of report.rows) sums.set(dimValue(r, dim), (sums.get(dimValue(r, dim)) ?? 0) + r[metric]);
  const ranked = [...sums.entries()].filter(([, v]) => v > 0).sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]));
  const shown = ranked.slice(0, top).map(([k]) => k);
  const names = new Map(shown.map((k) => [k, label(k)]));
  const series = shown.map((k) => names.get(k) as string);
  if (ranked.length > top) series.push(otherSeries);
  const points = new Map<string, Record<string, string | number>>();
  for (const s of bucketStarts(report.from, report.to, report.bucket)) {
    const p: Record<string, string | number> = { start: s };
    for (const name of series) p[name] = 0;
    points.set(s, p);
  }
  for (const r of report.rows) {
    const p = points.get(new Date(r.start).toISOString());
    if (!p) continue;
    const name = names.get(dimValue(r, dim)) ?? otherSeries;
    if (!(name in p)) continue;
    p[name] = (p[name] as number) + r[metric] / scale;
  }
  return { data: [...points.values()], series };
}

export const tokenKinds = [
  { key: "input", label: "Input" },
  { key: "cached", label: "Input, cached" },
  { key: "cacheWrite", label: "Input, cache write" },
  { key: "output", label: "Output" },
  { key: "reasoning", label: "Output, reasoning" },
] as const;

/** Tokens by kind per bucket: the input not cached nor written to the cache,
 * cached input, cache writes, output other than reasoning and reasoning; the
 * five add up to totalTokens. */
export function tokensByKind(report: UsageReport): Record<string, string | number>[] {
  const points = new Map<string, Record<string, string | number>>();
  for (const s of bucketStarts(report.from, report.to, report.bucket)) {
    const p: Record<string, string | number> = { start: s };
    for (const k of tokenKinds) p[k.label] = 0;
    points.set(s, p);
  }
  for (const r of report.rows) {
    const p = points.get(new Date(r.start).toISOString());
    if (!p) continue;
    const add = (label: string, n: number) => (p[label] = (p[label] as number) + n);
    add("Input", r.promptTokens - r.cachedTokens - r.cacheWriteTokens);
    add("Input, cached", r.cachedTokens);
    add("Input, cache write", r.cacheWriteTokens);
    add("Output", r.completionTokens - r.reasoningTokens);
    add("Output, reasoning", r.reasoningTokens);
  }
  return [...points.values()];
}

export interface Consumer {
  value: string;
  requests: number;
  denied: number;
  totalTokens: number;
  costMicroUsd: number;
  /** This consumer's share of the whole range's cost, 0..1 (0 when nothing cost). */
  costShare: number;
}

/** The consumers of the range by dimension, the largest cost first (then
 * tokens, then requests), with their denials from a report of the same
 * range filtered to resolution=denied. */
export function topConsumers(report: UsageReport, denied: UsageReport | undefined, dim: TopDimension, limit = 10): Consumer[] {
  const by = new Map<string, Consumer>();
  const get = (v: string) => {
    let c = by.get(v);
    if (!c) by.set(v, (c = { value: v, requests: 0, denied: 0, totalTokens: 0, costMicroUsd: 0, costShare: 0 }));
    return c;
  };
  for (const r of report.rows) {
    const c = get(dimValue(r, dim));
    c.requests += r.requests;
    c.totalTokens += r.totalTokens;
    c.costMicroUsd += r.costMicroUsd;
  }
  for (const r of denied?.rows ?? []) get(dimValue(r, dim)).denied += r.requests;
  const total = report.totals.costMicroUsd;
  const list = [...by.values()];
  for (const c of list) c.costShare = total > 0 ? c.costMicroUsd / total : 0;
  list.sort((a, b) => b.costMicroUsd - a.costMicroUsd || b.totalTokens - a.totalTokens || b.requests - a.requests || a.value.localeCompare(b.value));
  return list.slice(0, limit);
}

/** USD from micro-USD: "$1,234.57", and small amounts to the micro-dollar
 * ("$0.000125"), never rounded to $0.00 when not zero. */
// Made once: toLocaleString with options builds a formatter per call, and
// the page formats a few thousand numbers and labels when it renders.
const usd2 = new Intl.NumberFormat("en-US", { minimumFractionDigits: 2, maximumFractionDigits: 2 });
const usd6 = new Intl.NumberFormat("en-US", { minimumFractionDigits: 2, maximumFractionDigits: 6 });
const plain = new Intl.NumberFormat("en-US");
const compactCount = new Intl.NumberFormat("en-US", { notation: "compact", maximumFractionDigits: 1 });
const utcDay = new Intl.DateTimeFormat("en-US", { month: "short", day: "numeric", timeZone: "UTC" });
const localDay = new Intl.DateTimeFormat("en-US", { month: "short", day: "numeric" });
const localTime = new Intl.DateTimeFormat("en-GB", { hour: "2-digit", minute: "2-digit" });

export function usd(micro: number): string {
  const v = micro / 1e6;
  if (micro === 0) return "$0.00";
  return (v < 0 ? "-$" : "$") + (Math.abs(micro) >= 10_000 ? usd2 : usd6).format(Math.abs(v));
}

/** A count as "1,234", or compact ("1.2M") for axes. */
export function count(n: number, compact = false): string {
  return (compact ? compactCount : plain).format(n);
}

/** A bucket's start for an axis or a table: "14:00" for hours within a
 * day, "Dec 1 14:00" across days, "Dec 1" for days. Local time. */
export function bucketLabel(iso: string, bucket: Bucket, multiDay: boolean): string {
  const d = new Date(iso);
  if (bucket === "day") return utcDay.format(d);
  const time = localTime.format(d);
  return multiDay ? `${localDay.format(d)} ${time}` : time;
}

/** The name of a file an export is saved as: usage-<what>-<from>-<to>.csv (UTC, minutes). */
export function exportName(what: string, r: Range): string {
  const f = (d: Date) => d.toISOString().slice(0, 16).replace(/[-:]/g, "").replace("T", "-");
  return `usage-${what}-${f(r.from)}-${f(r.to)}.csv`;
}
