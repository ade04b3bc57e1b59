import { Alert, Button, Center, Code, Paper, PasswordInput, Stack, Text, Title } from "@mantine/core";
import { IconInfoCircle } from "@tabler/icons-react";
import { useState, type FormEvent } from "react";
import { useSession } from "../auth";
import { errorText } from "../components/states";

export function SignInPage() {
  const { signIn, endedBecause } = useSession();
  const [token, setToken] = useState("");
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);

  async function submit(e: FormEvent) {
    e.preventDefault();
    setBusy(true);
    setError(null);
    try {
      await signIn(token);
    } catch (err) {
      setError(errorText(err));
    } finally {
      setBusy(false);
    }
  }

  return (
    <Center mih="100vh" p="md" component="main">
      <Paper withBorder shadow="sm" p="xl" w="100%" maw={440}>
        <form onSubmit={submit} noValidate>
          <Stack>
            <Stack gap={4}>
              <Title order={1} size="h2">
                Sign in to Sluice
              </Title>
              <Text size="sm" c="dimmed">
                Use the platform's admin token. It is kept for this browser tab only and forgotten when you sign out or close the tab.
              </Text>
            </Stack>
            {endedBecause && (
              <Alert color="yellow" icon={<IconInfoCircle aria-hidden />} role="status">
                {endedBecause}
              </Alert>
            )}
            <PasswordInput
              label="Admin token"
              placeholder="sluice-admin-…"
              value={token}
              onChange={(e) => setToken(e.currentTarget.value)}
              error={error}
              autoComplete="current-password"
              data-autofocus
              autoFocus
              required
            />
            <Button type="submit" loading={busy} fullWidth>
              Sign in
            </Button>
            <Text size="xs" c="dimmed">
              Lost it? The first start of <Code>sluice serve</Code> prints a generated token once; or start the platform with{" "}
              <Code>SLUICE_ADMIN_TOKEN</Code> set to a token of your choice.
            </Text>
          </Stack>
        </form>
      </Paper>
    </Center>
  );
}
