import { Badge, Button, Card, Modal, Table, Text } from "@mantine/core";
import { useDisclosure } from "@mantine/hooks";
import { notifications } from "@mantine/notifications";
import { IconPlus } from "@tabler/icons-react";
import { useMutation, useQueryClient } from "@tanstack/react-query";
import { useNavigate } from "@tanstack/react-router";
import { call, type ProviderInput } from "../api/client";
import { invalidateDeployment, keys, useProviders } from "../api/queries";
import { useClient } from "../auth";
import { PageHeader } from "../components/Layout";
import { Empty, QueryView } from "../components/states";
import { when } from "../lib/format";
import { ProviderForm } from "./ProviderForm";
import { AnchorLink } from "../components/links";

export function ProvidersPage() {
  const client = useClient();
  const qc = useQueryClient();
  const navigate = useNavigate();
  const providers = useProviders();
  const [open, { open: show, close }] = useDisclosure(false);

  const create = useMutation({
    mutationFn: (input: ProviderInput) => call(client.POST("/providers", { body: input })),
    onSuccess: ({ data: p }) => {
      void qc.invalidateQueries({ queryKey: keys.providers });
      invalidateDeployment(qc);
      notifications.show({ color: "teal", title: "Provider created", message: `${p.name} is served at /${p.name}/v1.` });
      close();
      void navigate({ to: "/providers/$providerId/rate-limits", params: { providerId: p.id } });
    },
  });

  const addButton = (
    <Button leftSection={<IconPlus size={16} aria-hidden />} onClick={show}>
      New provider
    </Button>
  );
  return (
    <>
      <PageHeader
        title="Providers"
        description="Each provider is an upstream LLM API served by every gateway under /<name>/, with its own rate limits and guardrails."
        actions={addButton}
      />
      <QueryView query={providers} loading="Loading providers">
        {(list) =>
          list.length === 0 ? (
            <Card withBorder>
              <Empty title="No providers yet" action={addButton}>
                Add the upstream your applications should call (an OpenAI- or Anthropic-style API), then set its limits.
              </Empty>
            </Card>
          ) : (
            <Card withBorder p={0}>
              <Table.ScrollContainer minWidth={640}>
                <Table highlightOnHover verticalSpacing="sm" horizontalSpacing="md">
                  <Table.Thead>
                    <Table.Tr>
                      <Table.Th>Name</Table.Th>
                      <Table.Th>Type</Table.Th>
                      <Table.Th>Upstream</Table.Th>
                      <Table.Th>Key</Table.Th>
                      <Table.Th>Updated</Table.Th>
                    </Table.Tr>
                  </Table.Thead>
                  <Table.Tbody>
                    {list.map((p) => (
                      <Table.Tr key={p.id}>
                        <Table.Td>
                          <AnchorLink to="/providers/$providerId/rate-limits" params={{ providerId: p.id }} fw={600}>
                            {p.name}
                          </AnchorLink>
                          <Text size="xs" c="dimmed" className="mono">
                            /{p.name}/v1
                          </Text>
                        </Table.Td>
                        <Table.Td>{p.type === "openai" ? "OpenAI" : "Anthropic"}</Table.Td>
                        <Table.Td className="mono">{p.url ?? (p.targets ?? []).join(", ")}</Table.Td>
                        <Table.Td>
                          {p.hasApiKey ? (
                            <Badge color="teal" variant="light">set</Badge>
                          ) : (
                            <Badge color="gray" variant="light">none</Badge>
                          )}
                        </Table.Td>
                        <Table.Td>{when(p.updatedAt)}</Table.Td>
                      </Table.Tr>
                    ))}
                  </Table.Tbody>
                </Table>
              </Table.ScrollContainer>
            </Card>
          )
        }
      </QueryView>
      <Modal opened={open} onClose={close} title="New provider" size="lg">
        <ProviderForm submitLabel="Create provider" onSubmit={(input) => create.mutateAsync(input)} onCancel={close} />
      </Modal>
    </>
  );
}
