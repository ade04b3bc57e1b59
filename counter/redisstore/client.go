package redisstore

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"runtime"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// NewClient returns a go-redis client with the store's settings for o (its
// connection fields and timeouts; the rest is ignored), for another service
// of the process that shares the counters' Redis. The caller owns it.
func NewClient(o Options) (redis.UniversalClient, error) {
	if o.MaxInFlight <= 0 {
		o.MaxInFlight = DefaultMaxInFlight
	}
	c, _, err := newClient(&o)
	return c, err
}

// newClient builds the go-redis client o selects, a cluster client (cluster
// true) for Cluster or several Addrs, with the store's own settings: its
// timeouts, no command retries, one dial per call, RESP2.
func newClient(o *Options) (redis.UniversalClient, bool, error) {
	dial := orDefault(o.DialTimeout, DefaultDialTimeout)
	read := orDefault(o.ReadTimeout, DefaultReadTimeout)
	write := orDefault(o.WriteTimeout, DefaultWriteTimeout)
	if o.URL != "" && len(o.Addrs) > 0 {
		return nil, false, errors.New("redisstore: set url or addrs, not both")
	}
	if o.URL == "" && len(o.Addrs) == 0 {
		return nil, false, errors.New("redisstore: url or addrs required")
	}
	var tlsConf *tls.Config
	if o.TLS {
		tlsConf = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	// No command retries: a script that timed out may have run, and running
	// it again would charge twice. One dial attempt per call: the pool's own
	// probe redials in the background once a server is down.
	maint := &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	if o.Cluster || len(o.Addrs) > 1 {
		var co *redis.ClusterOptions
		if o.URL != "" {
			var err error
			if co, err = redis.ParseClusterURL(o.URL); err != nil {
				return nil, false, fmt.Errorf("redisstore: url: %w", err)
			}
		} else {
			co = &redis.ClusterOptions{Addrs: o.Addrs}
		}
		if o.Username != "" {
			co.Username = o.Username
		}
		if o.Password != "" {
			co.Password = o.Password
		}
		if tlsConf != nil && co.TLSConfig == nil {
			co.TLSConfig = tlsConf
		}
		co.DialTimeout, co.ReadTimeout, co.WriteTimeout = dial, read, write
		co.PoolTimeout = dial + read
		co.MaxRetries = -1
		co.DialerRetries = 1
		co.ContextTimeoutEnabled = true
		co.DisableIdentity = true
		co.Protocol = 2
		co.MaintNotificationsConfig = maint
		if o.PoolSize > 0 {
			co.PoolSize = o.PoolSize
		}
		co.MinIdleConns = min(o.MaxInFlight, poolSizeOr(co.PoolSize))
		return redis.NewClusterClient(co), true, nil
	}
	var ro *redis.Options
	if o.URL != "" {
		var err error
		if ro, err = redis.ParseURL(o.URL); err != nil {
			return nil, false, fmt.Errorf("redisstore: url: %w", err)
		}
	} else {
		ro = &redis.Options{Addr: o.Addrs[0]}
	}
	if o.Username != "" {
		ro.Username = o.Username
	}
	if o.Password != "" {
		ro.Password = o.Password
	}
	if tlsConf != nil && ro.TLSConfig == nil {
		if host, _, err := net.SplitHostPort(ro.Addr); err == nil {
			tlsConf.ServerName = host
		}
		ro.TLSConfig = tlsConf
	}
	ro.DialTimeout, ro.ReadTimeout, ro.WriteTimeout = dial, read, write
	ro.PoolTimeout = dial + read
	ro.MaxRetries = -1
	ro.DialerRetries = 1
	ro.ContextTimeoutEnabled = true
	ro.DisableIdentity = true
	ro.Protocol = 2
	ro.MaintNotificationsConfig = maint
	if o.PoolSize > 0 {
		ro.PoolSize = o.PoolSize
	}
	ro.MinIdleConns = min(o.MaxInFlight, poolSizeOr(ro.PoolSize))
	return redis.NewClient(ro), false, nil
}

// poolSizeOr is a configured pool size, or go-redis's default (10 per CPU)
// when unset.
func poolSizeOr(n int) int {
	if n > 0 {
		return n
	}
	return 10 * runtime.GOMAXPROCS(0)
}

func orDefault(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}
