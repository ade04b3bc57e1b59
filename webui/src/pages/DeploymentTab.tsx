// The Deployment tab: the provider's generated chain, read-only, in order,
// with each entry's origin, and the same route as the YAML gateways load.
import { Badge, Card, Code, CopyButton, Group, Button, SegmentedControl, Stack, Table, Text } from "@mantine/core";
import { useQuery } from "@tanstack/react-query";
import { useState } from "react";
import YAML from "yaml";
import { data } from "../api/client";
import { keys, useGuardrails } from "../api/queries";
import { useClient } from "../auth";
import { QueryView } from "../components/states";
import { originText } from "../lib/origin";
import { useProviderId } from "./ProviderPage";
import { AnchorLink } from "../components/links";

const originColor: Record<string, string> = { access: "gray", "rate-limit": "indigo", guardrail: "grape", cost: "teal" };

export function DeploymentTab() {
  const providerId = useProviderId();
  const client = useClient();
  const [view, setView] = useState<"chain" | "yaml">("chain");
  const dep = useQuery({
    queryKey: keys.deployment(providerId),
    queryFn: () => data(client.GET("/providers/{providerId}/deployment", { params: { path: { providerId } } })),
  });
  const guardrails = useGuardrails(providerId);

  return (
    <QueryView query={dep} loading="Loading the deployment">
      {(d) => (
        <Stack gap="md">
          <Group justify="space-between" gap="xs">
            <Text size="sm" c="dimmed" maw={720}>
              Generated from the Rate Limit settings and the guardrails: route <span className="mono">{d.route}</span> at{" "}
              <span className="mono">{d.context}</span>, deployment version {d.version}. Requests run the entries top to bottom; responses bottom to top.
            </Text>
            <SegmentedControl
              aria-label="View"
              value={view}
              onChange={(v) => setView(v)}
              data={[
                { value: "chain", label: "Chain" },
                { value: "yaml", label: "YAML" },
              ]}
            />
          </Group>
          {view === "chain" ? (
            <Card withBorder p={0}>
              <Table.ScrollContainer minWidth={720}>
                <Table verticalSpacing="sm" aria-label="Policy chain in order">
                  <Table.Thead>
                    <Table.Tr>
                      <Table.Th w={40}>#</Table.Th>
                      <Table.Th>Policy</Table.Th>
                      <Table.Th>Origin</Table.Th>
                      <Table.Th>Params</Table.Th>
                    </Table.Tr>
                  </Table.Thead>
                  <Table.Tbody>
                    {d.entries.map((e, i) => (
                      <Table.Tr key={i}>
                        <Table.Td>{i + 1}</Table.Td>
                        <Table.Td>
                          <Text fw={600} size="sm">
                            {e.name}
                          </Text>
                          <Text size="xs" c="dimmed">
                            {e.version}
                          </Text>
                        </Table.Td>
                        <Table.Td>
                          <Stack gap={4} align="flex-start">
                            <Badge variant="light" color={originColor[e.origin.kind] ?? "gray"}>
                              {e.origin.kind}
                            </Badge>
                            {e.origin.kind === "rate-limit" || e.origin.kind === "guardrail" ? (
                              <AnchorLink
                                size="sm"
                                to={e.origin.kind === "rate-limit" ? "/providers/$providerId/rate-limits" : "/providers/$providerId/guardrails"}
                                params={{ providerId }}
                              >
                                {originText(e, guardrails.data?.guardrails)}
                              </AnchorLink>
                            ) : (
                              <Text size="sm">{originText(e, guardrails.data?.guardrails)}</Text>
                            )}
                            {e.resources?.include && (
                              <Text size="xs" c="dimmed">
                                only {e.resources.include.join(", ")}
                              </Text>
                            )}
                            {e.resources?.exclude && (
                              <Text size="xs" c="dimmed">
                                all but {e.resources.exclude.join(", ")}
                              </Text>
                            )}
                          </Stack>
                        </Table.Td>
                        <Table.Td>
                          <Code block className="code-view" style={{ maxHeight: 180 }}>
                            {e.params && Object.keys(e.params).length ? YAML.stringify(e.params).trimEnd() : "# no params"}
                          </Code>
                        </Table.Td>
                      </Table.Tr>
                    ))}
                  </Table.Tbody>
                </Table>
              </Table.ScrollContainer>
            </Card>
          ) : (
            <Card withBorder>
              <Stack gap="xs">
                <Group justify="space-between">
                  <Text size="sm" c="dimmed">
                    The provider's part of the deployment document (upstream key redacted).
                  </Text>
                  <CopyButton value={d.yaml}>
                    {({ copied, copy }) => (
                      <Button size="xs" variant="light" onClick={copy}>
                        {copied ? "Copied" : "Copy YAML"}
                      </Button>
                    )}
                  </CopyButton>
                </Group>
                <Code block className="code-view" aria-label="Deployment YAML" tabIndex={0}>
                  {d.yaml}
                </Code>
              </Stack>
            </Card>
          )}
        </Stack>
      )}
    </QueryView>
  );
}
