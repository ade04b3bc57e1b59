import { screen, waitFor } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { afterEach, beforeEach, expect, it, vi } from "vitest";
import { useSession } from "../auth";
import { renderUI } from "../test/render";
import { SignInPage } from "./SignInPage";

function Probe() {
  const { token } = useSession();
  return token ? <p>signed in</p> : <SignInPage />;
}

beforeEach(() => {
  sessionStorage.clear();
  vi.stubGlobal(
    "fetch",
    vi.fn((_url: string, init?: RequestInit) => {
      const auth = new Headers(init?.headers).get("Authorization");
      return Promise.resolve(new Response("{}", { status: auth === "Bearer sluice-admin-right" ? 200 : 401 }));
    }),
  );
});
afterEach(() => vi.unstubAllGlobals());

it("refuses a token the platform does not accept, and keeps a good one for the tab", { timeout: 15000 }, async () => {
  const user = userEvent.setup();
  renderUI(<Probe />);
  const field = screen.getByLabelText(/Admin token/);
  expect(field).toHaveFocus();
  await user.type(field, "sluice-admin-wrong{Enter}");
  expect(await screen.findByText(/The platform does not accept this token/, {}, { timeout: 3000 })).toBeInTheDocument();
  expect(sessionStorage.getItem("sluice.adminToken")).toBeNull();

  await user.clear(field);
  await user.type(field, "  sluice-admin-right {Enter}");
  expect(await screen.findByText("signed in", {}, { timeout: 3000 })).toBeInTheDocument();
  expect(sessionStorage.getItem("sluice.adminToken")).toBe("sluice-admin-right");
  expect(localStorage.length).toBe(0);
});

it("asks for a token before calling the platform", async () => {
  const user = userEvent.setup();
  renderUI(<Probe />);
  await user.click(screen.getByRole("button", { name: "Sign in" }));
  await waitFor(() => expect(screen.getByText("Enter the admin token.")).toBeInTheDocument());
  expect(fetch).not.toHaveBeenCalled();
});
