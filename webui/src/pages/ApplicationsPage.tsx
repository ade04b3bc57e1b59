import { Badge, Button, Card, Checkbox, Group, Modal, Stack, Table, Text, TextInput } from "@mantine/core";
import { useDisclosure } from "@mantine/hooks";
import { notifications } from "@mantine/notifications";
import { IconPlus } from "@tabler/icons-react";
import { useQueryClient } from "@tanstack/react-query";
import { useNavigate } from "@tanstack/react-router";
import { useState, type FormEvent } from "react";
import { call, type Provider } from "../api/client";
import { invalidateDeployment, keys, useApplications, useProviders } from "../api/queries";
import { useClient } from "../auth";
import { PageHeader } from "../components/Layout";
import { Empty, ErrorState, QueryView } from "../components/states";
import { problemsByPath } from "../lib/errors";
import { when } from "../lib/format";
import { AnchorLink } from "../components/links";

/** The providers an application may call, as checkboxes. */
export function ProviderChoice({ providers, value, onChange }: { providers: Provider[]; value: string[]; onChange: (v: string[]) => void }) {
  if (providers.length === 0)
    return (
      <Text size="sm" c="dimmed">
        No providers yet: create one first, then grant it here.
      </Text>
    );
  return (
    <Checkbox.Group label="Providers it may call" description="Its keys are refused (403) on every other provider." value={value} onChange={onChange}>
      <Stack gap={6} mt={6}>
        {providers.map((p) => (
          <Checkbox key={p.id} value={p.id} label={<span>{p.name} <Text span size="xs" c="dimmed" className="mono">/{p.name}/v1</Text></span>} />
        ))}
      </Stack>
    </Checkbox.Group>
  );
}

export function ApplicationsPage() {
  const client = useClient();
  const qc = useQueryClient();
  const navigate = useNavigate();
  const apps = useApplications();
  const providers = useProviders();
  const [open, { open: show, close }] = useDisclosure(false);
  const [name, setName] = useState("");
  const [granted, setGranted] = useState<string[]>([]);
  const [err, setErr] = useState<unknown>(null);
  const [busy, setBusy] = useState(false);
  const byId = new Map((providers.data ?? []).map((p) => [p.id, p]));

  async function create(e: FormEvent) {
    e.preventDefault();
    setBusy(true);
    setErr(null);
    try {
      const r = await call(client.POST("/applications", { body: { name: name.trim(), providers: granted } }));
      void qc.invalidateQueries({ queryKey: keys.applications });
      invalidateDeployment(qc);
      notifications.show({ color: "teal", title: "Application created", message: `Now create a key for ${r.data.name}.` });
      close();
      setName("");
      setGranted([]);
      void navigate({ to: "/applications/$applicationId", params: { applicationId: r.data.id } });
    } catch (x) {
      setErr(x);
    } finally {
      setBusy(false);
    }
  }

  const addButton = (
    <Button leftSection={<IconPlus size={16} aria-hidden />} onClick={show}>
      New application
    </Button>
  );
  const problems = problemsByPath(err, ["$.name", "$.providers"]);
  return (
    <>
      <PageHeader
        title="Applications"
        description="An application is a consumer with its own API keys and its own share of every Per Consumer limit."
        actions={addButton}
      />
      <QueryView query={apps} loading="Loading applications">
        {(list) =>
          list.length === 0 ? (
            <Card withBorder>
              <Empty title="No applications yet" action={addButton}>
                Create an application for each team or service, grant it providers and give it keys.
              </Empty>
            </Card>
          ) : (
            <Card withBorder p={0}>
              <Table.ScrollContainer minWidth={560}>
                <Table highlightOnHover verticalSpacing="sm">
                  <Table.Thead>
                    <Table.Tr>
                      <Table.Th>Name</Table.Th>
                      <Table.Th>Providers</Table.Th>
                      <Table.Th>Created</Table.Th>
                    </Table.Tr>
                  </Table.Thead>
                  <Table.Tbody>
                    {list.map((a) => (
                      <Table.Tr key={a.id}>
                        <Table.Td>
                          <AnchorLink to="/applications/$applicationId" params={{ applicationId: a.id }} fw={600}>
                            {a.name}
                          </AnchorLink>
                          <Text size="xs" c="dimmed" className="mono">
                            {a.id}
                          </Text>
                        </Table.Td>
                        <Table.Td>
                          <Group gap={4}>
                            {a.providers.length === 0 ? (
                              <Text size="sm" c="dimmed">
                                none
                              </Text>
                            ) : (
                              a.providers.map((id) => (
                                <Badge key={id} variant="light">
                                  {byId.get(id)?.name ?? id}
                                </Badge>
                              ))
                            )}
                          </Group>
                        </Table.Td>
                        <Table.Td>{when(a.createdAt)}</Table.Td>
                      </Table.Tr>
                    ))}
                  </Table.Tbody>
                </Table>
              </Table.ScrollContainer>
            </Card>
          )
        }
      </QueryView>
      <Modal opened={open} onClose={close} title="New application" size="lg">
        <form onSubmit={create} noValidate>
          <Stack>
            <TextInput
              label="Name"
              value={name}
              onChange={(e) => setName(e.currentTarget.value)}
              required
              maxLength={200}
              error={problems.fields["$.name"]}
              data-autofocus
            />
            <ProviderChoice providers={providers.data ?? []} value={granted} onChange={setGranted} />
            {err != null && problems.rest && <ErrorState title="Not created" error={err} />}
            <Group justify="flex-end">
              <Button variant="default" onClick={close}>
                Cancel
              </Button>
              <Button type="submit" loading={busy} disabled={!name.trim()}>
                Create application
              </Button>
            </Group>
          </Stack>
        </form>
      </Modal>
    </>
  );
}
