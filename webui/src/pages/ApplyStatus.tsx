// Whether every gateway has applied a deployment version: shown after a
// save, polling the gateways until each one serves it (or failed to).
import { Alert, Group, Loader, Text } from "@mantine/core";
import { IconAlertTriangle, IconCircleCheck } from "@tabler/icons-react";
import type { Gateway } from "../api/client";
import { useGateways } from "../api/queries";
import { plural } from "../lib/format";

export function applyState(gateways: Gateway[], version: number) {
  const live = gateways.filter((g) => g.state !== "revoked" && !g.revokedAt);
  const applied = live.filter((g) => g.appliedVersion >= version);
  const failed = live.filter((g) => g.appliedVersion < version && g.state === "failed");
  return { live, applied, failed, done: applied.length + failed.length === live.length };
}

export function ApplyStatus({ version }: { version: number }) {
  // Polls every second until every gateway is settled.
  const gw = useGateways((d) => (d && applyState(d.gateways, version).done ? false : 1000));
  if (!gw.data) return null;
  const { live, applied, failed } = applyState(gw.data.gateways, version);
  if (live.length === 0)
    return (
      <Alert color="yellow" role="status" icon={<IconAlertTriangle aria-hidden />}>
        Saved as deployment version {version}. No gateway is registered, so nothing serves it yet.
      </Alert>
    );
  if (failed.length > 0)
    return (
      <Alert color="red" role="status" icon={<IconAlertTriangle aria-hidden />} title={`Version ${version}: ${failed.length} of ${live.length} gateways failed to apply it`}>
        {failed.map((g) => (
          <Text key={g.id} size="sm">
            {g.name}: {g.lastError ?? "failed"} (it keeps serving version {g.appliedVersion})
          </Text>
        ))}
      </Alert>
    );
  if (applied.length === live.length)
    return (
      <Alert color="teal" role="status" icon={<IconCircleCheck aria-hidden />}>
        Saved. Every gateway ({plural(live.length, "gateway")}) applied deployment version {version}.
      </Alert>
    );
  return (
    <Alert color="blue" role="status">
      <Group gap="xs">
        <Loader size="xs" aria-hidden />
        <Text size="sm">
          Saved as deployment version {version}: applied by {applied.length} of {plural(live.length, "gateway")}…
        </Text>
      </Group>
    </Alert>
  );
}
