package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"sluice/counter"
	"strings"
	"syscall"
	"time"

	"sluice/deployment"
	"sluice/internal/app"
	"sluice/platform"
)

// platformOptions are the flags `sluice platform` and `sluice serve` share.
type platformOptions struct {
	adminListen, data, database, logFormat, logLevel, usageRetention *string
	counters                                                         *countersFlags
}

func addPlatformFlags(fs *flag.FlagSet, database bool) platformOptions {
	o := platformOptions{
		adminListen: fs.String("admin-listen", "127.0.0.1:8081", "address of the platform API (/api/v1)"),
		data:        fs.String("data", platform.DefaultDataDir, "data directory: the SQLite database and the secret key file"),
		logFormat:   fs.String("log-format", "text", "log format: text or json"),
		logLevel:    fs.String("log-level", "info", "log level: debug, info, warn or error"),
		usageRetention: fs.String("usage-retention", "30d",
			"how long raw usage records are kept (\"30d\", \"720h\"; 0 keeps them forever); rollups are kept forever"),
		counters: addCountersFlags(fs),
	}
	empty := ""
	o.database = &empty
	if database {
		o.database = fs.String("database", "", "a PostgreSQL URL (postgres://...) instead of SQLite in --data")
	}
	return o
}

// open opens the platform of o with the counters setting c, writing the
// one-time admin token message to stdout.
func (o platformOptions) open(ctx context.Context, c deployment.Counters, logger *slog.Logger, stdout io.Writer) (*platform.Platform, error) {
	return o.openWith(ctx, c, nil, logger, stdout)
}

// openWith is open with the counter store the platform reads budgets from
// (nil: see platform.Options.CounterStore).
func (o platformOptions) openWith(ctx context.Context, c deployment.Counters, store counter.Store, logger *slog.Logger, stdout io.Writer) (*platform.Platform, error) {
	retention := time.Duration(-1) // "0": forever
	if strings.TrimSpace(*o.usageRetention) != "0" {
		d, err := deployment.ParseDuration(*o.usageRetention)
		if err != nil {
			return nil, fmt.Errorf("--usage-retention: %w", err)
		}
		retention = d
	}
	return app.OpenPlatform(ctx, app.PlatformOptions{
		DataDir: *o.data, DatabaseURL: *o.database, UsageRetention: retention,
		AdminToken: os.Getenv("SLUICE_ADMIN_TOKEN"), SecretKey: os.Getenv("SLUICE_SECRET_KEY"),
		Announce: stdout, Logger: logger, Counters: c, CounterStore: store,
	})
}

// countersRedisEnv is the environment variable of the Redis URL (a password
// in it stays out of the process list, unlike a flag's).
const countersRedisEnv = "SLUICE_COUNTERS_REDIS_URL"

// countersFlags are the counters setting of every generated deployment
// (docs/platform.md, "Cluster-wide counters"): none, each gateway counting in
// memory, or one Redis store that every gateway charges.
type countersFlags struct {
	redisURL, keyPrefix, failureMode string
	cluster                          bool
	timeout, dialTimeout             time.Duration
}

func addCountersFlags(fs *flag.FlagSet) *countersFlags {
	f := &countersFlags{}
	fs.StringVar(&f.redisURL, "counters-redis", "", "make every limit cluster-wide: the gateways count in the Redis at this URL, redis://[user:password@]host:port/db or rediss:// for TLS (default: $"+countersRedisEnv+"; unset: each gateway counts in memory)")
	fs.BoolVar(&f.cluster, "counters-redis-cluster", false, "the Redis is a Redis Cluster (more seeds with ?addr=host:port)")
	fs.StringVar(&f.keyPrefix, "counters-key-prefix", "", "prefix of every counter key in Redis (default "+deployment.DefaultRedisKeyPrefix+"), to share one Redis between deployments")
	fs.StringVar(&f.failureMode, "counters-failure-mode", "", "while Redis is unreachable: open (count per gateway) or closed (answer 503) (default "+deployment.DefaultRedisFailureMode+")")
	fs.DurationVar(&f.timeout, "counters-timeout", 0, "Redis read and write timeout per command (default 100ms; raise it for a distant Redis)")
	fs.DurationVar(&f.dialTimeout, "counters-dial-timeout", 0, "Redis dial timeout (default 200ms)")
	return f
}

// setting returns the counters section f gives, the Redis URL from getenv
// when the flag is empty, or an error naming the flag (or variable) at
// fault. Errors never show the password.
func (f *countersFlags) setting(getenv func(string) string) (deployment.Counters, error) {
	urlName, url := "--counters-redis", f.redisURL
	if url == "" {
		urlName, url = countersRedisEnv, getenv(countersRedisEnv)
	}
	if url == "" {
		for _, given := range []struct {
			name string
			set  bool
		}{
			{"--counters-redis-cluster", f.cluster}, {"--counters-key-prefix", f.keyPrefix != ""},
			{"--counters-failure-mode", f.failureMode != ""}, {"--counters-timeout", f.timeout != 0},
			{"--counters-dial-timeout", f.dialTimeout != 0},
		} {
			if given.set {
				return deployment.Counters{}, fmt.Errorf("%s needs --counters-redis (or %s)", given.name, countersRedisEnv)
			}
		}
		return deployment.Counters{}, nil
	}
	switch {
	case f.timeout < 0:
		return deployment.Counters{}, errors.New("--counters-timeout: must not be negative")
	case f.dialTimeout < 0:
		return deployment.Counters{}, errors.New("--counters-dial-timeout: must not be negative")
	}
	c := deployment.Counters{Backend: "redis", Redis: deployment.Redis{
		URL: url, Cluster: f.cluster, KeyPrefix: f.keyPrefix, FailureMode: f.failureMode,
		DialTimeout: deployment.Duration(f.dialTimeout), ReadTimeout: deployment.Duration(f.timeout), WriteTimeout: deployment.Duration(f.timeout),
	}}
	ps := platform.CountersProblems(c)
	if len(ps) == 0 {
		return c, nil
	}
	flags := map[string]string{
		"counters.redis.cluster":      "--counters-redis-cluster",
		"counters.redis.keyPrefix":    "--counters-key-prefix",
		"counters.redis.failureMode":  "--counters-failure-mode",
		"counters.redis.readTimeout":  "--counters-timeout",
		"counters.redis.writeTimeout": "--counters-timeout",
		"counters.redis.dialTimeout":  "--counters-dial-timeout",
	}
	// The messages name the document's fields; here they are flags.
	inMessage := strings.NewReplacer("counters.redis.readTimeout", "--counters-timeout",
		"counters.redis.writeTimeout", "--counters-timeout", "counters.redis.dialTimeout", "--counters-dial-timeout")
	msgs := make([]string, 0, len(ps))
	for _, p := range ps {
		name, ok := flags[p.Field]
		if !ok {
			name = urlName // the URL is where everything else comes from
		}
		msgs = append(msgs, name+": "+inMessage.Replace(p.Message))
	}
	return deployment.Counters{}, errors.New(strings.Join(msgs, "\n"))
}

func cmdPlatform(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("platform", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := addPlatformFlags(fs, true)
	if code, ok := parseFlags(fs, "sluice platform [--admin-listen ADDR] [--data DIR | --database URL] [--counters-redis URL] [flags]\n\nRuns the control plane alone: the platform API under /api/v1 and the web\nconsole at / (on --admin-listen).", args, stdout, stderr); !ok {
		return code
	}
	logger, err := newLogger(stderr, *o.logFormat, *o.logLevel)
	if err != nil {
		fmt.Fprintf(stderr, "sluice platform: %v\n", err)
		return 2
	}
	counters, err := o.counters.setting(os.Getenv)
	if err != nil {
		fmt.Fprintf(stderr, "sluice platform: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	p, err := o.open(ctx, counters, logger, stdout)
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
