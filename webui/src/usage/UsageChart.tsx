// One chart of the Usage page: stacked areas over the buckets on a canvas
// (AreaPlot), with a table of the same numbers one switch away (the chart's
// accessible alternative) and a summary sentence as the chart's label.
import { Card, Group, Table, Text, Title } from "@mantine/core";
import { memo, useId, useMemo, useState } from "react";
import { Segmented } from "../components/Segmented";
import { AreaPlot } from "./AreaPlot";
import { bucketLabel, type Bucket } from "./model";

const colors = ["blue.7", "teal.8", "orange.8", "grape.7", "cyan.9", "gray.6"];

export interface ChartProps {
  title: string;
  /** One point per bucket: start (ISO) and a number per series. */
  data: Record<string, string | number>[];
  series: string[];
  bucket: Bucket;
  format: (n: number) => string;
  axisFormat?: (n: number) => string;
  /** What the chart shows when there is nothing in the range. */
  empty: string;
}

/** Memoized: redrawn only when its props change (data and series are
 * expected to be memoized by the caller). */
export const UsageChart = memo(function UsageChart({ title, data, series, bucket, format, axisFormat = format, empty }: ChartProps) {
  const id = useId();
  const [view, setView] = useState<"chart" | "table">("chart");
  const multiDay = data.length > 24;
  const points = useMemo<Record<string, string | number>[]>(
    () => data.map((p) => ({ ...p, label: bucketLabel(p.start as string, bucket, multiDay) })),
    [data, bucket, multiDay],
  );
  const total = useMemo(() => data.reduce((t, p) => t + series.reduce((s, name) => s + ((p[name] as number) ?? 0), 0), 0), [data, series]);
  const labels = useMemo(() => points.map((p) => p.label as string), [points]);
  const values = useMemo(() => series.map((name) => data.map((p) => (p[name] as number) ?? 0)), [data, series]);
  const seriesColors = useMemo(() => series.map((_, i) => colors[i % colors.length]), [series]);
  const summary = `${title}: ${format(total)} in ${data.length} ${bucket === "hour" ? "hours" : "days"}${
    series.length > 0 ? `, split by ${series.join(", ")}` : ""
  }.`;
  return (
    <Card withBorder component="section" aria-labelledby={id + "-title"} data-testid={"chart-" + title}>
      <Group justify="space-between" mb="xs" wrap="nowrap" align="flex-start">
        <div>
          <Title order={3} size="h5" id={id + "-title"}>
            {title}
          </Title>
          <Text size="sm" c="dimmed">
            {format(total)} in the period
          </Text>
        </div>
        <Segmented
          size="xs"
          value={view}
          onChange={(v) => setView(v)}
          data={[
            { value: "chart", label: "Chart" },
            { value: "table", label: "Table" },
          ]}
          aria-label={`${title}: show as`}
        />
      </Group>
      {total === 0 ? (
        <Text size="sm" c="dimmed" py="lg" ta="center">
          {empty}
        </Text>
      ) : view === "chart" ? (
        <div role="img" aria-label={summary}>
          <AreaPlot
            height={200}
            labels={labels}
            xName={bucket === "hour" ? "Hour" : "Day"}
            values={values}
            series={series}
            colors={seriesColors}
            format={format}
            axisFormat={axisFormat}
            xSpace={multiDay ? 96 : 48}
          />
        </div>
      ) : (
        <Table.ScrollContainer
          minWidth={Math.max(320, 120 + 110 * series.length)}
          maxHeight={260}
          // The table scrolls: its viewport takes the focus, so that the keyboard scrolls it too.
          scrollAreaProps={{ viewportProps: { tabIndex: 0, role: "region", "aria-label": `${title}, table` } }}
        >
          <Table striped verticalSpacing={4} fz="sm" stickyHeader aria-label={title}>
            <Table.Thead>
              <Table.Tr>
                <Table.Th scope="col">{bucket === "hour" ? "Hour" : "Day"}</Table.Th>
                {series.map((s) => (
                  <Table.Th scope="col" key={s} ta="right">
                    {s}
                  </Table.Th>
                ))}
              </Table.Tr>
            </Table.Thead>
            <Table.Tbody>
              {points.map((p) => (
                <Table.Tr key={p.start as string}>
                  <Table.Th scope="row" fw={400}>
                    {p.label}
                  </Table.Th>
                  {series.map((s) => (
                    <Table.Td key={s} ta="right">
                      {format(p[s] as number)}
                    </Table.Td>
                  ))}
                </Table.Tr>
              ))}
            </Table.Tbody>
          </Table>
        </Table.ScrollContainer>
      )}
    </Card>
  );
});
