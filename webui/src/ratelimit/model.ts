// The Rate Limit tab's form state and its translation to and from the API's
// RateLimits (docs/platform.md "Rate Limit settings"). Field errors are keyed
// by the JSON path the server uses in its 422 details
// ($.backend.global.token.count), so that an error from either side shows
// at the same field.
import type { Limits, RateLimits, RateLimitScope, Schemas } from "../api/client";

export type Unit = Schemas["Reset"]["unit"];
export const units: Unit[] = ["minute", "hour", "day", "week", "month"];
export type Resource = Schemas["ResourceLimit"]["resource"];
export const resources: Resource[] = ["/chat/completions", "/completions", "/embeddings", "/responses", "/messages"];
export type Kind = "request" | "token" | "cost";
export const kinds: Kind[] = ["request", "token", "cost"];
export type ScopeName = "backend" | "consumer";
export type Mode = "global" | "perResource";

/** One row: a request or token count, or a cost amount in USD. Numbers are
 * kept as typed so that a half-typed value is not lost. */
export interface RowForm {
  enabled: boolean;
  value: string;
  duration: string;
  unit: Unit;
  /** The percents of the limit that raise a budget alert, as typed ("50, 80, 100"). */
  alertAt: string;
}
export type LimitsForm = Record<Kind, RowForm>;
export interface ResourceForm {
  resource: Resource;
  limits: LimitsForm;
}
export interface ScopeForm {
  mode: Mode;
  global: LimitsForm;
  default: LimitsForm;
  resources: ResourceForm[];
}
export type FormState = Record<ScopeName, ScopeForm>;
export type FieldErrors = Record<string, string>;

// The API's bounds (platform/api/openapi.yaml: CountLimit, CostLimit, Reset).
const maxCount = 1e15;
const minAmount = 0.000001;
const maxAmount = 1e12;
const maxDuration = 100000;

export function emptyRow(kind: Kind): RowForm {
  return { enabled: false, value: "", duration: "1", unit: kind === "cost" ? "month" : "hour", alertAt: "" };
}

export function emptyLimits(): LimitsForm {
  return { request: emptyRow("request"), token: emptyRow("token"), cost: emptyRow("cost") };
}

export function emptyScope(): ScopeForm {
  return { mode: "global", global: emptyLimits(), default: emptyLimits(), resources: [] };
}

function limitsToForm(l: Limits | undefined): LimitsForm {
  const f = emptyLimits();
  if (!l) return f;
  for (const k of kinds) {
    const row = l[k];
    if (!row) continue;
    const value = "count" in row ? String(row.count) : String((row as { amount: number }).amount);
    f[k] = { enabled: row.enabled, value, duration: String(row.reset.duration), unit: row.reset.unit, alertAt: alertAtText((row).alertAt) };
  }
  return f;
}

function scopeToForm(s: RateLimitScope | undefined): ScopeForm {
  const f = emptyScope();
  if (s?.perResource) {
    f.mode = "perResource";
    f.default = limitsToForm(s.perResource.default);
    f.resources = (s.perResource.resources ?? []).map((r) => ({ resource: r.resource, limits: limitsToForm(r.limit) }));
  } else if (s?.global) {
    f.global = limitsToForm(s.global);
  }
  return f;
}

export function toForm(rl: RateLimits): FormState {
  return { backend: scopeToForm(rl.backend), consumer: scopeToForm(rl.consumer) };
}

function parseInteger(s: string): number | null {
  const t = s.trim();
  if (!/^[0-9]+$/.test(t)) return null;
  // Beyond 2^53 the value is inexact, but still above every bound.
  return Number(t);
}

function parseAmount(s: string): number | null {
  const t = s.trim().replace(/^\$/, "");
  if (!/^([0-9]+(\.[0-9]*)?|\.[0-9]+)$/.test(t)) return null;
  const n = Number(t);
  return Number.isFinite(n) ? n : null;
}

/** A row with its alert thresholds (CountLimit and CostLimit's alertAt in
 * the budgets API, docs/platform.md; not in the generated types yet). */
type Row = (NonNullable<Limits["request"]> | NonNullable<Limits["cost"]>) & { alertAt?: number[] };

/** One row to the API, or undefined when it is off and holds nothing that
 * can be kept. An enabled row must be valid; a disabled one is kept (it
 * generates nothing) only when valid, and never reports errors. */
function rowFromForm(kind: Kind, row: RowForm, path: string, errors: FieldErrors): Row | undefined {
  const local: FieldErrors = {};
  let value: number | null;
  if (kind === "cost") {
    value = parseAmount(row.value);
    if (row.value.trim() === "") local[path + ".amount"] = "Enter an amount in USD.";
    else if (value === null) local[path + ".amount"] = "Enter an amount such as 5 or 0.25.";
    else if (value < minAmount) local[path + ".amount"] = "The amount must be at least $0.000001.";
    else if (value > maxAmount) local[path + ".amount"] = "The amount must be at most $1,000,000,000,000.";
  } else {
    value = parseInteger(row.value);
    const what = kind === "token" ? "tokens" : "requests";
    if (row.value.trim() === "") local[path + ".count"] = `Enter the number of ${what}.`;
    else if (value === null) local[path + ".count"] = "Enter a whole number.";
    else if (value < 1) local[path + ".count"] = "The count must be at least 1.";
    else if (value > maxCount) local[path + ".count"] = "The count must be at most 10^15.";
  }
  const duration = parseInteger(row.duration);
  if (duration === null || duration < 1) local[path + ".reset.duration"] = "Enter a whole number of at least 1.";
  else if (duration > maxDuration) local[path + ".reset.duration"] = "The period must be at most 100,000 units.";
  else if (row.unit === "month" && duration !== 1)
    local[path + ".reset.duration"] = "A month limit resets every calendar month: the number must be 1 (use days or weeks for other spans).";
  if (!units.includes(row.unit)) local[path + ".reset.unit"] = "Choose a unit.";
  const alertAt = parseAlertAt(row.alertAt ?? "");
  if (alertAt.error) local[path + ".alertAt"] = alertAt.error;

  if (Object.keys(local).length > 0) {
    if (row.enabled) Object.assign(errors, local);
    return undefined;
  }
  const reset = { duration: duration as number, unit: row.unit };
  const out: Row =
    kind === "cost" ? { enabled: row.enabled, amount: value as number, reset } : { enabled: row.enabled, count: value as number, reset };
  if (alertAt.value?.length) out.alertAt = alertAt.value;
  return out;
}

function limitsFromForm(f: LimitsForm, path: string, errors: FieldErrors): Limits | undefined {
  const out: Limits = {};
  for (const k of kinds) {
    const r = rowFromForm(k, f[k], `${path}.${k}`, errors);
    if (r) (out as Record<Kind, Row>)[k] = r;
  }
  return Object.keys(out).length ? out : undefined;
}

function scopeFromForm(name: ScopeName, f: ScopeForm, errors: FieldErrors): RateLimitScope | undefined {
  if (f.mode === "global") {
    const g = limitsFromForm(f.global, `$.${name}.global`, errors);
    return g ? { global: g } : undefined;
  }
  const base = `$.${name}.perResource`;
  const def = limitsFromForm(f.default, `${base}.default`, errors);
  const seen = new Map<Resource, number>();
  const list = f.resources.map((r, i) => {
    const prev = seen.get(r.resource);
    if (prev !== undefined) errors[`${base}.resources[${i}].resource`] = `${r.resource} is already listed above.`;
    seen.set(r.resource, i);
    // Every listed resource is sent, limits or not, so that the server's
    // paths (resources[i]) name the same rows as the form.
    return { resource: r.resource, limit: limitsFromForm(r.limits, `${base}.resources[${i}].limit`, errors) ?? {} };
  });
  if (!def && list.length === 0) return undefined;
  const pr: NonNullable<RateLimitScope["perResource"]> = {};
  if (def) pr.default = def;
  if (list.length) pr.resources = list;
  return { perResource: pr };
}

/** The API document the form stands for, and the errors that keep it from
 * being saved (empty when it can be). */
export function fromForm(f: FormState): { value: RateLimits; errors: FieldErrors } {
  const errors: FieldErrors = {};
  const value: RateLimits = {};
  const b = scopeFromForm("backend", f.backend, errors);
  const c = scopeFromForm("consumer", f.consumer, errors);
  if (b) value.backend = b;
  if (c) value.consumer = c;
  return { value, errors };
}

/** The same settings written the same way, for comparing a form with what
 * the server holds. */
export function canonical(rl: RateLimits): string {
  return JSON.stringify(fromForm(toForm(rl)).value);
}

export function resourcesLeft(f: ScopeForm): Resource[] {
  const used = new Set(f.resources.map((r) => r.resource));
  return resources.filter((r) => !used.has(r));
}

/** The server's problems as field errors; those of no form field (a path
 * such as $ or $.backend) are returned apart, to be shown above the form. */
export function serverErrors(details: { path: string; message: string }[]): { fields: FieldErrors; other: string[] } {
  const fields: FieldErrors = {};
  const other: string[] = [];
  const fieldPath = /^\$\.(backend|consumer)\.(global|perResource\.default|perResource\.resources\[\d+\]\.limit)\.(request|token|cost)\.(count|amount|reset\.duration|reset\.unit|alertAt)$/;
  const resourcePath = /^\$\.(backend|consumer)\.perResource\.resources\[\d+\]\.resource$/;
  for (const d of details) {
    // $.….alertAt[2] is shown at the row's one Alert at field.
    const path = d.path.replace(/\.alertAt\[\d+\]$/, ".alertAt");
    if (fieldPath.test(path) || resourcePath.test(path)) fields[path] = fields[path] ? fields[path] + " " + d.message : d.message;
    else other.push(d.path === "$" ? d.message : `${d.path}: ${d.message}`);
  }
  return { fields, other };
}

/** A short reading of a reset period: "per hour", "per 5 minutes", "per calendar month". */
export function periodText(duration: string, unit: Unit): string {
  const n = parseInteger(duration);
  if (n === null || n < 1) return "";
  if (unit === "month") return n === 1 ? "per calendar month (UTC)" : "";
  if (n === 1) return unit === "day" ? "per UTC day" : unit === "week" ? "per ISO week (UTC)" : `per ${unit}`;
  return `per ${n.toLocaleString("en-US")} ${unit}s`;
}

const kindNoun: Record<Kind, string> = { request: "requests", token: "tokens", cost: "USD" };

function limitsText(l: Limits | undefined): string[] {
  if (!l) return [];
  const out: string[] = [];
  for (const k of kinds) {
    const r = l[k];
    if (!r) continue;
    const v = "count" in r ? `${r.count.toLocaleString("en-US")} ${kindNoun[k]}` : `$${(r as { amount: number }).amount}`;
    const alerts = (r).alertAt?.length ? `, alerts at ${(r).alertAt.join(", ")} %` : "";
    out.push(`${v} ${periodText(String(r.reset.duration), r.reset.unit)}${alerts}${r.enabled ? "" : " (off)"}`);
  }
  return out;
}

/** The settings as sentences, one per limit: for showing two versions side
 * by side (a stale edit) without reading JSON. */
export function describe(rl: RateLimits): string[] {
  const out: string[] = [];
  for (const [name, label] of [
    ["backend", "Backend"],
    ["consumer", "Per consumer"],
  ] as const) {
    const s = rl[name];
    if (s?.global) for (const t of limitsText(s.global)) out.push(`${label}, provider-wide: ${t}`);
    if (s?.perResource) {
      for (const t of limitsText(s.perResource.default)) out.push(`${label}, default per endpoint: ${t}`);
      for (const r of s.perResource.resources ?? []) for (const t of limitsText(r.limit)) out.push(`${label}, ${r.resource}: ${t}`);
    }
  }
  return out.length ? out : ["No limits."];
}

/** Alert thresholds as typed ("50, 80, 100") to the API's alertAt, or the
 * error that keeps them from being saved: whole percents 1..100, strictly
 * ascending, at most 10. Empty is no alerts (undefined). */
export function parseAlertAt(text: string): { value?: number[]; error?: string } {
  const t = text.trim();
  if (t === "") return {};
  const parts = t.split(/[\s,;]+/).filter(Boolean).map((p) => p.replace(/%$/, ""));
  const out: number[] = [];
  for (const p of parts) {
    if (!/^[0-9]+$/.test(p)) return { error: "Enter whole percents separated by commas, such as 50, 80, 100." };
    const n = Number(p);
    if (n < 1 || n > 100) return { error: "Each percent must be from 1 to 100." };
    if (out.length && n <= out[out.length - 1]) return { error: "List the percents in ascending order, each once." };
    out.push(n);
  }
  if (out.length > 10) return { error: "At most 10 thresholds." };
  return { value: out };
}

export function alertAtText(v: number[] | undefined): string {
  return v?.length ? v.join(", ") : "";
}
