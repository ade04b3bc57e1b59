import { createTheme, Modal, Notification, type CSSVariablesResolver } from "@mantine/core";

export const theme = createTheme({
  primaryColor: "indigo",
  // White on indigo 6 is 4.1:1; on indigo 7, 4.8:1 (WCAG AA needs 4.5:1).
  primaryShade: { light: 7, dark: 8 },
  defaultRadius: "md",
  fontFamily: "system-ui, -apple-system, 'Segoe UI', Roboto, 'Helvetica Neue', Arial, sans-serif",
  fontFamilyMonospace: "ui-monospace, SFMono-Regular, Menlo, Consolas, 'Liberation Mono', monospace",
  headings: { fontWeight: "650" },
  // Transitions are skipped for users who ask their system for less motion.
  respectReducedMotion: true,
  components: {
    // Mantine's close button is an icon only.
    Modal: Modal.extend({ defaultProps: { closeButtonProps: { "aria-label": "Close" } } }),
    Notification: Notification.extend({
      defaultProps: { closeButtonProps: { "aria-label": "Close notification" } },
      styles: { description: { color: "var(--mantine-color-gray-7)" } },
    }),
  },
});

// Mantine's default palettes put text below WCAG AA's 4.5:1 in several
// places: dimmed text (gray 6 on white, 3.3:1), error text (red 6, 3.3:1),
// white on red, teal or orange buttons (3.8:1 and less) and the light
// variants' colored text on their tints. These are darker colors for text and
// filled backgrounds, each at least 4.5:1 against white and its light tint.
// axe-core checks the result on every page in the browser tests.
const strong: Record<string, [text: string, hover: string]> = {
  red: ["#c92a2a", "#a61e1e"],
  teal: ["#0b7a55", "#096146"],
  green: ["#237032", "#1b5a28"],
  blue: ["#1864ab", "#134f87"],
  indigo: ["#364fc7", "#2b3fa3"],
  grape: ["#862e9c", "#6d2580"],
  orange: ["#9a3d08", "#7f3206"],
  yellow: ["#6b4d00", "#573f00"],
};

export const cssVariablesResolver: CSSVariablesResolver = () => {
  const light: Record<string, string> = {
    "--mantine-color-dimmed": "var(--mantine-color-gray-7)",
    "--mantine-color-error": strong.red[0],
    "--mantine-color-gray-light-color": "var(--mantine-color-gray-8)",
    "--mantine-color-gray-text": "var(--mantine-color-gray-8)",
    // On the hovered tint too (the active navigation link under the mouse).
    "--mantine-primary-color-light-color": strong.indigo[1],
  };
  for (const [name, [text, hover]] of Object.entries(strong)) {
    light[`--mantine-color-${name}-text`] = text;
    light[`--mantine-color-${name}-light-color`] = text;
    light[`--mantine-color-${name}-outline`] = text;
    if (name !== "indigo") {
      light[`--mantine-color-${name}-filled`] = text;
      light[`--mantine-color-${name}-filled-hover`] = hover;
    }
  }
  return { variables: {}, light, dark: {} };
};
