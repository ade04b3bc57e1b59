package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"

	"sluice/internal/app"
	"sluice/platform"
)

// platformOptions are the flags `sluice platform` and `sluice serve` share.
type platformOptions struct {
	adminListen, data, database, logFormat, logLevel *string
}

func addPlatformFlags(fs *flag.FlagSet, database bool) platformOptions {
	o := platformOptions{
		adminListen: fs.String("admin-listen", "127.0.0.1:8081", "address of the platform API (/api/v1)"),
		data:        fs.String("data", platform.DefaultDataDir, "data directory: the SQLite database and the secret key file"),
		logFormat:   fs.String("log-format", "text", "log format: text or json"),
		logLevel:    fs.String("log-level", "info", "log level: debug, info, warn or error"),
	}
	empty := ""
	o.database = &empty
	if database {
		o.database = fs.String("database", "", "a PostgreSQL URL (postgres://...) instead of SQLite in --data")
	}
	return o
}

// open opens the platform of o, writing the one-time admin token message to
// stdout.
func (o platformOptions) open(ctx context.Context, logger *slog.Logger, stdout io.Writer) (*platform.Platform, error) {
	return app.OpenPlatform(ctx, app.PlatformOptions{
		DataDir: *o.data, DatabaseURL: *o.database,
		AdminToken: os.Getenv("SLUICE_ADMIN_TOKEN"), SecretKey: os.Getenv("SLUICE_SECRET_KEY"),
		Announce: stdout, Logger: logger,
	})
}

func cmdPlatform(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("platform", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := addPlatformFlags(fs, true)
	if code, ok := parseFlags(fs, "sluice platform [--admin-listen ADDR] [--data DIR | --database URL] [flags]\n\nRuns the control plane alone: the platform API under /api/v1 and the web\nconsole at / (on --admin-listen).", args, stdout, stderr); !ok {
		return code
	}
	logger, err := newLogger(stderr, *o.logFormat, *o.logLevel)
	if err != nil {
		fmt.Fprintf(stderr, "sluice platform: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	p, err := o.open(ctx, logger, stdout)
	if err != nil {
		fmt.Fprintf(stderr, "sluice platform: %v\n", err)
		return 1
	}
	defer p.Close()
	ln, err := net.Listen("tcp", *o.adminListen)
	if err != nil {
		fmt.Fprintf(stderr, "sluice platform: %v\n", err)
		return 1
	}
	logger.Info("platform listening", "addr", ln.Addr().String(), "api", "/api/v1")
	fmt.Fprintf(stdout, "sluice platform listening on http://%s\nsluice console: http://%s/\n", ln.Addr(), ln.Addr())
	if err := app.ServePlatform(ctx, p, ln, logger); err != nil {
		logger.Error("platform stopped", "error", err)
		return 1
	}
	logger.Info("platform stopped")
	return 0
}
