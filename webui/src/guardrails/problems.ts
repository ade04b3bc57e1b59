// The server's 422 problems for a guardrail, split into errors at the params
// fields they name (an @rjsf ErrorSchema: {allow: {0: {__errors: [...]}}})
// and the rest ($.name, $.version, or the chain check's $), shown above the
// form.
import type { ErrorSchema } from "@rjsf/utils";
import type { Problem } from "../api/client";

/** The segments of a JSON path below prefix: "$.params.a[0].b" -> ["a", "0", "b"];
 * null when path is not below prefix or cannot be read. */
export function pathSegments(path: string, prefix = "$.params"): string[] | null {
  if (path !== prefix && !path.startsWith(prefix + ".") && !path.startsWith(prefix + "[")) return null;
  const rest = path.slice(prefix.length);
  const segs: string[] = [];
  const re = /\.([^.[\]]+)|\[(\d+)\]|\["((?:[^"\\]|\\.)*)"\]/y;
  let i = 0;
  while (i < rest.length) {
    re.lastIndex = i;
    const m = re.exec(rest);
    if (!m) return null;
    segs.push(m[1] ?? m[2] ?? JSON.parse(`"${m[3]}"`));
    i = re.lastIndex;
  }
  return segs;
}

export function splitProblems(details: Problem[]): { errorSchema: ErrorSchema; other: Problem[] } {
  const errorSchema: ErrorSchema = {};
  const other: Problem[] = [];
  for (const d of details) {
    const segs = pathSegments(d.path);
    if (!segs || segs.length === 0) {
      other.push(d);
      continue;
    }
    let node = errorSchema as Record<string, unknown>;
    for (const s of segs) {
      node[s] ??= {};
      node = node[s] as Record<string, unknown>;
    }
    const errs = (node.__errors as string[] | undefined) ?? [];
    errs.push(d.message);
    node.__errors = errs;
  }
  return { errorSchema, other };
}
