import { MantineProvider } from "@mantine/core";
import { Notifications } from "@mantine/notifications";
import { QueryClient, QueryClientProvider } from "@tanstack/react-query";
import { RouterProvider } from "@tanstack/react-router";
import { useState } from "react";
import { ApiError } from "./api/client";
import { SessionProvider, useSession } from "./auth";
import { router } from "./router";
import { cssVariablesResolver, theme } from "./theme";

function makeQueryClient() {
  return new QueryClient({
    defaultOptions: {
      queries: {
        // Refused requests (4xx) are answers, not outages: no retry.
        retry: (n, err) => !(err instanceof ApiError && err.status >= 400 && err.status < 500) && n < 2,
        staleTime: 5_000,
        refetchOnWindowFocus: true,
      },
    },
  });
}


function Routes({ queryClient }: { queryClient: QueryClient }) {
  const { client, token } = useSession();
  return <RouterProvider router={router} context={{ queryClient, client, signedIn: token !== null }} />;
}

export function App() {
  const [queryClient] = useState(makeQueryClient);
  return (
    <MantineProvider theme={theme} cssVariablesResolver={cssVariablesResolver} defaultColorScheme="light">
      <Notifications position="top-right" autoClose={5000} limit={3} />
      <QueryClientProvider client={queryClient}>
        <SessionProvider onSignOut={() => queryClient.clear()}>
          <Routes queryClient={queryClient} />
        </SessionProvider>
      </QueryClientProvider>
    </MantineProvider>
  );
}
