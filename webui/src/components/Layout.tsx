import { AppShell, Burger, Button, Group, NavLink, Stack, Text, Title } from "@mantine/core";
import { useDisclosure } from "@mantine/hooks";
import { IconApps, IconChartBar, IconListDetails, IconLogout, IconPlugConnected, IconServer2 } from "@tabler/icons-react";
import { Link, Outlet, useRouterState } from "@tanstack/react-router";
import { useEffect } from "react";
import { useSession } from "../auth";
import { SignInPage } from "../pages/SignInPage";
import { AnchorLink } from "./links";

const nav = [
  { to: "/providers", label: "Providers", icon: IconPlugConnected },
  { to: "/applications", label: "Applications", icon: IconApps },
  { to: "/gateways", label: "Gateways", icon: IconServer2 },
  { to: "/usage", label: "Usage", icon: IconChartBar },
  { to: "/audit", label: "Audit log", icon: IconListDetails },
] as const;

function Logo() {
  return (
    <Group gap={8} wrap="nowrap">
      <img src="/favicon.svg" alt="" width={26} height={26} />
      <Text fw={700} size="lg">
        Sluice
      </Text>
    </Group>
  );
}

export function Layout() {
  const { token, signOut } = useSession();
  const [opened, { toggle, close }] = useDisclosure(false);
  const pathname = useRouterState({ select: (s) => s.location.pathname });
  useEffect(close, [pathname, close]);

  if (!token) return <SignInPage />;
  return (
    <AppShell header={{ height: 56 }} navbar={{ width: 220, breakpoint: "sm", collapsed: { mobile: !opened } }} padding="md">
      <a className="skip-link" href="#main">
        Skip to content
      </a>
      <AppShell.Header>
        <Group h="100%" px="md" justify="space-between" wrap="nowrap">
          <Group gap="sm" wrap="nowrap">
            <Burger opened={opened} onClick={toggle} hiddenFrom="sm" size="sm" aria-label={opened ? "Close navigation" : "Open navigation"} />
            <AnchorLink to="/providers" underline="never" c="inherit" aria-label="Sluice console home">
              <Logo />
            </AnchorLink>
          </Group>
          <Button variant="subtle" color="gray" leftSection={<IconLogout size={16} aria-hidden />} onClick={() => signOut()}>
            Sign out
          </Button>
        </Group>
      </AppShell.Header>
      <AppShell.Navbar p="xs" aria-label="Main">
        <Stack gap={2}>
            {nav.map((n) => (
              <NavLink
                key={n.to}
                component={Link}
                to={n.to}
                label={n.label}
                leftSection={<n.icon size={18} aria-hidden />}
                active={pathname === n.to || pathname.startsWith(n.to + "/")}
                aria-current={pathname === n.to || pathname.startsWith(n.to + "/") ? "page" : undefined}
              />
            ))}
        </Stack>
      </AppShell.Navbar>
      <AppShell.Main id="main" tabIndex={-1}>
        <Outlet />
      </AppShell.Main>
    </AppShell>
  );
}

export function NotFound() {
  return (
    <Stack align="flex-start" gap="sm">
      <Title order={1}>Not found</Title>
      <Text>There is no page at this address.</Text>
      <AnchorLink to="/providers">
        Go to the providers
      </AnchorLink>
    </Stack>
  );
}

/** A page's heading row: title, optional description and actions. */
export function PageHeader({ title, description, actions }: { title: string; description?: string; actions?: React.ReactNode }) {
  return (
    <Group justify="space-between" align="flex-start" mb="md" gap="sm">
      <Stack gap={2} maw={720}>
        <Title order={1} size="h2">
          {title}
        </Title>
        {description && (
          <Text c="dimmed" size="sm">
            {description}
          </Text>
        )}
      </Stack>
      {actions}
    </Group>
  );
}
