// The Usage page: charts over time of tokens (by kind), cost, requests and
// denials split by application or model, the top consumers, the recent
// records and the budget alerts, for a period and filters; CSV exports.
// Reads only GET /usage (the rollups) and /usage/records (docs/platform.md
// "Usage"), and /alerts (src/api/budgets.ts).
import { Autocomplete, Badge, Button, Card, Group, Menu, Select, SimpleGrid, Stack, Table, Text, TextInput, Title } from "@mantine/core";
import { notifications } from "@mantine/notifications";
import { IconChevronDown, IconDownload, IconRefresh } from "@tabler/icons-react";
import { keepPreviousData, useInfiniteQuery, useQuery } from "@tanstack/react-query";
import { useMemo, useState } from "react";
import { toApiError } from "../api/client";
import { useApplications, useProviders } from "../api/queries";
import { useClient, useSession } from "../auth";
import { PageHeader } from "../components/Layout";
import { Segmented } from "../components/Segmented";
import { Empty, ErrorState, LoadMore, Loading, QueryView, errorText } from "../components/states";
import { when } from "../lib/format";
import { AlertsCard, WebhookCard } from "../usage/AlertsCards";
import { defaultPeriod, defaultSplit, modelChoicesRange, recordsOptions, usageOptions } from "../usage/queries";
import { UsageChart } from "../usage/UsageChart";
import {
  count,
  exportName,
  minuteEnd,
  periods,
  pivot,
  rangeFor,
  recordsQuery,
  searchString,
  tokenKinds,
  tokensByKind,
  topConsumers,
  usageQuery,
  usd,
  type Filters,
  type Period,
  type Range,
  type Split,
  type TopDimension,
  type UsageRecord,
  type UsageReport,
} from "../usage/model";

const tokenSeries = tokenKinds.map((k) => k.label);

function useUsage(range: Range | null, filters: Filters, groupBy?: TopDimension, denied = false) {
  const client = useClient();
  // A custom range not set yet: a query that never runs.
  const opts = usageOptions(client, range ?? rangeFor(defaultPeriod, new Date(0))!, filters, groupBy, denied);
  return useQuery({ ...opts, enabled: range !== null, placeholderData: keepPreviousData });
}

/** Fetches path with the admin token as CSV and saves it as name. */
async function saveCSV(token: string | null, path: string, name: string) {
  let r: Response;
  try {
    r = await fetch("/api/v1" + path, { headers: { Authorization: "Bearer " + (token ?? ""), Accept: "text/csv" } });
  } catch {
    throw toApiError(undefined, undefined);
  }
  if (!r.ok) throw toApiError(r, await r.json().catch(() => undefined));
  const url = URL.createObjectURL(await r.blob());
  const a = document.createElement("a");
  a.href = url;
  a.download = name;
  document.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}

/** A datetime-local input's value as a Date (local time), or null. */
function localDate(v: string): Date | null {
  if (!v) return null;
  const d = new Date(v);
  return Number.isNaN(d.getTime()) ? null : d;
}

// The filters' dropdowns are made when opened: kept mounted (Mantine's
// default), each is positioned at mount, a forced layout of the page each.
const unmountedDropdown = { keepMounted: false } as const;

const resolutionColor: Record<string, string> = {
  settled: "teal",
  denied: "red",
  auth_failed: "red",
  invalid_request: "orange",
  upstream_error: "orange",
  internal_error: "orange",
  closed: "gray",
  abandoned: "gray",
  released: "gray",
};

export function UsagePage() {
  const { token } = useSession();
  const apps = useApplications();
  const providers = useProviders();
  const [period, setPeriod] = useState<Period>(defaultPeriod);
  const [customFrom, setCustomFrom] = useState("");
  const [customTo, setCustomTo] = useState("");
  const [now, setNow] = useState(() => minuteEnd());
  const [application, setApplication] = useState<string | null>(null);
  const [provider, setProvider] = useState<string | null>(null);
  const [model, setModel] = useState("");
  const [split, setSplit] = useState<Split>(defaultSplit);
  const [topDim, setTopDim] = useState<TopDimension>("application");
  const [exporting, setExporting] = useState(false);

  const range = useMemo(
    () => rangeFor(period, now, { from: localDate(customFrom), to: localDate(customTo) }),
    [period, now, customFrom, customTo],
  );
  const filters: Filters = useMemo(
    () => ({ application: application ?? undefined, provider: provider ?? undefined, model: model.trim() || undefined }),
    [application, provider, model],
  );

  const appName = useMemo(() => {
    const m = new Map((apps.data ?? []).map((a) => [a.id, a.name]));
    return (id: string) => (id === "" ? "(no application)" : (m.get(id) ?? id));
  }, [apps.data]);
  const labels = useMemo(() => {
    const other = (v: string) => (v === "" ? "(none)" : v);
    return { application: appName, key: other, model: other } satisfies Record<TopDimension, (v: string) => string>;
  }, [appName]);

  const series = useUsage(range, filters, split);
  const denied = useUsage(range, filters, split, true);
  const top = useUsage(range, filters, topDim);
  const topDenied = useUsage(range, filters, topDim, true);
  const modelRange = useMemo(() => (range ? modelChoicesRange(range) : null), [range]);
  const models = useUsage(modelRange, { application: filters.application, provider: filters.provider }, "model");

  async function exportCSV(what: "summary" | "records") {
    if (!range) return;
    setExporting(true);
    try {
      const path =
        what === "summary" ? "/usage?" + searchString(usageQuery(range, filters, split)) : "/usage/records?" + searchString(recordsQuery(range, filters, 1000));
      await saveCSV(token, path, exportName(what === "summary" ? "by-" + split : "records", range));
    } catch (x) {
      notifications.show({ color: "red", title: "Export failed", message: errorText(x) });
    } finally {
      setExporting(false);
    }
  }

  return (
    <Stack gap="md">
      <PageHeader
        title="Usage"
        description="Requests, tokens and cost as the gateways metered them, from the platform's hourly and daily rollups (UTC buckets)."
        actions={
          <Group gap="xs">
            <Button variant="default" leftSection={<IconRefresh size={16} aria-hidden />} onClick={() => setNow(minuteEnd())}>
              Refresh
            </Button>
            <Menu position="bottom-end">
              <Menu.Target>
                <Button leftSection={<IconDownload size={16} aria-hidden />} rightSection={<IconChevronDown size={14} aria-hidden />} loading={exporting} disabled={!range}>
                  Export CSV
                </Button>
              </Menu.Target>
              <Menu.Dropdown>
                <Menu.Item onClick={() => void exportCSV("summary")}>Summary by {split} and {range?.bucket ?? "bucket"}</Menu.Item>
                <Menu.Item onClick={() => void exportCSV("records")}>Every record in the period</Menu.Item>
              </Menu.Dropdown>
            </Menu>
          </Group>
        }
      />

      <Card withBorder component="section" aria-label="Period and filters">
        <Stack gap="sm">
          <Group gap="md" align="flex-end" wrap="wrap">
            <Stack gap={4}>
              <Text size="sm" fw={500} id="period-label">
                Period
              </Text>
              <Segmented value={period} onChange={(v) => setPeriod(v)} data={periods} aria-labelledby="period-label" />
            </Stack>
            <Stack gap={4}>
              <Text size="sm" fw={500} id="split-label">
                Split charts by
              </Text>
              <Segmented
                value={split}
                onChange={(v) => setSplit(v)}
                aria-labelledby="split-label"
                data={[
                  { value: "application", label: "Application" },
                  { value: "model", label: "Model" },
                ]}
              />
            </Stack>
          </Group>
          {period === "custom" && (
            <Group gap="sm" align="flex-start">
              <TextInput type="datetime-local" label="From" value={customFrom} onChange={(e) => setCustomFrom(e.currentTarget.value)} />
              <TextInput
                type="datetime-local"
                label="To"
                value={customTo}
                onChange={(e) => setCustomTo(e.currentTarget.value)}
                error={customFrom && customTo && !range ? "The end must be after the start." : undefined}
              />
            </Group>
          )}
          <SimpleGrid cols={{ base: 1, sm: 3 }} spacing="sm">
            <Select
              label="Application"
              comboboxProps={unmountedDropdown}
              placeholder="All applications"
              clearable
              searchable
              value={application}
              onChange={setApplication}
              data={(apps.data ?? []).map((a) => ({ value: a.id, label: a.name }))}
            />
            <Select
              label="Provider"
              comboboxProps={unmountedDropdown}
              placeholder="All providers"
              clearable
              searchable
              value={provider}
              onChange={setProvider}
              data={(providers.data ?? []).map((p) => p.name)}
            />
            <Autocomplete
              label="Model"
              comboboxProps={unmountedDropdown}
              placeholder="All models"
              value={model}
              onChange={setModel}
              data={[...new Set((models.data?.rows ?? []).map((r) => r.model ?? "").filter(Boolean))].sort()}
            />
          </SimpleGrid>
        </Stack>
      </Card>

      {period === "custom" && !range ? (
        <Card withBorder>
          <Empty title="Choose a range">Enter a start and an end to see the usage between them.</Empty>
        </Card>
      ) : (
        <>
          <Charts series={series} denied={denied} split={split} label={labels[split]} naming={split === "application" && apps.isPending} />
          <TopConsumers top={top} denied={topDenied} dim={topDim} setDim={setTopDim} label={labels[topDim]} />
          {range && <AlertsCard filters={filters} appName={appName} />}
          {range && <RecordsCard range={range} filters={filters} appName={appName} />}
          <WebhookCard />
        </>
      )}
    </Stack>
  );
}

type ReportQuery = ReturnType<typeof useUsage>;

const compact = (n: number) => count(n, true);

/** naming: the series' names (the applications) are still loading; the charts
 * wait for them rather than being drawn twice, with ids and then names. */
function Charts({ series, denied, split, label, naming }: { series: ReportQuery; denied: ReportQuery; split: Split; label: (v: string) => string; naming: boolean }) {
  // The chart data change only with the reports and the series' names: the
  // charts (the costliest part of the page to render) are not
  // redrawn when another of the page's queries answers.
  const r0 = series.data;
  const d0 = denied.data;
  const tokens = useMemo(() => (r0 ? tokensByKind(r0) : []), [r0]);
  const cost = useMemo(() => (r0 ? pivot(r0, split, "costMicroUsd", label, 5) : null), [r0, split, label]);
  const requests = useMemo(() => (r0 ? pivot(r0, split, "requests", label, 5) : null), [r0, split, label]);
  const den = useMemo(() => (d0 ? pivot(d0, split, "requests", label, 5) : null), [d0, split, label]);
  if (series.isPending || naming) return <Loading label="Loading the usage" />;
  if (series.isError || !series.data || !cost || !requests) return <ErrorState error={series.error} retry={() => void series.refetch()} title="Could not load the usage" />;
  const r = series.data;
  const bucket = r.bucket;
  return (
    <section aria-label="Usage over time">
      <Text size="sm" c="dimmed" mb="xs" aria-live="polite">
        {when(r.from)} to {when(r.to)}: {count(r.totals.requests)} requests, {count(r.totals.totalTokens)} tokens, {usd(r.totals.costMicroUsd)}
        {series.isFetching ? " (updating…)" : ""}
      </Text>
      <SimpleGrid cols={{ base: 1, lg: 2 }} spacing="md">
        <UsageChart
          title="Tokens by kind"
          data={tokens}
          series={tokenSeries}
          bucket={bucket}
          format={count}
          axisFormat={compact}
          empty="No tokens in this period."
        />
        <UsageChart title="Cost (USD)" data={cost.data} series={cost.series} bucket={bucket} format={usd} empty="Nothing cost anything in this period." />
        <UsageChart title="Requests" data={requests.data} series={requests.series} bucket={bucket} format={count} axisFormat={compact} empty="No requests in this period." />
        {den ? (
          <UsageChart title="Denials" data={den.data} series={den.series} bucket={bucket} format={count} axisFormat={compact} empty="No request was denied in this period." />
        ) : denied.isError ? (
          <ErrorState error={denied.error} retry={() => void denied.refetch()} title="Could not load the denials" />
        ) : (
          <Loading label="Loading the denials" />
        )}
      </SimpleGrid>
    </section>
  );
}

const dimLabel: Record<TopDimension, string> = { application: "Application", key: "API key", model: "Model" };

function TopConsumers({
  top,
  denied,
  dim,
  setDim,
  label,
}: {
  top: ReportQuery;
  denied: ReportQuery;
  dim: TopDimension;
  setDim: (d: TopDimension) => void;
  label: (v: string) => string;
}) {
  return (
    <Card withBorder component="section" aria-labelledby="top-heading">
      <Group justify="space-between" mb="sm">
        <Title order={2} size="h4" id="top-heading">
          Top consumers
        </Title>
        <Segmented
          size="xs"
          value={dim}
          onChange={(v) => setDim(v)}
          aria-label="Top consumers by"
          data={[
            { value: "application", label: "Applications" },
            { value: "key", label: "Keys" },
            { value: "model", label: "Models" },
          ]}
        />
      </Group>
      <QueryView query={top} loading="Loading the top consumers">
        {(r: UsageReport) => {
          const list = topConsumers(r, denied.data, dim, 10);
          if (list.length === 0) return <Empty title="No usage in this period" />;
          return (
            <Table.ScrollContainer minWidth={560}>
              <Table verticalSpacing="xs" aria-label={`Top consumers by ${dimLabel[dim].toLowerCase()}`}>
                <Table.Thead>
                  <Table.Tr>
                    <Table.Th scope="col">{dimLabel[dim]}</Table.Th>
                    {["Requests", "Denied", "Tokens", "Cost", "Share of cost"].map((h) => (
                      <Table.Th scope="col" ta="right" key={h}>
                        {h}
                      </Table.Th>
                    ))}
                  </Table.Tr>
                </Table.Thead>
                <Table.Tbody>
                  {list.map((c) => (
                    <Table.Tr key={c.value}>
                      <Table.Td className={dim === "application" ? undefined : "mono"}>{label(c.value)}</Table.Td>
                      <Table.Td ta="right">{count(c.requests)}</Table.Td>
                      <Table.Td ta="right">{count(c.denied)}</Table.Td>
                      <Table.Td ta="right">{count(c.totalTokens)}</Table.Td>
                      <Table.Td ta="right">{usd(c.costMicroUsd)}</Table.Td>
                      <Table.Td ta="right">{(c.costShare * 100).toFixed(1)} %</Table.Td>
                    </Table.Tr>
                  ))}
                </Table.Tbody>
              </Table>
            </Table.ScrollContainer>
          );
        }}
      </QueryView>
    </Card>
  );
}

function RecordsCard({ range, filters, appName }: { range: Range; filters: Filters; appName: (id: string) => string }) {
  const client = useClient();
  const q = useInfiniteQuery(recordsOptions(client, range, filters));
  return (
    <Card withBorder component="section" aria-labelledby="records-heading">
      <Title order={2} size="h4" id="records-heading" mb="sm">
        Recent requests
      </Title>
      <QueryView query={q} loading="Loading the records">
        {(d) => {
          const records: UsageRecord[] = d.pages.flatMap((p) => p.records);
          if (records.length === 0) return <Empty title="No requests in this period">Records appear here once a gateway has sent them (within seconds).</Empty>;
          return (
            <Stack gap="sm">
              <Table.ScrollContainer minWidth={980} scrollAreaProps={{ viewportProps: { tabIndex: 0, role: "region", "aria-label": "Recent requests, scrollable" } }}>
                <Table verticalSpacing={6} fz="sm" aria-label="Recent requests, newest first">
                  <Table.Thead>
                    <Table.Tr>
                      <Table.Th scope="col">When</Table.Th>
                      <Table.Th scope="col">Application</Table.Th>
                      <Table.Th scope="col">Provider</Table.Th>
                      <Table.Th scope="col">Model</Table.Th>
                      <Table.Th scope="col">Resolution</Table.Th>
                      <Table.Th scope="col">Denied by</Table.Th>
                      <Table.Th scope="col" ta="right">
                        Status
                      </Table.Th>
                      <Table.Th scope="col" ta="right">
                        Tokens in / out
                      </Table.Th>
                      <Table.Th scope="col" ta="right">
                        Cost
                      </Table.Th>
                      <Table.Th scope="col" ta="right">
                        Latency
                      </Table.Th>
                    </Table.Tr>
                  </Table.Thead>
                  <Table.Tbody>
                    {records.map((r) => (
                      <RecordRow key={r.id + r.ts} r={r} appName={appName} />
                    ))}
                  </Table.Tbody>
                </Table>
              </Table.ScrollContainer>
              <LoadMore query={q} label="Load more" />
              {q.isFetchNextPageError && <ErrorState error={q.error} retry={() => void q.fetchNextPage()} title="Could not load more" />}
            </Stack>
          );
        }}
      </QueryView>
    </Card>
  );
}

const td = Table.classes.td;
const right = { textAlign: "right" } as const;
const nowrap = { whiteSpace: "nowrap" } as const;

/** A row of the records table in plain elements with Mantine's table classes
 * (what Table.Tr and Table.Td render, without a component each: the table
 * has 50 rows of 10 cells). The table's own spacing and font size apply. */
function RecordRow({ r, appName }: { r: UsageRecord; appName: (id: string) => string }) {
  return (
    <tr className={Table.classes.tr} data-with-row-border>
      <td className={td} style={nowrap}>
        {when(r.ts)}
      </td>
      <td className={td}>{appName(r.application)}</td>
      <td className={td}>{r.provider}</td>
      <td className={td + " mono"} style={nowrap}>
        {r.servedModel && r.servedModel !== r.requestedModel ? `${r.requestedModel} → ${r.servedModel}` : r.requestedModel}
      </td>
      <td className={td}>
        <Badge variant="light" color={resolutionColor[r.resolution] ?? "gray"}>
          {r.resolution}
        </Badge>
      </td>
      <td className={td + " mono"}>{r.deniedBy || "—"}</td>
      <td className={td} style={right}>
        {r.status || "—"}
      </td>
      <td className={td} style={right}>
        {count(r.promptTokens)} / {count(r.completionTokens)}
      </td>
      <td className={td} style={right}>
        {usd(r.costMicroUsd)}
      </td>
      <td className={td} style={right}>
        {(r.latencyUs / 1000).toFixed(0)} ms
      </td>
    </tr>
  );
}
