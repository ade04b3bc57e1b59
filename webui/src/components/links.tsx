// Mantine components as typed router links.
import { Anchor, type AnchorProps } from "@mantine/core";
import { createLink } from "@tanstack/react-router";
import { forwardRef, type AnchorHTMLAttributes } from "react";

const MantineAnchor = forwardRef<HTMLAnchorElement, AnchorProps & AnchorHTMLAttributes<HTMLAnchorElement>>((props, ref) => (
  <Anchor ref={ref} {...props} />
));
MantineAnchor.displayName = "MantineAnchor";

export const AnchorLink = createLink(MantineAnchor);
