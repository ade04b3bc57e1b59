import { screen } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { useState } from "react";
import { expect, it } from "vitest";
import { renderUI } from "../test/render";
import { Segmented } from "./Segmented";

const data = [
  { value: "a", label: "Apples" },
  { value: "b", label: "Pears" },
] as const;

function Host({ log }: { log: string[] }) {
  const [v, setV] = useState<"a" | "b">("a");
  return (
    <Segmented
      value={v}
      onChange={(x) => {
        log.push(x);
        setV(x);
      }}
      data={data}
      aria-label="Fruit"
    />
  );
}

it.each([
  { name: "choosing the other segment selects it", click: "Pears", log: ["b"], checked: "Pears" },
  { name: "choosing the selected one changes nothing", click: "Apples", log: [], checked: "Apples" },
])("$name", async ({ click, log, checked }) => {
  const got: string[] = [];
  renderUI(<Host log={got} />);
  const group = screen.getByRole("radiogroup", { name: "Fruit" });
  expect(group).toBeInTheDocument();
  await userEvent.click(screen.getByRole("radio", { name: click }));
  expect(got).toEqual(log);
  expect(screen.getByRole("radio", { name: checked })).toBeChecked();
  for (const d of data) if (d.label !== checked) expect(screen.getByRole("radio", { name: d.label })).not.toBeChecked();
  // The selected segment is the one drawn as selected.
  expect(screen.getByText(checked).closest("label")).toHaveAttribute("data-active", "true");
});
