package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"sluice/cmd/sluice/internal/fairbench"
)

func cmdBench(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "fairness" {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
			fmt.Fprintln(stdout, "usage: sluice bench fairness [flags]   (sluice bench fairness --help lists them)")
			return 0
		}
		fmt.Fprintln(stderr, "usage: sluice bench fairness [flags]   (the one benchmark: fair admission under saturation)")
		return 2
	}
	fs := flag.NewFlagSet("bench fairness", flag.ContinueOnError)
	o := fairbench.Options{}
	fs.IntVar(&o.Tenants, "tenants", 200, "tenants (applications): one hot, one priority, one victim, 10 heavy, the rest light")
	fs.DurationVar(&o.Duration, "duration", 5*time.Minute, "load duration: the hot burst runs from 1/4 to 1/2 of it")
	fs.StringVar(&o.Mode, "mode", "fair", "fifo (the engine's queue decides), rpm (per-application request rate limit) or fair (fair-admission)")
	fs.StringVar(&o.Out, "out", "", "directory for summary.json and the plots (required)")
	fs.StringVar(&o.Capacity, "capacity", fairbench.DefaultCapacity, "the engine's capacity (sluice mock-llm --capacity syntax)")
	fs.Uint64Var(&o.Seed, "seed", 1, "seed of the load")
	fs.Float64Var(&o.BurstHeadroom, "burst-headroom", 0, "fair mode: the standard class's burstHeadroom (0 to below 1; 0: none)")
	if code, ok := parseFlags(fs, "sluice bench fairness --tenants N --duration D --mode fifo|rpm|fair --out DIR", args[1:], stdout, stderr); !ok {
		return code
	}
	if o.Out == "" {
		fmt.Fprintln(stderr, "sluice bench fairness: --out DIR is required")
		return 2
	}
	o.Progress = stderr
	if f, ok := stderr.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			o.Terminal = true
		}
	}
	o.Command = "sluice bench fairness " + strings.Join(args[1:], " ")
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := fairbench.Run(ctx, o); err != nil {
		fmt.Fprintf(stderr, "sluice bench fairness: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "sluice bench fairness: %s written\n", o.Out)
	return 0
}
