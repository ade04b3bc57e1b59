import { screen } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { expect, it, vi } from "vitest";
import { ApiError } from "../api/client";
import { renderUI } from "../test/render";
import { QueryView } from "./states";

const base = { isPending: false, isError: false, error: null, data: undefined as string[] | undefined, refetch: vi.fn() };

it("shows loading, then the data", () => {
  const { rerender } = renderUI(<QueryView query={{ ...base, isPending: true }} loading="Loading providers">{(d) => d.join()}</QueryView>);
  expect(screen.getByRole("status")).toHaveTextContent("Loading providers");
  rerender(<QueryView query={{ ...base, data: ["a", "b"] }}>{(d) => <p>{d.join()}</p>}</QueryView>);
  expect(screen.getByText("a,b")).toBeInTheDocument();
});

it("says why a load failed and offers to try again", async () => {
  const refetch = vi.fn();
  renderUI(
    <QueryView query={{ ...base, isError: true, error: new ApiError(0, "network", "The platform cannot be reached."), refetch }}>{() => null}</QueryView>,
  );
  expect(screen.getByRole("alert")).toHaveTextContent("The platform cannot be reached.");
  await userEvent.click(screen.getByRole("button", { name: "Try again" }));
  expect(refetch).toHaveBeenCalledOnce();
});
