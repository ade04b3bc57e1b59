// @vitest-environment node
// The committed API types are generated from platform/api/openapi.yaml
// (npm run generate, or make generate): this fails when they are stale.
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { expect, it } from "vitest";

it("src/api/schema.d.ts matches platform/api/openapi.yaml", () => {
  const dir = mkdtempSync(path.join(tmpdir(), "schema-"));
  try {
    const out = path.join(dir, "schema.d.ts");
    execFileSync(path.resolve("node_modules/.bin/openapi-typescript"), ["../platform/api/openapi.yaml", "-o", out], { stdio: "pipe" });
    expect(readFileSync("src/api/schema.d.ts", "utf8"), "run npm run generate (make generate)").toBe(readFileSync(out, "utf8"));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
