// Add or edit one guardrail: a policy from the catalog with a form generated
// from its params JSON Schema (@rjsf), or the whole entry as raw YAML/JSON.
// The server's 422 problems are shown at the fields they name
// ($.params.allow[0] under the allow list's first item); the rest above the
// form. A stale edit (412) keeps what was typed.
import { Alert, Badge, Button, Group, List, SegmentedControl, Select, Stack, Text, Textarea } from "@mantine/core";
import Form from "@rjsf/mantine";
import type { RJSFSchema, UiSchema } from "@rjsf/utils";
import validator from "@rjsf/validator-ajv8";
import { useMemo, useState } from "react";
import { ApiError, type GuardrailInput, type Policy, type Problem } from "../api/client";
import { errorText } from "../components/states";
import { splitProblems } from "./problems";
import { parseRaw, rawText, type EditorValue } from "./raw";

type Mode = "form" | "raw";

/** The policy's params schema for the form: its own title and description
 * are shown by the editor, not repeated inside the form. */
function formSchema(p: Policy | undefined): RJSFSchema {
  if (!p) return { type: "object" };
  const s = structuredClone(p.paramsSchema) as RJSFSchema;
  delete s.title;
  delete s.description;
  return s;
}

const uiSchema: UiSchema = { "ui:submitButtonOptions": { norender: true } };

export function GuardrailEditor({
  policies,
  initial,
  fixedPolicy,
  submitLabel,
  onSubmit,
  onCancel,
  conflictActions,
}: {
  policies: Policy[];
  initial?: EditorValue;
  /** Editing: the policy cannot change (delete and add another instead). */
  fixedPolicy?: boolean;
  submitLabel: string;
  onSubmit: (input: GuardrailInput) => Promise<unknown>;
  onCancel: () => void;
  /** Shown when the save was refused as stale (412). */
  conflictActions?: (retryWith: GuardrailInput) => React.ReactNode;
}) {
  const [value, setValue] = useState<EditorValue>(initial ?? { name: "", version: "v1", params: {} });
  const [mode, setMode] = useState<Mode>("form");
  const [raw, setRaw] = useState(() => (initial ? rawText(initial) : ""));
  const [rawError, setRawError] = useState<string | null>(null);
  const [error, setError] = useState<unknown>(null);
  const [busy, setBusy] = useState(false);
  // The last input sent: what "save mine over theirs" sends again.
  const [pendingInput, setPendingInput] = useState<GuardrailInput | null>(null);

  const policy = policies.find((p) => p.name === value.name);
  const schema = useMemo(() => formSchema(policy), [policy]);
  const problems: Problem[] = useMemo(() => (error instanceof ApiError ? error.details : []), [error]);
  const { errorSchema, other } = useMemo(() => splitProblems(problems), [problems]);
  const stale = error instanceof ApiError && error.status === 412;

  function switchMode(m: Mode) {
    if (m === mode) return;
    if (m === "raw") {
      setRaw(rawText(value));
      setRawError(null);
    } else {
      const r = parseRaw(raw);
      if (r.error) {
        setRawError(r.error + " Fix it to go back to the form.");
        return;
      }
      setValue(r.value!);
    }
    setMode(m);
  }

  async function send(v: EditorValue) {
    const input: GuardrailInput = { name: v.name, version: v.version || "v1", params: v.params };
    setBusy(true);
    setError(null);
    setPendingInput(input);
    try {
      await onSubmit(input);
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
    }
  }

  function submitRaw() {
    const r = parseRaw(raw);
    if (r.error) {
      setRawError(r.error);
      return;
    }
    setRawError(null);
    setValue(r.value!);
    void send(r.value!);
  }

  const policyOptions = policies.map((p) => ({ value: p.name, label: `${p.name} (${p.version})` }));
  return (
    <Stack gap="md">
      {!fixedPolicy ? (
        <Select
          label="Policy"
          description="From the catalog of this gateway's policies."
          placeholder="Choose a policy"
          data={policyOptions}
          value={value.name || null}
          searchable
          onChange={(n) => {
            const p = policies.find((x) => x.name === n);
            setValue({ name: n ?? "", version: p?.version ?? "v1", params: {} });
            setRaw(n ? rawText({ name: n, version: p?.version ?? "v1", params: {} }) : "");
            setError(null);
          }}
          disabled={mode === "raw"}
          comboboxProps={{ withinPortal: true }}
        />
      ) : (
        <Group gap="xs">
          <Text fw={600}>{value.name}</Text>
          <Badge variant="light">{value.version}</Badge>
        </Group>
      )}
      {policy && (
        <Text size="sm" c="dimmed">
          {policy.description}
        </Text>
      )}
      <SegmentedControl
        aria-label="Editor"
        value={mode}
        onChange={(m) => switchMode(m)}
        data={[
          { value: "form", label: "Form" },
          { value: "raw", label: "YAML / JSON" },
        ]}
        w="fit-content"
      />
      {rawError && (
        <Alert color="red" role="alert">
          {rawError}
        </Alert>
      )}
      {stale && (
        <Alert color="orange" role="alert" title="Someone else changed this guardrail">
          <Stack gap="xs">
            <Text size="sm">Your save was refused (412) so that their change is not overwritten unseen. What you typed is still here.</Text>
            {pendingInput && conflictActions?.(pendingInput)}
          </Stack>
        </Alert>
      )}
      {error != null && !stale && (other.length > 0 || problems.length === 0) && (
        <Alert color="red" role="alert" title="The platform refused this guardrail">
          {other.length > 0 ? (
            <List size="sm">
              {other.map((p) => (
                <List.Item key={p.path + p.message}>
                  {p.path === "$" ? "" : <span className="mono">{p.path}: </span>}
                  {p.message}
                </List.Item>
              ))}
            </List>
          ) : (
            <Text size="sm">{errorText(error)}</Text>
          )}
        </Alert>
      )}
      {mode === "form" ? (
        policy ? (
          <div className="rjsf-form">
            <Form
              key={policy.name}
              schema={schema}
              uiSchema={uiSchema}
              validator={validator}
              formData={value.params}
              onChange={(e) => setValue((v) => ({ ...v, params: (e.formData ?? {}) as Record<string, unknown> }))}
              onSubmit={(e) => void send({ ...value, params: (e.formData ?? {}) as Record<string, unknown> })}
              extraErrors={errorSchema}
              showErrorList={false}
              noHtml5Validate
              idPrefix="params"
            >
              <Group justify="flex-end" mt="md">
                <Button variant="default" onClick={onCancel}>
                  Cancel
                </Button>
                <Button type="submit" loading={busy}>
                  {submitLabel}
                </Button>
              </Group>
            </Form>
          </div>
        ) : (
          <Group justify="flex-end">
            <Button variant="default" onClick={onCancel}>
              Cancel
            </Button>
          </Group>
        )
      ) : (
        <Stack gap="xs">
          <Textarea
            label="Entry"
            description="The guardrail as in a deployment file: name, version and params, in YAML or JSON."
            autosize
            minRows={8}
            maxRows={24}
            value={raw}
            onChange={(e) => setRaw(e.currentTarget.value)}
            styles={{ input: { fontFamily: "var(--mantine-font-family-monospace)" } }}
            spellCheck={false}
          />
          {problems.length > 0 && other.length < problems.length && (
            <Alert color="red" role="alert" title="Problems at these fields">
              <List size="sm">
                {problems
                  .filter((p) => !other.includes(p))
                  .map((p) => (
                    <List.Item key={p.path + p.message}>
                      <span className="mono">{p.path}</span>: {p.message}
                    </List.Item>
                  ))}
              </List>
            </Alert>
          )}
          <Group justify="flex-end">
            <Button variant="default" onClick={onCancel}>
              Cancel
            </Button>
            <Button onClick={submitRaw} loading={busy}>
              {submitLabel}
            </Button>
          </Group>
        </Stack>
      )}
    </Stack>
  );
}
