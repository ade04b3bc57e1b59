import { Badge, Button, Card, Group, Modal, Stack, Tabs, Text, TextInput, Title } from "@mantine/core";
import { useDisclosure } from "@mantine/hooks";
import { notifications } from "@mantine/notifications";
import { IconArrowLeft } from "@tabler/icons-react";
import { useMutation, useQueryClient } from "@tanstack/react-query";
import { getRouteApi, Outlet, useNavigate, useRouterState } from "@tanstack/react-router";
import { useState } from "react";
import { call, type ProviderInput } from "../api/client";
import { invalidateDeployment, keys, useProvider } from "../api/queries";
import { useClient } from "../auth";
import { ErrorState, QueryView } from "../components/states";
import { ProviderForm } from "./ProviderForm";
import { AnchorLink } from "../components/links";

const route = getRouteApi("/providers/$providerId");

export function useProviderId(): string {
  return route.useParams().providerId;
}

const tabs = [
  { value: "rate-limits", label: "Rate Limit" },
  { value: "guardrails", label: "Guardrails" },
  { value: "deployment", label: "Deployment" },
  { value: "gateways", label: "Gateways" },
  { value: "settings", label: "Settings" },
] as const;

export function ProviderPage() {
  const providerId = useProviderId();
  const provider = useProvider(providerId);
  const navigate = useNavigate();
  const pathname = useRouterState({ select: (s) => s.location.pathname });
  const current = tabs.find((t) => pathname.endsWith("/" + t.value))?.value ?? "rate-limits";

  return (
    <Stack gap="md">
      <AnchorLink to="/providers" size="sm">
        <Group gap={4}>
          <IconArrowLeft size={14} aria-hidden /> Providers
        </Group>
      </AnchorLink>
      <QueryView query={provider} loading="Loading the provider">
        {(p) => (
          <Group gap="sm" align="baseline">
            <Title order={1} size="h2">
              {p.name}
            </Title>
            <Badge variant="light">{p.type === "openai" ? "OpenAI" : "Anthropic"}</Badge>
            <Text c="dimmed" size="sm" className="mono">
              /{p.name}/v1 → {p.url ?? (p.targets ?? []).join(", ")}
            </Text>
          </Group>
        )}
      </QueryView>
      <Tabs
        value={current}
        onChange={(v) => v && void navigate({ to: `/providers/$providerId/${v as (typeof tabs)[number]["value"]}`, params: { providerId } })}
        keepMounted={false}
      >
        <Tabs.List style={{ flexWrap: "nowrap", overflowX: "auto", overflowY: "hidden" }}>
          {tabs.map((t) => (
            <Tabs.Tab key={t.value} value={t.value}>
              {t.label}
            </Tabs.Tab>
          ))}
        </Tabs.List>
        {tabs.map((t) => (
          <Tabs.Panel key={t.value} value={t.value} pt="md">
            {t.value === current && <Outlet />}
          </Tabs.Panel>
        ))}
      </Tabs>
    </Stack>
  );
}

export function ProviderSettingsTab() {
  const providerId = useProviderId();
  const provider = useProvider(providerId);
  const client = useClient();
  const qc = useQueryClient();
  const navigate = useNavigate();
  const [confirmOpen, confirm] = useDisclosure(false);
  const [typed, setTyped] = useState("");

  const update = useMutation({
    mutationFn: (input: ProviderInput) => call(client.PUT("/providers/{providerId}", { params: { path: { providerId } }, body: input })),
    onSuccess: ({ data: p }) => {
      qc.setQueryData(keys.provider(providerId), p);
      void qc.invalidateQueries({ queryKey: keys.providers });
      invalidateDeployment(qc);
      notifications.show({ color: "teal", title: "Provider saved", message: `${p.name}: gateways apply the change within seconds.` });
    },
  });
  const remove = useMutation({
    mutationFn: () => call(client.DELETE("/providers/{providerId}", { params: { path: { providerId } } })),
    onSuccess: () => {
      void qc.invalidateQueries({ queryKey: keys.providers });
      void qc.invalidateQueries({ queryKey: keys.applications });
      invalidateDeployment(qc);
      notifications.show({ color: "teal", title: "Provider deleted", message: "Its route is gone from every gateway." });
      void navigate({ to: "/providers" });
    },
  });

  return (
    <QueryView query={provider}>
      {(p) => (
        <Stack maw={640}>
          <Card withBorder>
            {/* Keyed on updatedAt: a saved provider resets the form to what the server holds. */}
            <ProviderForm key={p.updatedAt} provider={p} submitLabel="Save provider" onSubmit={(input) => update.mutateAsync(input)} />
          </Card>
          <Card withBorder>
            <Stack gap="xs" align="flex-start">
              <Title order={2} size="h4">
                Delete this provider
              </Title>
              <Text size="sm" c="dimmed">
                Removes its route from every gateway, with its rate limits, guardrails and the applications' grants.
              </Text>
              <Button color="red" variant="light" onClick={confirm.open}>
                Delete provider
              </Button>
            </Stack>
          </Card>
          <Modal opened={confirmOpen} onClose={confirm.close} title={`Delete ${p.name}?`}>
            <Stack>
              <Text size="sm">
                Applications calling <span className="mono">/{p.name}/v1</span> will get 404 from every gateway. Type the provider's name to confirm.
              </Text>
              <TextInput label="Provider name" value={typed} onChange={(e) => setTyped(e.currentTarget.value)} autoComplete="off" />
              {remove.isError && <ErrorState title="Not deleted" error={remove.error} />}
              <Group justify="flex-end">
                <Button variant="default" onClick={confirm.close}>
                  Cancel
                </Button>
                <Button color="red" disabled={typed !== p.name} loading={remove.isPending} onClick={() => remove.mutate()}>
                  Delete
                </Button>
              </Group>
            </Stack>
          </Modal>
        </Stack>
      )}
    </QueryView>
  );
}
