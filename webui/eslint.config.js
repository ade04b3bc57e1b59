// ESLint flat config for the console: the recommended JavaScript and
// type-aware TypeScript rules, and the React hooks rules (the ones that catch
// stale closures and conditional hooks). `npm run lint` runs it with tsc.
import js from "@eslint/js";
import globals from "globals";
import reactHooks from "eslint-plugin-react-hooks";
import tseslint from "typescript-eslint";

export default tseslint.config(
  { ignores: ["dist/", "node_modules/", "src/api/schema.d.ts"] },
  js.configs.recommended,
  {
    files: ["src/**/*.{ts,tsx}", "vite.config.ts"],
    extends: [...tseslint.configs.recommendedTypeChecked],
    languageOptions: {
      globals: globals.browser,
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
    },
    plugins: { "react-hooks": reactHooks },
    rules: {
      ...reactHooks.configs.recommended.rules,
      "@typescript-eslint/no-unused-vars": ["error", { argsIgnorePattern: "^_", varsIgnorePattern: "^_" }],
      // React event handlers may return a promise (Mantine's form.onSubmit,
      // async click handlers); the argument positions stay checked.
      "@typescript-eslint/no-misused-promises": ["error", { checksVoidReturn: { attributes: false } }],
      // TanStack Router's redirect() is thrown by design from beforeLoad.
      "@typescript-eslint/only-throw-error": [
        "error",
        { allow: [{ from: "package", package: "@tanstack/router-core", name: "Redirect" }] },
      ],
    },
  },
  {
    // Node test files; the callbacks they hand to page.evaluate run in the page.
    files: ["browser/**/*.{js,mjs}", "scripts/**/*.{js,mjs}", "eslint.config.js"],
    languageOptions: { globals: { ...globals.node, ...globals.browser }, sourceType: "module" },
  },
);
