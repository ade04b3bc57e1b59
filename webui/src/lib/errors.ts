import { ApiError } from "../api/client";

/** The 422 problems of err keyed by JSON path ($.name), and a message for
 * the rest (empty when every problem has a field in known). */
export function problemsByPath(err: unknown, known: string[]): { fields: Record<string, string>; rest: string | null } {
  const fields: Record<string, string> = {};
  const rest: string[] = [];
  if (!(err instanceof ApiError)) return { fields, rest: err ? String((err as Error).message ?? err) : null };
  for (const d of err.details) {
    const k = known.find((p) => d.path === p || d.path.startsWith(p + "[") || d.path.startsWith(p + "."));
    if (k) fields[k] = fields[k] ? `${fields[k]} ${d.message}` : d.message;
    else rest.push(d.path === "$" ? d.message : `${d.path}: ${d.message}`);
  }
  if (err.details.length === 0) rest.push(err.message);
  return { fields, rest: rest.length ? rest.join(" ") : null };
}
