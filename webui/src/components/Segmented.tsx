// A segmented control drawn without measuring: Mantine's SegmentedControl's
// own markup and classes (so it looks the same and is the same radio group to
// assistive technology and the keyboard), with the selected segment's
// background drawn by CSS on the segment (Mantine's look before its sliding
// indicator initializes) instead of the indicator, which reads the layout of
// the page (getBoundingClientRect) on mount, once per control: on the Usage
// page, with seven of them, a forced layout each.
import { SegmentedControl, useMantineTheme } from "@mantine/core";
import { useId, type CSSProperties } from "react";

const classes = SegmentedControl.classes;

export interface SegmentedProps<T extends string> {
  value: T;
  onChange: (value: T) => void;
  data: readonly { value: T; label: string }[];
  size?: "xs" | "sm";
  "aria-label"?: string;
  "aria-labelledby"?: string;
}

export function Segmented<T extends string>({ value, onChange, data, size = "sm", ...aria }: SegmentedProps<T>) {
  const name = useId();
  const theme = useMantineTheme();
  const vars = {
    "--sc-shadow": "var(--mantine-shadow-xs)",
    "--sc-padding": `var(--sc-padding-${size})`,
    "--sc-font-size": `var(--mantine-font-size-${size})`,
  } as CSSProperties;
  return (
    <div className={classes.root} role="radiogroup" style={vars} {...aria}>
      {data.map((item) => {
        const active = item.value === value;
        const id = `${name}-${item.value}`;
        return (
          <div className={classes.control} data-active={active || undefined} key={item.value}>
            <input className={classes.input} type="radio" name={name} value={item.value} id={id} checked={active} onChange={() => onChange(item.value)} data-focus-ring={theme.focusRing} />
            <label className={classes.label} htmlFor={id} data-active={active || undefined}>
              <span className={classes.innerLabel}>{item.label}</span>
            </label>
          </div>
        );
      })}
    </div>
  );
}
