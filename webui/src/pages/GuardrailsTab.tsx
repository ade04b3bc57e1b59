// The Guardrails tab: raw policy entries appended after the generated ones,
// in their order. Add from the catalog (schema form or YAML/JSON), edit,
// toggle consumerBased, reorder and delete, each with the ETag the API
// asks for (a stale one is explained, never silently overwritten).
import { ActionIcon, Badge, Button, Card, Code, Group, Modal, Stack, Switch, Text, Title, Tooltip } from "@mantine/core";
import { useDisclosure, useMediaQuery } from "@mantine/hooks";
import { notifications } from "@mantine/notifications";
import { IconArrowDown, IconArrowUp, IconPencil, IconPlus, IconTrash } from "@tabler/icons-react";
import { useQueryClient } from "@tanstack/react-query";
import { lazy, Suspense, useState } from "react";
import YAML from "yaml";
import { ApiError, call, type Guardrail, type GuardrailInput, type Policy } from "../api/client";
import { invalidateDeployment, keys, useGuardrails, usePolicies } from "../api/queries";
import { useClient } from "../auth";
import { Empty, ErrorState, Loading, errorText } from "../components/states";
import { useProviderId } from "./ProviderPage";

// The schema form (@rjsf with its validator) is loaded when first opened:
// it is most of the console's code and no other page needs it.
const GuardrailEditor = lazy(() => import("../guardrails/GuardrailEditor").then((m) => ({ default: m.GuardrailEditor })));

interface Editing {
  guardrail?: Guardrail;
  etag?: string;
}

export function hasConsumerBased(p: Policy | undefined): boolean {
  const props = (p?.paramsSchema as { properties?: Record<string, unknown> } | undefined)?.properties;
  return !!props && "consumerBased" in props;
}

export function GuardrailsTab() {
  const providerId = useProviderId();
  const client = useClient();
  const qc = useQueryClient();
  const policies = usePolicies();
  const list = useGuardrails(providerId);
  const [editing, setEditing] = useState<Editing | null>(null);
  const [deleting, setDeleting] = useState<{ guardrail: Guardrail; etag: string } | null>(null);
  const [busy, setBusy] = useState<string | null>(null);
  // consumerBased as switched, shown until the saved list arrives.
  const [switched, setSwitched] = useState<Record<string, boolean>>({});
  const [deleteOpen, del] = useDisclosure(false);
  const narrow = useMediaQuery("(max-width: 40em)");

  const path = { providerId };
  const changed = () => {
    void qc.invalidateQueries({ queryKey: keys.guardrails(providerId) });
    invalidateDeployment(qc);
  };
  const fetchOne = (id: string) => call(client.GET("/providers/{providerId}/guardrails/{guardrailId}", { params: { path: { ...path, guardrailId: id } } }));

  async function openEdit(g: Guardrail) {
    setBusy(g.id);
    try {
      const r = await fetchOne(g.id);
      setEditing({ guardrail: r.data, etag: r.etag ?? "*" });
    } catch (e) {
      notifications.show({ color: "red", title: "Could not open the guardrail", message: errorText(e) });
    } finally {
      setBusy(null);
    }
  }

  async function submit(input: GuardrailInput, etag?: string) {
    if (editing?.guardrail) {
      const r = await call(
        client.PUT("/providers/{providerId}/guardrails/{guardrailId}", {
          params: { path: { ...path, guardrailId: editing.guardrail.id }, header: { "If-Match": etag ?? editing.etag ?? "*" } },
          body: input,
        }),
      );
      notifications.show({ color: "teal", title: "Guardrail saved", message: `${r.data.name} is in the chain at position ${r.data.position + 1}.` });
    } else {
      const r = await call(client.POST("/providers/{providerId}/guardrails", { params: { path }, body: input }));
      notifications.show({ color: "teal", title: "Guardrail added", message: `${r.data.name} runs after the generated limits.` });
    }
    setEditing(null);
    changed();
  }

  async function move(ids: string[], etag: string) {
    setBusy("order");
    try {
      await call(client.PUT("/providers/{providerId}/guardrails/order", { params: { path, header: { "If-Match": etag } }, body: { ids } }));
      changed();
    } catch (e) {
      const stale = e instanceof ApiError && e.status === 412;
      notifications.show({
        color: stale ? "orange" : "red",
        title: stale ? "The list changed meanwhile" : "Not reordered",
        message: stale ? "Someone else changed the guardrails; the list is reloaded: move it again." : errorText(e),
      });
      void list.refetch();
    } finally {
      setBusy(null);
    }
  }

  async function toggleConsumer(g: Guardrail, on: boolean) {
    setBusy(g.id);
    setSwitched((m) => ({ ...m, [g.id]: on }));
    try {
      // The latest params with only consumerBased changed, sent with the
      // ETag they were read at.
      const cur = await fetchOne(g.id);
      const params = { ...cur.data.params, consumerBased: on };
      await call(
        client.PUT("/providers/{providerId}/guardrails/{guardrailId}", {
          params: { path: { ...path, guardrailId: g.id }, header: { "If-Match": cur.etag ?? "*" } },
          body: { name: cur.data.name, version: cur.data.version, params },
        }),
      );
      await qc.invalidateQueries({ queryKey: keys.guardrails(providerId) });
      invalidateDeployment(qc);
    } catch (e) {
      notifications.show({ color: "red", title: "consumerBased not changed", message: errorText(e) });
    } finally {
      setSwitched(({ [g.id]: _, ...rest }) => rest);
      setBusy(null);
    }
  }

  async function openDelete(g: Guardrail) {
    setBusy(g.id);
    try {
      const r = await fetchOne(g.id);
      setDeleting({ guardrail: r.data, etag: r.etag ?? "*" });
      del.open();
    } catch (e) {
      notifications.show({ color: "red", title: "Could not open the guardrail", message: errorText(e) });
    } finally {
      setBusy(null);
    }
  }

  async function confirmDelete() {
    if (!deleting) return;
    setBusy("delete");
    try {
      await call(
        client.DELETE("/providers/{providerId}/guardrails/{guardrailId}", {
          params: { path: { ...path, guardrailId: deleting.guardrail.id }, header: { "If-Match": deleting.etag } },
        }),
      );
      notifications.show({ color: "teal", title: "Guardrail deleted", message: `${deleting.guardrail.name} is out of the chain.` });
      del.close();
      changed();
    } catch (e) {
      const stale = e instanceof ApiError && e.status === 412;
      notifications.show({
        color: stale ? "orange" : "red",
        title: stale ? "Not deleted: it changed meanwhile" : "Not deleted",
        message: stale ? "Someone else edited this guardrail after you opened it. Look at it again before deleting." : errorText(e),
      });
      del.close();
      void list.refetch();
    } finally {
      setBusy(null);
    }
  }

  if (list.isPending || policies.isPending) return <Loading label="Loading the guardrails" />;
  if (list.isError) return <ErrorState error={list.error} retry={() => list.refetch()} />;
  if (policies.isError) return <ErrorState error={policies.error} retry={() => policies.refetch()} />;
  const gs = list.data.guardrails;
  const catalog = policies.data;
  const ids = gs.map((g) => g.id);
  const swap = (i: number, j: number) => {
    const next = [...ids];
    [next[i], next[j]] = [next[j], next[i]];
    void move(next, list.data.etag);
  };

  const addButton = (
    <Button leftSection={<IconPlus size={16} aria-hidden />} onClick={() => setEditing({})}>
      Add guardrail
    </Button>
  );
  return (
    <Stack gap="md">
      <Group justify="space-between" align="flex-start">
        <Text size="sm" c="dimmed" maw={720}>
          Guardrails are policy entries added on top of the generated rate limits, run in this order after them. Each is checked against its policy's schema
          and by building the provider's whole chain before it is saved.
        </Text>
        {gs.length > 0 && addButton}
      </Group>
      {gs.length === 0 ? (
        <Card withBorder>
          <Empty title="No guardrails" action={addButton}>
            Add one from the policy catalog, for example model-access to restrict which models applications may call.
          </Empty>
        </Card>
      ) : (
        <Stack gap="sm" component="ol" style={{ listStyle: "none", padding: 0, margin: 0 }} aria-label="Guardrails in chain order">
          {gs.map((g, i) => {
            const p = catalog.find((x) => x.name === g.name);
            const consumer = hasConsumerBased(p);
            return (
              <Card key={g.id} withBorder component="li" padding="sm" aria-label={`${i + 1}. ${g.name}`}>
                <Group justify="space-between" align="flex-start" gap="xs" wrap="nowrap">
                  <Stack gap={4} style={{ minWidth: 0, flex: 1 }}>
                    <Group gap="xs">
                      <Badge variant="outline" color="gray" circle>
                        {i + 1}
                      </Badge>
                      <Title order={3} size="h5">
                        {g.name}
                      </Title>
                      <Badge variant="light" size="sm">
                        {g.version}
                      </Badge>
                      <Text size="xs" c="dimmed" className="mono">
                        {g.id}
                      </Text>
                    </Group>
                    <Code block className="code-view" style={{ maxHeight: 160 }}>
                      {Object.keys(g.params).length ? YAML.stringify(g.params).trimEnd() : "# no params"}
                    </Code>
                    {consumer && (
                      <Switch
                        label="consumerBased: one counter per application"
                        checked={switched[g.id] ?? g.params.consumerBased === true}
                        disabled={busy === g.id}
                        onChange={(e) => void toggleConsumer(g, e.currentTarget.checked)}
                      />
                    )}
                  </Stack>
                  <Group gap={4} wrap={narrow ? "wrap" : "nowrap"} justify="flex-end" w={narrow ? 72 : undefined}>
                    <Tooltip label="Move up">
                      <ActionIcon variant="subtle" aria-label={`Move ${g.name} up`} disabled={i === 0 || busy !== null} onClick={() => swap(i, i - 1)}>
                        <IconArrowUp size={18} aria-hidden />
                      </ActionIcon>
                    </Tooltip>
                    <Tooltip label="Move down">
                      <ActionIcon
                        variant="subtle"
                        aria-label={`Move ${g.name} down`}
                        disabled={i === gs.length - 1 || busy !== null}
                        onClick={() => swap(i, i + 1)}
                      >
                        <IconArrowDown size={18} aria-hidden />
                      </ActionIcon>
                    </Tooltip>
                    <Tooltip label="Edit">
                      <ActionIcon variant="subtle" aria-label={`Edit ${g.name}`} loading={busy === g.id} onClick={() => void openEdit(g)}>
                        <IconPencil size={18} aria-hidden />
                      </ActionIcon>
                    </Tooltip>
                    <Tooltip label="Delete">
                      <ActionIcon variant="subtle" color="red" aria-label={`Delete ${g.name}`} onClick={() => void openDelete(g)}>
                        <IconTrash size={18} aria-hidden />
                      </ActionIcon>
                    </Tooltip>
                  </Group>
                </Group>
              </Card>
            );
          })}
        </Stack>
      )}

      <Modal
        opened={editing !== null}
        onClose={() => setEditing(null)}
        title={editing?.guardrail ? `Edit ${editing.guardrail.name}` : "Add a guardrail"}
        size="xl"
        fullScreen={narrow}
      >
        {editing && (
          <Suspense fallback={<Loading label="Loading the editor" />}>
          <GuardrailEditor
            policies={catalog}
            fixedPolicy={!!editing.guardrail}
            initial={editing.guardrail ? { name: editing.guardrail.name, version: editing.guardrail.version, params: editing.guardrail.params } : undefined}
            submitLabel={editing.guardrail ? "Save guardrail" : "Add guardrail"}
            onSubmit={(input) => submit(input)}
            onCancel={() => setEditing(null)}
            conflictActions={(input) => (
              <Group gap="xs">
                <Button
                  size="xs"
                  color="orange"
                  onClick={async () => {
                    const cur = await fetchOne(editing.guardrail!.id);
                    setEditing({ guardrail: editing.guardrail, etag: cur.etag ?? "*" });
                    await submit(input, cur.etag ?? "*").catch((e) =>
                      notifications.show({ color: "red", title: "Not saved", message: errorText(e) }),
                    );
                  }}
                >
                  Save mine over theirs
                </Button>
                <Button size="xs" variant="default" onClick={() => void openEdit(editing.guardrail!)}>
                  Discard mine, load theirs
                </Button>
              </Group>
            )}
          />
          </Suspense>
        )}
      </Modal>

      <Modal opened={deleteOpen} onClose={del.close} title={`Delete ${deleting?.guardrail.name ?? "guardrail"}?`}>
        {deleting && (
          <Stack>
            <Text size="sm">This entry leaves the chain of every gateway:</Text>
            <Code block className="code-view">
              {YAML.stringify({ name: deleting.guardrail.name, version: deleting.guardrail.version, params: deleting.guardrail.params }).trimEnd()}
            </Code>
            <Group justify="flex-end">
              <Button variant="default" onClick={del.close}>
                Cancel
              </Button>
              <Button color="red" loading={busy === "delete"} onClick={() => void confirmDelete()}>
                Delete guardrail
              </Button>
            </Group>
          </Stack>
        )}
      </Modal>
    </Stack>
  );
}
