// Create or edit a provider: its route name, type, upstream (one URL or
// several targets), the header the key goes in, and the upstream key,
// which is write-only: never shown, only set, replaced or removed.
import { Alert, Badge, Button, Group, PasswordInput, SegmentedControl, Stack, Text, TextInput, Textarea } from "@mantine/core";
import { useState, type FormEvent } from "react";
import { ApiError, type Provider, type ProviderInput } from "../api/client";
import { problemsByPath } from "../lib/errors";

type KeyAction = "keep" | "set" | "remove";

export function ProviderForm({
  provider,
  submitLabel,
  onSubmit,
  onCancel,
}: {
  provider?: Provider;
  submitLabel: string;
  onSubmit: (input: ProviderInput) => Promise<unknown>;
  onCancel?: () => void;
}) {
  const [name, setName] = useState(provider?.name ?? "");
  const [type, setType] = useState<ProviderInput["type"]>(provider?.type ?? "openai");
  const [mode, setMode] = useState<"url" | "targets">(provider?.targets?.length ? "targets" : "url");
  const [url, setUrl] = useState(provider?.url ?? "");
  const [targets, setTargets] = useState((provider?.targets ?? []).join("\n"));
  const [authHeader, setAuthHeader] = useState(provider?.authHeader ?? "");
  const [keyAction, setKeyAction] = useState<KeyAction>(provider ? "keep" : "set");
  const [apiKey, setApiKey] = useState("");
  const [local, setLocal] = useState<Record<string, string>>({});
  const [error, setError] = useState<unknown>(null);
  const [busy, setBusy] = useState(false);

  const server = problemsByPath(error, ["$.name", "$.type", "$.url", "$.targets", "$.authHeader", "$.apiKey"]);
  const fieldError = (p: string) => local[p] ?? server.fields[p];
  const conflict = error instanceof ApiError && error.status === 409;

  function validate(): Record<string, string> {
    const e: Record<string, string> = {};
    if (!/^[A-Za-z0-9][A-Za-z0-9._-]*$/.test(name) || name.length > 63)
      e["$.name"] = "Letters, digits, '.', '_' and '-', starting with a letter or digit (at most 63).";
    const urlOk = (u: string) => /^https?:\/\/[^\s/]+/.test(u);
    if (mode === "url" && !urlOk(url.trim())) e["$.url"] = "Enter the upstream's base URL, e.g. https://api.openai.com.";
    if (mode === "targets") {
      const list = targets.split("\n").map((t) => t.trim()).filter(Boolean);
      if (list.length === 0) e["$.targets"] = "Enter at least one target URL, one a line.";
      else if (list.some((t) => !urlOk(t))) e["$.targets"] = "Every target must be an http:// or https:// URL.";
      else if (list.length > 16) e["$.targets"] = "At most 16 targets.";
    }
    if (authHeader && !/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/.test(authHeader)) e["$.authHeader"] = "A header name such as Authorization or x-api-key.";
    return e;
  }

  async function submit(ev: FormEvent) {
    ev.preventDefault();
    const e = validate();
    setLocal(e);
    if (Object.keys(e).length) return;
    const input: ProviderInput = { name, type };
    if (mode === "url") input.url = url.trim();
    else input.targets = targets.split("\n").map((t) => t.trim()).filter(Boolean);
    if (authHeader.trim()) input.authHeader = authHeader.trim();
    // Fields the form does not edit (set through the API) are kept: a PUT
    // without them would remove them.
    if (provider?.forwardHeaders?.length) input.forwardHeaders = provider.forwardHeaders;
    if (provider?.applicationHeader) input.applicationHeader = provider.applicationHeader;
    if (provider?.usageReportUrl) input.usageReportUrl = provider.usageReportUrl;
    if (keyAction === "set") {
      if (apiKey) input.apiKey = apiKey;
    } else if (keyAction === "remove") input.apiKey = "";
    setBusy(true);
    setError(null);
    try {
      await onSubmit(input);
      setApiKey("");
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
    }
  }

  const defaultHeader = type === "anthropic" ? "x-api-key" : "Authorization (Bearer)";
  return (
    <form onSubmit={submit} noValidate>
      <Stack>
        <TextInput
          label="Name"
          description={`The route: applications call /${name || "<name>"}/v1/…`}
          value={name}
          onChange={(e) => setName(e.currentTarget.value)}
          error={fieldError("$.name") ?? (conflict ? "A provider with this name exists." : undefined)}
          required
          maxLength={63}
        />
        <Stack gap={4}>
          <Text size="sm" fw={500} id="provider-type-label">
            API type
          </Text>
          <SegmentedControl
            aria-labelledby="provider-type-label"
            value={type}
            onChange={(v) => setType(v)}
            data={[
              { value: "openai", label: "OpenAI" },
              { value: "anthropic", label: "Anthropic" },
            ]}
          />
        </Stack>
        <Stack gap={4}>
          <Text size="sm" fw={500} id="provider-upstream-label">
            Upstream
          </Text>
          <SegmentedControl
            aria-labelledby="provider-upstream-label"
            value={mode}
            onChange={(v) => setMode(v)}
            data={[
              { value: "url", label: "One URL" },
              { value: "targets", label: "Several targets" },
            ]}
          />
        </Stack>
        {mode === "url" ? (
          <TextInput
            label="Upstream URL"
            placeholder="https://api.openai.com"
            description="Without /v1: the gateway appends the request's path."
            value={url}
            onChange={(e) => setUrl(e.currentTarget.value)}
            error={fieldError("$.url")}
            required
          />
        ) : (
          <Textarea
            label="Targets"
            description="One URL a line; requests are spread over them."
            autosize
            minRows={2}
            value={targets}
            onChange={(e) => setTargets(e.currentTarget.value)}
            error={fieldError("$.targets")}
            required
          />
        )}
        <TextInput
          label="Key header"
          description={`Leave empty for the default: ${defaultHeader}.`}
          value={authHeader}
          onChange={(e) => setAuthHeader(e.currentTarget.value)}
          error={fieldError("$.authHeader")}
        />
        <Stack gap={6}>
          <Group gap="xs">
            <Text size="sm" fw={500}>
              Upstream API key
            </Text>
            {provider && (provider.hasApiKey ? <Badge color="teal" variant="light">set</Badge> : <Badge color="gray" variant="light">not set</Badge>)}
          </Group>
          <Text size="xs" c="dimmed">
            Write-only: stored encrypted and never shown again, here or in the API.
          </Text>
          {provider && keyAction === "keep" ? (
            <Group gap="xs">
              <Button variant="default" size="xs" onClick={() => setKeyAction("set")}>
                {provider.hasApiKey ? "Replace key" : "Set key"}
              </Button>
              {provider.hasApiKey && (
                <Button variant="default" color="red" size="xs" onClick={() => setKeyAction("remove")}>
                  Remove key
                </Button>
              )}
            </Group>
          ) : keyAction === "remove" ? (
            <Group gap="xs">
              <Text size="sm">The key will be removed when you save.</Text>
              <Button variant="subtle" size="xs" onClick={() => setKeyAction("keep")}>
                Keep it
              </Button>
            </Group>
          ) : (
            <Group gap="xs" align="flex-end" wrap="nowrap">
              <PasswordInput
                style={{ flex: 1 }}
                aria-label={provider?.hasApiKey ? "New upstream API key" : "Upstream API key"}
                placeholder={provider ? "The new key" : "Optional, e.g. sk-…"}
                value={apiKey}
                onChange={(e) => setApiKey(e.currentTarget.value)}
                error={fieldError("$.apiKey")}
                autoComplete="off"
              />
              {provider && (
                <Button variant="subtle" size="xs" mb={4} onClick={() => { setKeyAction("keep"); setApiKey(""); }}>
                  Cancel
                </Button>
              )}
            </Group>
          )}
        </Stack>
        {error != null && server.rest && !conflict ? (
          <Alert color="red" role="alert" title="Not saved">
            {server.rest}
          </Alert>
        ) : null}
        <Group justify="flex-end">
          {onCancel && (
            <Button variant="default" onClick={onCancel}>
              Cancel
            </Button>
          )}
          <Button type="submit" loading={busy}>
            {submitLabel}
          </Button>
        </Group>
      </Stack>
    </form>
  );
}
