// A guardrail as raw text: the entry {name, version, params} in YAML or JSON,
// as in a deployment file.
import YAML from "yaml";

export interface EditorValue {
  name: string;
  version: string;
  params: Record<string, unknown>;
}

/** Parses the raw editor's text: an entry {name, version?, params?}. */
export function parseRaw(text: string): { value?: EditorValue; error?: string } {
  let doc: unknown;
  try {
    doc = YAML.parse(text);
  } catch (e) {
    return { error: `Not valid YAML or JSON: ${(e as Error).message}` };
  }
  if (!doc || typeof doc !== "object" || Array.isArray(doc)) return { error: "Write one entry: name, version and params." };
  const d = doc as Record<string, unknown>;
  const extra = Object.keys(d).filter((k) => !["name", "version", "params"].includes(k));
  if (extra.length) return { error: `Unknown field ${extra.map((k) => `"${k}"`).join(", ")}: an entry has name, version and params.` };
  if (typeof d.name !== "string" || !d.name) return { error: "name: the policy's name is required." };
  if (d.version !== undefined && typeof d.version !== "string") return { error: 'version: a string such as "v1".' };
  if (d.params !== undefined && d.params !== null && (typeof d.params !== "object" || Array.isArray(d.params)))
    return { error: "params: an object of the policy's parameters." };
  return { value: { name: d.name, version: (d.version as string) ?? "v1", params: (d.params as Record<string, unknown>) ?? {} } };
}

export function rawText(v: EditorValue): string {
  return YAML.stringify({ name: v.name, version: v.version, params: v.params });
}

