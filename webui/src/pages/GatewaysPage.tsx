// Gateways: every registered gateway with the deployment version it applied
// and when it last checked in; register one (its token shown once) or
// revoke its token. The provider's Gateways tab shows the same list against
// the provider's current version.
import { Alert, Badge, Button, Card, Code, CopyButton, Group, Modal, Stack, Table, Text, TextInput } from "@mantine/core";
import { useDisclosure } from "@mantine/hooks";
import { notifications } from "@mantine/notifications";
import { IconPlus } from "@tabler/icons-react";
import { useQuery, useQueryClient } from "@tanstack/react-query";
import { useState, type FormEvent } from "react";
import { call, data, type Gateway } from "../api/client";
import { keys, useGateways } from "../api/queries";
import { useClient } from "../auth";
import { PageHeader } from "../components/Layout";
import { Empty, ErrorState, QueryView, errorText } from "../components/states";
import { ago, when } from "../lib/format";
import { useProviderId } from "./ProviderPage";

const stateColor: Record<Gateway["state"], string> = { applied: "teal", pending: "blue", failed: "red", unknown: "gray", revoked: "gray" };
const stateHelp: Record<Gateway["state"], string> = {
  applied: "serves the current version",
  pending: "serves an older version",
  failed: "its last attempt at the current version failed",
  unknown: "never reported",
  revoked: "token revoked",
};

function GatewayTable({ gateways, version, onRevoke }: { gateways: Gateway[]; version: number; onRevoke?: (g: Gateway) => void }) {
  return (
    <Card withBorder p={0}>
      <Table.ScrollContainer minWidth={680}>
        <Table verticalSpacing="sm">
          <Table.Thead>
            <Table.Tr>
              <Table.Th>Gateway</Table.Th>
              <Table.Th>State</Table.Th>
              <Table.Th>Applied version</Table.Th>
              <Table.Th>Last check-in</Table.Th>
              {onRevoke && <Table.Th aria-label="Actions" />}
            </Table.Tr>
          </Table.Thead>
          <Table.Tbody>
            {gateways.map((g) => (
              <Table.Tr key={g.id}>
                <Table.Td>
                  <Text fw={600} size="sm">
                    {g.name}
                  </Text>
                  <Text size="xs" c="dimmed" className="mono">
                    {g.id}
                  </Text>
                </Table.Td>
                <Table.Td>
                  <Badge color={stateColor[g.state]} variant="light">
                    {g.state}
                  </Badge>
                  <Text size="xs" c="dimmed">
                    {g.appliedVersion >= version && g.state !== "revoked" ? `runs version ${version} or newer` : stateHelp[g.state]}
                  </Text>
                  {g.lastError && (
                    <Text size="xs" c="red.8">
                      {g.lastError}
                    </Text>
                  )}
                </Table.Td>
                <Table.Td>
                  {g.appliedVersion || "—"}
                  {g.appliedAt && (
                    <Text size="xs" c="dimmed">
                      {when(g.appliedAt)}
                    </Text>
                  )}
                </Table.Td>
                <Table.Td>
                  <span title={when(g.lastSeenAt)}>{ago(g.lastSeenAt)}</span>
                </Table.Td>
                {onRevoke && (
                  <Table.Td>
                    {g.state !== "revoked" && g.id !== "local" && (
                      <Button size="xs" variant="subtle" color="red" onClick={() => onRevoke(g)}>
                        Revoke
                      </Button>
                    )}
                  </Table.Td>
                )}
              </Table.Tr>
            ))}
          </Table.Tbody>
        </Table>
      </Table.ScrollContainer>
    </Card>
  );
}

export function GatewaysPage() {
  const client = useClient();
  const qc = useQueryClient();
  const gateways = useGateways(5000);
  const [addOpen, add] = useDisclosure(false);
  const [name, setName] = useState("");
  const [created, setCreated] = useState<{ name: string; token: string } | null>(null);
  const [err, setErr] = useState<unknown>(null);
  const [revoking, setRevoking] = useState<Gateway | null>(null);
  const [busy, setBusy] = useState(false);

  async function register(e: FormEvent) {
    e.preventDefault();
    setBusy(true);
    setErr(null);
    try {
      const r = await call(client.POST("/gateways", { body: { name: name.trim() } }));
      setCreated({ name: r.data.name, token: r.data.token });
      setName("");
      void qc.invalidateQueries({ queryKey: keys.gateways });
    } catch (x) {
      setErr(x);
    } finally {
      setBusy(false);
    }
  }

  async function revoke() {
    if (!revoking) return;
    setBusy(true);
    try {
      await call(client.DELETE("/gateways/{gatewayId}", { params: { path: { gatewayId: revoking.id } } }));
      notifications.show({ color: "teal", title: "Gateway revoked", message: `${revoking.name} gets no further changes.` });
      setRevoking(null);
      void qc.invalidateQueries({ queryKey: keys.gateways });
    } catch (x) {
      notifications.show({ color: "red", title: "Not revoked", message: errorText(x) });
    } finally {
      setBusy(false);
    }
  }

  return (
    <>
      <PageHeader
        title="Gateways"
        description="Every gateway serves every provider. Each pulls the deployment from the platform and reports the version it applied."
        actions={
          <Button leftSection={<IconPlus size={16} aria-hidden />} onClick={add.open}>
            Register gateway
          </Button>
        }
      />
      <QueryView query={gateways} loading="Loading the gateways">
        {(d) =>
          d.gateways.length === 0 ? (
            <Card withBorder>
              <Empty title="No gateways">Register a gateway to get its token, then start it with sluice gateway --platform.</Empty>
            </Card>
          ) : (
            <Stack gap="xs">
              <Text size="sm">Current deployment version: {d.currentVersion}</Text>
              <GatewayTable gateways={d.gateways} version={d.currentVersion} onRevoke={setRevoking} />
            </Stack>
          )
        }
      </QueryView>
      <Modal
        opened={addOpen}
        onClose={() => {
          add.close();
          setCreated(null);
          setErr(null);
        }}
        title={created ? `Gateway ${created.name} registered` : "Register a gateway"}
        size="lg"
      >
        {created ? (
          <Stack>
            <Alert color="yellow" role="status" title="Copy the token now: you will not see it again">
              Only its hash is stored. Lost tokens cannot be recovered: revoke the gateway and register a new one.
            </Alert>
            <Code block className="mono" aria-label="Gateway token">
              {created.token}
            </Code>
            <Text size="sm">Start the gateway with it:</Text>
            <Code block>{`sluice gateway --platform ${window.location.origin} --token ${created.token}`}</Code>
            <Group justify="flex-end">
              <CopyButton value={created.token}>
                {({ copied, copy }) => <Button onClick={copy}>{copied ? "Copied" : "Copy token"}</Button>}
              </CopyButton>
              <Button variant="default" onClick={() => { add.close(); setCreated(null); }}>
                Done
              </Button>
            </Group>
          </Stack>
        ) : (
          <form onSubmit={register}>
            <Stack>
              <TextInput label="Name" value={name} onChange={(e) => setName(e.currentTarget.value)} required maxLength={200} data-autofocus />
              {err != null && <ErrorState title="Not registered" error={err} />}
              <Group justify="flex-end">
                <Button variant="default" onClick={add.close}>
                  Cancel
                </Button>
                <Button type="submit" loading={busy} disabled={!name.trim()}>
                  Register
                </Button>
              </Group>
            </Stack>
          </form>
        )}
      </Modal>
      <Modal opened={revoking !== null} onClose={() => setRevoking(null)} title={`Revoke ${revoking?.name ?? ""}?`}>
        <Stack>
          <Text size="sm">
            Its token is refused from now on: the gateway keeps serving its last deployment but gets no further changes (including revoked keys).
          </Text>
          <Group justify="flex-end">
            <Button variant="default" onClick={() => setRevoking(null)}>
              Cancel
            </Button>
            <Button color="red" loading={busy} onClick={() => void revoke()}>
              Revoke gateway
            </Button>
          </Group>
        </Stack>
      </Modal>
    </>
  );
}

export function ProviderGatewaysTab() {
  const providerId = useProviderId();
  const client = useClient();
  const gateways = useGateways(5000);
  const dep = useQuery({
    queryKey: keys.deployment(providerId),
    queryFn: () => data(client.GET("/providers/{providerId}/deployment", { params: { path: { providerId } } })),
  });
  return (
    <QueryView query={gateways} loading="Loading the gateways">
      {(d) => {
        const version = dep.data?.version ?? d.currentVersion;
        const live = d.gateways.filter((g) => g.state !== "revoked");
        const running = live.filter((g) => g.appliedVersion >= version);
        return (
          <Stack gap="sm">
            <Text size="sm" c="dimmed" maw={720}>
              Every gateway runs this provider. Its current settings are deployment version {version}:{" "}
              <b>
                {running.length} of {live.length}
              </b>{" "}
              gateways apply them.
            </Text>
            {d.gateways.length === 0 ? <Empty title="No gateways" /> : <GatewayTable gateways={d.gateways} version={version} />}
          </Stack>
        );
      }}
    </QueryView>
  );
}
