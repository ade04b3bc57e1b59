import { MantineProvider } from "@mantine/core";
import { QueryClient, QueryClientProvider } from "@tanstack/react-query";
import { render } from "@testing-library/react";
import type { ReactNode } from "react";
import { SessionProvider } from "../auth";
import { theme } from "../theme";

/** Renders ui inside the providers the console runs with. */
export function renderUI(ui: ReactNode) {
  const qc = new QueryClient({ defaultOptions: { queries: { retry: false } } });
  return render(
    <MantineProvider theme={theme}>
      <QueryClientProvider client={qc}>
        <SessionProvider>{ui}</SessionProvider>
      </QueryClientProvider>
    </MantineProvider>,
  );
}
