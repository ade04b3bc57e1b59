// One application: its name and granted providers, and its API keys
// (created and shown once, listed by prefix, revoked after confirmation).
import { Alert, Badge, Button, Card, Code, CopyButton, Group, Modal, Stack, Table, Text, TextInput, Title } from "@mantine/core";
import { useDisclosure } from "@mantine/hooks";
import { notifications } from "@mantine/notifications";
import { IconArrowLeft, IconCopy, IconKey } from "@tabler/icons-react";
import { useQuery, useQueryClient } from "@tanstack/react-query";
import { getRouteApi, useNavigate } from "@tanstack/react-router";
import { useState, type FormEvent } from "react";
import { call, data, type Application, type CreatedKey, type Key } from "../api/client";
import { invalidateDeployment, keys, useProviders } from "../api/queries";
import { useClient } from "../auth";
import { Empty, ErrorState, QueryView, errorText } from "../components/states";
import { ago, when } from "../lib/format";
import { ProviderChoice } from "./ApplicationsPage";
import { AnchorLink } from "../components/links";
import { BudgetsCard } from "./BudgetsCard";

const route = getRouteApi("/applications/$applicationId");

export function keyStatus(k: Key, now = Date.now()): { label: string; color: string } {
  if (k.revokedAt) return { label: "revoked", color: "gray" };
  if (k.expiresAt && new Date(k.expiresAt).getTime() <= now) return { label: "expired", color: "orange" };
  return { label: "active", color: "teal" };
}

export function ApplicationPage() {
  const { applicationId } = route.useParams();
  const client = useClient();
  const app = useQuery({
    queryKey: keys.application(applicationId),
    queryFn: () => data(client.GET("/applications/{applicationId}", { params: { path: { applicationId } } })),
  });
  return (
    <Stack gap="md">
      <AnchorLink to="/applications" size="sm">
        <Group gap={4}>
          <IconArrowLeft size={14} aria-hidden /> Applications
        </Group>
      </AnchorLink>
      <QueryView query={app} loading="Loading the application">
        {(a) => <ApplicationView key={a.updatedAt} app={a} />}
      </QueryView>
    </Stack>
  );
}

function ApplicationView({ app }: { app: Application }) {
  const client = useClient();
  const qc = useQueryClient();
  const navigate = useNavigate();
  const providers = useProviders();
  const [name, setName] = useState(app.name);
  const [granted, setGranted] = useState<string[]>(app.providers);
  const [saving, setSaving] = useState(false);
  const [saveErr, setSaveErr] = useState<unknown>(null);
  const [deleteOpen, del] = useDisclosure(false);
  const path = { applicationId: app.id };
  const dirty = name.trim() !== app.name || [...granted].sort().join() !== [...app.providers].sort().join();

  async function save(e: FormEvent) {
    e.preventDefault();
    setSaving(true);
    setSaveErr(null);
    try {
      const r = await call(client.PUT("/applications/{applicationId}", { params: { path }, body: { name: name.trim(), providers: granted } }));
      qc.setQueryData(keys.application(app.id), r.data);
      void qc.invalidateQueries({ queryKey: keys.applications });
      invalidateDeployment(qc);
      notifications.show({ color: "teal", title: "Application saved", message: "Gateways apply the new grants within seconds." });
    } catch (x) {
      setSaveErr(x);
    } finally {
      setSaving(false);
    }
  }

  async function remove() {
    try {
      await call(client.DELETE("/applications/{applicationId}", { params: { path } }));
      void qc.invalidateQueries({ queryKey: keys.applications });
      invalidateDeployment(qc);
      notifications.show({ color: "teal", title: "Application deleted", message: `${app.name} and its keys are gone.` });
      void navigate({ to: "/applications" });
    } catch (x) {
      notifications.show({ color: "red", title: "Not deleted", message: errorText(x) });
    }
  }

  return (
    <Stack gap="md">
      <Group gap="sm" align="baseline">
        <Title order={1} size="h2">
          {app.name}
        </Title>
        <Text size="sm" c="dimmed" className="mono">
          {app.id}
        </Text>
      </Group>
      <KeysCard app={app} />
      <Card withBorder component="section" aria-labelledby="access-heading">
        <form onSubmit={save}>
          <Stack>
            <Title order={2} size="h4" id="access-heading">
              Name and access
            </Title>
            <TextInput label="Name" value={name} onChange={(e) => setName(e.currentTarget.value)} required maxLength={200} maw={420} />
            <ProviderChoice providers={providers.data ?? []} value={granted} onChange={setGranted} />
            {saveErr != null && <ErrorState title="Not saved" error={saveErr} />}
            <Group>
              <Button type="submit" loading={saving} disabled={!dirty || !name.trim()}>
                Save
              </Button>
            </Group>
          </Stack>
        </form>
      </Card>
      <BudgetsCard applicationId={app.id} />
      <Card withBorder component="section" aria-labelledby="danger-heading">
        <Stack gap="xs" align="flex-start">
          <Title order={2} size="h4" id="danger-heading">
            Delete this application
          </Title>
          <Text size="sm" c="dimmed">
            Its keys stop working on every gateway.
          </Text>
          <Button color="red" variant="light" onClick={del.open}>
            Delete application
          </Button>
        </Stack>
      </Card>
      <Modal opened={deleteOpen} onClose={del.close} title={`Delete ${app.name}?`}>
        <Stack>
          <Text size="sm">The application and all its keys are deleted; requests with them are refused.</Text>
          <Group justify="flex-end">
            <Button variant="default" onClick={del.close}>
              Cancel
            </Button>
            <Button color="red" onClick={() => void remove()}>
              Delete application
            </Button>
          </Group>
        </Stack>
      </Modal>
    </Stack>
  );
}

function KeysCard({ app }: { app: Application }) {
  const client = useClient();
  const qc = useQueryClient();
  const providers = useProviders();
  const path = { applicationId: app.id };
  const list = useQuery({
    queryKey: keys.keys(app.id),
    queryFn: () => data(client.GET("/applications/{applicationId}/keys", { params: { path } })).then((d) => d.keys),
    refetchInterval: 15_000,
  });
  const [createOpen, createModal] = useDisclosure(false);
  const [expires, setExpires] = useState("");
  const [created, setCreated] = useState<CreatedKey | null>(null);
  const [err, setErr] = useState<unknown>(null);
  const [busy, setBusy] = useState(false);
  const [revoking, setRevoking] = useState<Key | null>(null);

  async function create(e: FormEvent) {
    e.preventDefault();
    setBusy(true);
    setErr(null);
    try {
      const body = expires ? { expiresAt: new Date(expires + "T00:00:00Z").toISOString() } : {};
      const r = await call(client.POST("/applications/{applicationId}/keys", { params: { path }, body }));
      setCreated(r.data);
      setExpires("");
      void qc.invalidateQueries({ queryKey: keys.keys(app.id) });
      invalidateDeployment(qc);
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
      await call(client.DELETE("/applications/{applicationId}/keys/{keyId}", { params: { path: { ...path, keyId: revoking.id } } }));
      notifications.show({ color: "teal", title: "Key revoked", message: `${revoking.prefix}… is refused by every gateway within seconds.` });
      setRevoking(null);
      void qc.invalidateQueries({ queryKey: keys.keys(app.id) });
      invalidateDeployment(qc);
    } catch (x) {
      notifications.show({ color: "red", title: "Not revoked", message: errorText(x) });
    } finally {
      setBusy(false);
    }
  }

  const closeCreate = () => {
    createModal.close();
    setCreated(null);
    setErr(null);
  };
  const firstProvider = providers.data?.find((p) => app.providers.includes(p.id));
  return (
    <Card withBorder component="section" aria-labelledby="keys-heading">
      <Stack>
        <Group justify="space-between">
          <Title order={2} size="h4" id="keys-heading">
            API keys
          </Title>
          <Button leftSection={<IconKey size={16} aria-hidden />} onClick={createModal.open}>
            Create key
          </Button>
        </Group>
        <QueryView query={list} loading="Loading keys">
          {(ks) =>
            ks.length === 0 ? (
              <Empty title="No keys">Create a key to let this application call its providers.</Empty>
            ) : (
              <Table.ScrollContainer minWidth={600}>
                <Table verticalSpacing="xs">
                  <Table.Thead>
                    <Table.Tr>
                      <Table.Th>Key</Table.Th>
                      <Table.Th>Status</Table.Th>
                      <Table.Th>Created</Table.Th>
                      <Table.Th>Last used</Table.Th>
                      <Table.Th>Expires</Table.Th>
                      <Table.Th aria-label="Actions" />
                    </Table.Tr>
                  </Table.Thead>
                  <Table.Tbody>
                    {ks.map((k) => {
                      const s = keyStatus(k);
                      return (
                        <Table.Tr key={k.id}>
                          <Table.Td className="mono">{k.prefix}…</Table.Td>
                          <Table.Td>
                            <Badge color={s.color} variant="light">
                              {s.label}
                            </Badge>
                          </Table.Td>
                          <Table.Td>{when(k.createdAt)}</Table.Td>
                          <Table.Td>
                            <span title={when(k.lastUsedAt)}>{ago(k.lastUsedAt)}</span>
                          </Table.Td>
                          <Table.Td>{k.expiresAt ? when(k.expiresAt) : "never"}</Table.Td>
                          <Table.Td>
                            {!k.revokedAt && (
                              <Button size="xs" variant="subtle" color="red" onClick={() => setRevoking(k)} aria-label={`Revoke key ${k.prefix}`}>
                                Revoke
                              </Button>
                            )}
                          </Table.Td>
                        </Table.Tr>
                      );
                    })}
                  </Table.Tbody>
                </Table>
              </Table.ScrollContainer>
            )
          }
        </QueryView>
      </Stack>

      <Modal opened={createOpen} onClose={closeCreate} title={created ? "Your new key" : "Create a key"} size="lg" closeOnClickOutside={!created}>
        {created ? (
          <Stack>
            <Alert color="yellow" role="status" title="Copy it now: you will not see it again">
              Only its hash is stored. If it is lost, revoke it and create another.
            </Alert>
            <Group gap="xs" wrap="nowrap" align="stretch">
              <Code block style={{ flex: 1, wordBreak: "break-all", whiteSpace: "pre-wrap" }} aria-label="The new API key" data-testid="new-key">
                {created.key}
              </Code>
              <CopyButton value={created.key}>
                {({ copied, copy }) => (
                  <Button onClick={copy} leftSection={<IconCopy size={16} aria-hidden />} color={copied ? "teal" : undefined}>
                    {copied ? "Copied" : "Copy"}
                  </Button>
                )}
              </CopyButton>
            </Group>
            {firstProvider && (
              <>
                <Text size="sm">Try it through a gateway (a default sluice serve listens on 127.0.0.1:8080):</Text>
                <Code block style={{ whiteSpace: "pre-wrap", wordBreak: "break-all" }}>
                  {`curl http://127.0.0.1:8080/${firstProvider.name}/v1/chat/completions \\\n  -H 'Authorization: Bearer ${created.key}' -H 'Content-Type: application/json' \\\n  -d '{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}'`}
                </Code>
              </>
            )}
            <Group justify="flex-end">
              <Button onClick={closeCreate}>I have copied it</Button>
            </Group>
          </Stack>
        ) : (
          <form onSubmit={create}>
            <Stack>
              <TextInput
                type="date"
                label="Expires (optional)"
                description="From 00:00 UTC that day the key is refused. Leave empty for a key that does not expire."
                value={expires}
                onChange={(e) => setExpires(e.currentTarget.value)}
                maw={260}
              />
              {err != null && <ErrorState title="Not created" error={err} />}
              <Group justify="flex-end">
                <Button variant="default" onClick={closeCreate}>
                  Cancel
                </Button>
                <Button type="submit" loading={busy}>
                  Create key
                </Button>
              </Group>
            </Stack>
          </form>
        )}
      </Modal>

      <Modal opened={revoking !== null} onClose={() => setRevoking(null)} title="Revoke this key?">
        <Stack>
          <Text size="sm">
            <span className="mono">{revoking?.prefix}…</span> is refused by every gateway once they apply the change (within seconds). This cannot be undone.
          </Text>
          <Group justify="flex-end">
            <Button variant="default" onClick={() => setRevoking(null)}>
              Cancel
            </Button>
            <Button color="red" loading={busy} onClick={() => void revoke()}>
              Revoke key
            </Button>
          </Group>
        </Stack>
      </Modal>
    </Card>
  );
}
