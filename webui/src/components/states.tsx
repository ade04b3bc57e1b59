// Loading, empty and error states shared by every page.
import { Alert, Button, Center, Group, Loader, Stack, Text, Title } from "@mantine/core";
import { IconAlertTriangle, IconInbox } from "@tabler/icons-react";
import type { ReactNode } from "react";
import { ApiError } from "../api/client";

export function Loading({ label = "Loading" }: { label?: string }) {
  return (
    <Center py="xl" role="status" aria-live="polite">
      <Group gap="sm">
        <Loader size="sm" aria-hidden />
        <Text c="dimmed">{label}…</Text>
      </Group>
    </Center>
  );
}

export function errorText(err: unknown): string {
  if (err instanceof ApiError) {
    if (err.status === 0) return err.message;
    return `${err.message} (${err.status} ${err.code})`;
  }
  if (err instanceof Error) return err.message;
  return String(err);
}

export function ErrorState({ error, retry, title = "Could not load this" }: { error: unknown; retry?: () => void; title?: string }) {
  return (
    <Alert color="red" variant="light" title={title} icon={<IconAlertTriangle aria-hidden />} role="alert">
      <Stack gap="xs" align="flex-start">
        <Text size="sm">{errorText(error)}</Text>
        {retry && (
          <Button size="xs" variant="white" color="red" onClick={retry}>
            Try again
          </Button>
        )}
      </Stack>
    </Alert>
  );
}

export function Empty({ title, children, action }: { title: string; children?: ReactNode; action?: ReactNode }) {
  return (
    <Stack align="center" gap="xs" py="xl" ta="center">
      <IconInbox size={36} stroke={1.4} aria-hidden color="var(--mantine-color-dimmed)" />
      <Title order={3} size="h4">
        {title}
      </Title>
      {children && (
        <Text c="dimmed" size="sm" maw={460}>
          {children}
        </Text>
      )}
      {action}
    </Stack>
  );
}

/** Renders the state of a query: loading, error (with retry) or its data. */
export function QueryView<T>({
  query,
  loading,
  children,
}: {
  query: { isPending: boolean; isError: boolean; error: unknown; data: T | undefined; refetch: () => unknown };
  loading?: string;
  children: (data: T) => ReactNode;
}) {
  if (query.isPending) return <Loading label={loading} />;
  if (query.isError || query.data === undefined) return <ErrorState error={query.error} retry={() => query.refetch()} />;
  return <>{children(query.data)}</>;
}

/** The button that loads a paged list's next page, while there is one. */
export function LoadMore({ query, label }: { query: { hasNextPage: boolean; isFetchingNextPage: boolean; fetchNextPage: () => unknown }; label: string }) {
  if (!query.hasNextPage) return null;
  return (
    <Group>
      <Button variant="default" loading={query.isFetchingNextPage} onClick={() => void query.fetchNextPage()}>
        {label}
      </Button>
    </Group>
  );
}
