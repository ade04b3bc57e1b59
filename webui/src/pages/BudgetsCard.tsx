// An application's remaining budgets: every limit of the providers it may
// call, with what is left in the current window (GET
// /applications/{id}/budgets, src/api/budgets.ts).
import { Badge, Card, Code, Group, Progress, Stack, Table, Text, Title } from "@mantine/core";
import { ApiError } from "../api/client";
import { amount, useBudgets, type Budget } from "../api/budgets";
import { Empty, QueryView } from "../components/states";
import { when } from "../lib/format";

function usedColor(pct: number): string {
  return pct >= 100 ? "red.8" : pct >= 80 ? "orange.8" : "blue.7";
}

function limitName(b: Budget): string {
  return `${b.scope === "backend" ? "Backend" : "Per Consumer"} · ${b.resource || "provider-wide"} · ${b.dimension}`;
}

function QuotaHint() {
  return (
    <Text size="sm" c="dimmed">
      A key reads its own remaining budget from a gateway: <Code>GET /&lt;provider&gt;/v1/quota</Code> with{" "}
      <Code>Authorization: Bearer &lt;key&gt;</Code>.
    </Text>
  );
}

export function BudgetsCard({ applicationId }: { applicationId: string }) {
  const q = useBudgets(applicationId);
  // A platform without the budgets API answers its router's 404 (an unknown
  // application's 404 says the application does not exist).
  const missing = q.isError && q.error instanceof ApiError && q.error.status === 404 && !/does not exist/.test(q.error.message);
  return (
    <Card withBorder component="section" aria-labelledby="budgets-heading">
      <Stack gap="sm">
        <Title order={2} size="h4" id="budgets-heading">
          Remaining budgets
        </Title>
        {missing ? (
          <>
            <Text size="sm">This platform does not report budgets (it answered 404 for the budgets API).</Text>
            <QuotaHint />
          </>
        ) : (
          <QueryView query={q} loading="Loading the budgets">
            {(d) =>
              !d.available ? (
                <Stack gap="xs">
                  <Text size="sm">The platform cannot read the counters: {d.reason}</Text>
                  <QuotaHint />
                </Stack>
              ) : d.budgets.length === 0 ? (
                <Empty title="No limits apply">None of the providers this application may call has a request, token or cost limit.</Empty>
              ) : (
                <Table.ScrollContainer minWidth={760}>
                  <Table verticalSpacing="xs" aria-label="Remaining budgets">
                    <Table.Thead>
                      <Table.Tr>
                        <Table.Th scope="col">Provider</Table.Th>
                        <Table.Th scope="col">Limit</Table.Th>
                        <Table.Th scope="col">Period</Table.Th>
                        <Table.Th scope="col" w={180}>
                          Used
                        </Table.Th>
                        <Table.Th scope="col" ta="right">
                          Remaining of limit
                        </Table.Th>
                        <Table.Th scope="col">Resets</Table.Th>
                      </Table.Tr>
                    </Table.Thead>
                    <Table.Tbody>
                      {d.budgets.map((b) => {
                        const pct = Math.max(0, b.usedPercent);
                        return (
                          <Table.Tr key={[b.provider, b.entry, b.policy, b.origin, b.counter, b.resource, b.dimension].join("|")}>
                            <Table.Td>{b.provider}</Table.Td>
                            <Table.Td>
                              {limitName(b)}
                              {b.alertAt?.length ? (
                                <Text size="xs" c="dimmed">
                                  alerts at {b.alertAt.join(", ")} %
                                </Text>
                              ) : null}
                            </Table.Td>
                            <Table.Td>{b.period}</Table.Td>
                            <Table.Td>
                              <Group gap="xs" wrap="nowrap">
                                <Progress
                                  value={Math.min(100, pct)}
                                  color={usedColor(pct)}
                                  style={{ flex: 1 }}
                                  aria-label={`${b.provider}, ${limitName(b)}: ${pct.toFixed(0)} % used`}
                                />
                                <Text size="sm" w={48} ta="right">
                                  {pct.toFixed(0)} %
                                </Text>
                              </Group>
                            </Table.Td>
                            <Table.Td ta="right" style={{ whiteSpace: "nowrap" }}>
                              {Number(b.remaining) < 0 ? (
                                <Badge color="red" variant="light">
                                  over by {amount(String(-Number(b.remaining)), b.unit)}
                                </Badge>
                              ) : (
                                amount(b.remaining, b.unit)
                              )}{" "}
                              of {amount(b.limit, b.unit)}
                            </Table.Td>
                            <Table.Td style={{ whiteSpace: "nowrap" }}>{when(b.resetsAt)}</Table.Td>
                          </Table.Tr>
                        );
                      })}
                    </Table.Tbody>
                  </Table>
                </Table.ScrollContainer>
              )
            }
          </QueryView>
        )}
      </Stack>
    </Card>
  );
}
