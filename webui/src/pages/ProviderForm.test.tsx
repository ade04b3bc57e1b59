import { screen } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { describe, expect, it, vi } from "vitest";
import type { Provider } from "../api/client";
import { ApiError } from "../api/client";
import { renderUI } from "../test/render";
import { ProviderForm } from "./ProviderForm";

const provider: Provider = {
  id: "prv-1",
  name: "openai",
  type: "openai",
  url: "https://api.openai.com",
  authHeader: "Authorization",
  hasApiKey: true,
  createdAt: "2026-01-01T00:00:00Z",
  updatedAt: "2026-01-01T00:00:00Z",
};

describe("ProviderForm", () => {
  it("keeps the stored key unless it is replaced or removed", async () => {
    const user = userEvent.setup();
    const onSubmit = vi.fn(async () => {});
    renderUI(<ProviderForm provider={provider} submitLabel="Save" onSubmit={onSubmit} />);
    await user.click(screen.getByRole("button", { name: "Save" }));
    expect(onSubmit).toHaveBeenLastCalledWith({ name: "openai", type: "openai", url: "https://api.openai.com", authHeader: "Authorization" });

    await user.click(screen.getByRole("button", { name: "Replace key" }));
    await user.type(screen.getByLabelText("New upstream API key"), "sk-new");
    await user.click(screen.getByRole("button", { name: "Save" }));
    expect(onSubmit).toHaveBeenLastCalledWith(expect.objectContaining({ apiKey: "sk-new" }));
  });

  it("keeps the fields it does not edit", async () => {
    const user = userEvent.setup();
    const onSubmit = vi.fn(async () => {});
    const withUsage: Provider = { ...provider, forwardHeaders: ["x-mock-*"], applicationHeader: "X-Mock-Tenant", usageReportUrl: "http://127.0.0.1:9000/mock/usage" };
    renderUI(<ProviderForm provider={withUsage} submitLabel="Save" onSubmit={onSubmit} />);
    await user.click(screen.getByRole("button", { name: "Save" }));
    expect(onSubmit).toHaveBeenLastCalledWith(
      expect.objectContaining({ forwardHeaders: ["x-mock-*"], applicationHeader: "X-Mock-Tenant", usageReportUrl: "http://127.0.0.1:9000/mock/usage" }),
    );
  });

  it("removes the key with an empty apiKey", async () => {
    const user = userEvent.setup();
    const onSubmit = vi.fn(async () => {});
    renderUI(<ProviderForm provider={provider} submitLabel="Save" onSubmit={onSubmit} />);
    await user.click(screen.getByRole("button", { name: "Remove key" }));
    expect(screen.getByText("The key will be removed when you save.")).toBeInTheDocument();
    await user.click(screen.getByRole("button", { name: "Save" }));
    expect(onSubmit).toHaveBeenLastCalledWith(expect.objectContaining({ apiKey: "" }));
  });

  it("checks the name and URL before sending, and shows the server's errors at their fields", async () => {
    const user = userEvent.setup();
    const onSubmit = vi.fn(() =>
      Promise.reject(new ApiError(422, "validation_failed", "invalid", [{ path: "$.url", message: "the upstream URL ends in /v1" }])),
    );
    renderUI(<ProviderForm submitLabel="Create" onSubmit={onSubmit} />);
    await user.type(screen.getByLabelText(/^Name/), "-bad name");
    await user.click(screen.getByRole("button", { name: "Create" }));
    expect(screen.getByText(/Letters, digits/)).toBeInTheDocument();
    expect(screen.getByText(/Enter the upstream's base URL/)).toBeInTheDocument();
    expect(onSubmit).not.toHaveBeenCalled();

    await user.clear(screen.getByLabelText(/^Name/));
    await user.type(screen.getByLabelText(/^Name/), "openai");
    await user.type(screen.getByLabelText(/^Upstream URL/), "https://api.openai.com/v1");
    await user.click(screen.getByRole("button", { name: "Create" }));
    expect(await screen.findByText("the upstream URL ends in /v1")).toBeInTheDocument();
  });
});
