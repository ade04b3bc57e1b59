import { defineConfig } from "vitest/config";
import react from "@vitejs/plugin-react";

// The build goes to dist/console, which webui/embed.go embeds in the binary
// (dist/.keep stays, so go:embed compiles without a build).
export default defineConfig({
  plugins: [react()],
  build: {
    outDir: "dist/console",
    emptyOutDir: true,
    // One chunk per page would cut the first load further; the whole
    // console is measured in docs/benchmarks.md.
    chunkSizeWarningLimit: 1500,
  },
  server: {
    // npm run dev: the API of a local `sluice serve` on its default port.
    proxy: { "/api": "http://127.0.0.1:8081" },
  },
  test: {
    environment: "jsdom",
    globals: true,
    setupFiles: ["src/test/setup.ts"],
    include: ["src/**/*.test.{ts,tsx}"],
    css: false,
  },
});
