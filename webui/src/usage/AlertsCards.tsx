// The budget alerts (GET /alerts, newest first, with their webhook
// delivery) and the alert webhook setting (GET/PUT/DELETE /alerts/webhook;
// the secret is write-only).
import { Badge, Button, Card, Group, PasswordInput, Stack, Table, Text, TextInput, Title } from "@mantine/core";
import { notifications } from "@mantine/notifications";
import { useState, type FormEvent, type ReactNode } from "react";
import { ApiError } from "../api/client";
import { amount, useAlerts, useSaveWebhook, useWebhook, type AlertDelivery, type Webhook } from "../api/budgets";
import { Empty, ErrorState, LoadMore, QueryView, errorText } from "../components/states";
import { when } from "../lib/format";

const deliveryColor: Record<AlertDelivery["state"], string> = { delivered: "teal", pending: "blue", failed: "red", none: "gray" };

function deliveryText(d: AlertDelivery): string {
  switch (d.state) {
    case "delivered":
      return `delivered ${when(d.deliveredAt)}`;
    case "pending":
      return d.attempts > 0 ? `retrying (${d.attempts} attempts)` : "pending";
    case "failed":
      return `failed after ${d.attempts} attempts`;
    case "none":
      return "no webhook";
  }
}

/** A 404 from a platform that has no budgets API (an older version). */
function notThere(err: unknown): boolean {
  return err instanceof ApiError && err.status === 404;
}

/** A card of the budgets API: its heading and description, then what
 * missing says when the platform answers 404 (it has no such API), else
 * children. */
function ApiCard({ id, title, description, error, missing, children }: { id: string; title: string; description: string; error: unknown; missing: string; children: ReactNode }) {
  return (
    <Card withBorder component="section" aria-labelledby={id}>
      <Stack gap="sm">
        <div>
          <Title order={2} size="h4" id={id}>
            {title}
          </Title>
          <Text size="sm" c="dimmed">
            {description}
          </Text>
        </div>
        {notThere(error) ? <Text size="sm">{missing}</Text> : children}
      </Stack>
    </Card>
  );
}

export function AlertsCard({ filters, appName }: { filters: { application?: string; provider?: string }; appName: (id: string) => string }) {
  const q = useAlerts({ application: filters.application, provider: filters.provider });
  return (
    <ApiCard
      id="alerts-heading"
      title="Budget alerts"
      description={`Raised when a limit's usage reaches one of its row's "Alert at" percents, or when it denies a request; sent to the webhook below.`}
      error={q.error}
      missing="This platform does not report budget alerts (it answered 404 for /api/v1/alerts)."
    >
      <QueryView query={q} loading="Loading the alerts">
        {(d) => {
          const alerts = d.pages.flatMap((p) => p.alerts);
          if (alerts.length === 0)
            return <Empty title="No alerts">Set "Alert at" percents on a provider's Rate Limit rows to be told before a budget runs out.</Empty>;
          return (
            <Stack gap="sm">
              <Table.ScrollContainer
                minWidth={860}
                // The table scrolls in a narrow window: its viewport takes the focus, so that the keyboard scrolls it too.
                scrollAreaProps={{ viewportProps: { tabIndex: 0, role: "region", "aria-label": "Budget alerts, scrollable" } }}
              >
                <Table verticalSpacing={6} fz="sm" aria-label="Budget alerts, newest first">
                  <Table.Thead>
                    <Table.Tr>
                      <Table.Th scope="col">When</Table.Th>
                      <Table.Th scope="col">Application</Table.Th>
                      <Table.Th scope="col">Limit</Table.Th>
                      <Table.Th scope="col">Reached</Table.Th>
                      <Table.Th scope="col" ta="right">
                        Used / limit
                      </Table.Th>
                      <Table.Th scope="col">Window resets</Table.Th>
                      <Table.Th scope="col">Webhook</Table.Th>
                    </Table.Tr>
                  </Table.Thead>
                  <Table.Tbody>
                    {alerts.map((a) => (
                      <Table.Tr key={a.id}>
                        <Table.Td style={{ whiteSpace: "nowrap" }}>{when(a.at)}</Table.Td>
                        <Table.Td>{a.applicationId ? appName(a.applicationId) : "(every application)"}</Table.Td>
                        <Table.Td>
                          {a.provider} · {a.scope === "backend" ? "Backend" : "Per Consumer"} · {a.resource || "provider-wide"} · {a.dimension} per {a.period}
                        </Table.Td>
                        <Table.Td>
                          {a.trigger === "denied" ? (
                            <Badge color="red" variant="light">
                              denied a request
                            </Badge>
                          ) : (
                            <Badge color={a.threshold >= 100 ? "red" : a.threshold >= 80 ? "orange" : "blue"} variant="light">
                              {a.threshold} %
                            </Badge>
                          )}
                        </Table.Td>
                        <Table.Td ta="right" style={{ whiteSpace: "nowrap" }}>
                          {amount(a.used, a.unit)} / {amount(a.limit, a.unit)}
                        </Table.Td>
                        <Table.Td style={{ whiteSpace: "nowrap" }}>{when(a.windowResetsAt)}</Table.Td>
                        <Table.Td>
                          <Badge color={deliveryColor[a.delivery.state]} variant="light" title={a.delivery.lastError || undefined}>
                            {deliveryText(a.delivery)}
                          </Badge>
                          {a.delivery.state === "failed" && a.delivery.lastError && (
                            <Text size="xs" c="dimmed">
                              {a.delivery.lastError}
                            </Text>
                          )}
                        </Table.Td>
                      </Table.Tr>
                    ))}
                  </Table.Tbody>
                </Table>
              </Table.ScrollContainer>
              <LoadMore query={q} label="Load older alerts" />
            </Stack>
          );
        }}
      </QueryView>
    </ApiCard>
  );
}

export function WebhookCard() {
  const q = useWebhook();
  return (
    <ApiCard
      id="webhook-heading"
      title="Alert webhook"
      description="Each alert is POSTed as JSON to this URL, signed with the secret; failed deliveries are retried."
      error={q.error}
      missing="This platform has no alert webhook setting (it answered 404 for /api/v1/alerts/webhook)."
    >
      <QueryView query={q} loading="Loading the webhook">
        {(w) => <WebhookForm key={w.url + String(w.secretSet)} current={w} />}
      </QueryView>
    </ApiCard>
  );
}

function WebhookForm({ current }: { current: Webhook }) {
  const save = useSaveWebhook();
  const [url, setUrl] = useState(current.url);
  const [secret, setSecret] = useState("");
  const [urlError, setUrlError] = useState<string | null>(null);

  function submit(e: FormEvent) {
    e.preventDefault();
    const u = url.trim();
    if (!/^https?:\/\/\S+$/.test(u)) {
      setUrlError("Enter an http:// or https:// URL.");
      return;
    }
    setUrlError(null);
    save.mutate(secret ? { url: u, secret } : { url: u }, {
      onSuccess: () => {
        setSecret("");
        notifications.show({ color: "teal", title: "Webhook saved", message: "New alerts are sent to " + u });
      },
    });
  }

  function remove() {
    save.mutate(null, {
      onSuccess: () => notifications.show({ color: "teal", title: "Webhook removed", message: "Alerts are recorded, not sent." }),
      onError: (x) => notifications.show({ color: "red", title: "Not removed", message: errorText(x) }),
    });
  }

  const serverError = save.error instanceof ApiError ? save.error.details.find((d) => d.path === "$.url")?.message : undefined;
  return (
    <form onSubmit={submit}>
      <Stack gap="sm" maw={560}>
        <TextInput label="URL" placeholder="https://alerts.example.com/sluice" value={url} onChange={(e) => setUrl(e.currentTarget.value)} error={urlError ?? serverError} />
        <PasswordInput
          label="Signing secret"
          description={current.secretSet ? "A secret is set; it is never shown. Type a new one to replace it, or leave empty to keep it." : "Optional; write-only."}
          value={secret}
          onChange={(e) => setSecret(e.currentTarget.value)}
          autoComplete="new-password"
        />
        {save.isError && !serverError && <ErrorState title="Not saved" error={save.error} />}
        <Group>
          <Button type="submit" loading={save.isPending}>
            Save webhook
          </Button>
          {current.url && (
            <Button variant="light" color="red" onClick={remove} disabled={save.isPending}>
              Remove webhook
            </Button>
          )}
        </Group>
      </Stack>
    </form>
  );
}
