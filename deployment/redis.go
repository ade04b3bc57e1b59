package deployment

import (
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// redisProblem is one counters.redis setting the Redis store cannot use.
// field is relative to counters.redis ("url", "addrs[1]").
type redisProblem struct {
	field   string
	wantKey bool
	msg     string
}

// storeOwnedURLOption says why a URL query option cannot be used because the
// Redis store always sets it itself (a value in the URL would be silently
// replaced), or returns "".
func storeOwnedURLOption(name string) string {
	switch name {
	case "dial_timeout":
		return "set counters.redis.dialTimeout instead"
	case "read_timeout":
		return "set counters.redis.readTimeout instead"
	case "write_timeout":
		return "set counters.redis.writeTimeout instead"
	case "pool_timeout":
		return "the store derives it from dialTimeout and readTimeout"
	case "min_idle_conns":
		return "the store sizes the idle pool itself"
	case "max_retries":
		return "the store never retries a command: a script that timed out may have run, and a retry would charge twice"
	case "dialer_retries":
		return "the store dials once per call"
	case "protocol":
		return "the store speaks RESP2"
	}
	return ""
}

// redisProblems checks the counters.redis section as the Redis store
// (counter/redisstore) and go-redis will read it, so that
// `sluice validate` refuses what would fail, or silently mean something else,
// only when the gateway starts. Messages never show the password.
func redisProblems(r Redis) []redisProblem {
	var out []redisProblem
	add := func(field string, wantKey bool, format string, args ...any) {
		out = append(out, redisProblem{field, wantKey, fmt.Sprintf(format, args...)})
	}
	cluster := r.Cluster || len(r.Addrs) > 1
	urlUser, urlPass := "", ""
	if r.URL != "" {
		u, err := url.Parse(r.URL)
		if err != nil {
			var ue *url.Error
			if errors.As(err, &ue) {
				err = ue.Err // url.Error repeats the URL, password included
			}
			add("url", false, "invalid URL: %v", err)
			return out
		}
		if (u.Scheme != "redis" && u.Scheme != "rediss") || u.Host == "" {
			add("url", false, "want a redis:// or rediss:// URL with a host")
			return out
		}
		if u.User != nil {
			urlUser = u.User.Username()
			urlPass, _ = u.User.Password()
		}
		out = append(out, redisURLProblems(u, r, cluster)...)
	}
	for i, a := range r.Addrs {
		host, port, err := net.SplitHostPort(a)
		n, perr := strconv.Atoi(port)
		if err != nil || host == "" || strings.Contains(a, "://") || perr != nil || n < 1 || n > 65535 {
			add(fmt.Sprintf("addrs[%d]", i), false, "want host:port, got %q", a)
		}
	}
	if r.TLS && r.URL != "" {
		add("tls", false, "tls applies to addrs; with url, TLS is chosen by the scheme: write rediss:// for TLS (and remove tls)")
	}
	if r.Username != "" && urlUser != "" {
		add("username", false, "the url has a username too: give it in one place")
	}
	if r.Password != "" && urlPass != "" {
		add("password", false, "the url has a password too: give it in one place")
	}
	if (r.Username != "" || urlUser != "") && r.Password == "" && urlPass == "" {
		field := "username"
		if r.Username == "" {
			field = "url"
		}
		add(field, false, "a username without a password: Redis AUTH needs both, and without a password the store would connect unauthenticated")
	}
	if r.PoolSize < 0 {
		add("poolSize", false, "must not be negative")
	} else if r.PoolSize > math.MaxInt32 {
		add("poolSize", false, "must be at most %d", math.MaxInt32)
	}
	return out
}

// redisURLProblems checks a parsed redis:// or rediss:// URL with go-redis's
// own parser (unknown options, bad numbers and durations), and what the store
// would override or cannot serve.
func redisURLProblems(u *url.URL, r Redis, cluster bool) []redisProblem {
	var out []redisProblem
	add := func(format string, args ...any) {
		out = append(out, redisProblem{"url", false, fmt.Sprintf(format, args...)})
	}
	var err error
	if cluster {
		_, err = redis.ParseClusterURL(u.String())
	} else {
		_, err = redis.ParseURL(u.String())
	}
	if err != nil {
		add("%s", strings.TrimPrefix(err.Error(), "redis: "))
		return out
	}
	q := u.Query()
	names := make([]string, 0, len(q))
	for name := range q {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if why := storeOwnedURLOption(name); why != "" {
			add("URL option %s is set by the store: %s", name, why)
		}
	}
	if q.Has("pool_size") && r.PoolSize > 0 {
		add("URL option pool_size and counters.redis.poolSize both set the pool size: give one")
	}
	db := 0
	if seg := strings.Trim(u.Path, "/"); seg != "" {
		// ParseURL refuses a bad path; ParseClusterURL ignores the path.
		if db, err = strconv.Atoi(seg); err != nil {
			add("invalid URL path %q: want /DB, a database number", u.Path)
			return out
		}
	}
	if v := q.Get("db"); v != "" {
		db, _ = strconv.Atoi(v)
	}
	switch {
	case db < 0:
		add("database %d: Redis databases are numbered from 0", db)
	case cluster && db != 0:
		add("database %d: Redis Cluster has only database 0", db)
	}
	return out
}
