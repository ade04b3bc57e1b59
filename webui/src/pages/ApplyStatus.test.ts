import { expect, it } from "vitest";
import type { Gateway } from "../api/client";
import { applyState } from "./ApplyStatus";

const gw = (id: string, appliedVersion: number, state: Gateway["state"], revokedAt?: string): Gateway => ({
  id,
  name: id,
  createdAt: "2026-01-01T00:00:00Z",
  appliedVersion,
  lastVersion: appliedVersion,
  state,
  revokedAt,
});

it("counts the gateways that applied a version, ignoring revoked ones", () => {
  const s = applyState([gw("a", 7, "applied"), gw("b", 6, "pending"), gw("c", 2, "revoked", "2026-01-02T00:00:00Z")], 7);
  expect([s.live.length, s.applied.length, s.failed.length, s.done]).toEqual([2, 1, 0, false]);
  const t = applyState([gw("a", 8, "applied"), gw("b", 6, "failed")], 7);
  expect([t.applied.length, t.failed.length, t.done]).toEqual([1, 1, true]);
});
