// The Rate Limit tab: the provider's backend limits (one counter shared by
// every application) and per-consumer limits (the same value, one counter
// per application), provider-wide or per endpoint, each with request, token
// and cost rows. Saving replaces the settings with If-Match; a stale edit
// (412) keeps the form as typed and offers both ways forward.
import {
  ActionIcon,
  Alert,
  Badge,
  Button,
  Card,
  Group,
  List,
  Menu,
  Modal,
  NativeSelect,
  SegmentedControl,
  SimpleGrid,
  Stack,
  Switch,
  Text,
  TextInput,
  Title,
} from "@mantine/core";
import { useDisclosure } from "@mantine/hooks";
import { IconBell, IconPlus, IconTrash } from "@tabler/icons-react";
import { useQuery, useQueryClient } from "@tanstack/react-query";
import { useMemo, useRef, useState } from "react";
import { ApiError, call, type RateLimits } from "../api/client";
import { invalidateDeployment, keys } from "../api/queries";
import { useClient } from "../auth";
import { ErrorState, Loading } from "../components/states";
import {
  canonical,
  describe,
  emptyLimits,
  fromForm,
  kinds,
  periodText,
  resources,
  resourcesLeft,
  serverErrors,
  toForm,
  units,
  type FieldErrors,
  type FormState,
  type Kind,
  type LimitsForm,
  type RowForm,
  type ScopeForm,
  type ScopeName,
  type Unit,
} from "../ratelimit/model";
import { ApplyStatus } from "./ApplyStatus";
import { useProviderId } from "./ProviderPage";

interface Versioned {
  value: RateLimits;
  etag: string;
}

export function RateLimitTab() {
  const providerId = useProviderId();
  const client = useClient();
  const q = useQuery({
    queryKey: keys.rateLimits(providerId),
    queryFn: async () => {
      const r = await call(client.GET("/providers/{providerId}/rate-limits", { params: { path: { providerId } } }));
      return { value: r.data, etag: r.etag ?? "*" } satisfies Versioned;
    },
    // An open edit is not replaced behind the user's back; a save learns of
    // another's change through its 412.
    refetchOnWindowFocus: false,
  });
  if (q.isPending) return <Loading label="Loading the rate limits" />;
  if (q.isError) return <ErrorState error={q.error} retry={() => q.refetch()} />;
  return <RateLimitEditor key={providerId} providerId={providerId} server={q.data} />;
}

const kindLabel: Record<Kind, string> = { request: "Request", token: "Token", cost: "Cost" };
const kindUnit: Record<Kind, string> = { request: "requests", token: "tokens", cost: "USD" };
const unitLabel: Record<Unit, string> = { minute: "minute", hour: "hour", day: "day", week: "week", month: "month" };

function RateLimitEditor({ providerId, server }: { providerId: string; server: Versioned }) {
  const client = useClient();
  const qc = useQueryClient();
  const [base, setBase] = useState<Versioned>(server);
  const [form, setForm] = useState<FormState>(() => toForm(server.value));
  const [touched, setTouched] = useState<Set<string>>(new Set());
  const [showAll, setShowAll] = useState(false);
  const [server422, setServer422] = useState<{ fields: FieldErrors; other: string[] }>({ fields: {}, other: [] });
  const [saveError, setSaveError] = useState<unknown>(null);
  const [saving, setSaving] = useState(false);
  const [conflict, setConflict] = useState<Versioned | null>(null);
  const [appliedTarget, setAppliedTarget] = useState<number | null>(null);
  const [compareOpen, compare] = useDisclosure(false);

  const { value, errors } = useMemo(() => fromForm(form), [form]);
  const dirty = JSON.stringify(value) !== canonical(base.value) || Object.keys(errors).length > 0;
  const errorCount = Object.keys(errors).length;

  // A reload (another tab saved, a refetch) is taken while nothing is edited.
  // Adjusted during render, not in an effect, so the new figures show in the
  // same paint (react.dev: "adjusting some state when a prop changes").
  const [lastServer, setLastServer] = useState(server);
  if (server !== lastServer) {
    setLastServer(server);
    if (!dirty && !conflict) {
      setBase(server);
      setForm(toForm(server.value));
    }
  }

  function shown(path: string): string | undefined {
    const local = errors[path];
    if (local) {
      const row = path.replace(/\.(count|amount|reset\.duration|reset\.unit|resource)$/, "");
      if (showAll || touched.has(row) || touched.has(path)) return local;
      return undefined;
    }
    return server422.fields[path];
  }

  // touch: the edit shows the row's errors from now on (a value typed);
  // switching a row on does not, so that an empty new row is not red.
  function edit(path: string, fn: (f: FormState) => void, touch = true) {
    setForm((prev) => {
      const next = structuredClone(prev);
      fn(next);
      return next;
    });
    if (touch) setTouched((t) => new Set(t).add(path));
    setServer422((s) => ({ fields: Object.fromEntries(Object.entries(s.fields).filter(([k]) => !k.startsWith(path))), other: s.other }));
    setAppliedTarget(null);
  }

  async function save(over: Versioned = base) {
    setShowAll(true);
    if (errorCount > 0) return;
    setAppliedTarget(null);
    setSaving(true);
    setSaveError(null);
    setServer422({ fields: {}, other: [] });
    try {
      const r = await call(
        client.PUT("/providers/{providerId}/rate-limits", {
          params: { path: { providerId }, header: { "If-Match": over.etag } },
          body: value,
        }),
      );
      const saved = { value: r.data, etag: r.etag ?? "*" };
      setLastServer(saved);
      setBase(saved);
      setForm(toForm(saved.value));
      setConflict(null);
      setTouched(new Set());
      setShowAll(false);
      qc.setQueryData(keys.rateLimits(providerId), saved);
      invalidateDeployment(qc);
      const gw = await call(client.GET("/gateways"));
      setAppliedTarget(gw.data.currentVersion);
    } catch (err) {
      if (err instanceof ApiError && err.status === 412) {
        try {
          const r = await call(client.GET("/providers/{providerId}/rate-limits", { params: { path: { providerId } } }));
          setConflict({ value: r.data, etag: r.etag ?? "*" });
        } catch (e2) {
          setSaveError(e2);
        }
      } else if (err instanceof ApiError && err.status === 422) {
        setServer422(serverErrors(err.details));
      } else {
        setSaveError(err);
      }
    } finally {
      setSaving(false);
    }
  }

  function takeTheirs() {
    if (!conflict) return;
    setBase(conflict);
    setForm(toForm(conflict.value));
    setLastServer(conflict);
    qc.setQueryData(keys.rateLimits(providerId), conflict);
    setConflict(null);
    setTouched(new Set());
    setShowAll(false);
    setAppliedTarget(null);
    compare.close();
  }

  function keepMine() {
    if (!conflict) return;
    const theirs = conflict;
    setBase(theirs);
    compare.close();
    void save(theirs);
  }

  return (
    <Stack gap="md" pb={80}>
      <Text size="sm" c="dimmed" maw={820}>
        Limits become the provider's policy chain (see the Deployment tab). A <b>Backend</b> limit is one counter shared by every application; a{" "}
        <b>Per Consumer</b> limit is the same value counted separately for each application. Editing a limit keeps the usage already counted.
      </Text>

      {conflict && (
        <Alert color="orange" role="alert" title="Someone else changed these limits while you were editing">
          <Stack gap="xs">
            <Text size="sm">
              Your save was refused so that their change is not overwritten unseen (412). Your edit is still below, unsaved. Compare the two versions, then keep
              yours or take theirs.
            </Text>
            <Group gap="xs">
              <Button size="xs" variant="white" color="orange" onClick={compare.open}>
                Compare versions
              </Button>
              <Button size="xs" color="orange" onClick={keepMine} loading={saving}>
                Save mine over theirs
              </Button>
              <Button size="xs" variant="default" onClick={takeTheirs}>
                Discard mine, load theirs
              </Button>
            </Group>
          </Stack>
        </Alert>
      )}
      {server422.other.length > 0 && (
        <Alert color="red" role="alert" title="The platform refused these settings">
          <List size="sm">
            {server422.other.map((m) => (
              <List.Item key={m}>{m}</List.Item>
            ))}
          </List>
        </Alert>
      )}
      {saveError != null && <ErrorState title="Not saved" error={saveError} />}

      <SimpleGrid cols={{ base: 1, xl: 2 }} spacing="md">
        <ScopeCard
          name="backend"
          title="Backend"
          subtitle="One counter shared by every application: protects the upstream and your bill."
          scope={form.backend}
          edit={edit}
          shown={shown}
        />
        <ScopeCard
          name="consumer"
          title="Per Consumer"
          subtitle="The same limit for each application, counted separately for each one."
          scope={form.consumer}
          edit={edit}
          shown={shown}
        />
      </SimpleGrid>

      {appliedTarget !== null && !dirty && <ApplyStatus version={appliedTarget} />}

      <Card
        withBorder
        shadow="sm"
        pos="sticky"
        bottom={8}
        style={{ zIndex: 5 }}
        p="sm"
        aria-label="Save the rate limits"
        component="section"
      >
        <Group justify="space-between" gap="xs">
          <Text size="sm" c={errorCount && showAll ? "red.8" : "dimmed"} role="status" aria-live="polite">
            {errorCount > 0 && showAll
              ? `${errorCount} ${errorCount === 1 ? "field needs" : "fields need"} fixing before saving.`
              : dirty
                ? "Unsaved changes."
                : "No unsaved changes."}
          </Text>
          <Group gap="xs">
            <Button
              variant="default"
              disabled={!dirty || saving}
              onClick={() => {
                setForm(toForm(base.value));
                setTouched(new Set());
                setShowAll(false);
                setServer422({ fields: {}, other: [] });
              }}
            >
              Reset
            </Button>
            <Button onClick={() => void save()} loading={saving} disabled={!dirty}>
              Save rate limits
            </Button>
          </Group>
        </Group>
      </Card>

      <Modal opened={compareOpen} onClose={compare.close} title="Their version and yours" size="xl">
        <SimpleGrid cols={{ base: 1, sm: 2 }}>
          <Stack gap="xs">
            <Title order={3} size="h5">
              Saved by someone else
            </Title>
            <List size="sm">
              {describe(conflict?.value ?? {}).map((l) => (
                <List.Item key={l}>{l}</List.Item>
              ))}
            </List>
          </Stack>
          <Stack gap="xs">
            <Title order={3} size="h5">
              Yours (unsaved)
            </Title>
            <List size="sm">
              {describe(value).map((l) => (
                <List.Item key={l}>{l}</List.Item>
              ))}
            </List>
          </Stack>
        </SimpleGrid>
        <Group justify="flex-end" mt="md">
          <Button variant="default" onClick={takeTheirs}>
            Discard mine, load theirs
          </Button>
          <Button color="orange" onClick={keepMine}>
            Save mine over theirs
          </Button>
        </Group>
      </Modal>
    </Stack>
  );
}

type Edit = (path: string, fn: (f: FormState) => void, touch?: boolean) => void;
type Shown = (path: string) => string | undefined;

function ScopeCard({
  name,
  title,
  subtitle,
  scope,
  edit,
  shown,
}: {
  name: ScopeName;
  title: string;
  subtitle: string;
  scope: ScopeForm;
  edit: Edit;
  shown: Shown;
}) {
  const headingId = `${name}-heading`;
  const left = resourcesLeft(scope);
  const active = (l: LimitsForm) => kinds.filter((k) => l[k].enabled).length;
  const count =
    scope.mode === "global" ? active(scope.global) : active(scope.default) + scope.resources.reduce((n, r) => n + active(r.limits), 0);
  return (
    <Card withBorder component="section" aria-labelledby={headingId} padding="md">
      <Stack gap="sm">
        <Group justify="space-between" align="flex-start" gap="xs">
          <Stack gap={2} style={{ flex: 1, minWidth: 200 }}>
            <Group gap="xs">
              <Title order={2} size="h3" id={headingId}>
                {title}
              </Title>
              <Badge variant="light" color={count ? "indigo" : "gray"}>
                {count ? `${count} on` : "no limits"}
              </Badge>
            </Group>
            <Text size="sm" c="dimmed">
              {subtitle}
            </Text>
          </Stack>
          <SegmentedControl
            aria-label={`${title} mode`}
            value={scope.mode}
            onChange={(v) => edit(`$.${name}`, (f) => void (f[name].mode = v))}
            data={[
              { value: "global", label: "Provider-wide" },
              { value: "perResource", label: "Per Resource" },
            ]}
          />
        </Group>
        {scope.mode === "global" ? (
          <LimitsBlock
            label={`${title}, provider-wide`}
            hint="One counter across every endpoint."
            path={`$.${name}.global`}
            limits={scope.global}
            set={(path, fn, touch) => edit(path, (f) => fn(f[name].global), touch)}
            shown={shown}
          />
        ) : (
          <Stack gap="sm">
            <LimitsBlock
              label={`${title}, default`}
              heading="Default"
              hint="For each endpoint not listed below: one counter per endpoint."
              path={`$.${name}.perResource.default`}
              limits={scope.default}
              set={(path, fn, touch) => edit(path, (f) => fn(f[name].default), touch)}
              shown={shown}
            />
            {scope.resources.map((r, i) => {
              const path = `$.${name}.perResource.resources[${i}]`;
              return (
                <Card key={i} withBorder bg="var(--mantine-color-gray-0)" p="sm">
                  <Stack gap="xs">
                    <Group justify="space-between" gap="xs" align="flex-end">
                      <NativeSelect
                        label="Endpoint"
                        value={r.resource}
                        data={resources.filter((x) => x === r.resource || left.includes(x))}
                        onChange={(e) => edit(path, (f) => void (f[name].resources[i].resource = e.currentTarget.value as typeof r.resource))}
                        error={shown(`${path}.resource`)}
                        className="mono"
                      />
                      <ActionIcon
                        variant="subtle"
                        color="red"
                        size="lg"
                        aria-label={`Remove the ${r.resource} limits`}
                        onClick={() => edit(`$.${name}.perResource`, (f) => void f[name].resources.splice(i, 1))}
                      >
                        <IconTrash size={18} aria-hidden />
                      </ActionIcon>
                    </Group>
                    <LimitsBlock
                      label={`${title}, ${r.resource}`}
                      path={`${path}.limit`}
                      limits={r.limits}
                      set={(p, fn, touch) => edit(p, (f) => fn(f[name].resources[i].limits), touch)}
                      shown={shown}
                    />
                  </Stack>
                </Card>
              );
            })}
            <Menu position="bottom-start">
              <Menu.Target>
                <Button variant="light" leftSection={<IconPlus size={16} aria-hidden />} disabled={left.length === 0} w="fit-content">
                  Add endpoint
                </Button>
              </Menu.Target>
              <Menu.Dropdown>
                {left.map((res) => (
                  <Menu.Item
                    key={res}
                    className="mono"
                    onClick={() => edit(`$.${name}.perResource`, (f) => void f[name].resources.push({ resource: res, limits: emptyLimits() }))}
                  >
                    {res}
                  </Menu.Item>
                ))}
              </Menu.Dropdown>
            </Menu>
          </Stack>
        )}
      </Stack>
    </Card>
  );
}

function LimitsBlock({
  label,
  heading,
  hint,
  path,
  limits,
  set,
  shown,
}: {
  label: string;
  heading?: string;
  hint?: string;
  path: string;
  limits: LimitsForm;
  set: (path: string, fn: (l: LimitsForm) => void, touch?: boolean) => void;
  shown: Shown;
}) {
  return (
    <Stack gap={6}>
      {(heading || hint) && (
        <Group gap="xs">
          {heading && (
            <Text fw={600} size="sm">
              {heading}
            </Text>
          )}
          {hint && (
            <Text size="xs" c="dimmed">
              {hint}
            </Text>
          )}
        </Group>
      )}
      {kinds.map((k) => (
        <LimitRow
          key={k}
          kind={k}
          label={label}
          path={`${path}.${k}`}
          row={limits[k]}
          set={(fn, touch) => set(`${path}.${k}`, (l) => fn(l[k]), touch)}
          shown={shown}
        />
      ))}
    </Stack>
  );
}

function LimitRow({
  kind,
  label,
  path,
  row,
  set,
  shown,
}: {
  kind: Kind;
  label: string;
  path: string;
  row: RowForm;
  set: (fn: (r: RowForm) => void, touch?: boolean) => void;
  shown: Shown;
}) {
  const valueRef = useRef<HTMLInputElement>(null);
  const valuePath = `${path}.${kind === "cost" ? "amount" : "count"}`;
  const period = periodText(row.duration, row.unit);
  return (
    <Group gap="xs" align="flex-start" wrap="wrap" data-row={path}>
      <Switch
        w={104}
        mt={8}
        label={kindLabel[kind]}
        checked={row.enabled}
        aria-label={`${label}: ${kindLabel[kind]} limit`}
        onChange={(e) => {
          const on = e.currentTarget.checked;
          set((r) => void (r.enabled = on), false);
          if (on) setTimeout(() => valueRef.current?.focus(), 0);
        }}
      />
      <Group gap="xs" align="flex-start" wrap="wrap" style={{ flex: 1, minWidth: 260 }}>
        <TextInput
          ref={valueRef}
          style={{ flex: 1, minWidth: 150, maxWidth: 240 }}
          aria-label={`${label}: ${kindLabel[kind]} ${kind === "cost" ? "amount in USD" : "count"}`}
          placeholder={kind === "cost" ? "amount" : "count"}
          leftSection={kind === "cost" ? <Text size="sm">$</Text> : undefined}
          rightSection={
            <Text size="xs" c="dimmed" pr={6}>
              {kindUnit[kind]}
            </Text>
          }
          rightSectionWidth={kind === "cost" ? 44 : 72}
          rightSectionPointerEvents="none"
          inputMode={kind === "cost" ? "decimal" : "numeric"}
          value={row.value}
          disabled={!row.enabled}
          onChange={(e) => {
            const v = e.currentTarget.value;
            set((r) => void (r.value = v));
          }}
          error={shown(valuePath)}
        />
        <Group gap="xs" wrap="nowrap" align="flex-start">
          <Text size="sm" mt={8} c={row.enabled ? undefined : "dimmed"}>
            per
          </Text>
          <TextInput
            w={64}
            aria-label={`${label}: ${kindLabel[kind]} reset period, number of units`}
            inputMode="numeric"
            value={row.duration}
            disabled={!row.enabled}
            onChange={(e) => {
              const v = e.currentTarget.value;
              set((r) => void (r.duration = v));
            }}
            error={shown(`${path}.reset.duration`)}
            styles={{ error: { width: 220 } }}
          />
          <NativeSelect
            w={104}
            aria-label={`${label}: ${kindLabel[kind]} reset period, unit`}
            value={row.unit}
            disabled={!row.enabled}
            data={units.map((u) => ({ value: u, label: unitLabel[u] }))}
            onChange={(e) => {
              const v = e.currentTarget.value as Unit;
              set((r) => void (r.unit = v));
            }}
            error={shown(`${path}.reset.unit`)}
          />
        </Group>
        <TextInput
          w={150}
          aria-label={`${label}: ${kindLabel[kind]} alert at, percents`}
          placeholder="80, 100"
          title="Alert at these percents of the limit"
          leftSection={<IconBell size={14} aria-hidden />}
          rightSection={
            <Text size="xs" c="dimmed" pr={6}>
              %
            </Text>
          }
          rightSectionPointerEvents="none"
          value={row.alertAt}
          disabled={!row.enabled}
          onChange={(e) => {
            const v = e.currentTarget.value;
            set((r) => void (r.alertAt = v));
          }}
          error={shown(`${path}.alertAt`)}
          styles={{ error: { width: 220 } }}
        />
        {row.enabled && period && (
          <Text size="xs" c="dimmed" mt={10} visibleFrom="md">
            {period}
          </Text>
        )}
      </Group>
    </Group>
  );
}
