// The admin token, kept for this tab's session only (sessionStorage: gone
// when the tab closes, never shared with other tabs), and the API client
// that sends it. A 401 from any call ends the session: the token was
// revoked or replaced.
import { createContext, useCallback, useContext, useMemo, useState, type ReactNode } from "react";
import { ApiError, makeClient, type Client } from "./api/client";

const storageKey = "sluice.adminToken";

export interface Session {
  token: string | null;
  client: Client;
  /** Checks token against the API and keeps it; throws ApiError when refused. */
  signIn: (token: string) => Promise<void>;
  signOut: (reason?: string) => void;
  /** Why the last session ended, when it was not the user's sign-out. */
  endedBecause: string | null;
}

const SessionContext = createContext<Session | null>(null);

function readToken(): string | null {
  try {
    return sessionStorage.getItem(storageKey);
  } catch {
    return null;
  }
}

export function SessionProvider({ children, onSignOut }: { children: ReactNode; onSignOut?: () => void }) {
  const [token, setToken] = useState<string | null>(readToken);
  const [endedBecause, setEndedBecause] = useState<string | null>(null);

  const signOut = useCallback(
    (reason?: string) => {
      sessionStorage.removeItem(storageKey);
      setToken(null);
      setEndedBecause(reason ?? null);
      onSignOut?.();
    },
    [onSignOut],
  );

  const client = useMemo(
    () =>
      makeClient(
        () => readToken(),
        () => {
          if (readToken()) signOut("The platform refused the admin token (revoked or replaced). Sign in again.");
        },
      ),
    [signOut],
  );

  const signIn = useCallback(async (candidate: string) => {
    const t = candidate.trim();
    if (!t) throw new ApiError(0, "empty", "Enter the admin token.");
    // Checked with a plain request so that a wrong token is not taken for
    // the end of a session.
    let resp: Response;
    try {
      resp = await fetch("/api/v1/policies", { headers: { Authorization: "Bearer " + t } });
    } catch {
      throw new ApiError(0, "network", "The platform cannot be reached.");
    }
    if (resp.status === 401) throw new ApiError(401, "unauthorized", "The platform does not accept this token.");
    if (!resp.ok) throw new ApiError(resp.status, "http_" + resp.status, `The platform answered ${resp.status}.`);
    sessionStorage.setItem(storageKey, t);
    setEndedBecause(null);
    setToken(t);
  }, []);

  const value = useMemo(() => ({ token, client, signIn, signOut, endedBecause }), [token, client, signIn, signOut, endedBecause]);
  return <SessionContext.Provider value={value}>{children}</SessionContext.Provider>;
}

export function useSession(): Session {
  const s = useContext(SessionContext);
  if (!s) throw new Error("useSession outside SessionProvider");
  return s;
}

export function useClient(): Client {
  return useSession().client;
}
