// The audit log: every admin change, newest first, with who (token id),
// what, and the before/after representations; paged with `next`.
import { Badge, Button, Card, Code, Group, SimpleGrid, Stack, Table, Text, UnstyledButton } from "@mantine/core";
import { IconChevronDown, IconChevronRight } from "@tabler/icons-react";
import { useInfiniteQuery } from "@tanstack/react-query";
import { Fragment, useState } from "react";
import YAML from "yaml";
import { data, type AuditEntry } from "../api/client";
import { keys } from "../api/queries";
import { useClient } from "../auth";
import { PageHeader } from "../components/Layout";
import { Empty, QueryView } from "../components/states";
import { when } from "../lib/format";

const verbColor: Record<string, string> = { create: "teal", update: "blue", delete: "red", revoke: "orange", order: "grape" };

function verb(action: string): string {
  return action.split(".").pop() ?? action;
}

function Side({ title, v }: { title: string; v: Record<string, unknown> | null | undefined }) {
  return (
    <Stack gap={4}>
      <Text size="xs" fw={600} c="dimmed">
        {title}
      </Text>
      <Code block className="code-view" style={{ maxHeight: 260 }}>
        {v ? YAML.stringify(v).trimEnd() : "—"}
      </Code>
    </Stack>
  );
}

export function AuditPage() {
  const client = useClient();
  const [open, setOpen] = useState<Set<number>>(new Set());
  const q = useInfiniteQuery({
    queryKey: keys.audit,
    initialPageParam: undefined as number | undefined,
    queryFn: ({ pageParam }) => data(client.GET("/audit", { params: { query: { limit: 50, before: pageParam } } })),
    getNextPageParam: (last) => last.next,
  });
  const toggle = (id: number) =>
    setOpen((s) => {
      const n = new Set(s);
      if (n.has(id)) n.delete(id);
      else n.add(id);
      return n;
    });

  return (
    <>
      <PageHeader title="Audit log" description="Every change made through the API, newest first: who (admin token id), what, and the before and after." />
      <QueryView query={q} loading="Loading the audit log">
        {(d) => {
          const entries: AuditEntry[] = d.pages.flatMap((p) => p.entries);
          if (entries.length === 0)
            return (
              <Card withBorder>
                <Empty title="No changes yet">Changes to providers, limits, guardrails, applications, keys and gateways appear here.</Empty>
              </Card>
            );
          return (
            <Stack>
              <Card withBorder p={0}>
                <Table.ScrollContainer minWidth={640}>
                  <Table verticalSpacing="xs">
                    <Table.Thead>
                      <Table.Tr>
                        <Table.Th w={32} aria-label="Details" />
                        <Table.Th>When</Table.Th>
                        <Table.Th>Action</Table.Th>
                        <Table.Th>Resource</Table.Th>
                        <Table.Th>By token</Table.Th>
                      </Table.Tr>
                    </Table.Thead>
                    <Table.Tbody>
                      {entries.map((e) => (
                        <Fragment key={e.id}>
                          <Table.Tr>
                            <Table.Td>
                              <UnstyledButton
                                onClick={() => toggle(e.id)}
                                aria-expanded={open.has(e.id)}
                                aria-label={`${open.has(e.id) ? "Hide" : "Show"} the change of entry ${e.id}`}
                              >
                                {open.has(e.id) ? <IconChevronDown size={16} aria-hidden /> : <IconChevronRight size={16} aria-hidden />}
                              </UnstyledButton>
                            </Table.Td>
                            <Table.Td>{when(e.at)}</Table.Td>
                            <Table.Td>
                              <Group gap={6} wrap="nowrap">
                                <Badge size="sm" variant="light" color={verbColor[verb(e.action)] ?? "gray"}>
                                  {verb(e.action)}
                                </Badge>
                                <Text size="sm" className="mono">
                                  {e.action}
                                </Text>
                              </Group>
                            </Table.Td>
                            <Table.Td>
                              <Text size="sm">{e.resourceType}</Text>
                              <Text size="xs" c="dimmed" className="mono">
                                {e.resourceId}
                              </Text>
                            </Table.Td>
                            <Table.Td className="mono">{e.tokenId}</Table.Td>
                          </Table.Tr>
                          {open.has(e.id) && (
                            <Table.Tr>
                              <Table.Td colSpan={5}>
                                <SimpleGrid cols={{ base: 1, md: 2 }}>
                                  <Side title="Before" v={e.before} />
                                  <Side title="After" v={e.after} />
                                </SimpleGrid>
                              </Table.Td>
                            </Table.Tr>
                          )}
                        </Fragment>
                      ))}
                    </Table.Tbody>
                  </Table>
                </Table.ScrollContainer>
              </Card>
              {q.hasNextPage && (
                <Group justify="center">
                  <Button variant="default" loading={q.isFetchingNextPage} onClick={() => void q.fetchNextPage()}>
                    Load older changes
                  </Button>
                </Group>
              )}
            </Stack>
          );
        }}
      </QueryView>
    </>
  );
}
